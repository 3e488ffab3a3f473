"""`tinyol emulate`: run the firmware in QEMU, Renode or natively; print its serial URL."""
from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import tempfile
from pathlib import Path

import click

from ..checks import output_dir
from ..data import sensor as S
from ..errors import TinyolError
from ..options import app_options, board_option, kernels_option, model_option
from ..targets import emulator
from ..targets.firmware import BuildConfig, build


@click.command("emulate")
@board_option()
@model_option()
@click.option("--emulator", "emu", type=click.Choice(["qemu", "renode", "native"]), default="qemu",
              show_default=True, help="What runs the firmware.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="TCP port for the serial line (0: a free one).")
@click.option("--state", type=click.Path(file_okay=False), default=None,
              help="native, renode: folder that keeps the board's flash (flash.bin; native also "
                   "its boot counter) across runs; one target per folder.")
@click.option("--icount", type=click.IntRange(0, 10), default=None, metavar="SHIFT",
              help="qemu: deterministic time, one instruction = 2^SHIFT ns.")
@kernels_option()
@click.option("--test-build", is_flag=True, hidden=True,
              help="A test build (EXIT ends the program; for test harnesses).")
@app_options
@click.option("--sensor", "sensor_dir", default=None, metavar="DIR",
              help="With --app imu: play a `tinyol record-to-resd` folder as the board's IMU "
                   "(Renode: the LSM6DSO model on I2C2; native: its raw.bin) and send its "
                   "label schedule.")
@click.option("--store-bytes", type=click.IntRange(1), default=None, metavar="BYTES",
              help="Flash reserved for saved states (TOL_STORE_BYTES; default the board's last "
                   "1/8 of flash; native imitates the board's store either way).")
@click.pass_context
def cmd(ctx, board, model, emu, port, state, icount, kernels, test_build, app, stride, sensor_dir,
        store_bytes):
    """Start the firmware without hardware and print its pyserial URL.

    \b
    In another shell:
      tinyol info --port socket://127.0.0.1:PORT
    Type `reset` (and Enter), or send emulate SIGUSR1, to power-cycle the board: it boots
    again with its flash as it was (Renode: a machine reset; native and QEMU: the process is
    started again on the same port). `stop` or Ctrl-C stops the target.

    \b
    Keep a Renode board's flash across runs, and build with the reference kernels:
      tinyol emulate --emulator renode --state board1/ --kernels ref
    """
    verbose = ctx.find_root().obj.get("verbose", False)
    native = emu == "native" or board == "native"
    if state and emu == "qemu" and not native:
        raise TinyolError("--state keeps a board's flash, and QEMU's STM32L4 flash is read-only "
                          "(the firmware reports persistence unavailable)",
                          hint="use --emulator renode or --emulator native for a board that keeps its flash")
    if state:
        output_dir(state, "--state")  # before the build: a bad path is named at once
        emulator.check_state(Path(state), emu, board, store_bytes)
    if sensor_dir is not None:
        _check_sensor(sensor_dir, app, emu, board, native)
    # a release build: any local client could end a test build with EXIT
    cfg = BuildConfig("native" if native else board, model, kernels=kernels, test_build=test_build, app=app,
                      stride=stride, store_bytes=store_bytes)
    res = build(cfg, verbose=verbose, echo=click.echo if verbose else None)
    with contextlib.ExitStack() as stack:
        state_dir = state or (stack.enter_context(tempfile.TemporaryDirectory(prefix="tinyol-native-"))
                              if native else None)
        if sensor_dir is not None and native:
            os.environ["TINYOL_IMU_FILE"] = str(Path(sensor_dir) / "raw.bin")
        imu = app == "imu" and emu == "renode" and not native

        def start(port):
            return emulator.start(board, res, emulator=emu, port=port, state_dir=state_dir,
                                  icount_shift=icount, timeout=24 * 3600, imu=imu)

        target = start(port or None)
        if sensor_dir is not None:
            try:
                _play(target, sensor_dir, native)
            except BaseException:
                target.stop()
                raise
        _report_cpu(target, emu, res)
        image = res.program if native else res.elf
        kind = kernels or ("ref" if native else "simd")
        _run(target, emu, board, native, start, image=image, kernels=kind,
             flash=Path(state) / emulator.FLASH_IMAGE if state else None)


def _report_cpu(target, emu, res):
    """One line when the core fails the firmware's boot self-test (tol_cpu.h). Renode runs at
    once, so the verdict is read from the firmware's memory through the Monitor without
    touching the console; QEMU waits for its first client (`tinyol doctor` reports it then)."""
    from ..armdsp import cpu_verdict

    if emu != "renode" or not hasattr(target, "monitor"):
        return
    try:
        report = emulator.renode_cpu_report(target, res.elf, getattr(res.config, "kernels", None))
    except TinyolError:
        return
    if report is None:
        return
    line = cpu_verdict(*report)
    if line:
        click.echo(f"renode: {line}")


def _check_sensor(sensor_dir, app, emu, board, native):
    if app != "imu":
        raise TinyolError("--sensor feeds the IMU firmware", hint="add --app imu")
    if not native and (emu != "renode" or board != "disco_l475vg_iot01a"):
        raise TinyolError("--sensor needs the B-L475E-IOT01A in Renode (its IMU model) or native",
                          hint="--emulator renode --board disco_l475vg_iot01a, or --emulator native")
    S.check_folder(sensor_dir)  # every file as record-to-resd writes it, before anything starts


def _play(target, sensor_dir, native):
    """Wait for the boot line, send the label schedule and start the recording; then leave
    the console to the user (the firmware's lines wait for the next client)."""
    host, port = target.url.split("//")[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=120) as sock:
        boot = sock.makefile("rb").readline().decode(errors="replace").strip()
        if not boot.startswith("boot ") or not boot.endswith("status=0"):
            raise TinyolError(f"the IMU firmware did not start: {boot!r}")
        click.echo(boot)
        if native:
            meta = json.loads((Path(sensor_dir) / "sensor.json").read_text())
            sock.sendall(S.schedule_bytes(meta["schedule"]) + S.go_bytes(meta["rows"]))
        else:
            meta = S.start_recording(target, sock, sensor_dir)
    click.echo(f"playing {sensor_dir}: {meta['rows']} rows, {len(meta['schedule'])} label segments")


def _run(target, emu, board, native, start, *, image, kernels, flash):
    what = (f"{board} imitated by a host process (board name only; memory and speed are the "
            f"host's)" if native and board != "native" else board)
    click.echo(f"{emu}: {what} running {emulator.shown_path(image)} ({kernels} kernels); serial port: {target.url}")
    if flash is not None:
        click.echo(f"flash: {flash} (kept across runs)")
    elif emu == "qemu" and not native:
        click.echo("flash: read-only in QEMU (no save survives a reset)")
    else:
        click.echo("flash: kept across resets until the target stops (--state DIR keeps it longer)")
    click.echo(f"type `reset` (or kill -USR1 {os.getpid()}) to power-cycle the board, `stop` or Ctrl-C to stop")
    try:
        signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
        commands = _Commands(sys.stdin)
        signal.signal(signal.SIGUSR1, lambda *a: commands.lines.append("reset"))
        while True:
            rc = target.proc.poll()
            if rc is not None:
                click.echo(f"{emu} exited with code {rc}")
                break
            line = commands.next(0.5)
            if line is None:
                continue
            if line in ("stop", "quit", "exit"):
                click.echo("stopping")
                break
            if line == "reset":
                target = _power_cycle(target, emu, native, start)
                kept = ("QEMU's flash is read-only: the exported head" if emu == "qemu" and not native
                        else "flash kept")
                click.echo(f"reset: {board} power-cycled, {kept}; serial port: {target.url}")
            elif line:
                click.echo(f"unknown command {line!r}: type reset (power-cycle the board, its flash "
                           "kept) or stop")
    except KeyboardInterrupt:
        click.echo("stopping")
    finally:
        target.stop()


def _power_cycle(target, emu, native, start):
    """Reset the board as a power cycle does, its flash kept: Renode resets the machine (the
    store stays in flash.py, and in --state's flash.bin); the native process and QEMU are
    started again on the same port (native's flash lives in its state folder; QEMU's is
    read-only). A client must reconnect after a restart; Renode's socket stays open."""
    if emu == "renode" and not native:
        target.monitor.execute("machine Reset")
        return target
    port = int(target.url.rsplit(":", 1)[1])
    target.stop()
    return start(port)


class _Commands:
    """Lines typed on emulate's stdin, without blocking the serving loop. At end of input
    (a script, </dev/null) the target keeps serving until it is stopped; a terminal is read
    only while emulate runs in its foreground (`tinyol emulate &` is never stopped by SIGTTIN)."""

    def __init__(self, stream):
        self.stream = stream
        self.open = stream is not None
        try:
            self.fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            self.fd = None           # no descriptor (a test runner's stream): read it directly
        self.buf = ""
        self.lines: list[str] = []

    def _foreground(self) -> bool:
        try:
            return not os.isatty(self.fd) or os.tcgetpgrp(self.fd) == os.getpgrp()
        except OSError:
            return False

    def next(self, timeout: float) -> str | None:
        if self.lines:
            return self.lines.pop(0)
        if not self.open or (self.fd is not None and not self._foreground()):
            select.select([], [], [], timeout)
            return None
        if self.fd is not None:
            ready, _, _ = select.select([self.fd], [], [], timeout)
            if not ready:
                return None
            data = os.read(self.fd, 4096).decode(errors="replace")
        else:
            data = self.stream.readline()
        if not data:
            self.open = False
            data = "\n" if self.buf else ""
        *done, self.buf = (self.buf + data).split("\n")
        self.lines += [line.strip().lower() for line in done]
        return self.lines.pop(0) if self.lines else None

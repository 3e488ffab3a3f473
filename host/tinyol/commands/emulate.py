"""`tinyol emulate`: run the firmware in QEMU, Renode or natively; print its serial URL."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import tempfile
from pathlib import Path

import click

from ..checks import output_dir
from ..data import sensor as S
from ..errors import TinyolError
from ..options import app_options, board_option, model_option
from ..targets import emulator
from ..targets.firmware import BuildConfig, build


@click.command("emulate")
@board_option()
@model_option()
@click.option("--emulator", "emu", type=click.Choice(["qemu", "renode", "native"]), default="qemu",
              show_default=True, help="What runs the firmware.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="TCP port for the serial line (0: a free one).")
@click.option("--state", type=click.Path(file_okay=False), default=None,
              help="native: directory for persistent state (boot counter, flash image).")
@click.option("--icount", type=click.IntRange(0, 10), default=None, metavar="SHIFT",
              help="qemu: deterministic time, one instruction = 2^SHIFT ns.")
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
def cmd(ctx, board, model, emu, port, state, icount, test_build, app, stride, sensor_dir, store_bytes):
    """Start the firmware without hardware and print its pyserial URL.

    \b
    In another shell:
      tinyol info --port socket://127.0.0.1:PORT
    Ctrl-C stops the target.
    """
    verbose = ctx.find_root().obj.get("verbose", False)
    if state:
        output_dir(state, "--state")  # before the build: a bad path is named at once
    native = emu == "native" or board == "native"
    if sensor_dir is not None:
        _check_sensor(sensor_dir, app, emu, board, native)
    # a release build: any local client could end a test build with EXIT
    cfg = BuildConfig("native" if native else board, model, test_build=test_build, app=app, stride=stride,
                      store_bytes=store_bytes)
    res = build(cfg, verbose=verbose, echo=click.echo if verbose else None)
    with contextlib.ExitStack() as stack:
        state_dir = state or (stack.enter_context(tempfile.TemporaryDirectory(prefix="tinyol-native-"))
                              if native else None)
        if sensor_dir is not None and native:
            os.environ["TINYOL_IMU_FILE"] = str(Path(sensor_dir) / "raw.bin")
        target = emulator.start(board, res, emulator=emu, port=port or None, state_dir=state_dir,
                                icount_shift=icount, timeout=24 * 3600,
                                imu=app == "imu" and emu == "renode" and not native)
        if sensor_dir is not None:
            try:
                _play(target, sensor_dir, native)
            except BaseException:
                target.stop()
                raise
        _run(target, emu, board, native)


def _check_sensor(sensor_dir, app, emu, board, native):
    if app != "imu":
        raise TinyolError("--sensor feeds the IMU firmware", hint="add --app imu")
    if not native and (emu != "renode" or board != "disco_l475vg_iot01a"):
        raise TinyolError("--sensor needs the B-L475E-IOT01A in Renode (its IMU model) or native",
                          hint="--emulator renode --board disco_l475vg_iot01a, or --emulator native")
    missing = [f for f in ("acc.resd", "gyro.resd", "raw.bin", "sensor.json")
               if not (Path(sensor_dir) / f).is_file()]
    if missing:
        raise TinyolError(f"{sensor_dir}: no {', '.join(missing)} (not a record-to-resd folder)",
                          hint="tinyol record-to-resd RECORDING --out DIR")


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


def _run(target, emu, board, native):
    what = (f"{board} imitated by a host process (board name only; memory and speed are the "
            f"host's)" if native and board != "native" else board)
    click.echo(f"{emu}: {what} running; serial port: {target.url}")
    click.echo("stop with Ctrl-C")
    try:
        signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
        rc = target.proc.wait()
        click.echo(f"{emu} exited with code {rc}")
    except KeyboardInterrupt:
        click.echo("stopping")
    finally:
        target.stop()

"""Emulated boards a user can power-cycle and keep, through `tinyol emulate` itself.

* Renode (real 1.15.3, tests/_renode_util.py): `--state DIR` keeps the board's flash in
  DIR/flash.bin; `reset` typed on emulate's stdin resets the machine. Oracle: the board's own
  replies (boot count, store status, predictions) and the native target's C flash reader, which
  reads the flash.bin that Renode's flash.py wrote and restores the same learner from it.
* native: the same `reset` (the process started again on its port), `--kernels` as the
  device's INFO reports it.
* QEMU: `--state` refused in one line (its flash is read-only), `reset` reboots it with the
  exported head; `fleet --emulate --emulator qemu --board B --kernels K` boots B's firmware with
  K, as each board's INFO says.
* A fall-back to an older record (the newest damaged) is reported: boot line, INFO, info, load.
* `verify`'s hint names `--kernels ref` commands that parse with tinyol's own CLI.
* A flash.bin of the wrong size is refused in one line and left as it was (native and Renode).
"""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from tinyol.errors import TinyolError
from tinyol.link.device import Device
from tinyol.targets import emulator

MODEL = "models/digits"
BOARD = "nucleo_l476rg"
TINYOL = os.path.join(os.path.dirname(sys.executable), "tinyol")
IMAGE_BYTES = 128 * 1024 // 8 * 9      # the L476's 128 KB store and one state byte per double-word


class Emulate:
    """`tinyol emulate ...` as a user runs it, its stdin a pipe we type into."""

    def __init__(self, *args: str, env: dict | None = None):
        self.proc = subprocess.Popen([TINYOL, "emulate", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, cwd=ROOT, start_new_session=True,
                                     env=env)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._drain, daemon=True).start()
        self.url = self.expect("serial port:").split("serial port:")[1].strip()

    def _drain(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, text: str, timeout: float = 240.0) -> str:
        deadline = time.monotonic() + timeout
        seen = []
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1.0)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"emulate ended (code {self.proc.wait()}) before {text!r}: {seen}")
            seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"no {text!r} within {timeout} s: {seen}")

    def type(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.type("stop")
            self.expect("stopping", timeout=30)
            assert self.proc.wait(30) == 0

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _inputs(n: int, seed: int):
    from tinyol.data.datasets import load_source
    from tinyol.model.folder import load_manifest, quantize
    m = load_manifest(str(ROOT / MODEL))
    X, y, _ = load_source("digits:5-9@train")
    pick = np.random.default_rng(seed).permutation(len(y))[:n]
    s, z = float(m["input"]["scale"]), int(m["input"]["zero_point"])
    return [quantize(x.ravel(), s, z) for x in X[pick]], y[pick]


def _learn(dev, xs, ys) -> None:
    for x, t in zip(xs, ys):
        dev.sample(x, int(t))


def _probe(dev, xs) -> list[tuple[int, float]]:
    return [(r.prediction, r.value) for r in (dev.predict(x) for x in xs)]


def _open(url: str, attempts: int = 40) -> Device:
    """A new client: after a process restart the port is back within a moment."""
    for i in range(attempts):
        try:
            return Device.open(url, timeout=5)
        except Exception:
            if i == attempts - 1:
                raise
            time.sleep(0.25)


def _save_then_drift(dev, seed: int):
    """Learn, SAVE, probe; then learn more, so that RAM no longer equals the record: a reset
    that kept RAM (or lost the flash) would show."""
    xs, ys = _inputs(60, seed)
    _learn(dev, xs[:30], ys[:30])
    saved = dev.save()
    probe_x, _ = _inputs(20, seed + 100)
    probe = _probe(dev, probe_x)
    _learn(dev, xs[30:], ys[30:])
    assert _probe(dev, probe_x) != probe, "the drift after the save changed no prediction: no oracle"
    return saved, probe_x, probe


@pytest.mark.slow
@pytest.mark.renode
def test_renode_board_keeps_its_flash_across_reset_and_restart(firmware, tmp_path):
    """save -> reset (typed on emulate's stdin) -> load: the saved predictions; save -> stop
    emulate -> start it again with the same --state -> load: the same; and the native target's
    own flash reader restores the same learner from the flash.bin Renode's flash.py wrote."""
    from _renode_util import require_renode
    env = dict(os.environ, TINYOL_RENODE=require_renode())
    firmware(BOARD, MODEL, kernels="ref", test_build=False)     # built, so emulate only checks it
    state = tmp_path / "board1"
    emu = Emulate("--emulator", "renode", "--board", BOARD, "--model", MODEL, "--state", str(state),
                  "--kernels", "ref", env=env)
    try:
        assert (state / "flash.bin").stat().st_size == IMAGE_BYTES
        with _open(emu.url) as dev:
            assert dev.info.board == BOARD and "simd_kernels" not in dev.info.flags  # --kernels ref
            boots = dev.info.boot_count
            assert dev.store_status() == ("empty", 0)
            saved, probe_x, probe = _save_then_drift(dev, 1)
            assert saved.seq == 1
        emu.type("reset")
        emu.expect("reset: nucleo_l476rg power-cycled")
        with _open(emu.url) as dev:
            assert dev.info.boot_count == boots + 1, "the machine did not reboot"
            assert dev.store_status() == ("loaded", 1)
            assert _probe(dev, probe_x) == probe            # restored at boot
            assert dev.load().seq == 1
            assert _probe(dev, probe_x) == probe
            _learn(dev, *_inputs(10, 7))                   # RAM moves on; the flash does not
        emu.type("bogus")
        emu.expect("unknown command 'bogus'")
        emu.stop()
        emu = Emulate("--emulator", "renode", "--board", BOARD, "--model", MODEL, "--state", str(state),
                      "--kernels", "ref", env=env)
        emu.expect("flash: ")
        with _open(emu.url) as dev:
            assert dev.store_status() == ("loaded", 1)
            assert dev.load().seq == 1
            assert _probe(dev, probe_x) == probe
            assert dev.stats().samples_seen == 30
        # a second target on the same folder is refused while this one runs
        r = _tinyol("emulate", "--emulator", "renode", "--board", BOARD, "--model", MODEL, "--state", str(state),
                    "--kernels", "ref", env=env)
        assert r.returncode == 1 and r.stderr.startswith(f"error: state folder {state} is in use"), r.stderr
        emu.stop()
    finally:
        emu.kill()
    # the same file, read by flash_native.c: the record Renode's strict flash model stored
    # (ref kernels on both, so the predictions are the same bits)
    emu = Emulate("--emulator", "native", "--model", MODEL, "--state", str(state))
    try:
        with _open(emu.url) as dev:
            assert dev.store_status() == ("loaded", 1)
            assert _probe(dev, probe_x) == probe
        emu.stop()
    finally:
        emu.kill()


@pytest.mark.slow
def test_native_reset_on_stdin_and_kernels(firmware, tmp_path):
    """native: a reset (here SIGUSR1, as from another shell) starts the process again on its
    port with its flash; `--kernels simd` is what the device reports (ref is native's default)."""
    firmware("native", MODEL, kernels="simd")
    emu = Emulate("--emulator", "native", "--model", MODEL, "--kernels", "simd")
    try:
        with _open(emu.url) as dev:
            assert "simd_kernels" in dev.info.flags
            boots = dev.info.boot_count
            saved, probe_x, probe = _save_then_drift(dev, 2)
        os.kill(emu.proc.pid, signal.SIGUSR1)
        assert emu.expect("reset: nucleo_l476rg power-cycled").endswith(emu.url)
        with _open(emu.url) as dev:
            assert dev.info.boot_count == boots + 1
            assert dev.store_status() == ("loaded", saved.seq)
            assert _probe(dev, probe_x) == probe
        emu.stop()
    finally:
        emu.kill()
    emu = Emulate("--emulator", "native", "--model", MODEL)
    try:
        with _open(emu.url) as dev:
            assert "simd_kernels" not in dev.info.flags
        emu.stop()
    finally:
        emu.kill()


@pytest.mark.slow
@pytest.mark.parametrize("emu", ["native", "renode"])
def test_a_wrong_size_flash_image_is_refused_not_wiped(firmware, tmp_path, emu):
    """Another board's or a truncated flash.bin: one line, exit 1, the file as it was, no boot
    counted (native)."""
    board = BOARD if emu == "renode" else "native"
    state = tmp_path / "s"
    state.mkdir()
    old = bytes(range(256)) * 512                              # 128 KB: an image without its states
    (state / "flash.bin").write_bytes(old)
    r = _tinyol("emulate", "--emulator", emu, "--board", board, "--model", MODEL, "--state", str(state))
    assert r.returncode == 1, r
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and f"{state / 'flash.bin'}" in lines[0], r.stderr
    assert "131,072 bytes" in lines[0] or "131072 bytes" in lines[0], r.stderr
    assert "Traceback" not in r.stderr and len(lines) <= 2 and not r.stdout
    assert (state / "flash.bin").read_bytes() == old
    if emu == "native":      # the native process itself refuses it too (flash_native.c)
        with pytest.raises(TinyolError) as e:
            emulator.start_native(firmware("native", MODEL).program, state_dir=state, timeout=60)
        assert "131072 bytes, but this target's flash takes 147456" in str(e.value)
        assert "\n" not in str(e.value) and (state / "flash.bin").read_bytes() == old
    assert not (state / "boot_count").exists()


def _tinyol(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([TINYOL, *args], capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)


def test_qemu_refuses_state_in_one_line(tmp_path):
    r = _tinyol("emulate", "--emulator", "qemu", "--state", str(tmp_path / "s"))
    assert r.returncode == 1
    assert r.stderr.startswith("error: --state keeps a board's flash, and QEMU's STM32L4 flash is read-only")
    assert len(r.stderr.strip().splitlines()) == 2 and not (tmp_path / "s").exists()


@pytest.mark.slow
@pytest.mark.qemu
def test_fleet_pool_boots_the_board_and_kernels_asked_for(tmp_path):
    """`fleet --emulate --emulator qemu --board B --kernels K`: each board's INFO names B and K."""
    from tinyol.commands.fleet import EmulatedPool
    pool = EmulatedPool(1, str(ROOT / MODEL), emulator="qemu", board="nucleo_l432kc", kernels="ref",
                        state_dir=tmp_path)
    try:
        assert "nucleo_l432kc firmware" in pool.describe() and "(ref kernels)" in pool.describe()
        with Device.open(pool.urls[0], timeout=5) as dev:
            assert dev.info.board == "nucleo_l432kc" and "simd_kernels" not in dev.info.flags
    finally:
        pool.stop()
    pool = EmulatedPool(1, str(ROOT / MODEL), emulator="native", board="nucleo_l432kc", state_dir=tmp_path)
    try:
        with Device.open(pool.urls[0], timeout=5) as dev:
            assert dev.info.board == "nucleo_l432kc"
    finally:
        pool.stop()


def test_fleet_board_needs_emulate():
    r = _tinyol("fleet", "--twins", "2", "--board", "nucleo_l432kc")
    assert r.returncode == 1 and "--board and --kernels choose the firmware --emulate starts" in r.stderr, r.stderr


def _boot_line(url: str) -> str:
    """The boot line the native target sends its first client."""
    import socket
    host, port = url.split("//")[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        return sock.makefile("rb").readline().decode().strip()


def _records(image: bytes) -> dict[int, int]:
    """seq -> offset of each record header in a flash.bin (docs/persistence.md: magic "TOLS",
    seq at byte 16)."""
    import struct
    store = len(image) // 9 * 8
    out, at = {}, image.find(b"TOLS", 0, store)
    while at >= 0:
        if at % 8 == 0:
            out[struct.unpack_from("<I", image, at + 16)[0]] = at
        at = image.find(b"TOLS", at + 8, store)
    return out


@pytest.mark.slow
def test_a_fall_back_to_an_older_record_is_reported(firmware, tmp_path):
    """Two saves; then the newest record changes in flash (a flipped payload bit), or its
    commit double-word is torn: boot restores the older record and says so on the boot line
    (damaged=1), in INFO (flag store_damaged), `tinyol info` and `tinyol load`; a clean boot says
    nothing of the kind."""
    program = firmware("native", MODEL).program
    state = tmp_path / "s"
    xs, ys = _inputs(40, 5)
    probe_x, _ = _inputs(20, 6)
    with emulator.start_native(program, state_dir=state, timeout=120) as t, Device.open(t.url, timeout=5) as dev:
        _learn(dev, xs[:20], ys[:20])
        assert dev.save().seq == 1
        older = _probe(dev, probe_x)
        _learn(dev, xs[20:], ys[20:])
        assert dev.save().seq == 2
        newer = _probe(dev, probe_x)
    assert newer != older
    with emulator.start_native(program, state_dir=state, timeout=120) as t:
        assert _boot_line(t.url).endswith(" store=loaded")
        with Device.open(t.url, timeout=5) as dev:
            assert dev.store_status() == ("loaded", 2) and "store_damaged" not in dev.info.flags
    image = bytearray((state / "flash.bin").read_bytes())
    at = _records(bytes(image))[2]
    pristine = bytes(image)
    image[at + 40 + 100] ^= 0x10                                    # a payload bit changed
    (state / "flash.bin").write_bytes(image)
    with emulator.start_native(program, state_dir=state, timeout=120) as t:
        assert "store=loaded damaged=1" in _boot_line(t.url)
        with Device.open(t.url, timeout=5) as dev:
            assert dev.store_status() == ("loaded", 1) and "store_damaged" in dev.info.flags
            assert _probe(dev, probe_x) == older
        r = _tinyol("info", "--port", t.url)
        assert r.returncode == 0 and "loaded (record 1); a newer record is damaged" in r.stdout, r.stdout
        r = _tinyol("load", "--port", t.url)
        assert r.returncode == 0 and "warning: at boot a newer record was found damaged" in r.stdout, r.stdout
    image = bytearray(pristine)
    image[len(image) // 9 * 8 + at // 8] = 2                        # its commit double-word torn
    (state / "flash.bin").write_bytes(image)
    with emulator.start_native(program, state_dir=state, timeout=120) as t, Device.open(t.url, timeout=5) as dev:
        assert dev.store_status() == ("loaded", 1) and "store_damaged" in dev.info.flags


@pytest.mark.parametrize("board", [BOARD, "native"])
def test_verify_hint_names_commands_that_exist(board):
    """The hint `verify` gives when latents differ on SIMD kernels: every `tinyol ...` command
    in it parses with tinyol's own CLI (the old hint promised an `emulate --kernels` that did
    not exist); on reference kernels it asks for a report instead."""
    import re

    import click
    from tinyol.cli import group
    from tinyol.commands.verify import _narrow_down
    hint = _narrow_down(board, MODEL, simd=True)
    commands = re.findall(r"`tinyol ([^`]+)`", hint)
    assert len(commands) == (2 if board != "native" else 1), hint
    for text in commands:
        argv = text.split()
        sub = group.get_command(click.Context(group), argv[0])
        ctx = sub.make_context(argv[0], argv[1:])
        assert ctx.params["kernels"] == "ref", text
    assert "--kernels" not in _narrow_down(board, MODEL, simd=False)


@pytest.mark.slow
@pytest.mark.qemu
def test_qemu_reset_reboots_with_the_exported_head(firmware):
    """QEMU: `reset` starts it again on the same port; its flash is read-only, so the board
    comes back with the exported head and says persistence is unavailable."""
    firmware(BOARD, MODEL, test_build=False)
    emu = Emulate("--emulator", "qemu", "--board", BOARD, "--model", MODEL)
    try:
        emu.expect("flash: read-only in QEMU")
        with _open(emu.url) as dev:
            assert dev.store_status() == ("unavailable", 0) and "simd_kernels" in dev.info.flags
            _learn(dev, *_inputs(5, 9))
            assert dev.stats().samples_seen == 5
        emu.type("reset")
        assert "QEMU's flash is read-only: the exported head" in emu.expect("reset: nucleo_l476rg power-cycled")
        with _open(emu.url) as dev:
            assert dev.stats().samples_seen == 0
        emu.stop()
    finally:
        emu.kill()

"""The board's own sensor end to end (examples/imu_learner, docs/sensor.md): the device learns.

Recorded wrist motion (the watch set, tinyol_studies.sensor_demo's plan: held-out windows of
subjects 8-10, unlabelled; labelled TRAP and ROW of subjects 1 and 2, exercises models/imu was
not trained on, as new classes 5 and 6; the same held-out windows again) becomes RESD files
(`tinyol record-to-resd`); Renode's LSM6DSO model plays them on the B-L475E-IOT01A's I2C2; the
firmware reads the FIFO over I2C, windows and scales the rows (tol_window), predicts every
window and learns the labelled ones. Oracles: the windows the host twin builds from the rows the
emulated sensor reports (tinyol.data.sensor: the model's decimal arithmetic, then the same integer
scaling), compared by CRC-32 window for window; predictions and confidences of the numpy
reference learner on those windows (backbone in TFLM's runtime); the accuracy on the held-out
windows before and after learning, from the device's own predictions, against the twin's and a
floor on the gain. The native build runs the same pipeline on the rows from a file, with the
same results.
"""
from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from tinyol.data import sensor as S
from tinyol_studies import sensor_demo as demo
from tinyol.targets import emulator

EXAMPLE = ROOT / "examples" / "imu_learner"
MODEL = ROOT / "models" / "imu"
MIN_GAIN = 0.25  # accuracy points the held-out windows gain; the twin's plan: 1/3 -> 2/3

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("seglearn") is None,
                                 reason="seglearn (watch data) not installed: make setup")]


def _pio_build(env: str) -> Path:
    proc = subprocess.run([sys.executable, "-m", "platformio", "run", "-d", str(EXAMPLE), "-e", env],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PLATFORMIO_CORE_DIR": os.environ.get(
                              "PLATFORMIO_CORE_DIR", str(ROOT / ".pio-core")), "PLATFORMIO_NO_ANSI": "true"})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    build = EXAMPLE / ".pio" / "build" / env
    return build / ("firmware" if env == "native" else "firmware.elf")


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """The record-to-resd folder of the demo's plan (through the CLI) and the twin's expectations."""
    from click.testing import CliRunner
    from tinyol.cli import group

    rec = demo.recording()
    tmp = tmp_path_factory.mktemp("imu")
    np.savez(tmp / "rec.npz", X=rec["X"], y=rec["y"])
    out = tmp / "resd"
    r = CliRunner().invoke(group, ["record-to-resd", str(tmp / "rec.npz"), "--rate", "50", "--out", str(out)])
    assert r.exit_code == 0, r.output
    meta = json.loads((out / "sensor.json").read_text())
    n_measure = sum(b - a for _, a, b in demo.MEASURE)
    assert meta["rows"] == len(rec["X"]) and meta["schedule"][:3] == [[0, 255], [n_measure, 5],
                                                                      [n_measure + 600, 6]]
    raw = np.frombuffer((out / "raw.bin").read_bytes(), "<i2").reshape(-1, 6)
    twin = demo.Twin(MODEL)
    want = twin.play(raw, meta["schedule"])
    before, after, n = demo.accuracy_before_after(want["preds"], rec["segments"], twin.length)
    assert n == 21 and after - before >= MIN_GAIN, (before, after)
    return dict(want, dir=out, meta=meta, segments=rec["segments"], length=twin.length,
                before=before, after=after)


def _collect(sock, until="done", limit=100000) -> list[str]:
    f = sock.makefile("rb")
    lines = []
    for _ in range(limit):
        raw = f.readline()
        assert raw, "the firmware's console closed: " + "\n".join(lines[-5:])
        line = raw.decode(errors="replace").strip()
        lines.append(line)
        if line.startswith(until) or line.startswith("error"):
            break
    return lines


def _check(lines, rec):
    out = S.parse_lines(lines)
    assert out["done"] == len(rec["crc"]), lines[-3:]
    idx = [w[0] for w in out["windows"]]
    assert idx == list(range(len(rec["crc"])))
    # the device built the twin's windows, byte for byte
    assert [w[1] for w in out["windows"]] == rec["crc"]
    # and predicted what the reference learner predicts, with the same confidence
    assert [w[2] for w in out["windows"]] == rec["preds"]
    assert [w[3] for w in out["windows"]] == rec["conf_e6"]
    assert [l[0] for l in out["learned"]] == rec["learned"]
    assert [l[1] for l in out["learned"]] == [rec["labels"][k] for k in rec["learned"]]
    return out


def _learned_something(out, rec):
    """The device's own predictions on the held-out windows, before and after learning: the
    twin's accuracies, and a gain of at least MIN_GAIN."""
    before, after, _ = demo.accuracy_before_after([w[2] for w in out["windows"]], rec["segments"],
                                                  rec["length"])
    assert (before, after) == (rec["before"], rec["after"])
    assert after - before >= MIN_GAIN, (before, after)


@pytest.mark.renode
def test_renode_imu_learns_like_the_twin(recording, _renode_launcher):
    """tinyol's own firmware built with --app imu, in Renode, fed through `tinyol.data.sensor`."""
    from tinyol.targets.firmware import BuildConfig, build

    elf = build(BuildConfig("disco_l475vg_iot01a", str(MODEL), app="imu", stride=50)).elf
    with emulator.start_renode("disco_l475vg_iot01a", elf, timeout=400, imu=True) as t:
        host, port = t.url.split("//")[1].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=300) as sock:
            boot = _collect(sock, until="boot")[-1]
            assert boot.startswith("boot model=imu sensor=0x6c length=100 stride=50 channels=6 rate=52 status=0"), boot
            S.start_recording(t, sock, recording["dir"])
            lines = _collect(sock)
            # the user button (B1, PC13): a short press selects class 1, a long one learns the
            # last window as class 1 (the sensor keeps sampling: Renode's default zero rows)
            btn = "sysbus.gpioPortC.userButton"
            for held in ("0.3", "1.5"):
                t.monitor.execute("pause")
                t.monitor.execute(f"{btn} Press")
                t.monitor.execute(f'emulation RunFor "{held}"')
                t.monitor.execute(f"{btn} Release")
                t.monitor.execute("start")
                if held == "0.3":
                    assert _collect(sock, until="class")[-1] == "class 1"
            pressed = _collect(sock, until="learned")[-1]
    out = _check(lines, recording)
    _learned_something(out, recording)
    n_windows = len(recording["crc"])
    assert pressed == f"learned {n_windows - 1} 1 {len(recording['learned']) + 1}"
    assert len(out["learned"]) == len(recording["learned"]) > 40


def test_example_builds_for_the_board():
    """examples/imu_learner (the same sources over tinyol.h, the library build) links for the
    B-L475E-IOT01A with the I2C driver and without tinyol's protocol."""
    elf = _pio_build("disco_l475vg_iot01a")
    linked = (elf.parent / "firmware.map").read_text()
    for present in ("tol_i2c_read", "tol_window_push", "tinyol_predict"):
        assert present in linked, present
    for absent in ("tol_proto_parse", "tol_server_feed", "imu_file"):
        assert absent not in linked, absent
    # tinyol.h's split placement: where the memory plan (the manifest's) puts the learner and its
    # replay buffer, the linker put the example's blocks (arm-none-eabi-nm), at the plan's sizes
    m = json.loads((MODEL / "manifest.json").read_text())["memory"]
    assert (m["learner_region"], m["replay_region"]) == ("SRAM2", "SRAM1")
    syms = {}
    for line in subprocess.run(["arm-none-eabi-nm", "-S", str(elf)], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 4:
            syms[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
    base = {"SRAM1": 0x20000000, "SRAM2": 0x10000000}
    for sym, region, size in (("learner_mem", m["learner_region"], m["learner_bytes"] - m["replay_bytes"]),
                              ("replay_mem", m["replay_region"], m["replay_bytes"])):
        addr, got = syms[sym]
        assert got == size, (sym, got, size)
        assert base[region] <= addr and addr + got <= base[region] + m["regions"][region]["size"], sym


def test_native_imu_from_a_file(recording, monkeypatch):
    """The example's native build: the same pipeline reads the rows from a file."""
    program = _pio_build("native")
    monkeypatch.setenv("TINYOL_IMU_FILE", str(recording["dir"] / "raw.bin"))
    with emulator.start_native(program, timeout=300) as t:
        host, port = t.url.split("//")[1].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=120) as sock:
            boot = _collect(sock, until="boot")[-1]
            assert boot.startswith("boot model=imu sensor=0x00 length=100 stride=50"), boot
            sock.sendall(S.schedule_bytes(recording["meta"]["schedule"]))
            sock.sendall(S.go_bytes(recording["meta"]["rows"]))
            lines = _collect(sock)
        _learned_something(_check(lines, recording), recording)
        # a person at `tinyol monitor` labels the last window (class 3) and asks for the counters
        from click.testing import CliRunner
        from tinyol.cli import group

        r = CliRunner().invoke(group, ["monitor", "--port", t.url, "--until", "stats", "--json",
                                       "--seconds", "60"], input="3\nq\n")
        assert r.exit_code == 0, r.output
        got = json.loads(r.output)
        assert got["learned"] == {"3": 1} and got["windows"] == 0


@pytest.fixture
def _renode_launcher(monkeypatch):
    sys.path.insert(0, str(ROOT / "tests"))
    from _renode_util import SKIP_REASON, renode_launcher

    launcher = renode_launcher()
    if launcher is None:
        pytest.skip(SKIP_REASON)
    monkeypatch.setenv("TINYOL_RENODE", launcher)

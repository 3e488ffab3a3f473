"""The board's own sensor end to end (examples/imu_learner, docs/sensor.md).

Recorded wrist motion (the watch set: two exercises of subject 3, labelled, then two more
recordings of the same exercises, unlabelled) becomes RESD files (`tinyol record-to-resd`);
Renode's LSM6DSO model plays them on the B-L475E-IOT01A's I2C2; the firmware reads the FIFO
over I2C, windows and scales the rows (tol_window), predicts every window and learns the
labelled ones as two new classes. Oracles: the windows the host twin builds from the rows the
emulated sensor reports (tinyol.data.sensor: the model's decimal arithmetic, then the same integer
scaling), compared by CRC-32 window for window; predictions and confidences of the numpy
reference learner on those windows (backbone in TFLM's runtime). The native build runs the same
pipeline on the rows from a file, with the same results.
"""
from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from tinyol.data import sensor as S
from tinyol.targets import emulator

EXAMPLE = ROOT / "examples" / "imu_learner"
MODEL = ROOT / "models" / "imu"
# watch recordings (index into seglearn's file): labelled PEN -> class 3, IR -> class 4, then
# unlabelled PEN and IR of the same subject (3)
PLAN = [(74, 3), (9, 4), (40, -1), (44, -1)]

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
    """The record-to-resd folder of PLAN (through the CLI) and the twin's expectations."""
    from click.testing import CliRunner
    from tinyol.cli import group
    from tinyol.data.datasets import watch_recordings
    from tinyol.targets.simulation import latents, learner_settings, load_model, make_learner

    d = watch_recordings()
    X = np.concatenate([np.asarray(d["X"][i]) for i, _ in PLAN])
    y = np.concatenate([np.full(len(d["X"][i]), lab) for i, lab in PLAN])
    tmp = tmp_path_factory.mktemp("imu")
    np.savez(tmp / "rec.npz", X=X, y=y)
    out = tmp / "resd"
    r = CliRunner().invoke(group, ["record-to-resd", str(tmp / "rec.npz"), "--rate", "50", "--out", str(out)])
    assert r.exit_code == 0, r.output
    meta = json.loads((out / "sensor.json").read_text())
    assert meta["rows"] == len(X) and meta["schedule"][:2] == [[0, 3], [len(d["X"][74]), 4]]

    m = json.loads((MODEL / "manifest.json").read_text())
    sens = S.sensor("lsm6dsl")
    mul, add = S.coefficients(sens.unit_per_lsb, m["input"]["scale"], m["input"]["zero_point"],
                              *S.preprocess(m, 6))
    raw = np.frombuffer((out / "raw.bin").read_bytes(), "<i2").reshape(-1, 6)
    windows = S.windows(S.scale_raw(raw, mul, add), 100, 50)
    labels = S.window_labels([tuple(s) for s in meta["schedule"]], len(windows), 100, 50)
    model = load_model(MODEL)
    lrn = make_learner(model, *learner_settings(model))
    preds, conf_e6, learned = [], [], []
    for k, q in enumerate(latents(model, windows.reshape(len(windows), -1))):
        p, c = lrn.predict(q)
        preds.append(int(p))
        conf_e6.append(int(np.float32(c) * np.float32(1e6)))  # the firmware's (int32_t)(conf * 1e6f)
        if labels[k] != 255:
            lrn.learn(q, labels[k])
            learned.append(k)
    return {"dir": out, "meta": meta, "crc": [zlib.crc32(w.tobytes()) for w in windows],
            "preds": preds, "conf_e6": conf_e6, "learned": learned, "labels": labels,
            "rows_per_rec": [len(d["X"][i]) for i, _ in PLAN]}


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


def _test_windows_accuracy(rec) -> float:
    """Accuracy on the unlabelled windows (recordings 3 and 4 of PLAN)."""
    n0 = sum(rec["rows_per_rec"][:2])
    truth = []
    for k in range(len(rec["crc"])):
        first = k * 50
        if first < n0:
            truth.append(None)
            continue
        last = first + 99
        in_third = last < n0 + rec["rows_per_rec"][2]
        in_fourth = first >= n0 + rec["rows_per_rec"][2]
        truth.append(PLAN[0][1] if in_third else PLAN[1][1] if in_fourth else None)
    pairs = [(p, t) for p, t in zip(rec["preds"], truth) if t is not None]
    return float(np.mean([p == t for p, t in pairs]))


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
    n_windows = len(recording["crc"])
    assert pressed == f"learned {n_windows - 1} 1 {len(recording['learned']) + 1}"
    assert len(out["learned"]) == len(recording["learned"]) > 30
    # the learned classes are what the device now predicts on most held-out windows (how often
    # rightly is the backbone's business: docs/sensor.md gives the measured accuracy)
    held_out = out["windows"][-30:]
    assert np.mean([w[2] in (3, 4) for w in held_out]) > 0.5   # measured: 23 of 30


def test_example_builds_for_the_board():
    """examples/imu_learner (the same sources over tinyol.h, the library build) links for the
    B-L475E-IOT01A with the I2C driver and without tinyol's protocol."""
    elf = _pio_build("disco_l475vg_iot01a")
    linked = (elf.parent / "firmware.map").read_text()
    for present in ("tol_i2c_read", "tol_window_push", "tinyol_predict"):
        assert present in linked, present
    for absent in ("tol_proto_parse", "tol_app_feed", "imu_file"):
        assert absent not in linked, absent


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
        _check(lines, recording)
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

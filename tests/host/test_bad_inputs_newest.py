"""The newest verbs' bad inputs (issue 34): one line, a non-zero exit, nothing written wrongly.

Each case is what a careless user typed; the oracle is the command line itself (exit code,
stderr, the files left behind) and, for record-to-resd, the bytes it writes for a good
recording next to a bad one.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import ROOT
from tinyol.cli import main


def _run(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _one_line_error(rc, err, *needles):
    assert rc != 0, err
    assert "Traceback" not in err
    first = [l for l in err.splitlines() if l.startswith("error:")]
    assert len(first) == 1, err
    for n in needles:
        assert n in err, (n, err)


def _recording(path, X, **extra):
    np.savez(path, X=np.asarray(X), **extra)
    return path


@pytest.mark.parametrize("X, extra, said", [
    ([[1e30, 0, 1]] * 10, {}, "beyond any IMU's range"),
    ([[-1e30, 0, 1]] * 10, {}, "beyond any IMU's range"),
    (np.array([["a", "b", "c"]] * 10), {}, "X is not numbers"),
    ([[0, 0, 1]] * 10, {"t": np.array(["x"] * 10)}, "t is not numbers"),
    ([[0, 0, 1]] * 10, {"y": np.full(10, 0.5)}, "whole numbers"),
    ([[0, 0, 1]] * 10, {"t": np.arange(9) * 0.02}, "10 finite timestamps"),
])
def test_record_to_resd_refuses_a_bad_recording_and_writes_nothing(tmp_path, capsys, X, extra, said):
    src = _recording(tmp_path / "rec.npz", X, **extra)
    rc, _, err = _run(["record-to-resd", str(src), "--rate", "50", "--out", str(tmp_path / "o")], capsys)
    _one_line_error(rc, err, said)
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_record_to_resd_refuses_bad_rate_and_out(tmp_path, capsys):
    src = _recording(tmp_path / "rec.npz", [[0, 0, 1]] * 10)
    for rate in ("nan", "inf", "-5", "0"):
        rc, _, err = _run(["record-to-resd", str(src), "--rate", rate, "--out", str(tmp_path / "o")], capsys)
        assert rc != 0 and "Traceback" not in err and rate in err, err
    (tmp_path / "file").write_text("x")
    rc, _, err = _run(["record-to-resd", str(src), "--rate", "50", "--out", str(tmp_path / "file")], capsys)
    _one_line_error(rc, err, "is a file")
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"ax,ay,az\n\xff\xfe,1,2\n")
    rc, _, err = _run(["record-to-resd", str(bad), "--rate", "50", "--out", str(tmp_path / "o")], capsys)
    _one_line_error(rc, err, "bad.csv")


def test_record_to_resd_still_writes_a_good_recording_truthfully(tmp_path, capsys):
    """The oracle for the refusals above: 8 g saturates to the int16 rail with its sign (a
    real sensor clips), a value of 1e30 is no reading at all."""
    src = _recording(tmp_path / "rec.npz", [[9.0, -9.0, 1.0]] * 4)
    rc, _, err = _run(["record-to-resd", str(src), "--rate", "50", "--out", str(tmp_path / "o")], capsys)
    assert rc == 0, err
    raw = np.frombuffer((tmp_path / "o" / "raw.bin").read_bytes(), "<i2").reshape(-1, 6)
    assert raw[:, 0].tolist() == [32767] * 4 and raw[:, 1].tolist() == [-32768] * 4


def _sensor_folder(tmp_path, capsys):
    src = _recording(tmp_path / "rec.npz", [[0, 0, 1]] * 300)
    out = tmp_path / "walk"
    assert _run(["record-to-resd", str(src), "--rate", "50", "--out", str(out)], capsys)[0] == 0
    return out


@pytest.mark.parametrize("damage, said", [
    (lambda d: (d / "raw.bin").write_bytes(b""), "raw.bin: 0 bytes, sensor.json says 300 rows"),
    (lambda d: (d / "raw.bin").write_bytes(b"\0" * 11), "raw.bin: 11 bytes"),
    (lambda d: (d / "sensor.json").write_text("{"), "sensor.json: not as record-to-resd writes it"),
    (lambda d: (d / "sensor.json").write_text(json.dumps({"rows": "300", "schedule": [[0, 1]]})),
     "sensor.json: not as record-to-resd writes it"),
    (lambda d: (d / "sensor.json").write_text(json.dumps({"rows": 300, "schedule": [[400, 1]]})),
     "sensor.json: not as record-to-resd writes it"),
    (lambda d: (d / "acc.resd").write_bytes(b"RESD"), "acc.resd: not a RESD file of 300 samples"),
    (lambda d: (d / "gyro.resd").unlink(), "no gyro.resd"),
])
def test_emulate_sensor_refuses_a_damaged_folder_before_starting(tmp_path, capsys, damage, said):
    d = _sensor_folder(tmp_path, capsys)
    damage(d)
    rc, out, err = _run(["emulate", "--emulator", "native", "--app", "imu", "--sensor", str(d),
                         "--model", str(ROOT / "models/digits")], capsys)
    _one_line_error(rc, err, said)
    assert "playing" not in out


def test_export_stage_train_empty_is_refused(tmp_path, capsys):
    for spec in ("", " ", ",", " , "):
        rc, _, err = _run(["export", str(ROOT / "models/digits/digits.keras"), "-o", str(tmp_path / "o"),
                           "--split", "conv2", "--stage-train", spec], capsys)
        _one_line_error(rc, err, "names nothing")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("seconds", ["-1", "nan", "inf", "0"])
def test_monitor_seconds_must_be_positive_and_finite(capsys, seconds):
    rc, _, err = _run(["monitor", "--port", "socket://127.0.0.1:9", "--seconds", seconds], capsys)
    assert rc != 0 and "Traceback" not in err and seconds in err, err
    assert "cannot open" not in err  # refused before the port is touched


def test_bench_json_stdout_is_the_json_alone(tmp_path):
    """`tinyol bench --json | jq` used to get 'wrote FILE' (and every progress line) mixed
    into the JSON; progress goes to stderr now, child processes' output included."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "tinyol.cli", "bench", "--model", str(ROOT / "models/digits"),
                        "--no-firmware", "--no-stream", "--out", str(tmp_path / "b.md"), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)  # the whole of stdout
    assert d["models"] == [] and "wrote" in p.stderr and (tmp_path / "b.md").is_file()

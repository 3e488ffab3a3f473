"""Driving a device from the CLI (issue 9, items 4, 5, 7): `tinyol set`, `reset`, `stream --prefill
/--epochs/--layout`, label and shape checks, `Device("socket://...")`, native board imitation,
`simulate --log` vs `stream --log` through `tinyol compare`.

The native firmware is the device (the same app and learner C code as the boards); the reference
learner (`tinyol simulate`) is the oracle for the per-sample records.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tinyol.cli import main as cli_main
from tinyol.data.datasets import fit_layout
from tinyol.errors import TinyolError
from tinyol.link.device import Device
from tinyol.targets import emulator

ROOT = Path(__file__).resolve().parents[2]
DIGITS = str(ROOT / "models" / "digits")


@pytest.fixture
def run(capsys):
    def go(args, expect=0):
        rc = cli_main([str(a) for a in args])
        cap = capsys.readouterr()
        out = cap.out + cap.err
        assert rc == expect, (args, rc, out)
        return out if expect else cap.out + cap.err
    return go


@pytest.fixture
def native(firmware, tmp_path):
    res = firmware("native", "models/digits")
    (tmp_path / "state").mkdir()
    with emulator.start_native(res.program, state_dir=tmp_path / "state", timeout=300) as t:
        yield t


# ---------------------------------------------------------------------------------------------
# shapes: checked, never guessed (pure host)

def test_layout_refuses_mismatch_and_names_both_shapes():
    X = np.arange(2 * 6 * 128, dtype=np.float32).reshape(2, 6, 128)
    with pytest.raises(TinyolError) as e:
        fit_layout(X, [128, 6])
    assert "[6, 128]" in str(e.value) and "[128, 6]" in str(e.value)
    assert "--layout channels-first" in e.value.hint
    Y = fit_layout(X, [128, 6], "channels-first")
    assert Y.shape == (2, 128, 6) and Y[1, 5, 2] == X[1, 2, 5]      # moved, not reshaped
    assert fit_layout(X.reshape(2, -1), [128, 6]).shape == (2, 128, 6)  # flat rows: model order
    assert fit_layout(np.zeros((3, 8, 8)), [8, 8, 1]).shape == (3, 8, 8, 1)
    with pytest.raises(TinyolError, match="768 values"):
        fit_layout(X, [100, 6])


def test_eval_refuses_labels_beyond_the_device_classes(tmp_path, run):
    """digits has room for 10 classes: a label 12 is refused in --eval too, before anything is sent
    (the port does not even exist)."""
    from tinyol.data.datasets import load_source, save_npz

    X, y, _ = load_source("digits:0-4@test")
    y = y.copy()
    y[7] = 12
    save_npz(str(tmp_path / "bad.npz"), X, y)
    for mode in ("--eval", "--train"):
        out = run(["stream", "-p", "socket://127.0.0.1:1", "-m", DIGITS, "--data",
                   str(tmp_path / "bad.npz"), mode], expect=1)
        assert "row 7: label 12 is not one of the device's classes 0..9" in out, out


# ---------------------------------------------------------------------------------------------
# the device

def test_device_from_url_set_reset_prefill(native, run):
    url = native.url
    with Device(url, timeout=3) as dev:     # a URL, not only Device.open
        assert dev.info.model == "digits"
        lr0 = dev.get("lr")
    out = run(["set", "-p", url, "--mode", "sgd", "--lr", "0.01", "--n-old", "4", "--json"])
    now = json.loads(out)
    assert now["mode"] == "sgd" and abs(now["lr"] - 0.01) < 1e-9 and now["n_old"] == 4
    with Device(url, timeout=3) as dev:     # read back over a new connection: the device has it
        assert dev.get("mode") == 1 and dev.get("n_old") == 4
    # momentum: the digits firmware was exported with momentum 0 and reserves no buffers
    out = run(["set", "-p", url, "--momentum", "0.9"], expect=1)
    assert "refused momentum = 0.9" in out and "--momentum > 0" in out
    out = run(["set", "-p", url, "--n-old", "17"], expect=1)      # exported with n_old 16
    assert "--replay-n-old" in out
    # prefill: REPLAY_ADD fills the buffer, nothing is learned
    out = run(["stream", "-p", url, "-m", DIGITS, "--prefill", "digits:0-4@train",
               "--prefill-limit", "50", "--no-progress"])
    assert "50 samples of digits:0-4@train offered" in out and "50/200 slots filled" in out
    with Device(url, timeout=3) as dev:
        st = dev.stats()
        assert st.replay_fill == 50 and st.samples_seen == 0 and st.updates == 0
    out = run(["reset", "-p", url, "--json"])
    assert json.loads(out) == {"samples_seen": 0, "n_active": 5, "replay_fill": 0,
                               "replay_capacity": 200}
    with Device(url, timeout=3) as dev:
        assert dev.get("mode") == 2 and dev.get("lr") == lr0 and dev.get("n_old") == 16


def test_epochs_and_compare_with_simulate(native, tmp_path, run):
    """Two epochs of a shuffled source on the device; the reference learner fed the same rows in
    the same order writes the same records (tinyol compare says so, exit 0)."""
    url = native.url
    dev_log, sim_log = tmp_path / "dev.jsonl", tmp_path / "sim.jsonl"
    run(["stream", "-p", url, "-m", DIGITS, "--data", "digits:5-6@train", "--limit", "40",
         "--shuffle", "--seed", "3", "--epochs", "2", "--log", str(dev_log), "--no-progress"])
    recs = [json.loads(l) for l in dev_log.read_text().splitlines()]
    assert len(recs) == 80
    idx = [r["index"] for r in recs]
    assert sorted(idx[:40]) == sorted(idx[40:]) and idx[:40] != idx[40:]  # reshuffled per epoch
    assert recs[-1]["samples_seen"] == 80
    # the same rows, in the device's order, through the reference learner
    from tinyol.data.datasets import load_source, save_npz

    X, y, _ = load_source("digits:5-6@train")
    save_npz(str(tmp_path / "order.npz"), X[idx], y[idx])
    run(["simulate", "--model", DIGITS, "--data", str(tmp_path / "order.npz"), "--log", str(sim_log)])
    sim = [json.loads(l) for l in sim_log.read_text().splitlines()]
    assert [r["index"] for r in sim] == list(range(80))
    # the simulator's index is its own source's row: map it back before comparing
    for r, i in zip(sim, idx):
        r["index"] = i
    sim_log.write_text("".join(json.dumps(r) + "\n" for r in sim))
    out = run(["compare", str(dev_log), str(sim_log)])
    assert "same: every line agrees" in out, out
    # and a real difference is found and reported
    sim[10]["prediction"] = 99
    sim_log.write_text("".join(json.dumps(r) + "\n" for r in sim))
    out = run(["compare", str(dev_log), str(sim_log)], expect=1)
    assert "1 lines differ" in out and "line 11" in out


def test_native_reports_the_board_it_imitates(firmware, tmp_path):
    res = firmware("native", "models/digits")
    (tmp_path / "s").mkdir()
    with emulator.start("nucleo_l432kc", res, emulator="native", state_dir=tmp_path / "s",
                        timeout=120) as t:
        with Device(t.url, timeout=3) as dev:
            assert dev.info.board == "nucleo_l432kc"


def test_autoencoder_log_and_summary_tell_the_truth(firmware, tmp_path, run):
    """models/anomaly on the native device: flagged samples are not `learned` (the head is not
    updated on them), exactly as the reference learner logs it; the summary names no classes and
    prints no nan."""
    res = firmware("native", "models/anomaly")
    (tmp_path / "s").mkdir()
    model = str(ROOT / "models" / "anomaly")
    with emulator.start_native(res.program, state_dir=tmp_path / "s", timeout=300) as t:
        out = run(["stream", "-p", t.url, "-m", model, "--data", "sensor:anomalies@test",
                   "--limit", "150", "--log", tmp_path / "dev.jsonl", "--no-progress"])
    assert "classes active" not in out and "nan" not in out, out
    dev = [json.loads(l) for l in (tmp_path / "dev.jsonl").read_text().splitlines()]
    flagged = [r for r in dev if r["prediction"] == 1]
    assert flagged and not any(r["learned"] for r in flagged)
    assert any(r["learned"] for r in dev)
    from tinyol.data.datasets import load_source, save_npz

    X, y, _ = load_source("sensor:anomalies@test")
    save_npz(str(tmp_path / "first.npz"), X[:150], y[:150])
    run(["simulate", "--model", model, "--data", tmp_path / "first.npz", "--log", tmp_path / "sim.jsonl"])
    assert "same: every line agrees" in run(["compare", tmp_path / "dev.jsonl", tmp_path / "sim.jsonl"])

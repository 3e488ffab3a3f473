"""Anomaly mode a user can act on (issue 33, item 4): the kdd135 source against aeon's own loader,
detections against scikit-learn's metrics, `simulate --tune` and its rule, and on the native
device: the threshold in every reply equals the reference learner's, the summary's detections equal
simulate's, the log names score and threshold, --plot draws them.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from tinyol.cli import main as cli_main
from tinyol.data.datasets import load_source
from tinyol.learn import anomaly as A
from tinyol.targets import emulator

ROOT = Path(__file__).resolve().parents[2]
KDD = ROOT / "models" / "kdd135"


def _cli(capsys, *args, expect=0) -> str:
    rc = cli_main([str(a) for a in args])
    cap = capsys.readouterr()
    assert rc == expect, (args, rc, cap.out + cap.err)
    return cap.out + cap.err


def _aeon_csv(split: str) -> tuple[np.ndarray, np.ndarray]:
    """The aeon wheel's own files, read with the csv module (aeon's loader needs pandas)."""
    import csv
    import importlib.util

    spec = importlib.util.find_spec("aeon")
    if spec is None:
        pytest.skip("aeon is not installed")
    path = (Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "KDD-TSAD_135"
            / f"135_UCR_Anomaly_InternalBleeding16_{split}.csv")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return (np.array([float(r["value"]) for r in rows]),
            np.array([int(float(r["is_anomaly"])) for r in rows]))


def test_kdd135_windows_follow_the_aeon_files():
    v, lab = _aeon_csv("TEST")
    tr, _ = _aeon_csv("TRAIN")
    assert np.array_equal(v[:len(tr)], tr)  # the train file is the series' first part
    lo, hi = tr.min(), tr.max()
    X, y, _ = load_source("kdd135@test")
    starts = np.arange(3000, len(v) - 64 + 1, 4)
    assert X.shape == (len(starts), 64)
    np.testing.assert_allclose(X[7], (v[starts[7]:starts[7] + 64] - lo) / (hi - lo), rtol=1e-6)
    anom = np.flatnonzero(lab)
    want = [int(((s <= anom) & (anom < s + 64)).any()) for s in starts]
    assert y.tolist() == want and sum(want) == 19
    Xtr, ytr, _ = load_source("kdd135@train")
    Xv, yv, _ = load_source("kdd135@val")
    assert len(Xtr) == 285 and len(Xv) == 435 and not ytr.any() and not yv.any()


def test_kdd135_val_split_is_refused_elsewhere(capsys, tmp_path):
    (tmp_path / "f.csv").write_text("".join(f"{i},{i % 2}\n" for i in range(10)))
    out = _cli(capsys, "simulate", "--model", KDD, "--data", f"{tmp_path / 'f.csv'}@val", expect=1)
    assert "only kdd135 has a @val part" in out and "Traceback" not in out


def test_detection_matches_sklearn():
    from sklearn.metrics import f1_score, precision_score, recall_score

    rng = np.random.default_rng(3)
    for _ in range(20):
        lab = (rng.random(200) < 0.1).astype(int)
        flags = rng.random(200) < 0.15
        d = A.flags_vs_labels(flags, lab)
        assert d["precision"] == pytest.approx(precision_score(lab, flags, zero_division=np.nan))
        assert d["recall"] == pytest.approx(recall_score(lab, flags))
        assert d["f1"] == pytest.approx(f1_score(lab, flags))
    d = A.flags_vs_labels([False] * 5, [0] * 5)
    assert math.isnan(d["precision"]) and math.isnan(d["recall"]) and d["false_positive_rate"] == 0


def test_choose_k_rules():
    det = lambda tp, fp, fn: A.detection(tp, fp, fn, 100)  # noqa: E731
    # labelled anomalies: best F1, ties to the larger k
    k, rule = A.choose_k({2.0: det(5, 9, 0), 4.0: det(5, 1, 0), 6.0: det(5, 1, 0), 8.0: det(2, 0, 3)})
    assert k == 6.0 and "F1" in rule
    # normal only: the smallest k without a false alarm
    k, rule = A.choose_k({2.0: det(0, 3, 0), 3.0: det(0, 0, 0), 5.0: det(0, 0, 0)})
    assert k == 3.0 and "no false alarm" in rule


@pytest.mark.slow
def test_simulate_tune_reports_on_data_it_did_not_choose_on(capsys):
    """--tune picks k on kdd135@val (normal: the smallest quiet k); the report on kdd135@test
    equals a plain run with that k, and the k just below it raised false alarms on @val."""
    res = json.loads(_cli(capsys, "simulate", "--model", KDD, "--data", "kdd135@test", "--tune",
                          "kdd135@val", "--json"))
    k = res["tuning"]["k"]
    assert res["settings"]["threshold_k"] == k
    plain = json.loads(_cli(capsys, "simulate", "--model", KDD, "--data", "kdd135@test",
                            "--threshold-k", k, "--json"))
    for key in ("precision", "recall", "f1", "roc_auc", "flagged"):
        assert res[key] == plain[key]
    val = [json.loads(_cli(capsys, "simulate", "--model", KDD, "--data", "kdd135@val",
                           "--threshold-k", kk, "--json")) for kk in (k, k - 0.5)]
    assert val[0]["counts_after_warmup"]["fp"] == 0 < val[1]["counts_after_warmup"]["fp"]
    c = res["counts_after_warmup"]
    assert res["precision"] == pytest.approx(c["tp"] / (c["tp"] + c["fp"]))
    assert res["roc_auc"] > 0.98 and res["recall"] > 0.9


@pytest.mark.slow
def test_native_anomaly_summary_log_plot_equal_the_twin(firmware, tmp_path, capsys, monkeypatch):
    """models/kdd135 on the native device: every reply's threshold and score equal the reference
    learner's (compare, rtol 0), the summary's detections are simulate's, --plot writes a PNG,
    and `pull` without --out writes MODEL-head.npz where the user stands."""
    res = firmware("native", "models/kdd135")
    (tmp_path / "s").mkdir()
    with emulator.start_native(res.program, state_dir=tmp_path / "s", timeout=300) as t:
        _cli(capsys, "set", "-p", t.url, "--threshold-k", "3.5")
        out = _cli(capsys, "stream", "-p", t.url, "-m", KDD, "--data", "kdd135@test", "--limit",
                   "400", "--log", tmp_path / "dev.jsonl", "--plot", tmp_path / "dev.png",
                   "--no-progress", "--json")
        monkeypatch.chdir(tmp_path)
        pulled = _cli(capsys, "pull", "-p", t.url)
    assert (tmp_path / "kdd135-head.npz").is_file() and "kdd135-head.npz" in pulled
    dev = json.loads(out)
    sim = json.loads(_cli(capsys, "simulate", "--model", KDD, "--data", "kdd135@test", "--limit",
                          "400", "--threshold-k", "3.5", "--log", tmp_path / "sim.jsonl", "--json"))
    assert dev["threshold_k"] == 3.5 and dev["warmup"] == 50
    assert dev["threshold"] == pytest.approx(sim["final_threshold"], rel=1e-6)
    for k in ("precision", "recall", "f1"):
        assert dev[k] == pytest.approx(sim[k])
    assert dev["anomaly_counts"] == {k: v for k, v in sim["counts_after_warmup"].items() if v}
    recs = [json.loads(l) for l in (tmp_path / "dev.jsonl").read_text().splitlines()]
    assert "confidence" not in recs[0] and recs[0]["threshold"] is None  # warm-up: no threshold yet
    assert all(r["threshold"] > 0 for r in recs[50:])
    assert "same: every line agrees" in _cli(capsys, "compare", tmp_path / "dev.jsonl",
                                             tmp_path / "sim.jsonl", "--rtol", "0")
    assert (tmp_path / "dev.png").stat().st_size > 10_000


@pytest.mark.slow
@pytest.mark.qemu
def test_qemu_thresholds_equal_the_twin(firmware):
    """The Cortex-M4 build (SIMD kernels) in QEMU: every score, flag and threshold in the replies
    equals the reference learner's, bit for bit, on the windows around the anomaly."""
    from tinyol.link.device import Device
    from tinyol.link.stream import Stream
    from tinyol.model.folder import load_manifest
    from tinyol.targets.twin import latents, learner_settings, load_model, make_learner, \
        quantize_input

    X, y, _ = load_source("kdd135@test")
    X, y = X[:320], y[:320]  # the anomaly is at windows 281-299
    fw = firmware("nucleo_l476rg", model="models/kdd135")
    with emulator.start_qemu("nucleo_l476rg", fw.elf, timeout=240) as t:
        with Device.open(t.url, timeout=5) as dev:
            st = Stream(dev, load_manifest(KDD), mode="train", window=4, timeout=3.0)
            st.run((i, X[i], int(y[i])) for i in range(len(y)))
    recs = st.records
    model = load_model(KDD)
    lrn = make_learner(model, *learner_settings(model))
    Xq = quantize_input(X, *model.input_q)
    want = []
    for q, xq in zip(latents(model, Xq), Xq):
        thr = lrn.anomaly_stats.threshold()
        s, f = lrn.anomaly(q, xq)
        want.append((np.float32(s), np.float32(thr), int(f)))
    got = [(np.float32(r.score), np.float32(r.threshold), r.prediction) for r in recs]
    assert got == want
    assert sum(f for *_, f in want) >= 18 and st.summary.detection["recall"] > 0.9

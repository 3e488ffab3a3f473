"""`tinyol simulate` and the study helpers, against independent computations."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
from click.testing import CliRunner
from tinyol.commands import simulate as simulate_cli
from tinyol.learn import learner as L
from tinyol.targets import twin as S

ROOT = pathlib.Path(__file__).resolve().parents[2]
DIGITS = ROOT / "models" / "digits"
ANOMALY = ROOT / "models" / "anomaly"

runtime = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
needs_digits = pytest.mark.skipif(not (DIGITS / "manifest.json").exists(),
                                  reason="models/digits not exported")
needs_anomaly = pytest.mark.skipif(not (ANOMALY / "manifest.json").exists(),
                                   reason="models/anomaly not exported")


def test_roc_auc_matches_sklearn():
    from sklearn.metrics import roc_auc_score
    rng = np.random.default_rng(0)
    for _ in range(5):
        lab = rng.random(200) < 0.3
        s = np.round(rng.normal(lab * 1.0, 1.0), 1)  # rounded: many ties
        assert S.roc_auc(s, lab) == pytest.approx(roc_auc_score(lab, s), abs=1e-12)


def _simulate(*args) -> dict:
    res = CliRunner().invoke(simulate_cli.cmd, [*args, "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


@needs_digits
def test_simulate_matches_manual_reference_loop():
    out = _simulate("--model", str(DIGITS), "--data", "digits:5-9@test", "--order-seed", "3",
                    "--replay-capacity", "30", "--replay-bits", "7", "--replay-n-old", "3",
                    "--lr", "0.02", "--seed", "9")
    # independent path: our own TFLM invocation, quantization and learner loop
    from tinyol.data.datasets import load_source
    m = json.loads((DIGITS / "manifest.json").read_text())
    X, y, _ = load_source("digits:5-9@test")
    perm = np.random.default_rng(3).permutation(len(y))
    X, y = X[perm], y[perm]
    sc, zp = m["input"]["scale"], m["input"]["zero_point"]
    Xq = np.clip(np.round(X / np.float32(sc)) + zp, -128, 127).astype(np.int8)
    it = runtime.Interpreter.from_bytes((DIGITS / "backbone.tflite").read_bytes())
    Q = []
    for x in Xq:
        it.set_input(x[None], 0)
        it.invoke()
        Q.append(it.get_output(0).reshape(-1).copy())
    npz = np.load(DIGITS / "head_init.npz")
    cfg = L.Config(latent_dim=m["latent"]["dim"], n_outputs=npz["W"].shape[0],
                   init_classes=int(npz["n_classes"]), init_weight=npz["W"], init_bias=npz["b"],
                   latent_scale=m["latent"]["scale"], latent_zero_point=m["latent"]["zero_point"],
                   replay_capacity=30, replay_bits=7, seed=9,
                   settings=L.Settings(lr=0.02, n_old=3, n_new=m["learner"]["replay_n_new"],
                                       momentum=m["learner"]["momentum"],
                                       weight_decay=m["learner"]["weight_decay"]))
    lrn = L.Learner(cfg)
    hits = 0
    for q, t in zip(Q, y):
        hits += lrn.predict(q)[0] == t
        lrn.learn(q, int(t))
    assert out["samples"] == len(y)
    assert out["prequential_accuracy"] == pytest.approx(hits / len(y), abs=1e-12)
    assert out["stats"]["replay_fill"] == 30
    assert out["replay"]["bytes"] == L.replay_bytes(30, 32, 7, 10)


@needs_digits
def test_replay_keeps_old_classes_naive_forgets():
    common = ["--model", str(DIGITS), "--data", "digits:5-9@train", "--eval", "digits:0-4@test",
              "--order-seed", "0", "--lr", "0.03"]
    naive = _simulate(*common, "--mode", "sgd")
    replay = _simulate(*common, "--mode", "replay", "--prefill", "digits:0-4@train",
                       "--replay-capacity", "100", "--replay-n-old", "16")
    frozen = _simulate(*common, "--mode", "frozen")
    assert frozen["final_accuracy"] > 0.95
    assert naive["final_accuracy"] < 0.5          # forgetting
    assert replay["final_accuracy"] > 0.85        # kept
    assert naive["stats"]["n_active"] == replay["stats"]["n_active"] == 10


@needs_anomaly
def test_simulate_anomaly_detects_faults():
    out = _simulate("--model", str(ANOMALY), "--data", "sensor@train",
                    "--data", "sensor:anomalies@test")
    assert out["anomalous"] > 50
    assert out["roc_auc"] > 0.9
    assert out["detection_rate"] > 0.8
    assert out["false_positive_rate"] < 0.1
    assert out["detection_delay"] is not None and out["detection_delay"] < 20


def test_simulate_missing_model_is_one_line_error(tmp_path):
    import contextlib
    import io

    from tinyol.cli import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["simulate", "--model", str(tmp_path / "nope"), "--data", "digits"])
    assert rc != 0
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    assert lines and lines[0].startswith("error:") and "manifest.json" in lines[0]


@needs_digits
@pytest.mark.slow
def test_study_quick_run(tmp_path):
    from tinyol_studies import replay as study
    out = tmp_path / "study.md"
    js = tmp_path / "study.json"
    assert study.main(["--seeds", "2", "--no-tune", "--out", str(out), "--json", str(js),
                       "-q"]) == 0
    rows = json.loads(js.read_text())["rows"]
    by = {(r["method"], r["bits"], r["capacity"], r["policy"]): r for r in rows}
    naive = by[("naive SGD", 0, 0, "-")]
    for bits in (32, 8, 7):
        rep = by[("latent replay", bits, 200, "reservoir")]
        assert rep["old_accuracy"][0] > naive["old_accuracy"][0] + 0.2
    f32 = by[("latent replay", 32, 100, "reservoir")]["final_accuracy"][0]
    i8 = by[("latent replay", 8, 100, "reservoir")]["final_accuracy"][0]
    assert abs(f32 - i8) < 0.01
    assert "| latent replay | 7-bit | 200 |" in out.read_text()


@needs_digits
def test_committed_study_rows_are_recomputed():
    """docs/study.md's figures, recomputed (not re-rendered): a few rows of its table from the
    hyper-parameters and stream orders the document states, through the same learner runs;
    each cell must equal the committed one at the precision it is printed with."""
    import re

    from tinyol_studies import replay as study
    text = (ROOT / "docs" / "study.md").read_text()
    seeds = int(re.search(r"mean ± std over (\d+) stream orders", text).group(1))
    naive_lr = float(re.search(r"naive SGD lr = ([0-9.]+)", text).group(1))
    m = re.search(r"replay lr = ([0-9.]+), n_old = (\d+), n_new = (\d+)", text)
    rep = dict(lr=float(m.group(1)), n_old=int(m.group(2)), n_new=int(m.group(3)))
    d = study.load(str(ROOT / "models" / "digits"))
    rows = {  # (method, storage, slots, policy) as the table prints them -> run_one settings
        ("frozen", "-", "-", "-"): dict(mode="frozen", lr=0.0),
        ("naive SGD", "-", "-", "-"): dict(mode="sgd", lr=naive_lr),
        ("latent replay", "int8", "20", "reservoir"): dict(mode="replay", capacity=20, bits=8, **rep),
        ("latent replay", "7-bit", "50", "reservoir"): dict(mode="replay", capacity=50, bits=7, **rep),
        ("latent replay", "int8", "100", "balanced"): dict(mode="replay", capacity=100, bits=8,
                                                           policy="balanced", **rep),
    }
    table = {tuple(c.strip() for c in line.strip("|").split("|")[:4]): line
             for line in text.splitlines() if line.startswith("| ") and line.count("|") == 11}
    for key, kw in rows.items():
        assert key in table, f"docs/study.md has no row {key}"
        runs = [study.run_one(d.model, d.Qtr, d.ytr, d.Qte, d.yte, seed=s, **kw) for s in range(seeds)]
        cells = [c.strip() for c in table[key].strip("|").split("|")]
        for col, k in ((6, "final_accuracy"), (7, "old_accuracy"), (8, "new_accuracy"),
                       (9, "prequential_accuracy")):
            v = np.array([r[k] for r in runs])
            assert study._pm((float(v.mean()), float(v.std()))) == cells[col], (key, k)

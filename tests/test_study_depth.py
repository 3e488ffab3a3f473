"""docs/study.md's depth section is what tinyol.studies.depth renders from the committed raw
results (docs/study_depth.json), and those results were measured on the data sets it names."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from tinyol.studies import depth as SD

ROOT = Path(__file__).resolve().parents[1]


def _results() -> list[dict]:
    return json.loads((ROOT / "docs" / "study_depth.json").read_text())


def test_depth_section_is_rendered_from_the_committed_results():
    res = _results()
    doc = (ROOT / "docs" / "study.md").read_text(encoding="utf-8")
    assert doc.count(SD.MARK_BEGIN) == 1
    assert doc[doc.index(SD.MARK_BEGIN):] == SD.markdown(res, len(res[0]["joint"]))
    assert "synthetic" not in doc[doc.index(SD.MARK_BEGIN):].lower()


def test_committed_results_cover_both_datasets_and_every_cut():
    res = {r["name"]: r for r in _results() if "scenario" not in r}
    assert set(res) == {"digits", "watch"}
    assert [r.get("scenario") for r in _results()] == [None, None, "users"]
    w = res["watch"]
    assert [c["cut"] for c in w["cuts"]] == ["head", "embed", "conv3", "conv2"]
    assert all(c["fits"] for c in w["cuts"])          # conv2 is the deepest cut there is
    for r in res.values():
        for c in r["cuts"]:
            assert len(c["replay"]) == len(r["joint"]) and all(0 <= a <= 1 for a in c["replay"])
        # the floor stays below every cut with replay, the upper bound above the best
        assert np.mean(r["naive"]["acc"]) < min(np.mean(c["replay"]) for c in r["cuts"])
        assert np.mean(r["joint"]) > max(np.mean(c["replay"]) for c in r["cuts"])


@pytest.mark.skipif(importlib.util.find_spec("seglearn") is None,
                    reason="seglearn (the watch data) not installed: make setup")
def test_watch_results_were_measured_on_the_watch_source():
    from tinyol.data.datasets import load_source

    w = next(r for r in _results() if r["name"] == "watch")
    _, yte, _ = load_source("watch@test")
    _, ytr, _ = load_source("watch@train")
    assert w["n_test"] == min(SD.WATCH_TEST, len(yte))
    assert w["n_stream"] == min(SD.WATCH_STREAM, int(np.isin(ytr, SD.WATCH_NEW).sum()))


def _raw_watch() -> dict:
    from tinyol.data.datasets import watch_recordings

    return watch_recordings()


@pytest.mark.skipif(importlib.util.find_spec("seglearn") is None,
                    reason="seglearn (the watch data) not installed: make setup")
def test_new_users_split_keeps_calibration_and_test_apart():
    from tinyol.data.datasets import load_source

    d = _raw_watch()
    Xu, yu, _ = load_source("watch@test")
    sp = SD.watch_user_split()
    # every new-user window is in exactly one part, and is the raw recording at its offset
    parts = np.concatenate([sp["calib"], sp["test"], sp["gap"]])
    assert np.array_equal(np.sort(parts), np.arange(len(yu)))
    for i in range(len(yu)):
        r, t = sp["rec"][i], sp["start"][i]
        assert int(d["subject"][r]) in (8, 9, 10) and yu[i] == int(d["y"][r])
        assert np.array_equal(Xu[i], np.asarray(d["X"][r][t:t + 100], np.float32))
    for r in np.unique(sp["rec"]):
        n = (len(d["X"][r]) - 100) // 50 + 1
        mine = sp["rec"] == r
        cal = sp["start"][mine & (sp["part"] == 0)]
        te = sp["start"][mine & (sp["part"] == 1)]
        # the first half calibrates, the second half tests: no sample in both
        assert len(cal) == n // 2 and cal.min() == 0 and len(te) >= n - n // 2 - 1
        assert cal.max() + 100 <= te.min()
        assert te.max() + 100 <= len(d["X"][r])
    # the stream: every calibration window once, recordings whole and in time order
    orders = []
    for seed in range(3):
        o = SD.users_stream_order(sp, seed)
        assert np.array_equal(np.sort(o), sp["calib"])
        rec = sp["rec"][o]
        runs = rec[np.r_[True, rec[1:] != rec[:-1]]]
        assert len(runs) == len(np.unique(rec))            # each recording streamed in one piece
        assert all(np.all(np.diff(sp["start"][o][rec == r]) == 50) for r in runs)
        orders.append(tuple(runs))
    assert len(set(orders)) == 3                            # the seed is the recordings' order


@pytest.mark.skipif(importlib.util.find_spec("seglearn") is None,
                    reason="seglearn (the watch data) not installed: make setup")
def test_new_users_results_were_measured_on_that_split():
    from tinyol.data.datasets import load_source

    u = next(r for r in _results() if r.get("scenario") == "users")
    d = _raw_watch()
    ns = [(len(x) - 100) // 50 + 1 for x, s in zip(d["X"], d["subject"]) if int(s) >= 8]
    _, ytr, _ = load_source("watch@train")
    _, yu, _ = load_source("watch@test")
    assert u["n_pretrain"] == len(ytr) and u["recordings"] == len(ns) == 42
    assert u["n_calib"] == sum(n // 2 for n in ns)
    assert u["n_calib"] + u["n_test"] + u["n_gap"] == len(yu) and u["n_gap"] == len(ns)
    seeds = len(u["joint"])
    assert [c["cut"] for c in u["cuts"]] == ["head", "embed", "conv3", "conv2"]
    assert u["start"] == u["cuts"][0]["start"]
    for c in u["cuts"]:
        assert len(c["replay"]) == seeds and all(0 <= a <= 1 for a in c["replay"])
        # one pre-trained network: the cuts differ only by where its int8 part ends
        assert abs(c["start"] - u["start"]) < 0.02
    # the shapes are those of the class-incremental watch network (its instructions apply)
    ci = next(r for r in _results() if r["name"] == "watch" and "scenario" not in r)
    assert [(c["cut"], c["params"], c["ram"]) for c in u["cuts"]] == \
        [(c["cut"], c["params"], c["ram"]) for c in ci["cuts"]]
    assert np.mean(u["joint"]) > max(np.mean(c["replay"]) for c in u["cuts"])


def test_lean_section_is_rendered_from_the_committed_results():
    """docs/study.md's lean-stage section is tinyol.studies.lean's rendering of
    docs/study_lean.json, before the depth section; every row was measured (3 orders)."""
    from tinyol.studies import lean as SL

    res = json.loads((ROOT / "docs" / "study_lean.json").read_text())
    doc = (ROOT / "docs" / "study.md").read_text(encoding="utf-8")
    i, j = doc.index(SL.MARK_BEGIN), doc.index(SL.MARK_END)
    assert j < doc.index(SD.MARK_BEGIN)
    assert doc[i:j + len(SL.MARK_END)] + "\n" == SL.markdown(res, 3)
    for r in res:
        for row in r["rows"]:
            assert len(row["acc"]) == 3 and row["trained"] <= row["params"]

"""docs/study.md's depth section is what tinyol.study_depth renders from the committed raw
results (docs/study_depth.json), and those results were measured on the data sets it names."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from tinyol import study_depth as SD

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
    res = {r["name"]: r for r in _results()}
    assert set(res) == {"digits", "watch"}
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
    from tinyol.datasets import load_source

    w = next(r for r in _results() if r["name"] == "watch")
    _, yte, _ = load_source("watch@test")
    _, ytr, _ = load_source("watch@train")
    assert w["n_test"] == min(SD.WATCH_TEST, len(yte))
    assert w["n_stream"] == min(SD.WATCH_STREAM, int(np.isin(ytr, SD.WATCH_NEW).sum()))

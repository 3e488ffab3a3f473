"""The `watch` source: seglearn's smartwatch physiotherapy set, read from the installed wheel's
data file, cut into 2 s windows and split by subject. The oracle is the raw file itself."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from tinyol.data.datasets import load_source, watch_windows
from tinyol.errors import TinyolError

installed = pytest.mark.skipif(importlib.util.find_spec("seglearn") is None,
                               reason="seglearn (the watch data) not installed: make setup")


def _raw() -> dict:
    spec = importlib.util.find_spec("seglearn")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "watch_dataset.npy"
    return np.load(path, allow_pickle=True).item()


def _expected(subjects) -> tuple[np.ndarray, np.ndarray]:
    """Windows of 100 steps every 50 steps, recordings in file order, these subjects only."""
    d = _raw()
    xs, ys = [], []
    for rec, lab, s in zip(d["X"], d["y"], d["subject"]):
        if int(s) in subjects:
            for start in range(0, len(rec) - 99, 50):
                xs.append(rec[start:start + 100])
                ys.append(int(lab))
    return np.asarray(xs, np.float32), np.asarray(ys)


@installed
def test_watch_windows_are_the_recordings():
    d = _raw()
    assert len(d["X"]) == 140 and sorted(set(np.asarray(d["subject"]).tolist())) == list(range(1, 11))
    X, y, names = load_source("watch")
    n = sum((len(r) - 100) // 50 + 1 for r in d["X"])
    assert X.shape == (n, 100, 6) and X.dtype == np.float32 and y.shape == (n,)
    assert names == ["PEN", "ABD", "FEL", "IR", "ER", "TRAP", "ROW"] == list(d["y_labels"])
    # window 1 of recording 0 = its steps 50..149, channels ax ay az wx wy wz in order
    assert np.array_equal(X[1], np.asarray(d["X"][0][50:150], np.float32))
    assert y[0] == d["y"][0] and set(y.tolist()) == set(range(7))
    # every recording's tail shorter than a window is dropped, none is lost whole
    r0 = (len(d["X"][0]) - 100) // 50 + 1
    assert np.array_equal(X[r0], np.asarray(d["X"][1][:100], np.float32))


@installed
def test_watch_split_is_by_subject():
    Xtr, ytr, _ = load_source("watch@train")
    Xte, yte, _ = load_source("watch@test")
    ex_tr, ey_tr = _expected(range(1, 8))
    ex_te, ey_te = _expected((8, 9, 10))
    assert np.array_equal(Xtr, ex_tr) and np.array_equal(ytr, ey_tr)
    assert np.array_equal(Xte, ex_te) and np.array_equal(yte, ey_te)
    _, _, subject, _ = watch_windows()
    assert len(ytr) + len(yte) == len(subject)
    assert len(ytr) == int(np.isin(subject, range(1, 8)).sum())
    # both sides of the split hold every exercise (the test is new users, not new classes)
    assert set(ytr.tolist()) == set(yte.tolist()) == set(range(7))


@installed
def test_watch_class_filter_keeps_labels():
    Xn, yn, names = load_source("watch:4-6@train")
    _, ytr, _ = load_source("watch@train")
    assert set(yn.tolist()) == {4, 5, 6} and len(yn) == int(np.isin(ytr, [4, 5, 6]).sum())
    assert [names[c] for c in (4, 5, 6)] == ["ER", "TRAP", "ROW"]
    with pytest.raises(TinyolError, match="class 7 does not exist"):
        load_source("watch:7")


def test_watch_without_seglearn_is_one_clear_error(monkeypatch):
    # None in sys.modules is how Python marks a module as not importable: find_spec returns None
    monkeypatch.setitem(sys.modules, "seglearn", None)
    with pytest.raises(TinyolError) as e:
        load_source("watch@train")
    assert "seglearn" in str(e.value) and "not installed" in str(e.value)
    assert "pip install --no-deps seglearn" in e.value.hint


def test_watch_damaged_file_is_one_clear_error(monkeypatch, tmp_path):
    # a stand-in package directory holding a truncated data file (a damaged install)
    pkg = tmp_path / "seglearn"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "data" / "watch_dataset.npy").write_bytes(b"\x93NUMPY\x01\x00")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "seglearn", raising=False)
    with pytest.raises(TinyolError, match="unreadable") as e:
        load_source("watch")
    assert "--force-reinstall" in e.value.hint

"""Data sources: built-in digits/sensor, class filters, splits, CSV/NPZ/stdin, error messages."""
from __future__ import annotations

import io

import numpy as np
import pytest
from sklearn.datasets import load_digits
from tinyol.data.datasets import SENSOR_WINDOW, as_text_lines, iter_source, load_source, save_npz, split_spec
from tinyol.errors import TinyolError


@pytest.fixture(scope="module")
def sk_digits():
    d = load_digits()
    return d.images.reshape(-1, 8, 8, 1) / 16.0, d.target


def test_digits_whole_matches_sklearn(sk_digits):
    X, y, names = load_source("digits")
    Xr, yr = sk_digits
    assert X.dtype == np.float32 and y.dtype == np.int64
    assert X.shape == (1797, 8, 8, 1)
    np.testing.assert_array_equal(y, yr)
    np.testing.assert_allclose(X, Xr, rtol=0, atol=1e-7)
    assert X.min() == 0.0 and X.max() == 1.0
    assert names == [str(i) for i in range(10)]


@pytest.mark.parametrize("spec,classes", [
    ("digits:5-9", [5, 6, 7, 8, 9]),
    ("digits:0-4", [0, 1, 2, 3, 4]),
    ("digits:0,3,7", [0, 3, 7]),
    ("digits:0-1,9", [0, 1, 9]),
])
def test_digits_class_filter(sk_digits, spec, classes):
    X, y, names = load_source(spec)
    _, yr = sk_digits
    assert sorted(set(y.tolist())) == classes       # labels are not renumbered
    assert len(y) == int(np.isin(yr, classes).sum())
    assert names[7] == "7"


def test_split_is_stratified_disjoint_and_deterministic():
    Xtr, ytr, _ = load_source("digits:0-4@train")
    Xte, yte, _ = load_source("digits:0-4@test")
    Xall, yall, _ = load_source("digits:0-4")
    assert len(ytr) + len(yte) == len(yall)
    assert abs(len(yte) / len(yall) - 0.3) < 0.01
    # disjoint: no test image is also a train image
    tr = {x.tobytes() for x in Xtr}
    dup = sum(x.tobytes() in tr for x in Xte)
    assert dup <= 2  # the digits set has a couple of pixel-identical images
    # stratified: per-class share within 2 samples of 30 %
    for c in range(5):
        n = int((yall == c).sum())
        assert abs(int((yte == c).sum()) - 0.3 * n) <= 2
    # filtered split == split then filter (digits:0-4@test is a subset of digits@test)
    Xte_all, yte_all, _ = load_source("digits@test")
    np.testing.assert_array_equal(Xte, Xte_all[np.isin(yte_all, range(5))])
    Xte2, yte2, _ = load_source("digits:0-4@test")
    np.testing.assert_array_equal(Xte, Xte2)


def test_split_spec():
    assert split_spec("digits:0-4@train") == ("digits", "0-4", "train")
    assert split_spec("data/a:b.csv") == ("data/a:b.csv", None, None)
    assert split_spec("x.npz@test") == ("x.npz", None, "test")


def test_sensor_windows():
    X, y, names = load_source("sensor")
    assert X.shape[1] == SENSOR_WINDOW == 640 and (y == 0).all()
    assert np.isfinite(X).all()
    Xa, ya, _ = load_source("sensor:anomalies")
    assert set(ya.tolist()) == {0, 1} and names == ["normal", "anomalous"]
    X2, _, _ = load_source("sensor:anomalies")
    np.testing.assert_array_equal(Xa, X2)          # deterministic
    # anomalies are different from normal windows: the mean distance to the normal centroid
    # is larger for faulty windows
    mu = X.mean(axis=0)
    d = np.linalg.norm(Xa - mu, axis=1)
    assert d[ya == 1].mean() > 1.2 * d[ya == 0].mean()


def test_csv_round_trip_header_and_label_column(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3)).astype(np.float32)
    y = rng.integers(0, 4, 20)
    p = tmp_path / "d.csv"
    rows = ["a,label,b,c"] + [f"{x[0]:.9g},{lab},{x[1]:.9g},{x[2]:.9g}" for x, lab in zip(X, y)]
    p.write_text("\n".join(rows) + "\n")
    X2, y2, names = load_source(str(p), label_column="label")
    np.testing.assert_array_equal(X2, X)
    np.testing.assert_array_equal(y2, y)
    X3, y3, _ = load_source(str(p), label_column=1)
    np.testing.assert_array_equal(X3, X)
    # no header, label last (default)
    q = tmp_path / "e.csv"
    q.write_text(as_text_lines(X, y))
    X4, y4, _ = load_source(str(q))
    np.testing.assert_array_equal(X4, X)
    np.testing.assert_array_equal(y4, y)


def test_npz_round_trip_and_split(tmp_path):
    X, y, names = load_source("digits:0,3,7")
    p = tmp_path / "d.npz"
    save_npz(str(p), X, y, names)
    X2, y2, n2 = load_source(str(p))
    np.testing.assert_array_equal(X2, X)
    np.testing.assert_array_equal(y2, y)
    assert n2 == names
    Xt, yt, _ = load_source(str(p) + "@test")
    assert 0.28 < len(yt) / len(y) < 0.32


def test_stdin_iterator_is_lazy_and_checks_lines():
    lines = io.StringIO("0.5 1.5 2\n\n# comment\n1,2,0\n3 4 x\n")
    it = iter_source("-", stdin=lines)
    x, lab = next(it)
    np.testing.assert_array_equal(x, np.array([0.5, 1.5], np.float32))
    assert lab == 2
    assert next(it)[1] == 0
    with pytest.raises(TinyolError, match="stdin line 5: non-numeric"):
        next(it)
    with pytest.raises(TinyolError, match="expected 2 like the first line"):
        list(iter_source("-", stdin=io.StringIO("1 2 0\n1 2 3 0\n")))
    X, y, _ = load_source("-", stdin=io.StringIO("1 2 0\n3 4 1\n"))
    assert X.shape == (2, 2) and y.tolist() == [0, 1]


@pytest.mark.parametrize("content,fname,match", [
    (None, "missing.csv", "not found"),
    ("1,2,0\n1,nan,1\n", "a.csv", "NaN or Inf in sample 1"),
    ("1,2,0\n1,inf,1\n", "a.csv", "NaN or Inf"),
    ("1,2,0.5\n1,3,1\n", "a.csv", "label of sample 0 is not an integer"),
    ("1,2,0\n1,3\n", "a.csv", "row 2 has 2 columns, expected 3"),
    ("1,2,-1\n", "a.csv", "negative"),
    ("a,b\n", "a.csv", "header but no rows"),
])
def test_csv_errors(tmp_path, content, fname, match):
    p = tmp_path / fname
    if content is not None:
        p.write_text(content)
    with pytest.raises(TinyolError, match=match) as e:
        load_source(str(p))
    assert "\n" not in str(e.value)


def test_npz_errors(tmp_path):
    p = tmp_path / "bad.npz"
    np.savez(p, X=np.zeros((3, 2)), labels=np.zeros(3))
    with pytest.raises(TinyolError, match="missing array"):
        load_source(str(p))
    np.savez(p, X=np.zeros((3, 2)), y=np.zeros(4))
    with pytest.raises(TinyolError, match=r"y must have shape \[3\]"):
        load_source(str(p))
    np.savez(p, X=np.zeros(3), y=np.zeros(3))
    with pytest.raises(TinyolError, match="X must have shape"):
        load_source(str(p))


def test_filter_errors():
    with pytest.raises(TinyolError, match="bad class filter"):
        load_source("digits:a-b")
    with pytest.raises(TinyolError, match="class 12 does not exist"):
        load_source("digits:12")
    with pytest.raises(TinyolError, match="unknown sensor variant"):
        load_source("sensor:bogus")


def _aeon_file(name: str):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("aeon")
    if spec is None:
        pytest.skip("aeon (the UEA archive files) not installed: make setup")
    return Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / name


def test_vowels_is_the_archive_split_read_back():
    """`vowels` is JapaneseVowels's equal-length files as aeon ships them: @train the TRAIN
    file (30 utterances per speaker, the archive's description), @test the TEST file; each
    row read back channel by channel, time last in the file, channels last here."""
    base = _aeon_file("JapaneseVowels")
    Xtr, ytr, names = load_source("vowels@train")
    Xte, yte, _ = load_source("vowels@test")
    assert Xtr.shape == (270, 25, 12) and Xte.shape == (370, 25, 12)
    assert np.array_equal(np.bincount(ytr), [30] * 9) and len(names) == 9
    for X, y, part in ((Xtr, ytr, "TRAIN"), (Xte, yte, "TEST")):
        data = [ln for ln in (base / f"JapaneseVowels_eq_{part}.ts").read_text().splitlines()
                if ln and not ln.startswith(("#", "@"))]
        assert len(data) == len(y)
        for i in (0, len(data) // 2, len(data) - 1):
            *chans, label = data[i].split(":")
            assert int(label) - 1 == y[i]
            assert np.array_equal(X[i], np.array([[float(v) for v in c.split(",")]
                                                  for c in chans], np.float32).T)
    X, y, _ = load_source("vowels:5-8@train")
    assert X.shape[0] == 120 and set(y) == {5, 6, 7, 8}
    Xall, _, _ = load_source("vowels")
    assert Xall.shape[0] == 640

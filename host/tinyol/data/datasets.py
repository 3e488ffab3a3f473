"""Data sources for `tinyol export --calib`, `simulate` and `stream`.

A *source spec* is a short string:

``digits``                scikit-learn's bundled 8x8 digits, X [N,8,8,1] in [0,1]
``digits:5-9``            class filter: a range ``a-b``, a list ``0,3,7`` or a mix ``0-2,7``
``digits:0-4@train``      deterministic stratified split (seed 0, test = 30 %); ``@test`` likewise
``basicmotions``          BasicMotions (UEA archive): 80 smart-watch recordings, 100 steps x 6 channels
                          (3-axis accelerometer, 3-axis gyroscope), X [N,100,6] channels last;
                          classes Standing, Running, Walking, Badminton. The files ship inside the
                          `aeon` wheel (``pip install --no-deps aeon``: the data files are enough)
``vowels``                JapaneseVowels (UCI, via the UEA archive): 9 male speakers saying /ae/,
                          12 LPC cepstrum coefficients per frame, in the archive's equal-length
                          version (25 frames), X [N,25,12] channels last; the class is the
                          speaker. ``@train``/``@test`` are the archive's own split (270 / 370).
                          The files ship inside the `aeon` wheel, as BasicMotions's
``watch``                 seglearn's smartwatch physiotherapy set: 10 subjects, 7 shoulder exercises
                          (PEN ABD FEL IR ER TRAP ROW), both sides, 6-axis IMU at 50 Hz (ax ay az
                          in g, wx wy wz in rad/s); 140 recordings cut into 2 s windows (100 steps,
                          stride 50), X [N,100,6] channels last. ``@train``/``@test`` split by
                          SUBJECT (train 1-7, test 8-10: new users). The file ships inside the
                          `seglearn` wheel (``pip install --no-deps seglearn``: the data is enough).
                          :func:`watch_sensor_windows` gives the same windows as the board's sensor
                          reports them (models/imu is trained on those)
``kdd135``                KDD-TSAD 135 (UCR anomaly archive, SIGKDD 2021 competition: "InternalBleeding16",
                          the heart rate of a patient with internal bleeding, 7,501 points, one labelled
                          anomaly at points 4187-4198): windows of 64 points, stride 4, scaled with the
                          training part's min and max to about [0, 1], label 1 if the window overlaps
                          the anomaly. Split in time: ``@train`` points 0-1199 (the series' own normal
                          training part), ``@val`` 1200-2999 (normal: for choosing a threshold),
                          ``@test`` 3000-7500 (holds the anomaly); no split = the whole series. The file
                          ships inside the `aeon` wheel, as BasicMotions's
``sensor``                synthetic vibration windows, normal machine only (label 0)
``sensor:anomalies``      normal and faulty windows mixed (label 1 = anomalous)
``path/to/file.csv``      feature columns + one integer label column (header optional)
``path/to/file.npz``      arrays ``X`` [N,...] and ``y`` [N] (optional ``class_names``)
``-``                     stdin, one sample a line: comma/space separated floats, last = label

``@train``/``@test`` work on every source except ``-`` (``watch`` splits by subject, ``kdd135`` in
time (it also has ``@val``), the others by a stratified random split). Labels are never renumbered: a filtered
source keeps the original class numbers, and ``class_names[label]`` is always that label's name.
"""
from __future__ import annotations

import csv
import importlib.util
import io
import os
import sys
from pathlib import Path
from typing import Iterator, TextIO

import numpy as np

from ..errors import TinyolError
from .sensor import window_starts

# Lazy on purpose: scikit-learn is imported where a source needs it (digits, splits); it
# takes about a second to load and `tinyol stream --data file.csv` does not need it.

SPLIT_SEED = 0
TEST_FRACTION = 0.3

# Synthetic sensor: 5 frames x 128 spectral bins = 640 values per window (the MLPerf Tiny
# anomaly-detection input size), computed from a simulated accelerometer signal.
SENSOR_FRAMES = 5
SENSOR_BINS = 128
SENSOR_WINDOW = SENSOR_FRAMES * SENSOR_BINS
SENSOR_RATE_HZ = 4096.0
SENSOR_N_NORMAL = 1000
SENSOR_N_ANOMALOUS = 300
SENSOR_SEED = 20260701

BUILTIN = ("digits", "sensor", "basicmotions", "watch", "vowels", "kdd135")

# KDD-TSAD 135: 64-point windows every 4 points; the split points of the series (in points)
KDD135_WINDOW = 64
KDD135_STRIDE = 4
KDD135_SPLITS = {"train": (0, 1200), "val": (1200, 3000), "test": (3000, None)}

# seglearn's watch set: 2 s windows at 50 Hz, half-overlapping; subjects 8-10 are `@test`.
WATCH_WINDOW = 100
WATCH_STRIDE = 50
WATCH_TEST_SUBJECTS = (8, 9, 10)


def _parse_classes(text: str, spec: str) -> list[int]:
    """``"5-9"`` -> [5..9], ``"0,3,7"`` -> [0,3,7], ``"0-2,7"`` -> [0,1,2,7]."""
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                a, b = (int(v) for v in part.split("-", 1))
                if b < a:
                    raise ValueError
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise TinyolError(f"bad class filter {text!r} in source {spec!r}",
                          hint="use a range like 5-9 or a list like 0,3,7") from None
    return sorted(set(out))


def split_spec(spec: str) -> tuple[str, str | None, str | None]:
    """Split ``name[:filter][@train|@test]`` into (name, filter, split)."""
    base, split = spec, None
    for s in ("@train", "@test", "@val"):
        if spec.endswith(s):
            base, split = spec[: -len(s)], s[1:]
            break
    name, flt = base, None
    head, sep, tail = base.partition(":")
    if sep and head in BUILTIN:
        name, flt = head, tail
    return name, flt, split


def _validate(X: np.ndarray, y: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X)
    y = np.asarray(y)
    if X.ndim < 2:
        raise TinyolError(f"{where}: X must have shape [N, features...], got {list(X.shape)}")
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise TinyolError(f"{where}: y must have shape [{X.shape[0]}], got {list(y.shape)}")
    if X.shape[0] == 0:
        raise TinyolError(f"{where}: no samples")
    try:
        Xf = X.astype(np.float32)
    except (TypeError, ValueError):
        raise TinyolError(f"{where}: X is not numeric (dtype {X.dtype})") from None
    bad = ~np.isfinite(Xf)
    if bad.any():
        idx = np.argwhere(bad)[0]
        raise TinyolError(f"{where}: NaN or Inf in sample {int(idx[0])}")
    if y.dtype.kind in "iu":
        yi = y.astype(np.int64)
    else:
        try:
            yf = y.astype(np.float64)
        except (TypeError, ValueError):
            raise TinyolError(f"{where}: labels must be integers (dtype {y.dtype})") from None
        nonint = ~np.isfinite(yf) | (yf != np.round(yf))
        if nonint.any():
            i = int(np.argmax(nonint))
            raise TinyolError(f"{where}: label of sample {i} is not an integer: {y[i]!r}")
        _check_label_range(yf, where)
        yi = yf.astype(np.int64)
    _check_label_range(yi, where)
    return Xf, yi


# The protocol carries a label as u16 and 0xFFFF means "no label": the largest class a device
# can ever learn is 0xFFFE. Checked before anything is sized by a label (class-name lists,
# counters), so one absurd label cannot make the host allocate gigabytes.
MAX_LABEL = 0xFFFE


def _check_label_range(y: np.ndarray, where: str) -> None:
    if len(y) == 0:
        return
    neg = y < 0
    if neg.any():
        i = int(np.argmax(neg))
        raise TinyolError(f"{where}: label of sample {i} is negative: {y[i]:g}")
    big = y > MAX_LABEL
    if big.any():
        i = int(np.argmax(big))
        raise TinyolError(f"{where}: label of sample {i} is {y[i]:g}, above the largest class tinyol "
                          f"can carry ({MAX_LABEL})",
                          hint="labels are class numbers 0, 1, 2, ... (map your label values to them)")


def _split(X: np.ndarray, y: np.ndarray, which: str) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    counts = np.bincount(y)
    strat = y if counts[counts > 0].min() >= 2 else None
    tr, te = train_test_split(idx, test_size=TEST_FRACTION, random_state=SPLIT_SEED,
                              stratify=strat)
    sel = np.sort(tr if which == "train" else te)
    return X[sel], y[sel]


def _digits() -> tuple[np.ndarray, np.ndarray, list[str]]:
    from sklearn.datasets import load_digits

    d = load_digits()
    X = (d.images.astype(np.float32) / np.float32(16.0)).reshape(-1, 8, 8, 1)
    return X, d.target.astype(np.int64), [str(i) for i in range(10)]


def sensor_windows(n_normal: int, n_anomalous: int, seed: int = SENSOR_SEED
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic synthetic vibration windows, X [N,640] float32 in ~[0,1], y [N] (1 = fault).

    A normal machine runs at a shaft frequency f0 (random in 40..60 Hz) with harmonics 2f0, 3f0
    of random amplitude plus broadband noise. Faults add one of: a bearing tone at a non-harmonic
    frequency (3.3..7.7 x f0), a loose-part sub-harmonic f0/2 with strong 1.5x/2.5x lines, or a
    broadband rise (2.4x noise). Each window is 5 Hann-windowed 256-sample frames, |rfft| bins 1..128,
    log-compressed and scaled to about [0, 1].
    """
    rng = np.random.default_rng(seed)
    n = n_normal + n_anomalous
    frame = 2 * SENSOR_BINS
    t = np.arange(SENSOR_FRAMES * frame, dtype=np.float64) / SENSOR_RATE_HZ
    hann = np.hanning(frame)
    X = np.empty((n, SENSOR_WINDOW), dtype=np.float32)
    y = np.zeros(n, dtype=np.int64)
    y[n_normal:] = 1
    perm = rng.permutation(n)
    y = y[perm]
    for i in range(n):
        f0 = rng.uniform(40.0, 60.0)
        amps = rng.uniform([0.8, 0.2, 0.05], [1.2, 0.5, 0.2])
        noise = 0.05
        sig = sum(a * np.sin(2 * np.pi * (k + 1) * f0 * t + rng.uniform(0, 2 * np.pi))
                  for k, a in enumerate(amps))
        if y[i]:
            kind = rng.integers(3)
            if kind == 0:
                fb = f0 * rng.uniform(3.3, 7.7)
                sig = sig + rng.uniform(0.15, 0.4) * np.sin(2 * np.pi * fb * t)
            elif kind == 1:
                for m, a in ((0.5, 0.2), (1.5, 0.15), (2.5, 0.1)):
                    sig = sig + a * rng.uniform(0.7, 1.3) * np.sin(
                        2 * np.pi * m * f0 * t + rng.uniform(0, 2 * np.pi))
            else:
                noise = 0.12
        sig = sig + noise * rng.standard_normal(t.shape)
        frames = sig.reshape(SENSOR_FRAMES, frame) * hann
        mag = np.abs(np.fft.rfft(frames, axis=1))[:, 1:SENSOR_BINS + 1]
        X[i] = (np.log1p(mag) / 5.0).reshape(-1).astype(np.float32)
    return X, y


def _ts_file(path) -> tuple[np.ndarray, list[str], list[str]]:
    """A .ts file of the UEA/UCR archive (sktime/aeon format): X [N, T, C] channels last, the
    label of each row, the class names in declaration order."""
    classes: list[str] = []
    rows, labels = [], []
    data = False
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not data:
            low = line.lower()
            if low.startswith("@classlabel"):
                classes = line.split()[2:]
            data = low.startswith("@data")
            continue
        *channels, lab = line.split(":")
        rows.append([[float(v) for v in c.split(",")] for c in channels])
        labels.append(lab)
    X = np.transpose(np.asarray(rows, dtype=np.float32), (0, 2, 1))  # [N, C, T] -> [N, T, C]
    return X, labels, classes


def _aeon_parts(folder: str, stem: str, what: str) -> list:
    """The TRAIN and TEST .ts files of one data set inside the installed `aeon` package."""
    spec = importlib.util.find_spec("aeon")  # the data files only: aeon is not imported
    base = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / folder \
        if spec is not None and spec.submodule_search_locations else None
    if base is None or not (base / f"{stem}_TRAIN.ts").is_file():
        raise TinyolError(f"the {what} data set ships inside the `aeon` package, which is not "
                          "installed", hint="pip install --no-deps aeon  (its data files are enough)")
    return [_ts_file(base / f"{stem}_{s}.ts") for s in ("TRAIN", "TEST")]


def _vowels() -> tuple[np.ndarray, np.ndarray, list[str], int]:
    """JapaneseVowels, equal-length version: X [640, 25, 12], y (speaker 0-8), class names, and
    the number of rows of the archive's TRAIN file (the rest is its TEST file)."""
    parts = _aeon_parts("JapaneseVowels", "JapaneseVowels_eq", "JapaneseVowels")
    names = [f"speaker {c}" for c in parts[0][2]]
    X = np.concatenate([p[0] for p in parts])
    y = np.array([parts[0][2].index(lab) for p in parts for lab in p[1]], dtype=np.int64)
    return X, y, names, len(parts[0][1])


def _basicmotions() -> tuple[np.ndarray, np.ndarray, list[str]]:
    parts = _aeon_parts("BasicMotions", "BasicMotions", "BasicMotions")
    names = parts[0][2]
    X = np.concatenate([p[0] for p in parts])
    y = np.array([names.index(lab) for p in parts for lab in p[1]], dtype=np.int64)
    return X, y, names


def watch_recordings() -> dict:
    """seglearn's watch_dataset.npy as stored: a dict with X (list of [n, 6] float64
    recordings), y, subject, side, X_labels, y_labels. Read from the installed package's files;
    seglearn itself is not imported (nor are its dependencies needed)."""
    spec = importlib.util.find_spec("seglearn")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "watch_dataset.npy" \
        if spec is not None and spec.submodule_search_locations else None
    if path is None or not path.is_file():
        raise TinyolError("the watch data set ships inside the `seglearn` package, which is not "
                          "installed", hint="pip install --no-deps seglearn  (its data file is "
                          "enough; make setup does it)")
    # a pickled dict (numpy's .npy of an object): the file of an installed package, not user input
    try:
        d = np.load(path, allow_pickle=True).item()
        missing = [k for k in ("X", "y", "subject", "y_labels") if k not in d]
    except Exception as e:  # noqa: BLE001 - a damaged install, reported in one line
        raise TinyolError(f"{path}: unreadable ({type(e).__name__}: {e})",
                          hint="reinstall it: pip install --force-reinstall --no-deps "
                               "seglearn==1.2.5") from None
    if missing:
        raise TinyolError(f"{path}: not the watch data set (no {', '.join(missing)})",
                          hint="pip install --force-reinstall --no-deps seglearn==1.2.5")
    return d


def watch_windows() -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """All windows of the watch set: X [N, 100, 6] float32, y [N], subject [N], class names.
    Recording r gives windows starting at 0, 50, 100, ... (the tail shorter than a window is
    dropped), recordings in the file's order."""
    d = watch_recordings()
    xs, ys, subj = [], [], []
    for rec, lab, s in zip(d["X"], d["y"], d["subject"]):
        rec = np.asarray(rec, np.float32)
        starts = window_starts(len(rec), WATCH_WINDOW, WATCH_STRIDE)
        xs.extend(rec[i:i + WATCH_WINDOW] for i in starts)
        ys.extend([int(lab)] * len(starts))
        subj.extend([int(s)] * len(starts))
    return (np.stack(xs), np.array(ys, np.int64), np.array(subj, np.int64),
            [str(n) for n in d["y_labels"]])


def watch_sensor_windows(classes=None, split: str | None = None, sensor_name: str = "lsm6dsl"
                         ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The watch set as the board's sensor reports it: each recording turned into the int16 rows
    Renode's LSM6DSO model gives for it (tinyol.data.sensor.lsm6dso_lsb, what `record-to-resd`
    writes to raw.bin), back to g and rad/s with the sensitivity the device's scaling assumes
    (``SENSORS[sensor_name].unit_per_lsb``), cut with the device's :func:`window_starts`.
    X [N, 100, 6] float32 = raw * unit per LSB: what tol_window sees before the model's input
    quantization (models/imu is trained on these). ``classes``: the exercises to keep (labels
    kept); ``split``: "train" (subjects 1-7), "test" (8-10) or None."""
    from .sensor import lsm6dso_lsb, sensor

    d = watch_recordings()
    unit = np.asarray(sensor(sensor_name).unit_per_lsb, np.float64)
    xs, ys = [], []
    for rec, lab, s in zip(d["X"], d["y"], d["subject"]):
        if classes is not None and int(lab) not in classes:
            continue
        if split is not None and (int(s) in WATCH_TEST_SUBJECTS) != (split == "test"):
            continue
        rows = (lsm6dso_lsb(np.asarray(rec)).astype(np.float64) * unit).astype(np.float32)
        starts = window_starts(len(rows), WATCH_WINDOW, WATCH_STRIDE)
        xs.extend(rows[i:i + WATCH_WINDOW] for i in starts)
        ys.extend([int(lab)] * len(starts))
    return np.stack(xs), np.array(ys, np.int64), [str(n) for n in d["y_labels"]]


def kdd135_series() -> tuple[np.ndarray, np.ndarray]:
    """KDD-TSAD 135 as shipped in the `aeon` wheel: the whole series (7,501 float64 values) and
    its point labels (1 = the anomaly). Read from the package's CSV; aeon is not imported."""
    spec = importlib.util.find_spec("aeon")
    path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "KDD-TSAD_135" / \
        "135_UCR_Anomaly_InternalBleeding16_TEST.csv" \
        if spec is not None and spec.submodule_search_locations else None
    if path is None or not path.is_file():
        raise TinyolError("the kdd135 series ships inside the `aeon` package, which is not installed",
                          hint="pip install --no-deps aeon  (its data files are enough)")
    d = np.loadtxt(path, delimiter=",", skiprows=1)  # timestamp, value, is_anomaly
    return d[:, 1], d[:, 2].astype(np.int64)


def kdd135_windows(split: str | None = None, stride: int = KDD135_STRIDE
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Windows of KDD-TSAD 135: X [N, 64] float32 scaled by the training part's min/max,
    y [N] (1 = the window overlaps the labelled anomaly), start [N] (first point of each window).
    `split`: None (the whole series), "train", "val" or "test" (KDD135_SPLITS, in points: a
    window lies wholly inside its part)."""
    v, lab = kdd135_series()
    a, b = KDD135_SPLITS["train"]
    lo, hi = v[a:b].min(), v[a:b].max()
    start, stop = (0, len(v)) if split is None else KDD135_SPLITS[split]
    stop = len(v) if stop is None else stop
    starts = np.arange(start, stop - KDD135_WINDOW + 1, stride)
    X = np.stack([(v[i:i + KDD135_WINDOW] - lo) / (hi - lo) for i in starts]).astype(np.float32)
    y = np.array([int(lab[i:i + KDD135_WINDOW].any()) for i in starts], np.int64)
    return X, y, starts


def _sensor(flt: str | None, spec: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    names = ["normal", "anomalous"]
    if flt in (None, "", "normal"):
        X, y = sensor_windows(SENSOR_N_NORMAL, 0)
    elif flt == "anomalies":
        X, y = sensor_windows(SENSOR_N_NORMAL, SENSOR_N_ANOMALOUS, seed=SENSOR_SEED + 1)
    else:
        raise TinyolError(f"unknown sensor variant {flt!r} in {spec!r}",
                          hint="use `sensor` or `sensor:anomalies`")
    return X, y, names


def _label_index(header: list[str] | None, ncols: int, label_column: str | int | None,
                 where: str) -> int:
    if label_column is None:
        return ncols - 1
    if isinstance(label_column, int) or str(label_column).lstrip("-").isdigit():
        i = int(label_column)
        if not -ncols <= i < ncols:
            raise TinyolError(f"{where}: label column {i} out of range (file has {ncols} columns)")
        return i % ncols
    if header is None or label_column not in header:
        raise TinyolError(f"{where}: no column named {label_column!r}",
                          hint="the file has no header" if header is None else
                          "columns: " + ", ".join(header))
    return header.index(label_column)


def _is_number(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def _csv(path: str, label_column) -> tuple[np.ndarray, np.ndarray, list[str] | None]:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = [r for r in csv.reader(f) if r and any(c.strip() for c in r)]
    except UnicodeDecodeError as e:
        raise TinyolError(f"{path}: not a text CSV file (byte {e.start} is not UTF-8 text)",
                          hint="give a CSV of numbers (features..., label) or an .npz with X and y") from None
    except csv.Error as e:
        raise TinyolError(f"{path}: unreadable CSV ({e})",
                          hint="one sample a line: comma-separated numbers, the label last") from None
    if not rows:
        raise TinyolError(f"{path}: empty CSV file")
    header = None
    if not all(_is_number(c) for c in rows[0]):
        header = [c.strip() for c in rows[0]]
        rows = rows[1:]
    if not rows:
        raise TinyolError(f"{path}: CSV file has a header but no rows")
    ncols = len(header) if header else len(rows[0])
    if ncols < 2:
        raise TinyolError(f"{path}: need at least one feature column and a label column")
    for i, r in enumerate(rows):
        if len(r) != ncols:
            raise TinyolError(f"{path}: row {i + 1 + (header is not None)} has {len(r)} "
                              f"columns, expected {ncols}")
    li = _label_index(header, ncols, label_column, path)
    try:
        data = np.array([[float(c) for c in r] for r in rows], dtype=np.float64)
    except ValueError as e:
        raise TinyolError(f"{path}: non-numeric value ({e})") from None
    y = data[:, li]
    X = np.delete(data, li, axis=1)
    return X, y, None


def _npz(path: str) -> tuple[np.ndarray, np.ndarray, list[str] | None]:
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("X", "y") if k not in z.files]
            if missing:
                raise TinyolError(f"{path}: missing array(s) {', '.join(missing)}",
                                  hint=f"the file has: {', '.join(z.files) or 'nothing'}")
            names = [str(s) for s in z["class_names"]] if "class_names" in z.files else None
            return z["X"], z["y"], names
    except (OSError, ValueError) as e:
        raise TinyolError(f"{path}: not a readable .npz file ({e})") from None


def load_source(spec: str, *, label_column: str | int | None = None,
                stdin: TextIO | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Load a whole source: (X float32 [N,...], y int64 [N], class_names).

    ``class_names[k]`` names label ``k``; a source without names gets ``["0", "1", ...]``.
    Raises TinyolError (one line) for a missing file, bad shapes, NaN/Inf or non-integer labels.
    """
    if spec == "-":
        xs, ys = [], []
        for x, lab in iter_source("-", stdin=stdin):
            xs.append(x)
            ys.append(lab)
        if not xs:
            raise TinyolError("stdin: no samples")
        X, y = _validate(np.stack(xs), np.array(ys, dtype=np.int64), "stdin")
        return X, y, [str(i) for i in range(int(y.max()) + 1)]

    name, flt, split = split_spec(spec)
    names: list[str] | None
    if name == "digits":
        X, y, names = _digits()
    elif name == "basicmotions":
        X, y, names = _basicmotions()
    elif name == "watch":
        X, y, subject, names = watch_windows()
        if split:  # by subject: the test split is people the model never saw
            keep = np.isin(subject, WATCH_TEST_SUBJECTS) == (split == "test")
            X, y, split = X[keep], y[keep], None
    elif name == "vowels":
        X, y, names, n_train = _vowels()
        if split:  # the archive's own split
            X, y = (X[:n_train], y[:n_train]) if split == "train" else (X[n_train:], y[n_train:])
            split = None
    elif name == "sensor":
        X, y, names = _sensor(flt, spec)
        flt = None
    elif name == "kdd135":
        X, y, _ = kdd135_windows(split)
        names, split = ["normal", "anomalous"], None
    else:
        if not os.path.exists(name):
            raise TinyolError(f"data source {name!r} not found",
                              hint="give a CSV/NPZ file, `-` for stdin, or one of: "
                                   "digits[:a-b][@train|@test], basicmotions[:a-b][@train|@test], "
                                   "watch[:a-b][@train|@test], vowels[:a-b][@train|@test], "
                                   "kdd135[@train|@val|@test], sensor[:anomalies]")
        if os.path.isdir(name):
            raise TinyolError(f"data source {name!r} is a directory, not a CSV/NPZ file")
        if name.lower().endswith(".npz"):
            X, y, names = _npz(name)
        else:
            X, y, names = _csv(name, label_column)
    if split == "val":
        raise TinyolError(f"{spec}: only kdd135 has a @val part",
                          hint="use @train or @test (a stratified split) for this source")
    X, y = _validate(X, y, name)
    if names is None:
        names = [str(i) for i in range(int(y.max()) + 1)]
    if split:
        X, y = _split(X, y, split)
    if flt:
        keep = _parse_classes(flt, spec)
        bad = [c for c in keep if c >= len(names)]
        if bad:
            raise TinyolError(f"{spec}: class {bad[0]} does not exist (classes 0-{len(names) - 1})")
        mask = np.isin(y, keep)
        X, y = X[mask], y[mask]
    if len(y) == 0:
        raise TinyolError(f"{spec}: no samples left after filtering")
    return X, y, names


def sample_order(n: int, *, shuffle: bool = False, seed: int = 0, limit: int | None = None,
                 epochs: int = 1) -> np.ndarray:
    """The rows a stream sends, in order (`tinyol stream` and `tinyol simulate` alike): the
    source order, or with `shuffle` a permutation by `seed`; `limit` keeps the first rows of
    that order once; each further epoch sends those rows again, reshuffled with seed + epoch."""
    base = np.random.default_rng(seed).permutation(n) if shuffle else np.arange(n)
    base = base[:limit] if limit is not None else base
    orders = [base] + [base[np.random.default_rng(seed + e).permutation(len(base))] if shuffle
                       else base for e in range(1, epochs)]
    return np.concatenate(orders)


def parse_line(line: str, where: str = "stdin") -> tuple[np.ndarray, int] | None:
    """One stdin/serial text sample: ``f1,f2,...,label`` (commas and/or spaces). None if blank."""
    line = line.split("#", 1)[0].strip()
    if not line:
        return None
    toks = line.replace(",", " ").split()
    if len(toks) < 2:
        raise TinyolError(f"{where}: need features and a label, got {line!r}")
    try:
        vals = np.array([float(t) for t in toks], dtype=np.float64)
    except ValueError:
        raise TinyolError(f"{where}: non-numeric value in {line!r}") from None
    if not np.isfinite(vals).all():
        raise TinyolError(f"{where}: NaN or Inf in {line!r}")
    lab = vals[-1]
    if lab != round(lab) or lab < 0 or lab > MAX_LABEL:
        raise TinyolError(f"{where}: label must be an integer 0..{MAX_LABEL}, got {toks[-1]!r}")
    return vals[:-1].astype(np.float32), int(lab)


def iter_source(spec: str, *, label_column: str | int | None = None,
                stdin: TextIO | None = None) -> Iterator[tuple[np.ndarray, int]]:
    """Yield (x float32 [...], label int) one sample at a time.

    For ``-`` the samples are read lazily from stdin (live sensors); every line must have the
    same number of features as the first. Other sources are loaded whole and yielded in order.
    """
    if spec != "-":
        X, y, _ = load_source(spec, label_column=label_column)
        for i in range(len(y)):
            yield X[i], int(y[i])
        return
    f = stdin if stdin is not None else sys.stdin
    nfeat = None
    for lineno, line in enumerate(f, 1):
        s = parse_line(line, f"stdin line {lineno}")
        if s is None:
            continue
        if nfeat is None:
            nfeat = s[0].shape[0]
        elif s[0].shape[0] != nfeat:
            raise TinyolError(f"stdin line {lineno}: {s[0].shape[0]} features, "
                              f"expected {nfeat} like the first line")
        yield s


def save_npz(path: str, X: np.ndarray, y: np.ndarray, class_names: list[str] | None = None) -> None:
    """Write a source as NPZ (the format `load_source` reads back)."""
    arrays = {"X": np.asarray(X, np.float32), "y": np.asarray(y, np.int64)}
    if class_names is not None:
        arrays["class_names"] = np.array(class_names)
    np.savez(path, **arrays)


def as_text_lines(X: np.ndarray, y: np.ndarray) -> str:
    """Render samples in the stdin line format (``%.9g`` floats, label last)."""
    buf = io.StringIO()
    for x, lab in zip(X.reshape(len(X), -1), y):
        buf.write(",".join("%.9g" % v for v in x) + f",{int(lab)}\n")
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# per-sample shape vs the model's input: checked, never guessed

LAYOUTS = ("channels-first", "flat")


def _squeeze(shape) -> tuple[int, ...]:
    return tuple(int(d) for d in shape if int(d) != 1)


def fit_layout(X: np.ndarray, input_shape, layout: str | None = None,
               where: str = "the source") -> np.ndarray:
    """X [N, ...] reshaped to [N, *input_shape], or a TinyolError naming both shapes.

    Accepted without ``layout``: the model's shape exactly, the same up to size-1 axes
    ((8, 8) for (8, 8, 1)), and flat rows ((768,) for (128, 6): CSV rows are read in the model's
    own order, channels last). Anything else must say how: ``layout="channels-first"`` moves the
    source's first axis last ((6, 128) -> (128, 6)); ``layout="flat"`` reads the values in row-major
    order whatever their shape.
    """
    X = np.asarray(X)
    want = tuple(int(d) for d in input_shape)
    have = tuple(int(d) for d in X.shape[1:])
    n_want, n_have = int(np.prod(want)), int(np.prod(have))
    if n_have != n_want:
        raise TinyolError(f"{where} has samples of shape {list(have)} ({n_have} values); the model "
                          f"input is {list(want)} ({n_want} values)",
                          hint="give samples of the model's input shape (see the model's "
                               "manifest.json: input.shape)")
    if layout is None:
        if have == want or _squeeze(have) == _squeeze(want) or len(have) == 1:
            return X.reshape((len(X),) + want)
        raise TinyolError(f"{where} has samples of shape {list(have)}, the model input is "
                          f"{list(want)}: tinyol does not guess how to rearrange them",
                          hint="--layout channels-first if the source is channels-first "
                               f"({list(have)} -> channels last), or --layout flat to read the "
                               "values in row-major order")
    if layout == "flat":
        return X.reshape((len(X),) + want)
    if layout == "channels-first":
        moved = have[1:] + have[:1]
        if moved != want and _squeeze(moved) != _squeeze(want):
            raise TinyolError(f"--layout channels-first turns {where}'s samples {list(have)} into "
                              f"{list(moved)}, not the model input {list(want)}",
                              hint="--layout flat reads the values in row-major order")
        return np.ascontiguousarray(np.moveaxis(X, 1, -1)).reshape((len(X),) + want)
    raise TinyolError(f"unknown layout {layout!r}", hint="use one of: " + ", ".join(LAYOUTS))


def check_labels(y: np.ndarray, n_classes: int, where: str = "the source") -> None:
    """Refuse labels outside 0..n_classes-1 (every mode: training, evaluation, prediction)."""
    y = np.asarray(y)
    bad = np.flatnonzero((y < 0) | (y >= n_classes))
    if len(bad):
        r = int(bad[0])
        raise TinyolError(f"{where}, row {r}: label {int(y[r])} is not one of the device's classes "
                          f"0..{n_classes - 1} ({len(bad)} such rows; nothing was sent)",
                          hint="filter the source (e.g. digits:0-4) or export the model with a "
                               "larger --max-classes")

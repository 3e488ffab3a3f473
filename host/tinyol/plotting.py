"""Learning curves as PNG (matplotlib, Agg backend: no display needed).

Input: the per-sample records of a stream (tinyol.link.stream.Record, or the dicts
of a `--log` jsonl file): index, label, prediction.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import TinyolError

# Lazy on purpose: matplotlib is imported where a plot is drawn; it takes about a second to
# load and only --plot needs it.


def accuracy_curves(labels, predictions, window: int = 50) -> dict:
    """Running (cumulative) and windowed accuracy over samples, overall and per class.

    Returns {"x": sample numbers 1..N, "running": [N], "windowed": [N],
    "per_class": {label: (x_c, running_c)}} where x_c are the sample numbers at
    which that class appeared.
    """
    y = np.asarray(labels)
    p = np.asarray(predictions)
    hit = (y == p).astype(float)
    n = len(hit)
    x = np.arange(1, n + 1)
    running = np.cumsum(hit) / x
    c = np.concatenate([[0.0], np.cumsum(hit)])
    lo = np.maximum(0, np.arange(n) + 1 - window)
    windowed = (c[1:] - c[lo]) / (np.arange(n) + 1 - lo)
    per = {}
    for k in sorted(set(int(v) for v in y)):
        m = y == k
        per[k] = (x[m], np.cumsum(hit[m]) / np.arange(1, m.sum() + 1))
    return {"x": x, "running": running, "windowed": windowed, "per_class": per}


def plot_learning_curve(records, path, *, title: str = "prequential accuracy", window: int = 50,
                        class_names: list[str] | None = None, marks: dict | None = None) -> Path:
    """Write a two-panel PNG: overall running + windowed accuracy; running accuracy per class.

    `records`: objects or dicts with label and prediction (rows without both are skipped).
    `marks`: optional {sample number: text} drawn as vertical lines (phases of a run).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    get = (lambda r, k: r[k]) if records and isinstance(records[0], dict) else getattr
    rows = [(get(r, "label"), get(r, "prediction")) for r in records
            if get(r, "label") is not None and get(r, "prediction") is not None]
    if not rows:
        raise TinyolError("no labelled predictions to plot", hint="--plot needs labelled rows")
    y, p = zip(*rows)
    cur = accuracy_curves(y, p, window)
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    a1.plot(cur["x"], cur["running"], label="running (all samples so far)", lw=2)
    a1.plot(cur["x"], cur["windowed"], label=f"last {window} samples", lw=1, alpha=0.7)
    a1.set_ylabel("accuracy")
    a1.set_ylim(0, 1.02)
    a1.set_title(title)
    a1.grid(alpha=0.3)
    a1.legend(loc="lower right")
    for k, (xc, rc) in cur["per_class"].items():
        name = class_names[k] if class_names and k < len(class_names) else str(k)
        a2.plot(xc, rc, label=f"class {name}")
    a2.set_xlabel("sample")
    a2.set_ylabel("running accuracy per class")
    a2.set_ylim(0, 1.02)
    a2.grid(alpha=0.3)
    a2.legend(loc="lower right", ncol=min(5, len(cur["per_class"])), fontsize="small")
    for xm, text in (marks or {}).items():
        for a in (a1, a2):
            a.axvline(xm, color="grey", ls="--", lw=1)
        a1.text(xm, 0.03, " " + text, fontsize="small", color="grey")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_anomaly_scores(scores, thresholds, flags, labels=None, path="scores.png", *,
                        title: str = "anomaly score") -> Path:
    """Write a PNG of an anomaly run over time: each sample's score (log scale), the threshold
    it was compared with (a step line; none drawn during the warm-up, where it is infinite),
    flagged samples as red dots and, with labels, labelled anomalies shaded.

    scores, thresholds: float [N] (the device's reply or the twin's); flags: bool [N]."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = np.asarray(scores, np.float64)
    t = np.asarray([np.nan if v is None else v for v in thresholds], np.float64)
    f = np.asarray(flags, bool)
    if not len(s):
        raise TinyolError("no scores to plot")
    x = np.arange(1, len(s) + 1)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    if labels is not None:
        a = np.asarray([0 if v is None else v for v in labels]) != 0
        edges = np.flatnonzero(np.diff(np.concatenate([[0], a.astype(int), [0]])))
        for k, (lo, hi) in enumerate(zip(edges[::2], edges[1::2])):
            ax.axvspan(lo + 0.5, hi + 0.5, color="orange", alpha=0.25,
                       label="labelled anomaly" if k == 0 else None)
    pos = s > 0
    ax.plot(x[pos], s[pos], lw=0.8, color="tab:blue", label="score")
    t = np.where(np.isfinite(t), t, np.nan)
    ax.step(x, t, where="post", lw=1.2, color="black", label="threshold (mean + k std)")
    if f.any():
        ax.plot(x[f & pos], s[f & pos], "o", ms=3.5, color="red", label=f"flagged ({int(f.sum())})")
    ax.set_yscale("log")
    ax.set_xlabel("sample")
    ax.set_ylabel("score (reconstruction MSE)")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

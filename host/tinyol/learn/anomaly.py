"""What an anomaly run means to a user: detections against labels (precision, recall, F1, ROC
AUC), score statistics, and a threshold factor k chosen on a validation stream.

The device (mcu/src/tol_anomaly.c, its twin :class:`tinyol.learn.learner.AnomalyThreshold`)
flags a sample when its score (reconstruction MSE) exceeds mean + k x std of the scores it has
seen (Welford over the warm-up, then an EMA). These functions only read what a run produced:
per-sample scores, flags and labels (label != 0 = anomalous). `tinyol stream` and
`tinyol simulate` both report through them.
"""
from __future__ import annotations

import math

import numpy as np

# threshold factors `tinyol simulate --tune` tries (mean + k std)
K_GRID = tuple([x / 2 for x in range(2, 21)] + [12.0, 15.0, 20.0])


def detection(tp: int, fp: int, fn: int, tn: int) -> dict:
    """Precision, recall (= detection rate), F1 and false-positive rate of binary flags; nan
    where undefined (no flag: precision; no anomaly: recall; no normal sample: FPR)."""
    nan = math.nan
    p = tp / (tp + fp) if tp + fp else nan
    r = tp / (tp + fn) if tp + fn else nan
    f1 = 2 * p * r / (p + r) if math.isfinite(p) and math.isfinite(r) and p + r > 0 else (
        0.0 if tp + fn and tp == 0 else nan)
    return {"tp": int(tp), "fp": int(fp), "fn": int(fn), "tn": int(tn),
            "precision": p, "recall": r, "f1": f1,
            "false_positive_rate": fp / (fp + tn) if fp + tn else nan}


def flags_vs_labels(flags, labels) -> dict:
    """:func:`detection` of flags (bool) against labels (!= 0 anomalous)."""
    f = np.asarray(flags, bool)
    a = np.asarray(labels) != 0
    return detection(int(np.sum(f & a)), int(np.sum(f & ~a)), int(np.sum(~f & a)),
                     int(np.sum(~f & ~a)))


def roc_auc(scores, labels) -> float:
    """Area under the ROC curve of scores against labels (Mann-Whitney U, ties counted half);
    nan without both classes."""
    s = np.asarray(scores, np.float64)
    lab = np.asarray(labels) != 0
    pos, neg = s[lab], s[~lab]
    if len(pos) == 0 or len(neg) == 0:
        return math.nan
    from scipy.stats import rankdata
    ranks = rankdata(np.concatenate([pos, neg]))  # average ranks for ties
    u = ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2
    return float(u / (len(pos) * len(neg)))


def score_stats(scores, labels=None) -> dict:
    """Mean, standard deviation, median, 99th percentile and maximum of the finite scores, over
    all samples and, with labels, per group ("normal": label 0, "anomalous": the others)."""
    s = np.asarray(scores, np.float64)

    def one(v):
        v = v[np.isfinite(v)]
        if not len(v):
            return None
        return {"n": int(len(v)), "mean": float(v.mean()), "std": float(v.std()),
                "median": float(np.median(v)), "p99": float(np.percentile(v, 99)),
                "max": float(v.max())}

    out = {"all": one(s)}
    if labels is not None:
        a = np.asarray(labels) != 0
        out["normal"], out["anomalous"] = one(s[~a]), one(s[a])
    return out


def choose_k(results: dict[float, dict]) -> tuple[float, str]:
    """The threshold factor to suggest from runs of the same validation stream, one per k
    ({k: detection dict, counted after the warm-up}). With anomalies in the stream: the k of the
    best F1 (ties: the larger k, fewer false alarms). Normal only: the smallest k that raised
    no false alarm. Returns (k, the rule in words)."""
    ks = sorted(results)
    if any(results[k]["tp"] + results[k]["fn"] for k in ks):
        best = max(ks, key=lambda k: (np.nan_to_num(results[k]["f1"], nan=-1.0), k))
        return best, "the best F1 on the validation stream (ties: the larger k)"
    quiet = [k for k in ks if results[k]["fp"] == 0]
    if quiet:
        return quiet[0], "the smallest k with no false alarm on the (normal) validation stream"
    return ks[-1], f"no k up to {ks[-1]:g} kept the validation stream free of false alarms: the largest"


def score_lines(st: dict) -> list[str]:
    """:func:`score_stats` as text lines (all, normal, anomalous), for the summaries."""
    out = []
    for group in ("all", "normal", "anomalous"):
        g = st.get(group)
        if g:
            out.append(f"{group:<10} n {g['n']:>5}  mean {g['mean']:.3g}  std {g['std']:.3g}  "
                       f"median {g['median']:.3g}  p99 {g['p99']:.3g}  max {g['max']:.3g}")
    return out

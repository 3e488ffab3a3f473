"""The continual-learning study: naive TinyOL SGD vs quantized latent replay.

    PYTHONPATH=host:studies python -m tinyol_studies.replay            # writes docs/study.md

scikit-learn digits; the backbone of models/digits was trained on classes 0-4
only. Classes 5-9 of the training split are streamed once through the
reference learner (tinyol.learn.learner, the numpy twin of the firmware's learner),
prequentially; afterwards the head is scored on the held-out test split of all
ten classes. The replay buffer starts pre-filled with latents of the
pre-training classes 0-4 (training split, offered in a seeded random order
through the buffer's own policy), as Latent Replay (Pellegrini et al. 2020)
does with its pre-training data. Each configuration runs over several stream
orders (seed s shuffles the stream, the prefill order and seeds the learner).

Hyper-parameters (lr, n_old, n_new) are chosen on a validation split carved
from the training split (never on the test split), then fixed for all runs.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from pathlib import Path

import numpy as np

from tinyol import __version__
from tinyol.data.datasets import load_source
from tinyol.learn import learner as L
from tinyol.targets import twin as S

# Lazy on purpose: scikit-learn is imported where a split is made (about a second to load).

SIZES = (20, 50, 100, 200)
BITS = (32, 8, 7)
LR_GRID = (0.001, 0.003, 0.01, 0.03, 0.1)
N_OLD_GRID = (1, 2, 4, 8, 16)
N_NEW_GRID = (1, 2)
TUNE_CAPACITY, TUNE_BITS = 100, 8
TUNE_SEEDS = (100, 101, 102)
OLD, NEW = list(range(5)), list(range(5, 10))


@dataclasses.dataclass
class Data:
    model: S.Model
    Qtr: np.ndarray
    ytr: np.ndarray
    Qte: np.ndarray
    yte: np.ndarray


def load(model_dir: str) -> Data:
    model = S.load_model(model_dir)
    Xtr, ytr, _ = load_source("digits@train")
    Xte, yte, _ = load_source("digits@test")
    q = model.input_q
    return Data(model, S.latents(model, S.quantize_input(Xtr, *q)), ytr,
                S.latents(model, S.quantize_input(Xte, *q)), yte)


def run_one(model: S.Model, Qtr, ytr, Qev, yev, *, seed: int, mode: str, lr: float,
            n_old: int = 0, n_new: int = 1, capacity: int = 0, bits: int = 8,
            policy: str = "reservoir", momentum: float = 0.0) -> dict:
    rng = np.random.default_rng(seed)
    old = np.flatnonzero(np.isin(ytr, OLD))
    new = np.flatnonzero(np.isin(ytr, NEW))
    pre_idx, stream_idx = rng.permutation(old), rng.permutation(new)
    settings = L.Settings(lr=lr, momentum=momentum, n_new=n_new, n_old=n_old,
                          mode=L.MODES[mode])
    replay = dict(capacity=capacity if mode == "replay" else 0, bits=bits,
                  policy=L.POLICIES[policy], seed=seed + 1, max_new=n_new)
    lrn = S.make_learner(model, settings, replay)
    pre = (Qtr[pre_idx], ytr[pre_idx]) if replay["capacity"] else None
    res = S.run_classifier(lrn, Qtr[stream_idx], ytr[stream_idx], prefill=pre,
                           eval_set=(Qev, yev))
    pe = S.evaluate(lrn, Qev)
    res["old_accuracy"] = float(np.mean(pe[np.isin(yev, OLD)] == yev[np.isin(yev, OLD)]))
    res["new_accuracy"] = float(np.mean(pe[np.isin(yev, NEW)] == yev[np.isin(yev, NEW)]))
    return res


def tune(d: Data, log) -> tuple[dict, dict]:
    """Grid search on a validation split of the training data."""
    from sklearn.model_selection import train_test_split
    idx = np.arange(len(d.ytr))
    fit, val = train_test_split(idx, test_size=0.3, random_state=0, stratify=d.ytr)
    fit, val = np.sort(fit), np.sort(val)
    args = (d.model, d.Qtr[fit], d.ytr[fit], d.Qtr[val], d.ytr[val])

    def score(**kw):
        return float(np.mean([run_one(*args, seed=s, **kw)["final_accuracy"]
                              for s in TUNE_SEEDS]))

    naive = {lr: score(mode="sgd", lr=lr) for lr in LR_GRID}
    best_naive = max(naive, key=naive.get)
    log("tune naive: " + ", ".join(f"lr={k}: {v:.3f}" for k, v in naive.items()))
    grid = {}
    for lr, n_old, n_new in itertools.product(LR_GRID, N_OLD_GRID, N_NEW_GRID):
        grid[(lr, n_old, n_new)] = score(mode="replay", lr=lr, n_old=n_old, n_new=n_new,
                                         capacity=TUNE_CAPACITY, bits=TUNE_BITS)
        log(f"tune replay lr={lr} n_old={n_old} n_new={n_new}: {grid[(lr, n_old, n_new)]:.3f}")
    best = max(grid, key=lambda k: (round(grid[k], 3), -k[1], -k[2]))  # prefer cheaper on ties
    return ({"lr": best_naive, "val_accuracy": naive[best_naive], "grid": naive},
            {"lr": best[0], "n_old": best[1], "n_new": best[2], "val_accuracy": grid[best],
             "grid": {f"lr={k[0]} n_old={k[1]} n_new={k[2]}": v for k, v in grid.items()}})


def study(d: Data, seeds: int, tuned: tuple[dict, dict], log) -> list[dict]:
    naive, rep = tuned
    D, C = d.model.W.shape[1], d.model.W.shape[0]
    rows = []

    def add(name, r_bits, cap, r_policy, **kw):
        runs = [run_one(d.model, d.Qtr, d.ytr, d.Qte, d.yte, seed=s, **kw) for s in range(seeds)]
        r = {"method": name, "bits": r_bits, "capacity": cap, "policy": r_policy}
        for k in ("final_accuracy", "old_accuracy", "new_accuracy", "prequential_accuracy"):
            v = np.array([x[k] for x in runs])
            r[k] = (float(v.mean()), float(v.std()))
        r["replay_bytes"] = L.replay_bytes(cap, D, r_bits, C) if cap else 0
        r["learner_bytes"] = L.learner_bytes(D, C, cap, r_bits, kw.get("n_new", 1),
                                             kw.get("n_old", 0), kw.get("momentum", 0) == 0)
        rows.append(r)
        log(f"{name:<16} bits={r_bits} cap={cap:<4} {r_policy:<9} final "
            f"{r['final_accuracy'][0]:.3f}±{r['final_accuracy'][1]:.3f}")

    add("frozen", 0, 0, "-", mode="frozen", lr=0.0)
    add("naive SGD", 0, 0, "-", mode="sgd", lr=naive["lr"])
    if rep["lr"] != naive["lr"]:
        add("naive SGD, replay's lr", 0, 0, "-", mode="sgd", lr=rep["lr"])
    for cap in SIZES:
        for bits in BITS:
            add("latent replay", bits, cap, "reservoir", mode="replay", lr=rep["lr"],
                n_old=rep["n_old"], n_new=rep["n_new"], capacity=cap, bits=bits)
    for policy in ("balanced", "ar1"):
        add("latent replay", 8, 100, policy, mode="replay", lr=rep["lr"], n_old=rep["n_old"],
            n_new=rep["n_new"], capacity=100, bits=8, policy=policy)
    return rows


def _pm(v) -> str:
    return f"{100 * v[0]:.1f} ± {100 * v[1]:.1f}"


def markdown(d: Data, rows: list[dict], tuned, seeds: int, cmdline: str) -> str:
    naive, rep = tuned
    D, C = d.model.W.shape[1], d.model.W.shape[0]
    n_new_stream = int(np.isin(d.ytr, NEW).sum())
    n_pre = int(np.isin(d.ytr, OLD).sum())
    out = [
        "<!-- generated by tinyol %s from models/digits and scikit-learn digits "
        "(python -m tinyol_studies.replay) — do not edit -->" % __version__,
        "# Study: forgetting and latent replay on the digits stream",
        "",
        "Reproduce (about a minute on one core):",
        "",
        "```",
        cmdline,
        "```",
        "",
        "## Setup",
        "",
        f"- Backbone: `models/digits` (int8, latent D = {D}), trained on digits 0-4 only; its "
        f"head starts with 5 active classes out of C_max = {C}.",
        f"- Stream: the {n_new_stream} training-split samples of classes 5-9, shuffled, each "
        "seen once; prequential (predict, then learn). Latents come from TFLM's runtime on "
        "`backbone.tflite`.",
        f"- Replay buffer: pre-filled with the latents of the {n_pre} training-split samples of "
        "classes 0-4, offered in a seeded random order through the buffer's own policy (Latent "
        "Replay keeps pre-training latents the same way); then every update mixes n_new fresh "
        "and n_old replayed latents and offers the fresh ones to the buffer.",
        f"- Score: accuracy of the final head on the held-out test split ({len(d.yte)} samples, "
        f"all ten classes); mean ± std over {seeds} stream orders (seed s shuffles the stream and "
        "the prefill and seeds the learner's PRNG).",
        "- Learner: tinyol.learn.learner (numpy, float32), identical to the firmware's tol_learner.c "
        "(tests/host/test_learner_equiv.py).",
        f"- Hyper-parameters chosen on a validation split of the training data (30 %, "
        f"{len(TUNE_SEEDS)} orders), never on the test split: naive SGD lr = {naive['lr']}; "
        f"replay lr = {rep['lr']}, n_old = {rep['n_old']}, n_new = {rep['n_new']} (tuned at "
        f"{TUNE_CAPACITY} slots, 8-bit). Momentum 0, no weight decay, no clipping.",
        "",
        "## Results",
        "",
        "| method | storage | slots | policy | replay bytes | learner bytes | final acc 0-9 (%) "
        "| old 0-4 (%) | new 5-9 (%) | prequential (%) |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    storage = {0: "-", 32: "float32", 8: "int8", 7: "7-bit"}
    for r in rows:
        out.append(f"| {r['method']} | {storage[r['bits']]} | {r['capacity'] or '-'} | "
                   f"{r['policy']} | {r['replay_bytes'] or '-'} | {r['learner_bytes']} | "
                   f"{_pm(r['final_accuracy'])} | {_pm(r['old_accuracy'])} | "
                   f"{_pm(r['new_accuracy'])} | {_pm(r['prequential_accuracy'])} |")
    out += [
        "",
        "Bytes: `replay bytes` = TOL_REPLAY_BYTES(slots, D, bits, C_max) (rows, uint16 labels, "
        "per-class counters); `learner bytes` = TOL_LEARNER_BYTES_EX(D, C_max, slots, bits, "
        "n_new, n_old, no momentum): head, gradient factors for n_new + n_old samples, buffer, "
        "scratch and counters, the static buffer the firmware reserves. "
        "See docs/learner.md for the formulas.",
        "",
        "## Reading",
        "",
    ]
    by = {(r["method"], r["bits"], r["capacity"], r["policy"]): r for r in rows}
    nv = by[("naive SGD", 0, 0, "-")]
    fz = by[("frozen", 0, 0, "-")]
    smallest = (" the smallest in the grid: it trades learning for forgetting less"
                if naive["lr"] == min(LR_GRID) else "")
    out.append(f"- Naive TinyOL SGD forgets: the frozen head scores "
               f"{100 * fz['old_accuracy'][0]:.1f} % on 0-4; after the stream naive SGD keeps "
               f"{_pm(nv['old_accuracy'])} % on 0-4 (new {_pm(nv['new_accuracy'])} %) at its "
               f"best validation lr ({naive['lr']}{',' if smallest else ''}{smallest}).")
    nr = by.get(("naive SGD, replay's lr", 0, 0, "-"))
    if nr is not None:
        out.append(f"- At the replay runs' lr ({rep['lr']}) naive SGD keeps only "
                   f"{_pm(nr['old_accuracy'])} % of 0-4.")
    lines = []
    for cap in SIZES:
        f, e, s = (by[("latent replay", b, cap, "reservoir")]["final_accuracy"][0]
                   for b in (32, 8, 7))
        lines.append(f"{cap} slots: float {100 * f:.1f}, int8 {100 * e:.1f} "
                     f"({100 * (e - f):+.1f}), 7-bit {100 * s:.1f} ({100 * (s - f):+.1f})")
    out.append("- Replay keeps the old classes. Final accuracy by storage (difference to "
               "float32 in points): " + "; ".join(lines) + ".")
    out.append("- The backbone's latents are int8 already, so int8 storage keeps them exactly "
               "and gives the same results as float32 storage (which keeps their dequantized "
               "values) at 1/4 of the bytes per slot; 7-bit storage drops one more bit "
               "(|error| <= 1 LSB, 7/32 of float32) and costs at most a few tenths of a point, "
               "well inside the spread over stream orders.")
    b = by[("latent replay", 8, 100, "balanced")]
    a = by[("latent replay", 8, 100, "ar1")]
    r = by[("latent replay", 8, 100, "reservoir")]
    out.append(f"- Policy at 100 int8 slots: reservoir {_pm(r['final_accuracy'])}, "
               f"class-balanced {_pm(b['final_accuracy'])}, AR1 {_pm(a['final_accuracy'])} %.")
    out += [
        "",
        "## Tuning grid (validation accuracy)",
        "",
        "naive SGD: " + ", ".join(f"lr {k}: {100 * v:.1f}" for k, v in naive["grid"].items()),
        "",
        "| replay (8-bit, %d slots) | val acc (%%) |" % TUNE_CAPACITY,
        "|---|---:|",
    ]
    for k, v in rep["grid"].items():
        out.append(f"| {k} | {100 * v:.1f} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tinyol_studies.replay", description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="models/digits")
    ap.add_argument("--seeds", type=int, default=5, help="stream orders per configuration")
    ap.add_argument("--out", default="docs/study.md", help="markdown report ('-' = stdout)")
    ap.add_argument("--json", default=None, help="also write the raw results here")
    ap.add_argument("--no-tune", action="store_true",
                    help="skip the grid search; use the learner defaults")
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    log = (lambda *_: None) if a.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    d = load(a.model)
    if a.no_tune:
        s = L.Settings()
        tuned = ({"lr": s.lr, "val_accuracy": float("nan"), "grid": {}},
                 {"lr": s.lr, "n_old": s.n_old, "n_new": s.n_new, "val_accuracy": float("nan"),
                  "grid": {}})
    else:
        tuned = tune(d, log)
    rows = study(d, a.seeds, tuned, log)
    cmd = "PYTHONPATH=host:studies python -m tinyol_studies.replay" + ("" if a.seeds == 5 else f" --seeds {a.seeds}")
    text = markdown(d, rows, tuned, a.seeds, cmd)
    if a.out == "-":
        sys.stdout.write(text)
    else:
        Path(a.out).write_text(text)
        log(f"wrote {a.out}")
    if a.json:
        Path(a.json).write_text(json.dumps({"tuned": tuned, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Last layer, float stage or lean stage (issue 19): at each cut of the depth study's networks
and of a third one (JapaneseVowels), what does training fewer parameters (sparse update:
biases only, or one layer's weights) cost in accuracy, and what does it save in learner RAM
and train-step work; and what is the best configuration that fits the NUCLEO-L476RG?

    PYTHONPATH=host:studies python -m tinyol_studies.lean --json docs/study_lean.json
        # replaces its section of docs/study.md; raw results in docs/study_lean.json, which is
        # also read first: rows already in it are not re-run

Same protocol as tinyol_studies.depth (its datasets, networks, exports, stream, replay of 200
int8 slots, lr, stream orders): each cut is exported as the float stage (`--stage-train all`),
biases only (`bias`) and the layer right below the classifier trained whole with the rest on
biases (`embed`), and the stage's numpy twin (bit-identical with tol_stage.c) learns the new
classes. Reported per variant: final accuracy (mean ± std over stream orders), trained
parameters, learner RAM at 200 slots (tinyol.memory, the firmware's static buffer), the most
replay slots with which the whole firmware fits the NUCLEO-L476RG (tinyol.memory's board plan,
the linker's verdict) and the train step's cost (measured by `tinyol bench` where the depth
study measured it, else the twin's MAC count times the measured instructions per MAC). Then,
on digits and watch, the configurations that fit the L476RG at the slot count that fits, with
the recipe (replay policy, idle-time rehearsal) chosen on a validation split.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tinyol import __version__, memory
from tinyol.boards import BOARDS
from tinyol.data.datasets import load_source
from tinyol.errors import TinyolError
from tinyol.learn import learner as L
from tinyol.model.export import export_model
from tinyol.model.folder import read_manifest
from tinyol.paths import project_root
from tinyol.targets import twin as S
from . import depth as D

MARK_BEGIN = "<!-- study_lean begin -->"
MARK_END = "<!-- study_lean end -->"
BOARD = "nucleo_l476rg"


def export_variant(ds, cut: str, train: str | None, out: Path,
                   capacity: int = D.CAPACITY) -> S.Model:
    export_model(str(ds.keras_path), str(out), split=None if cut == "head" else cut,
                 calib=str(ds.calib), max_classes=ds.n_classes, replay_capacity=capacity,
                 replay_bits=D.BITS, name=f"{ds.name}_{cut}", stage_train=train)
    return S.load_model(out)


def l476_slots(out: Path) -> int:
    """The most replay slots with which this export fits the L476RG (0: none, or it does not
    fit even without)."""
    m = memory.Model.from_manifest(read_manifest(out))
    b = BOARDS[BOARD]
    return max(0, int(memory.largest_capacity(m, b.name, memory.board_regions(b))))


# --------------------------------------------------------------------------- cost (twin MACs)
def step_macs(model: S.Model, n_old: int = 16) -> dict:
    """Multiply-accumulates (and pooling taps) of one prediction and of one train step of
    1 fresh + n_old replayed samples, counted from the layer shapes exactly as the twin and
    tol_stage.c loop: per sample the forward pass through every layer, then backward from the
    last layer down to the first that trains (weight gradients where weights train, bias
    gradients where biases train, the input delta of every layer above the first that
    trains); plus the SGD step over the trained parameters."""
    if model.stage is None:
        C, Dm = model.W.shape
        fwd = C * Dm
        per = fwd + C * Dm + C  # forward, dW, db
        return {"predict": fwd, "train": (1 + n_old) * per + C * Dm + C}
    layers = model.stage[0]
    from tinyol.learn import stage as ST

    def conns(l):
        if l.kind == ST.GAP:
            return l.in_size
        return len(ST._connections(l)[0])

    first = min(i for i, l in enumerate(layers) if l.n_train)
    fwd = sum(conns(l) for l in layers)
    bwd = 0
    for i in range(len(layers) - 1, first - 1, -1):
        l = layers[i]
        if l.kind in ST.LINEAR:
            bwd += conns(l) if l.train == ST.TRAIN_ALL else 0
            bwd += l.out_size if l.train != ST.TRAIN_FROZEN else 0
        if i > first:
            bwd += conns(l)
    T = ST.n_trained(layers)
    return {"predict": fwd, "train": (1 + n_old) * (fwd + bwd) + T}


def bench_rows(ds, res: dict, work: Path, echo) -> None:
    """`tinyol bench` (QEMU -icount, Cortex-M4 build, 16 replay slots: the step's cost does not
    depend on them) for every row whose train step the depth study did not measure."""
    from tinyol.bench.bench import bench_model

    for c in res["rows"]:
        if c.get("instr") or "bench_error" in c:
            continue
        out = work / f"bench_{res['name']}_{c['cut']}_{c['variant'].replace(' ', '_')}"
        try:
            export_variant(ds, c["cut"], c["train"], out, D.BENCH_CAPACITY)
            r = bench_model(str(out), "simd", echo=lambda s: None)
            err = r.error
        except Exception as e:  # noqa: BLE001 - reported in the table
            err = str(e).splitlines()[0][:160]
        if err:
            c["bench_error"] = err
        else:
            c["instr"], c["instr_predict"], c["instr_source"] = (
                r.train_instr, r.predict_instr, "tinyol bench, this study")
        echo(f"{res['name']} bench {c['cut']} {c['variant']}: {c.get('instr') or err}")


# --------------------------------------------------------------------------- runs
def make(model: S.Model, *, seed: int, capacity: int, policy: int, extra: int, lr: float,
         mode: str = "replay"):
    """The twin with the device's settings: `extra` idle rehearsal steps after each streamed
    sample are the device's own (settings.rehearse; tinyol.targets.twin.run_classifier
    gives the learner its whole idle budget after each sample: Learner.idle / Stage.idle, the
    twins of tol_learner_rehearse / tol_stage_rehearse)."""
    settings = L.Settings(lr=lr, n_new=1, n_old=16 if mode == "replay" else 0,
                          mode=L.MODES[mode], rehearse=extra if mode == "replay" else 0)
    replay = dict(capacity=capacity if mode == "replay" else 0, bits=D.BITS, policy=policy,
                  seed=seed + 1, max_new=1)
    return S.make_learner(model, settings, replay)


def run(ds, model: S.Model, Qtr, Qte, *, seed: int, capacity: int = D.CAPACITY,
        policy: int = L.POLICY_RESERVOIR, extra: int = 0, lr: float = D.LR,
        mode: str = "replay", eval_idx=None) -> float:
    """tinyol_studies.depth.run with a replay policy, a capacity and idle rehearsal: the same
    stream order, prefill and seeds (extra = 0, reservoir, 200 slots gives depth.run's
    accuracy)."""
    rng = np.random.default_rng(seed)
    old, new = np.flatnonzero(np.isin(ds.ytr, ds.old)), np.flatnonzero(np.isin(ds.ytr, ds.new))
    if eval_idx is not None:  # validation: stream and prefill without the held-out part
        old, new = np.setdiff1d(old, eval_idx), np.setdiff1d(new, eval_idx)
    pre_idx, stream_idx = rng.permutation(old), rng.permutation(new)
    lrn = make(model, seed=seed, capacity=capacity, policy=policy, extra=extra, lr=lr, mode=mode)
    ev = (Qtr[eval_idx], ds.ytr[eval_idx]) if eval_idx is not None else (Qte, ds.yte)
    pre = (Qtr[pre_idx], ds.ytr[pre_idx]) if mode == "replay" else None
    res = S.run_classifier(lrn, Qtr[stream_idx], ds.ytr[stream_idx], prefill=pre, eval_set=ev)
    return res["final_accuracy"]


def run_users(ds, model: S.Model, Qtr, Qu, split: dict, *, seed: int,
              capacity: int = D.CAPACITY, policy: int = L.POLICY_RESERVOIR, extra: int = 0,
              lr: float = D.LR) -> float:
    """tinyol_studies.depth.run_users (replay) with a policy, a capacity and idle rehearsal."""
    rng = np.random.default_rng(seed)
    stream = D.users_stream_order(split, seed)
    lrn = make(model, seed=seed, capacity=capacity, policy=policy, extra=extra, lr=lr)
    te = split["test"]
    pre = rng.permutation(len(ds.ytr))
    res = S.run_classifier(lrn, Qu[stream], ds.yte[stream], prefill=(Qtr[pre], ds.ytr[pre]),
                           eval_set=(Qu[te], ds.yte[te]))
    return res["final_accuracy"]


# --------------------------------------------------------------------------- the third data set
VOWELS_OLD, VOWELS_NEW = [0, 1, 2, 3, 4], [5, 6, 7, 8]   # speakers 1-5 | 6-9


def vowels_model(n_classes: int, seed: int):
    """The vowels network over [1, 25, 12] (25 frames of 12 LPC cepstra): conv 1x3 -> conv 1x3
    stride 2 -> max-pool 1x2 -> conv 1x3 -> GAP -> Dense 24 -> Dense, written as Conv2D with
    1 x k kernels as the watch network is."""
    import keras

    keras.utils.set_random_seed(seed)
    L_ = keras.layers
    inp = keras.Input((1, 25, 12), name="lpc")
    h = L_.Conv2D(16, (1, 3), padding="same", activation="relu", name="conv1")(inp)
    h = L_.Conv2D(16, (1, 3), strides=(1, 2), padding="same", activation="relu", name="conv2")(h)
    h = L_.MaxPooling2D((1, 2), name="pool")(h)
    h = L_.Conv2D(16, (1, 3), padding="same", activation="relu", name="conv3")(h)
    h = L_.GlobalAveragePooling2D(name="gap")(h)
    h = L_.Dense(24, activation="relu", name="embed")(h)
    return keras.Model(inp, L_.Dense(n_classes, name="head")(h), name="vowels")


VOWELS_EPOCHS = 150


def vowels_dataset(work: Path, echo) -> D.Dataset:
    """JapaneseVowels (source `vowels`): the network learns speakers 1-5 from the archive's
    training file, the device streams speakers 6-9 of it, the test is the archive's test file
    (all nine speakers, other utterances)."""
    Xtr, ytr, _ = load_source("vowels@train")
    Xte, yte, _ = load_source("vowels@test")
    Xtr, Xte = Xtr[:, None], Xte[:, None]
    path = work / "vowels.keras"
    if not path.exists():  # a work folder kept between runs keeps the trained backbone
        echo("training the vowels backbone on speakers 1-5")
        m = np.isin(ytr, VOWELS_OLD)
        D._fit(vowels_model(len(VOWELS_OLD), seed=0), Xtr[m], ytr[m], seed=0,
               epochs=VOWELS_EPOCHS).save(path)

    def joint(s):
        return vowels_model(len(VOWELS_OLD) + len(VOWELS_NEW), s)

    return D.Dataset("vowels", path, Xtr, ytr, Xte, yte, VOWELS_OLD, VOWELS_NEW,
                     ["head", "embed", "conv3", "conv2"], joint, work)


def dataset(name: str, work: Path, echo):
    if name == "digits":
        return D.digits_dataset(work)
    if name == "watch":
        return D.watch_dataset(work, echo)
    if name == "vowels":
        return vowels_dataset(work, echo)
    raise TinyolError(f"unknown data set {name!r} (digits, watch, users, vowels)")


def bounds(ds, model: S.Model, Qtr, Qte, seeds: int, epochs: int, echo) -> dict:
    """Joint training (upper bound) and naive SGD of the last layer (floor, lr chosen on a
    validation split of the training data), as tinyol_studies.depth.study_dataset does."""
    accs = []
    for s in range(seeds):
        net = D._fit(ds.make_joint(100 + s), ds.Xtr, ds.ytr, seed=100 + s, epochs=epochs)
        accs.append(float(np.mean(np.argmax(net.predict(ds.Xte, verbose=0), 1) == ds.yte)))
    rng = np.random.default_rng(99)
    val = rng.choice(len(ds.ytr), len(ds.ytr) * 3 // 10, replace=False)
    val_acc = {lr: D.run(ds, model, Qtr, Qte, seed=50, mode="sgd", lr=lr, eval_idx=val)
               for lr in D.NAIVE_LR_GRID}
    lr = max(val_acc, key=val_acc.get)
    naive = [D.run(ds, model, Qtr, Qte, seed=s, mode="sgd", lr=lr) for s in range(seeds)]
    echo(f"{ds.name}: joint {np.mean(accs):.3f}, naive SGD (lr {lr}) {np.mean(naive):.3f}")
    return {"joint": accs, "naive": {"lr": lr, "acc": naive}, "source": "measured here"}


def _key(row: dict) -> tuple:
    return (row["cut"], row["variant"])


def study(ds, seeds: int, work: Path, echo, variants: dict, cached: dict | None = None,
          users: tuple | None = None, depth: dict | None = None,
          lean_seeds: int | None = None, only_cached: bool = False) -> dict:
    """Every cut and variant of one data set (class-incremental), or of the new-users
    scenario when `users` = (users Dataset, split) is given; rows already in `cached` are
    kept, not re-run. `depth`: the depth study's results for the same data set and scenario:
    its float-stage accuracies are taken instead of re-run once the last layer's run here
    gives its accuracies to the last bit (the same network, stream orders and learner)."""
    name = ds.name if users is None else "watch"
    reuse = {}
    if depth is not None:
        reuse = {c["cut"]: c["replay"] for c in depth["cuts"]
                 if c["cut"] != "head" and len(c["replay"]) == seeds}
        head = next(c["replay"] for c in depth["cuts"] if c["cut"] == "head")
    out = cached or {"name": name, "rows": []}
    if users is None:
        out.update(n_stream=int(np.isin(ds.ytr, ds.new).sum()), n_test=int(len(ds.yte)))
    else:
        out.update(scenario="users", n_stream=int(len(users[1]["calib"])),
                   n_test=int(len(users[1]["test"])))
    done = {_key(r): r for r in out["rows"]}
    for cut in ds.cuts:
        for label, train in (variants[cut] if cut in variants else [("last layer", None)]):
            d = work / f"{name}{'_users' if users else ''}_{cut}_{label.replace(' ', '_')}"
            if (cut, label) in done:
                if "macs" not in done[(cut, label)]:  # a run from before the cost column
                    done[(cut, label)]["macs"] = step_macs(export_variant(ds, cut, train, d))
                continue
            if only_cached:
                continue
            model = export_variant(ds, cut, train, d)
            Qtr, Qte = D._latents(model, ds.Xtr), D._latents(model, ds.Xte)
            src = "run here"
            n = seeds if train in (None, "all") or lean_seeds is None else lean_seeds
            if train == "all" and cut in reuse and out.get("head_check"):
                accs, src = reuse[cut], "docs/study_depth.json"
            elif users is None:
                accs = [run(ds, model, Qtr, Qte, seed=s) for s in range(n)]
            else:
                accs = [run_users(ds, model, Qtr, Qte, users[1], seed=s) for s in range(n)]
            if cut == "head" and depth is not None:
                out["head_check"] = bool(accs == head)
                echo(f"{name}: last layer {'equals' if accs == head else 'differs from'} the "
                     f"depth study's run ({accs} vs {head})")
            trained = (int(model.W.size + model.b.size) if model.stage is None
                       else int(sum(l.n_train for l in model.stage[0])))
            row = {"cut": cut, "variant": label, "train": train, "acc": accs, "acc_source": src,
                   "params": D.cut_row(model, cut)["params"], "trained": trained,
                   "ram": D.learner_ram(model, D.CAPACITY, D.BITS), "l476_slots": l476_slots(d),
                   "latent_dim": int(model.manifest["latent"]["dim"]),
                   "macs": step_macs(model)}
            echo(f"{name}{' users' if users else ''}: {cut} {label}: {np.mean(accs):.3f} ± "
                 f"{np.std(accs):.3f}, trained {trained}, RAM {row['ram']}, L476RG slots "
                 f"{row['l476_slots']}, MACs {row['macs']}")
            out["rows"].append(row)
    order = [(cut, label) for cut in ds.cuts
             for label, _ in (variants[cut] if cut in variants else [("last layer", None)])]
    out["rows"].sort(key=lambda r: order.index(_key(r)) if _key(r) in order else len(order))
    return out


# --------------------------------------------------------------------------- best on the L476RG
CAP_LIMIT = 1000          # the most slots tried (more than the prefill + stream of any set here)
RECIPE_LRS = (D.LR,)
RECIPE_EXTRA = (0, 2, 4, 8)
RECIPE_POLICIES = (L.POLICY_RESERVOIR, L.POLICY_BALANCED)
POLICY_NAMES = {L.POLICY_RESERVOIR: "reservoir", L.POLICY_BALANCED: "balanced"}


def best_l476(ds, res: dict, seeds: int, work: Path, echo, candidates: list[tuple],
              redo: bool = False) -> dict:
    """For each candidate (cut, variant) that fits the L476RG: its slot count that fits (at
    most CAP_LIMIT), the recipe (policy x idle rehearsal x lr) chosen on a validation split
    of the training data (30 %, one order), then the chosen recipe on the test split over
    `seeds` orders. Cached in res["l476"] (`redo`: run the candidates again), with the
    validation accuracy of every recipe tried and the wall-clock seconds of the search and of
    the test runs (a shared 2-core machine: an indication, not a benchmark)."""
    out = res.setdefault("l476", [])
    if redo:   # re-run these: drop their cached rows
        out[:] = [r for r in out if _key(r) not in set(candidates)]
    done = {(r["cut"], r["variant"]) for r in out}
    rows = {_key(r): r for r in res["rows"]}
    rng = np.random.default_rng(99)
    val = rng.choice(len(ds.ytr), len(ds.ytr) * 3 // 10, replace=False)
    for cut, label in candidates:
        base = rows[(cut, label)]
        if (cut, label) in done or base["l476_slots"] <= 0:
            continue
        cap = min(base["l476_slots"], CAP_LIMIT)
        model = export_variant(ds, cut, base["train"],
                               work / f"l476_{ds.name}_{cut}_{label.replace(' ', '_')}", cap)
        Qtr, Qte = D._latents(model, ds.Xtr), D._latents(model, ds.Xte)
        t0 = time.perf_counter()
        grid = {}
        for pol in RECIPE_POLICIES:
            for extra in RECIPE_EXTRA:
                for lr in RECIPE_LRS:
                    grid[(pol, extra, lr)] = run(ds, model, Qtr, Qte, seed=50, capacity=cap,
                                                 policy=pol, extra=extra, lr=lr, eval_idx=val)
        pol, extra, lr = max(grid, key=grid.get)
        t1 = time.perf_counter()
        accs = [run(ds, model, Qtr, Qte, seed=s, capacity=cap, policy=pol, extra=extra, lr=lr)
                for s in range(seeds)]
        plain = ([run(ds, model, Qtr, Qte, seed=s, capacity=cap) for s in range(seeds)]
                 if (pol, extra, lr) != (L.POLICY_RESERVOIR, 0, D.LR) else accs)
        r = {"cut": cut, "variant": label, "train": base["train"], "slots": cap,
             "ram": D.learner_ram(model, cap, D.BITS), "policy": pol, "extra": extra, "lr": lr,
             "val": {f"{POLICY_NAMES[p]} x{e} lr {l}": v for (p, e, l), v in grid.items()},
             "acc": accs, "plain": plain,
             "seconds": {"search": round(t1 - t0), "test": round(time.perf_counter() - t1)}}
        echo(f"{ds.name} L476RG {cut} {label} at {cap} slots: recipe {POLICY_NAMES[pol]}, "
             f"{extra} idle steps, lr {lr}: {np.mean(accs):.3f} ± {np.std(accs):.3f} "
             f"(plain {np.mean(plain):.3f}); search {r['seconds']['search']} s, test runs "
             f"{r['seconds']['test']} s")
        out.append(r)
    order = [("head", "last layer")]   # the last layer first, then as searched
    out.sort(key=lambda r: 0 if _key(r) in order else 1)
    return res


# the variants per cut: the float stage, biases only, one layer's weights + biases elsewhere
_DEEP = [("float stage", "all"), ("lean: biases", "bias"), ("lean: embed weights + biases", "embed")]
VARIANTS = {
    "digits": {"embed": [("float stage", "all"), ("lean: biases", "bias")], "conv2": _DEEP},
    "watch": {"embed": [("float stage", "all"), ("lean: biases", "bias")],
              "conv3": _DEEP, "conv2": _DEEP},
    "vowels": {"embed": [("float stage", "all"), ("lean: biases", "bias")],
               "conv3": _DEEP, "conv2": _DEEP},
}
# the configurations tried on the L476RG: the last layer and the two most accurate (at 200
# slots) of the others that fit it
L476_TOP = 2


def l476_candidates(res: dict, top: int = L476_TOP) -> list[tuple]:
    fit = [r for r in res["rows"] if r["l476_slots"] > 0 and r["cut"] != "head"]
    fit.sort(key=lambda r: -np.mean(r["acc"]))
    return [("head", "last layer")] + [_key(r) for r in fit[:top]]


def _acc(v: list, seeds: int) -> str:
    """mean ± std over the stream orders, or the one order's accuracy when subsampled."""
    return D._pm(v) if len(v) == seeds else (
        f"{100 * v[0]:.1f} (order 0 only)" if len(v) == 1 else f"{D._pm(v)} ({len(v)} orders)")


def _steps(v: tuple) -> str:
    """(0, 2, 4) -> '0, 2 or 4'"""
    return ", ".join(map(str, v[:-1])) + f" or {v[-1]}" if len(v) > 1 else str(v[0])


def _mega(v: float) -> str:
    return f"{v / 1e6:.2f} M" if v >= 1e6 else f"{v / 1e3:.0f} k"


def share_instr(results: list[dict]) -> None:
    """The new-users rows take the class-incremental watch rows' measurements (same shapes)."""
    ci = next((r for r in results if r["name"] == "watch" and not r.get("scenario")), None)
    us = next((r for r in results if r.get("scenario") == "users"), None)
    if ci is None or us is None:
        return
    by = {_key(c): c for c in ci["rows"]}
    for c in us["rows"]:
        src = by.get(_key(c), {})
        for k in ("instr", "instr_predict", "bench_error"):
            if k in src:
                c[k] = src[k]
        if "instr" in src:
            c["instr_source"] = "the class-incremental watch row"


def _cost(c: dict) -> str:
    if c.get("instr"):
        return f"{c['instr']:,}"
    return "does not fit QEMU's 128 KB" if "bench_error" in c else "-"


TITLES = {("digits", None): "digits (new classes)", ("watch", None): "watch: new classes",
          ("watch", "users"): "watch: new users", ("vowels", None): "vowels (new speakers)"}


def markdown(results: list[dict], seeds: int) -> str:
    share_instr(results)
    o = [MARK_BEGIN,
         f"<!-- generated by tinyol {__version__} (python -m tinyol_studies.lean) — do not edit -->",
         "## Last layer, float stage or lean stage? Three data sets", "",
         "Reproduce: `PYTHONPATH=host:studies python -m tinyol_studies.lean --json docs/study_lean.json` "
         "(rows already in the json are kept: delete a data set's entry to re-run it).", "",
         f"The depth study's (next section) protocol: the backbone up to each cut in int8, the "
         f"stage after it learning the new classes from one pass over the stream with latent "
         f"replay pre-filled with the pre-training classes (200 int8 slots, reservoir, "
         f"n_new = 1, n_old = 16, lr = {D.LR}, momentum 0), final accuracy on the held-out "
         f"test split, mean ± std over {seeds} stream orders. Each cut is exported as the float "
         f"stage (`--stage-train all`), biases only below the classifier (`--stage-train bias`) "
         f"and `embed`'s weights plus biases elsewhere (`--stage-train embed`); what does not "
         f"train stays in flash. Learner RAM at 200 slots: tinyol.memory (the firmware's "
         f"static buffer). L476RG slots: the most replay slots with which the whole firmware "
         f"fits the NUCLEO-L476RG by tinyol.memory's board plan, the one the linker is held to "
         f"(0: it does not fit even without replay).", "",
         "Train step: instructions of one train step (1 fresh + 16 replayed samples) "
         "measured by `tinyol bench` (QEMU -icount, Cortex-M4 build with 16 replay slots: the "
         "step does not depend on them): the float stages and last layers of digits and watch "
         "in the depth study's run, every other row in this one; the new-users rows have the "
         "class-incremental watch rows' shapes and take their measurements. MACs: the twin's "
         "multiply-accumulates (and pooling taps) of that step, counted from the layer shapes: "
         "per sample the forward pass through the stage and the backward pass down to the "
         "first layer that trains, plus the SGD step over the trained parameters.", "",
         "Joint training (upper bound: the same network trained offline on every class) and "
         "naive SGD of the last layer (floor, lr chosen on a validation split): for digits and "
         "watch the depth study's runs (docs/study_depth.json), for vowels run here the same "
         "way. The float stages and last layers of watch (both tables) are the depth study's "
         "runs too: the last layer re-run here gave the same accuracies to the last bit "
         "(same network, stream orders and learner), so its float stages were not re-run. "
         "`order 0 only`: a lean variant run on the first stream order alone, to keep the run "
         "affordable on a shared 2-core machine (its float stage's order 0 is quoted next to "
         "it in the Reading).", "",
         "Data sets: digits and watch as in the depth study; **vowels**: JapaneseVowels (UCI, "
         "in the UEA archive's equal-length version that ships inside the `aeon` wheel; source "
         "`vowels`): 9 speakers, 25 frames of 12 LPC cepstrum coefficients per utterance. A "
         "network of three 1 x 3 convolutions (the second with stride 2, then a 1 x 2 "
         "max-pool), GAP, Dense 24 and Dense is trained here on speakers 1-5 of the archive's "
         "training file; the device streams speakers 6-9 of it (120 utterances); the test is "
         "the archive's test file (370 utterances, all nine speakers). models/ holds no "
         "network trained on it.", ""]
    for r in results:
        o += [f"### {TITLES[(r['name'], r.get('scenario'))]}", "",
              f"Stream: {r['n_stream']} samples; test: {r['n_test']} samples."
              + (" New users as in the depth study's new-users table: the network knows all "
                 "seven exercises; the first halves of the new users' recordings stream, the "
                 "second halves test." if r.get("scenario") else ""), "",
              "| cut | variant | params | trained | learner RAM at 200 slots (B) | L476RG slots "
              "| MACs / step | train step (instr) | final acc (%) |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for c in r["rows"]:
            o.append(f"| {c['cut']} | {c['variant']} | {c['params']:,} | {c['trained']:,} | "
                     f"{c['ram']:,} | {c['l476_slots']} | {c['macs']['train']:,} | {_cost(c)} | "
                     f"{_acc(c['acc'], seeds)} |")
        b = r["bounds"]
        o += [f"| naive SGD, last layer (floor, lr {b['naive']['lr']}) | | | | | | | | "
              f"{D._pm(b['naive']['acc'])} |",
              f"| {b.get('joint_label', 'joint training, all classes offline (upper bound)')} "
              f"| | | | | | | | {D._pm(b['joint'])} |", ""]
    best = [r for r in results if r.get("l476")]
    if best:
        o += ["### The best configuration that fits the NUCLEO-L476RG", "",
              f"Each configuration above that fits the L476RG, run with the replay slots that "
              f"fit (at most {CAP_LIMIT}), and the recipe knobs the twin offers: replay policy "
              f"(reservoir or class-balanced, tol_replay's policies) and idle-time rehearsal "
              f"({_steps(RECIPE_EXTRA)} extra SGD steps on 16 replayed samples after each "
              f"streamed sample: the device's own idle rehearsal, `--rehearse` / `tinyol set "
              f"--rehearse`, run by the twin's `idle()`, bit for bit the firmware's, head and "
              f"stage, which gave every searched row); lr {D.LR} "
              f"throughout (the learners keep a constant lr: a decaying one did not pay in "
              f"docs/adaptive.md's recipe study). The recipe is chosen on a "
              f"validation split of the training data (30 % held out of prefill and stream, one "
              f"order; the validation accuracies of every recipe tried are the second table), "
              f"then run on the test split over {seeds} orders; `(not searched)`: the recipe "
              f"was set, not chosen, and the row run on fewer orders, for lack of CPU on the "
              f"shared machine. `plain` is the same configuration "
              f"with the table's recipe (reservoir, no rehearsal, lr {D.LR}). Idle work: "
              f"instructions per streamed sample spent on rehearsal, ≈ extra steps x 16/17 of "
              f"the train step (the replayed share of it).", "",
              "| data set | cut | variant | slots | learner RAM (B) | recipe | train step "
              "(instr) | idle work / sample (instr) | plain (%) | with recipe (%) | joint (%) "
              "| gap (points) |",
              "|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
        for r in best:
            rows = {_key(c): c for c in r["rows"]}
            for c in r["l476"]:
                base = rows[_key(c)]
                idle = c["extra"] * base["instr"] * 16 / 17 if base.get("instr") else None
                gap = 100 * (np.mean(r["bounds"]["joint"]) - np.mean(c["acc"]))
                recipe = (f"{POLICY_NAMES[c['policy']]}, {c['extra']} idle steps, lr {c['lr']}"
                          + ("" if c.get("val") else " (not searched)"))
                idle_s = "-" if idle is None else "0" if not idle else "≈ " + _mega(idle)
                o.append(f"| {r['name']} | {c['cut']} | {c['variant']} | {c['slots']} | "
                         f"{c['ram']:,} | {recipe} | {_cost(base)} | {idle_s} | "
                         f"{_acc(c['plain'], seeds)} | {_acc(c['acc'], seeds)} | "
                         f"{D._pm(r['bounds']['joint'])} | {gap:.1f} |")
        o.append("")
        searched = [(r, c) for r in best for c in r["l476"]
                    if isinstance(c.get("val"), dict)
                    and all(isinstance(v, float) for v in c["val"].values())]
        if searched:
            keys = list(searched[0][1]["val"])
            heads = [k.rsplit(" lr ", 1)[0] if len(RECIPE_LRS) == 1 else k for k in keys]
            o += ["Validation accuracy (%) of every recipe tried (`balanced x4`: class-balanced "
                  "replay, 4 idle steps; one stream order, the 30 % of the training data held "
                  "out; the chosen one in bold, the first of equals), and the wall-clock "
                  "time of the search and of the test runs (chosen recipe and `plain`, "
                  f"{seeds} orders each) on the shared 2-core machine, under `nice`:", "",
                  "| data set | cut | variant | " + " | ".join(heads)
                  + " | search (s) | test runs (s) |",
                  "|---|---|---|" + "---:|" * (len(keys) + 2)]
            for r, c in searched:
                chosen = (f"{POLICY_NAMES[c['policy']]} x{c['extra']} lr {c['lr']}")
                vals = [(f"**{100 * c['val'][k]:.1f}**" if k == chosen
                         else f"{100 * c['val'][k]:.1f}") for k in keys]
                sec = c.get("seconds", {})
                o.append(f"| {r['name']} | {c['cut']} | {c['variant']} | " + " | ".join(vals)
                         + f" | {sec.get('search', '-')} | {sec.get('test', '-')} |")
            o.append("")
    o += ["### Reading", ""] + READING + ["", MARK_END]
    return "\n".join(o) + "\n"


# Observations on the committed run (docs/study_lean.json), written by hand as study_depth's.
READING = [
    "- Sparse updates do not pay on any of the three sets. Biases alone (`lean: biases`) end "
    "where the last layer alone ends, at every cut: digits 86.0 / 86.4 % against 86.1 %; "
    "watch 68.4 / 68.7 / 68.3 % in order 0 against the last layer's 68.1 % in that order; "
    "vowels 75.6 % at every cut against 75.5 %; watch's new users 78.9 / 78.5 / 79.1 % "
    "against 78.8 %. Shifting the thresholds of frozen layers does not make new classes "
    "separable nor fit a new user's signal: the weights must move.",
    "- One layer's weights (`embed`) plus biases recover the float stage only where `embed` "
    "holds most of the cut's parameters: digits `conv2` 92.5 ± 0.7 % against 92.8 ± 0.9 %. "
    "Where the convolutions matter they fall back towards `embed` alone: watch `conv2` "
    "69.3 % against the float stage's 71.2 % (order 0), new users `conv3` 81.3 % against "
    "84.9 % (order 0), vowels `conv2` 75.9 % against 76.8 %.",
    "- Nor do they save much. RAM: at the conv cuts the replay buffer dominates (200 slots of "
    "a 400-value latent are 80 KB of watch's 104 KB), so freezing the convolutions saves "
    "9-12 KB (watch `conv2` 92-95 KB against 104 KB; digits `conv2` 115 KB against 190 KB "
    "is the exception: 8.5 k `embed` weights). Work: the backward pass still runs through "
    "every layer above the first one that trains, and the lean step does not run faster "
    "per MAC: digits `embed` biases only 327 k instructions against 468 k for half the MACs "
    "(2.1 instructions per MAC against 1.5), watch `conv3` biases only 1.18 M against the "
    "float stage's 1.14 M, vowels `conv3` 375 k against 527 k.",
    "- Deeper learning pays on digits (+6.3 points at `embed`, +6.7 at `conv2`), a little on "
    "watch's new classes (+2.0 at `embed`, +4.4 at `conv2`, for 12x the RAM and 70x the "
    "instructions) and most on watch's new users (+4.4 at `conv3`, depth table); it does "
    "not pay on vowels: 75.5 ± 1.7 % for the last layer, 76.8 ± 0.9 % for the deepest float "
    "stage (within the spread, for 11x the RAM and 40x the train-step instructions), while "
    "joint training reaches 95.1 ± 1.0 %. There 30 utterances per new speaker, seen once, "
    "are what is missing, not trainable depth; naive SGD falls to 56.0 %.",
    "- On the NUCLEO-L476RG the 2-point goal is not met; idle rehearsal on the last layer with "
    "a large buffer closes about half the gap on digits, 30 % of it on watch. digits: the "
    "last layer fits 1000 int8 slots (39.8 KB); the search over 0-8 idle steps x both policies chose reservoir + 4 steps on "
    "the validation split (93.1 %, against 91.8 % with 8, 89.1 % with 2, 87.0 % with none; "
    "class-balanced gives the same numbers there because the 880 training samples left after "
    "holding out 30 % never fill 1000 slots, so no policy decides, and the first of equals "
    "was taken), and on the test split it reaches 91.7 ± 0.5 % against 86.4 ± 0.7 % without "
    "rehearsal, 5.6 points below joint training's 97.3 %, for about 188 k idle instructions "
    "per sample (4 x 16/17 of a 50 k step, ≈ 2.4 ms at 80 MHz). The firmware runs exactly "
    "this: `tinyol export ... --rehearse 4` (or `tinyol set --rehearse 4`) on the one-layer "
    "head, no RAM added; these rows come from the twin's `idle()`, bit-identical with "
    "`tol_learner_rehearse`. "
    "The float stage at `embed` fits only 40 slots (83 KB): the same search chose "
    "class-balanced + 8 steps (validation 93.1 %, but its eight validation accuracies scatter "
    "over 85-93 % in no order of steps: one order on 40 slots is noisy), 90.3 ± 1.4 % on the "
    "test against 89.5 ± 0.6 % without, within the spread, for ≈ 3.5 M idle instructions per "
    "sample (≈ 44 ms at 80 MHz): 1.4 points below the last layer with rehearsal at 19x its "
    "idle work. What stands in the way of the last 5 points is memory: the cuts "
    "that reach 92-93 % without rehearsal need 124-190 KB at 200 slots, and `conv2` (92.8 %) "
    "does not fit at all as a float stage and with 11 slots as a lean one. watch, new "
    "classes: the last layer with 1000 slots (29.7 KB) chose class-balanced replay + 8 idle "
    "steps (validation 82.5 %; the validation windows are of the training subjects and "
    "overlap their neighbours by half, hence far above the test's new subjects) and reaches "
    "70.1 ± 1.0 % against 66.7 ± 1.3 % without, 8.3 points below joint training (78.5 ± "
    "3.5 %, itself uncertain: the test subjects are new users the stream never shows), for "
    "≈ 229 k idle instructions per sample. The float stage at `conv2` fits with 142 slots "
    "(81 KB) and reaches 72.4 / 71.0 % in orders 0 and 1 without rehearsal (71.2 / 69.5 % "
    "with 200 slots), 1.6 points closer to joint training than the last layer with "
    "rehearsal; its recipe was not searched: its step is 70x the last layer's (2.1 M "
    "instructions) and its stream twice `embed`'s on digits, so from the `embed` row's "
    "times the search and test runs would take an estimated 40-50 minutes of the shared "
    "machine, more than the session had.",
]


def write_section(text: str, path: Path) -> None:
    """Replace this section, or put it right before the depth section (which study_depth
    renders to the end of the file)."""
    doc = path.read_text(encoding="utf-8") if path.exists() else ""
    if MARK_BEGIN in doc:
        head, rest = doc[:doc.index(MARK_BEGIN)], doc[doc.index(MARK_END) + len(MARK_END):]
        doc = head + text.rstrip() + rest
    elif D.MARK_BEGIN in doc:
        i = doc.index(D.MARK_BEGIN)
        doc = doc[:i] + text.rstrip() + "\n\n" + doc[i:]
    else:
        doc = doc.rstrip() + "\n\n" + text
    path.write_text(doc, encoding="utf-8")


def _depth_bounds(depth: list[dict], name: str, scenario=None) -> dict:
    r = next(x for x in depth if x["name"] == name and x.get("scenario") == scenario)
    b = {"joint": r["joint"], "naive": r["naive"], "source": "docs/study_depth.json"}
    if scenario == "users":
        b["joint_label"] = "offline training on subjects 1-7 + the calibration halves (upper bound)"
        b["naive"] = dict(r["naive"])
    return b


def _depth_instr(depth: list[dict], res: dict) -> None:
    """The train-step instructions `tinyol bench` measured for the depth study's cuts (the
    float stage and the last layer; the new-users networks have the class-incremental
    network's shapes, so the users rows take the class-incremental rows' measurements)."""
    r = next((x for x in depth if x["name"] == res["name"] and not x.get("scenario")), None)
    bench = {c["cut"]: c.get("bench", {}) for c in (r["cuts"] if r else [])}
    for c in res["rows"]:
        b = bench.get(c["cut"], {})
        if c["train"] in (None, "all") and "train" in b:
            c["instr"], c["instr_predict"] = b["train"], b["predict"]
            c["instr_source"] = "docs/study_depth.json"
        elif c["train"] in (None, "all") and "error" in b:
            c["bench_error"] = b["error"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=D.SEEDS)
    ap.add_argument("--datasets", default="digits,watch,users,vowels",
                    help="users: the watch set's new-users scenario")
    ap.add_argument("--l476", default="digits,watch",
                    help="data sets whose L476RG-fitting configurations get the recipe search")
    ap.add_argument("--lean-seeds", type=int, default=None,
                    help="stream orders for the lean variants (default: --seeds)")
    ap.add_argument("--work", default=None,
                    help="keep exports and trained networks here (default: a temporary folder)")
    ap.add_argument("--only-cached", action="store_true",
                    help="run no table row that is not in the json already")
    ap.add_argument("--bench", action="store_true",
                    help="measure the train step in QEMU for rows the depth study did not")
    ap.add_argument("--l476-cuts", default=None, metavar="CUT:VARIANT,...",
                    help="the configurations to search instead (e.g. 'embed:float stage')")
    ap.add_argument("--l476-redo", action="store_true",
                    help="search the --l476-cuts configurations again (drop their cached rows)")
    ap.add_argument("--l476-top", type=int, default=L476_TOP,
                    help="how many of the most accurate fitting stages get the recipe search")
    ap.add_argument("--out", default=str(project_root() / "docs/study.md"))
    ap.add_argument("--json", default=None,
                    help="raw results: read first (rows in it are not re-run), written after "
                         "each data set")
    ap.add_argument("--from-json", default=None, help="only re-render the section from results")
    a = ap.parse_args(argv)
    if a.from_json:
        results = json.loads(Path(a.from_json).read_text())
        share_instr(results)
        write_section(markdown(results, a.seeds), Path(a.out))
        return 0
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    def echo(s):
        print(s, file=sys.stderr, flush=True)

    depth = json.loads((project_root() / "docs/study_depth.json").read_text())
    results = (json.loads(Path(a.json).read_text())
               if a.json and Path(a.json).exists() else [])
    results = [r for r in results if "rows" in r and (r["name"], r.get("scenario")) in TITLES]

    def save():
        order = list(TITLES)
        results.sort(key=lambda r: order.index((r["name"], r.get("scenario"))))
        if a.json:
            Path(a.json).write_text(json.dumps(results, indent=1, default=float))

    def entry(name, scenario=None):
        return next((r for r in results if r["name"] == name and r.get("scenario") == scenario),
                    None)

    with tempfile.TemporaryDirectory(prefix="tinyol-lean-") as tmp:
        work = Path(a.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in a.datasets.split(","):
            if name == "users":
                uds, split = D.users_dataset(work, echo)
                old = entry("watch", "users")
                r = study(uds, a.seeds, work, echo, VARIANTS["watch"], old, users=(uds, split),
                          depth=next(x for x in depth if x.get("scenario") == "users"),
                          lean_seeds=a.lean_seeds, only_cached=a.only_cached)
                r["bounds"] = _depth_bounds(depth, "watch", "users")
                _depth_instr(depth, r)
                if old is None:
                    results.append(r)
                save()
                continue
            ds = dataset(name, work, echo)
            old = entry(name)
            r = study(ds, a.seeds, work, echo, VARIANTS[name], old,
                      depth=next((x for x in depth if x["name"] == name
                                  and not x.get("scenario")), None),
                      lean_seeds=a.lean_seeds, only_cached=a.only_cached)
            if old is None:
                results.append(r)
            if name == "vowels":
                if "bounds" not in r:
                    m = export_variant(ds, "head", None, work / "vowels_bounds")
                    r["bounds"] = bounds(ds, m, D._latents(m, ds.Xtr), D._latents(m, ds.Xte),
                                         a.seeds, VOWELS_EPOCHS, echo)
            else:
                r["bounds"] = _depth_bounds(depth, name)
            _depth_instr(depth, r)
            save()
            if a.bench:
                bench_rows(ds, r, work, echo)
                save()
            if name in a.l476.split(","):
                cands = ([tuple(c.split(":")) for c in a.l476_cuts.split(",")] if a.l476_cuts
                         else l476_candidates(r, a.l476_top))
                best_l476(ds, r, a.seeds, work, echo, cands, redo=a.l476_redo)
                save()
    share_instr(results)
    save()
    write_section(markdown(results, a.seeds), Path(a.out))
    echo(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Lean trained weights on the NUCLEO-L476RG (issue 30, items 2 and 3): the int16 stage
(`--stage-weights int16`, 2 B per trained parameter instead of 8) frees RAM for replay at
the cuts that pay; the stage's own learning rate (`--stage-lr-scale`) chosen on a validation
split. Digits and watch, new classes.

    PYTHONPATH=host:studies python -m tinyol_studies.lean16 --json docs/study_lean16.json [--work DIR]
        [--only KEY]     # rows already in the json are kept: delete one to re-run it

Each case is exported for the NUCLEO-L476RG as a user would (`tinyol export --board
nucleo_l476rg --split CUT --stage-weights int16 --replay-bits 4 ...`, no --replay-capacity:
the largest buffer that fits by tinyol.memory's board plan, the one the linker is held to,
at most CAP_LIMIT); the twin (bit-identical with tol_stage.c, tests/host/test_stage_int16.py)
learns the new classes with the depth study's protocol (tinyol_studies.depth: replay
pre-filled with the pre-training classes, the new ones streamed once, n_new 1, n_old 16,
lr 0.03). The recipe (plain, or class-balanced + 2 idle steps; x stage learning-rate scale 0.3, 1, 3, 10) is
chosen on a validation split (30 % of the training data held out of prefill and stream,
one order: tinyol_studies.lean.best_l476's), then re-exported with the chosen
--stage-lr-scale / --replay-policy / --rehearse and run on the test split over 3 orders.

The codec searches (SEARCHES, keys "... | int16 x codec"): the int16 stage with the replay
storage searched too (`--replay-bits 4` or `--replay-codec pq:M`, each exported with the
largest buffer that fits, no CAP_LIMIT) x recipe x stage learning-rate scale, chosen on the
same validation split, the chosen one re-exported and run on the test split over 3 orders.
`--val-orders N` averages each validation row over N stream orders (a check of the one-order
choice: the top rows are a few validation samples apart).

The wide grid (key "digits | embed | int16 wide grid", run with `--val-orders 3`): the axes the
codec search did not try, idle rehearsal (0, 2, 4 steps) with either policy and the stage lr
scale beyond 10 (3, 10, 20, 30), at the 4-bit and pq:128 storages (639 slots each), chosen by
the mean over 3 validation orders; the chosen one on the test split as above.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from tinyol.learn import learner as L
from tinyol.model.export import export_model
from tinyol.targets import twin as S
from . import depth as D
from . import lean as LN

BOARD = "nucleo_l476rg"
ORDERS = 3
CAP_LIMIT = 1000
# (data set, cut, export keywords)
CASES = [
    ("digits", "embed", dict(split="embed", stage_weights="int16", replay_bits=4)),
    ("watch", "conv3", dict(split="conv3", stage_weights="int16", replay_bits=4)),
    ("watch", "conv2", dict(split="conv2", stage_weights="int16", replay_bits=4)),
    ("digits", "conv2", dict(split="conv2", stage_weights="int16", replay_bits=4)),
]
# the recipes searched (a small grid: the shared 2-core machine): the plain one and the best of
# the recipe study (class-balanced replay + 2 idle steps), each at three stage learning rates
RECIPES = ((L.POLICY_RESERVOIR, 0), (L.POLICY_BALANCED, 2))
LR_SCALES = (0.3, 1.0, 3.0, 10.0)
# the codec searches: (data set, cut, export keywords, storages, recipes, lr scales); each
# storage x recipe x scale on the validation split. "4" is --replay-bits 4, "pq:M"
# --replay-codec pq:M. watch's grid is trimmed (the shared 2-core machine): the plain recipe
# left out (11-15 points below balanced x2 on watch's validation split in the search above),
# PQ at 2x and 4x the 4-bit slots (pq:100, pq:50 of conv3's 400-value latent; pq:200 is the
# 4-bit slot size, which digits' search found no better than 4 bits)
# (data set, cut, export keywords, storages, recipes, lr scales, key)
SEARCHES = [
    ("digits", "embed", dict(split="embed", stage_weights="int16"),
     ("4", "pq:32", "pq:64", "pq:128"), RECIPES, (3.0, 10.0), "int16 x codec"),
    ("watch", "conv3", dict(split="conv3", stage_weights="int16"),
     ("4", "pq:100", "pq:50"), ((L.POLICY_BALANCED, 2),), (3.0, 10.0), "int16 x codec"),
    # the axes the codec search left out (docs/study.md, "Against the goal"): idle rehearsal
    # with the plain reservoir, class-balanced replay without and with more idle steps, the
    # stage lr scale beyond 10; at the two storages of digits' 639 slots (4-bit, pq:128)
    ("digits", "embed", dict(split="embed", stage_weights="int16"), ("4", "pq:128"),
     tuple((pol, reh) for pol in (L.POLICY_RESERVOIR, L.POLICY_BALANCED) for reh in (0, 2, 4)),
     (3.0, 10.0, 20.0, 30.0), "int16 wide grid"),
]


def storage_kw(storage: str) -> dict:
    """Export keywords of a storage of SEARCHES: 4-bit grids or a PQ codebook."""
    return dict(replay_codec=storage) if storage.startswith("pq:") else dict(replay_bits=int(storage))


def export(ds, out: Path, kw: dict, capacity: int | None = None, **extra) -> S.Model:
    export_model(str(ds.keras_path), str(out), calib=str(ds.calib), board=BOARD,
                 max_classes=ds.n_classes, lr=D.LR, replay_capacity=capacity,
                 name=f"{ds.name}_lean16", echo=lambda s: None, **kw, **extra)
    return S.load_model(out)


def run(ds, model: S.Model, Qtr, Qte, *, seed: int, policy: int, rehearse: int,
        lr_scale: float | None = None, eval_idx=None) -> float:
    """tinyol_studies.lean.run at the export's capacity and storage; lr_scale: the stage's
    learning-rate scale for the search (None: the export's own)."""
    rng = np.random.default_rng(seed)
    old, new = np.flatnonzero(np.isin(ds.ytr, ds.old)), np.flatnonzero(np.isin(ds.ytr, ds.new))
    if eval_idx is not None:
        old, new = np.setdiff1d(old, eval_idx), np.setdiff1d(new, eval_idx)
    pre_idx, stream_idx = rng.permutation(old), rng.permutation(new)
    m = model.manifest["learner"]
    settings = L.Settings(lr=D.LR, n_new=1, n_old=16, mode=L.MODE_REPLAY, rehearse=rehearse)
    replay = dict(capacity=int(m["replay_capacity"]), bits=int(m["replay_bits"]), policy=policy,
                  seed=seed + 1, max_new=1)
    lrn = S.make_learner(model, settings, replay)
    if lr_scale is not None:
        lrn.cfg.stage_lr_scale = float(np.float32(lr_scale))
    ev = (Qtr[eval_idx], ds.ytr[eval_idx]) if eval_idx is not None else (Qte, ds.yte)
    res = S.run_classifier(lrn, Qtr[stream_idx], ds.ytr[stream_idx],
                           prefill=(Qtr[pre_idx], ds.ytr[pre_idx]), eval_set=ev)
    return res["final_accuracy"]


def study_case(ds, cut: str, kw: dict, work: Path, echo) -> dict:
    tag = f"{ds.name}_{cut}"
    model = export(ds, work / f"l16_{tag}", kw)
    cap = int(model.manifest["learner"]["replay_capacity"])
    if cap > CAP_LIMIT:
        model = export(ds, work / f"l16_{tag}", kw, CAP_LIMIT)
        cap = CAP_LIMIT
    Qtr, Qte = D._latents(model, ds.Xtr), D._latents(model, ds.Xte)
    val = np.random.default_rng(99).choice(len(ds.ytr), len(ds.ytr) * 3 // 10, replace=False)
    t0 = time.perf_counter()
    grid = {}
    for pol, reh in RECIPES:
        for sc in LR_SCALES:
            grid[(pol, reh, sc)] = run(ds, model, Qtr, Qte, seed=50, policy=pol, rehearse=reh,
                                       lr_scale=sc, eval_idx=val)
            echo(f"  {tag} val {LN.POLICY_NAMES[pol]} x{reh} scale {sc}: {grid[(pol, reh, sc)]:.3f}")
    pol, reh, sc = max(grid, key=grid.get)
    t1 = time.perf_counter()
    # the chosen recipe as the user exports it: the device starts with exactly these settings
    chosen = export(ds, work / f"l16_{tag}_chosen", kw, cap, stage_lr_scale=sc,
                    replay_policy=LN.POLICY_NAMES[pol], rehearse=reh)
    acc = [run(ds, chosen, Qtr, Qte, seed=s, policy=pol, rehearse=reh) for s in range(ORDERS)]
    t2 = time.perf_counter()
    man = chosen.manifest
    r = {"data": ds.name, "cut": cut, "export": {**kw, "stage_lr_scale": sc,
                                                  "replay_policy": LN.POLICY_NAMES[pol], "rehearse": reh},
         "slots": cap, "learner_bytes": int(man["memory"]["learner_bytes"]),
         "stage_memory": man["stage"]["memory"], "trained": int(man["stage"]["trained"]),
         "val": {f"{LN.POLICY_NAMES[p]} x{e} scale {s}": v for (p, e, s), v in grid.items()},
         "acc": acc, "seconds": {"search": round(t1 - t0), "test": round(t2 - t1)}}
    echo(f"{tag}: {cap} slots, recipe {LN.POLICY_NAMES[pol]} x{reh} scale {sc}: "
         f"{100 * np.mean(acc):.1f} ± {100 * np.std(acc):.1f}")
    return r


def search_case(ds, cut: str, kw: dict, storages, recipes, scales, work: Path, echo,
                val_orders: int = 1) -> dict:
    """The int16 stage with storage x recipe x lr scale chosen on the validation split (each
    storage exported with the largest buffer that fits the board; the mean over
    ``val_orders`` stream orders, seeds 50, 51, ...), then the chosen export on the test split
    over ORDERS stream orders."""
    tag = f"{ds.name}_{cut}"
    val = np.random.default_rng(99).choice(len(ds.ytr), len(ds.ytr) * 3 // 10, replace=False)
    t0 = time.perf_counter()
    grid, per_order, slots, models = {}, {}, {}, {}
    for st in storages:
        skw = {**kw, **storage_kw(st)}
        model = export(ds, work / f"l16s_{tag}_{st.replace(':', '')}", skw)
        slots[st] = int(model.manifest["learner"]["replay_capacity"])
        Qtr = D._latents(model, ds.Xtr)
        models[st] = (skw, model)
        for pol, reh in recipes:
            for sc in scales:
                k = (st, pol, reh, sc)
                per_order[k] = [run(ds, model, Qtr, None, seed=50 + o, policy=pol, rehearse=reh,
                                    lr_scale=sc, eval_idx=val) for o in range(val_orders)]
                grid[k] = float(np.mean(per_order[k]))
                echo(f"  {tag} {st} ({slots[st]} slots) val {LN.POLICY_NAMES[pol]} x{reh} "
                     f"scale {sc}: {grid[k]:.3f}")
    st, pol, reh, sc = max(grid, key=grid.get)
    t1 = time.perf_counter()
    skw = models[st][0]
    chosen = export(ds, work / f"l16s_{tag}_chosen", skw, stage_lr_scale=sc,
                    replay_policy=LN.POLICY_NAMES[pol], rehearse=reh)
    assert int(chosen.manifest["learner"]["replay_capacity"]) == slots[st]
    Qtr, Qte = D._latents(chosen, ds.Xtr), D._latents(chosen, ds.Xte)
    acc = [run(ds, chosen, Qtr, Qte, seed=s, policy=pol, rehearse=reh) for s in range(ORDERS)]
    t2 = time.perf_counter()
    man = chosen.manifest
    r = {"data": ds.name, "cut": cut, "export": {**skw, "stage_lr_scale": sc,
                                                  "replay_policy": LN.POLICY_NAMES[pol], "rehearse": reh},
         "storage": st, "slots": slots[st], "slots_per_storage": slots,
         "learner_bytes": int(man["memory"]["learner_bytes"]),
         "memory": {k: man["memory"][k] for k in ("learner_parts", "regions", "ram_bytes", "flash_bytes")},
         "stage_memory": man["stage"]["memory"], "trained": int(man["stage"]["trained"]),
         "val": {f"{s_} | {LN.POLICY_NAMES[p]} x{e} scale {c}": v for (s_, p, e, c), v in grid.items()},
         "val_orders": val_orders,
         **({"val_per_order": {f"{s_} | {LN.POLICY_NAMES[p]} x{e} scale {c}": v
                               for (s_, p, e, c), v in per_order.items()}} if val_orders > 1 else {}),
         "acc": acc, "seconds": {"search": round(t1 - t0), "test": round(t2 - t1)}}
    echo(f"{tag}: chosen {st} ({slots[st]} slots), {LN.POLICY_NAMES[pol]} x{reh} scale {sc}: "
         f"{100 * np.mean(acc):.1f} ± {100 * np.std(acc):.1f} {[round(100 * a, 1) for a in acc]}")
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--only", default=None)
    ap.add_argument("--val-orders", type=int, default=1,
                    help="the codec searches: stream orders averaged on the validation split "
                         "(rows keyed '... int16 x codec, validation over N orders' when N > 1)")
    a = ap.parse_args(argv)
    res = json.loads(a.json.read_text()) if a.json.exists() else {}
    work = a.work or Path(tempfile.mkdtemp(prefix="tinyol-lean16-"))
    work.mkdir(parents=True, exist_ok=True)

    def echo(s):
        print(s, flush=True)

    sets = {}
    try:
        for name, cut, kw in CASES:
            key = f"{name} | {cut} | int16"
            if key in res or (a.only and a.only not in key):
                continue
            if name not in sets:
                sets[name] = LN.dataset(name, work, echo)
            res[key] = study_case(sets[name], cut, kw, work, echo)
            a.json.write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
        for name, cut, kw, storages, recipes, scales, label in SEARCHES:
            key = f"{name} | {cut} | {label}" + (
                f", validation over {a.val_orders} orders" if a.val_orders > 1 else "")
            if key in res or (a.only and a.only not in key):
                continue
            if name not in sets:
                sets[name] = LN.dataset(name, work, echo)
            res[key] = search_case(sets[name], cut, kw, storages, recipes, scales, work, echo,
                                   a.val_orders)
            a.json.write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
    finally:
        if a.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

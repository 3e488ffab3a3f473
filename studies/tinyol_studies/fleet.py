"""The fleet study: non-IID boards, naive local vs local replay vs fleet averaging.

    PYTHONPATH=host:studies python -m tinyol_studies.fleet [--quick]     # prints the tables of docs/fleet.md
    PYTHONPATH=host:studies python -m tinyol_studies.fleet --stage        # adaptive stage vs head fleets

models/digits (backbone trained on digits 0-4). Digits 5-9 of the training split are
dealt out to N boards, each seeing only C of the five new classes (``classes:C``,
tinyol.fleet.split_non_iid); each board streams its share once. Afterwards every
board's head, and the fleet's aggregate, is scored on the whole test split (all ten
classes: old ones must not be forgotten). The boards are numpy twins of the firmware's
learner (tinyol.learn.learner; tests/device/test_fleet.py checks native boards give the same
aggregates), driven by tinyol.fleet's host loop with Flower's strategies; the wire bytes
come from a small fleet of native targets; the large fleet runs in Flower's
simulation engine (Ray).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from tinyol.data.datasets import load_source
from tinyol.targets.twin import load_model
from tinyol.fleet.members import TwinBoard, make_twin
from tinyol.fleet.data import Shard, latents_fn, split_non_iid
from tinyol.fleet.loop import Fleet, FleetConfig, Member
from tinyol.fleet.params import Head, initial_params
from tinyol.fleet.simulation import params_accuracy, run_flower_simulation

OLD, NEW = list(range(5)), list(range(5, 10))
METHODS = [  # name, learning mode, strategy, k (None: local only)
    ("naive local (SGD)", "sgd", "none", None),
    ("local replay (buffer pre-filled with 0-4)", "replay", "none", None),
    ("fleet SGD, FedAvg every 10", "sgd", "fedavg", 10),
    ("fleet replay, FedAvg every 40", "replay", "fedavg", 40),
    ("fleet replay, FedAvg every 10", "replay", "fedavg", 10),
    ("fleet replay, FedAvg every 2", "replay", "fedavg", 2),
    ("fleet replay, FedAvgM every 10", "replay", "fedavgm", 10),
    ("fleet replay, FedAdam every 10", "replay", "fedadam", 10),
]


class StudyTwin(TwinBoard):
    """A twin that remembers the last head (or stage) it gave the host (its own, before the push)."""

    def pull(self):
        head, n = super().pull()
        self.last_pulled = head
        return head, n


PREFILL_N = 100  # latents of the pre-training classes 0-4 in each board's buffer (of 200)


def data(model_dir: str):
    f = latents_fn(model_dir)
    X, y, _ = load_source("digits:5-9@train")
    Xo, yo, _ = load_source("digits:0-4@train")
    Xe, ye, _ = load_source("digits@test")
    return f(X), y, Shard(None, yo, f(Xo)), Shard(None, ye, f(Xe))


def run(model, Q, y, old_pool: Shard, ev: Shard, n: int, split: str, mode: str, strategy: str,
        k: int | None, seed: int, fleet_kw: dict | None = None, **over) -> dict:
    parts = split_non_iid(y, n, split, seed)
    rng = np.random.default_rng(seed + 1)
    picks = [rng.choice(len(old_pool), PREFILL_N, replace=False) for _ in range(n)]
    shards = [Shard(None, y[p], Q[p], sorted(set(int(v) for v in y[p]))) for p in parts]
    longest = max(len(s) for s in shards)
    cfg = FleetConfig(k=k or longest, strategy=strategy, eval_every=0, use_latents=True, **(fleet_kw or {}))
    members = [Member(StudyTwin(f"board{i}", make_twin(model, "", learn_mode=mode, **over).lrn), s,
                        prefill=Shard(None, old_pool.y[p], old_pool.Q[p]) if mode == "replay" else None)
               for i, (s, p) in enumerate(zip(shards, picks))]
    fleet = Fleet(members, initial_params(model), cfg)
    log = fleet.run()
    fleet.close()
    old, new = np.isin(ev.y, OLD), np.isin(ev.y, NEW)

    def acc(h, mask=None):
        mask = np.ones(len(ev.y), bool) if mask is None else mask
        return params_accuracy(model, h, ev.Q[mask], ev.y[mask])
    # each board's own head at the end of its stream, before the last push
    own = [m.board.last_pulled for m in members]
    out = {"rounds": len(log), "samples": int(sum(len(s) for s in shards))}
    for key, mask in (("board", None), ("board_old", old), ("board_new", new)):
        v = [acc(h, mask) for h in own]
        out[key], out[key + "_min"], out[key + "_max"] = float(np.mean(v)), min(v), max(v)
    if strategy == "none":
        out["fleet"] = out["fleet_old"] = out["fleet_new"] = None
    else:
        g = fleet.global_head
        out["fleet"], out["fleet_old"], out["fleet_new"] = acc(g), acc(g, old), acc(g, new)
    out["head_bytes_per_round"] = own[0].nbytes * 2 * n if strategy != "none" else 0
    return out


def large(model_dir: str, n: int, per: int, k: int, strategies=("none", "fedavg", "fedadam"), seed: int = 0,
          engine: str = "flower") -> list[dict]:
    """N boards in Flower's simulation engine, each seeing ONE new class: `per` samples drawn
    (with replacement: digits is small) from that class; buffers pre-filled with 0-4."""
    model = load_model(model_dir)
    Q, y, old_pool, ev = data(model_dir)
    rng = np.random.default_rng(seed)
    shards, prefills = [], []
    for i in range(n):
        c = NEW[i % len(NEW)]
        idx = rng.choice(np.flatnonzero(y == c), per, replace=True)
        shards.append(Shard(None, y[idx], Q[idx], [c]))
        p = rng.choice(len(old_pool), PREFILL_N, replace=False)
        prefills.append(Shard(None, old_pool.y[p], old_pool.Q[p]))
    rows = []
    for strategy in strategies:
        cfg = FleetConfig(k=k, strategy=strategy, use_latents=True)
        t0 = time.monotonic()
        if engine == "flower":
            log = run_flower_simulation(model_dir, shards, ev, cfg, learn_mode="replay", prefills=prefills)
        else:
            members = [Member(make_twin(model, f"twin{i}", learn_mode="replay"), s, prefill=p)
                       for i, (s, p) in enumerate(zip(shards, prefills))]
            fleet = Fleet(members, Head(model.W, model.b, np.arange(len(model.b)) < model.n_init), cfg,
                            eval_shard=ev)
            log = fleet.run()
            fleet.close()
        secs = time.monotonic() - t0
        last = log[-1]
        accs = [b["accuracy"] for b in last["boards"].values() if b.get("accuracy") is not None]
        rows.append({"n": n, "engine": engine, "strategy": strategy, "rounds": len(log), "seconds": secs,
                     "board": float(np.mean(accs)), "board_min": min(accs), "board_max": max(accs),
                     "fleet": last.get("fleet_accuracy"),
                     "fleet_per_round": [r.get("fleet_accuracy") for r in log]})
        print(rows[-1], file=sys.stderr)
    return rows


STAGE_METHODS = [("local replay (no fleet)", "replay", "none", None, {}),
                 ("fleet replay, FedAvg every 10", "replay", "fedavg", 10, {}),
                 ("fleet replay, FedAdam every 10", "replay", "fedadam", 10, {}),
                 ("fleet replay, FedAdam (--server-lr 0.01) every 10", "replay", "fedadam", 10,
                  {"server_lr": 0.01})]


def stage_vs_head(models=("models/digits", "models/digits_adaptive"), n: int = 4, seeds: int = 3,
                  capacities=(None, 200), split: str = "classes:2") -> list[dict]:
    """The same non-IID fleet (digits 5-9 dealt to n boards, C classes each, buffers pre-filled
    with 0-4) learning with the one-layer head (models/digits) and with the adaptive stage
    (models/digits_adaptive, cut before `embed`): replay capacity as exported (None) or forced."""
    rows = []
    for path in models:
        model = load_model(path)
        Q, y, old_pool, ev = data(path)
        exported = int(model.manifest["learner"]["replay_capacity"])
        for cap in capacities:
            if cap == exported:
                continue  # the same as the exported capacity (None)
            over = {} if cap is None else {"replay_capacity": cap}
            for name, mode, strategy, k, skw in STAGE_METHODS:
                runs = [run(model, Q, y, old_pool, ev, n, split, mode, strategy, k, seed, skw, **over)
                        for seed in range(seeds)]
                r = {"model": path, "learner": "adaptive stage" if model.stage else "head",
                     "replay": cap or exported, "method": name,
                     "rounds": runs[0]["rounds"], "n": n}
                for key in ("board", "board_min", "board_max", "board_old", "board_new", "fleet", "fleet_old",
                            "fleet_new"):
                    vals = [x[key] for x in runs]
                    r[key] = None if vals[0] is None else float(np.mean(vals))
                    r[key + "_std"] = None if vals[0] is None else float(np.std(vals))
                rows.append(r)
                print(r, file=sys.stderr)
    return rows


def stage_table(rows: list[dict]) -> str:
    lines = ["| learner | replay slots | method | rounds | each board's own (min-max) / old / new "
             "| fleet's aggregate: all ± std / old 0-4 / new 5-9 |", "|---|--:|---|--:|---|---|"]
    for r in rows:
        fl = "—" if r["fleet"] is None else (f"{r['fleet']:.3f} ± {r['fleet_std']:.3f} / {r['fleet_old']:.3f} / "
                                              f"{r['fleet_new']:.3f}")
        lines.append(f"| {r['learner']} | {r['replay']} | {r['method']} | {r['rounds']} | {r['board']:.3f} "
                     f"({r['board_min']:.3f}-{r['board_max']:.3f}) / {r['board_old']:.3f} / {r['board_new']:.3f} "
                     f"| {fl} |")
    return "\n".join(lines)


def table(rows: list[dict]) -> str:
    lines = ["| boards | method | rounds | each board's own head: all (min-max) / old / new "
             "| fleet's aggregate: all / old 0-4 / new 5-9 |",
             "|--:|---|--:|---|---|"]
    for r in rows:
        fl = "—" if r["fleet"] is None else f"{r['fleet']:.3f} / {r['fleet_old']:.3f} / {r['fleet_new']:.3f}"
        lines.append(f"| {r['n']} | {r['method']} | {r['rounds']} | {r['board']:.3f} "
                     f"({r['board_min']:.3f}-{r['board_max']:.3f}) / {r['board_old']:.3f} / {r['board_new']:.3f} "
                     f"| {fl} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/digits")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--boards", default="4,8,16")
    ap.add_argument("--split", default="classes:2")
    ap.add_argument("--json", default=None, help="also write the raw rows here")
    ap.add_argument("--large", type=int, default=0, help="instead: N boards in Flower's simulation engine")
    ap.add_argument("--per", type=int, default=20, help="--large: samples per board")
    ap.add_argument("--every", type=int, default=10, help="--large: k")
    ap.add_argument("--engine", default="flower", choices=["flower", "host"], help="--large: where")
    ap.add_argument("--strategies", default="none,fedavg,fedadam", help="--large: which")
    ap.add_argument("--stage", action="store_true",
                    help="instead: adaptive stage (models/digits_adaptive) vs head (models/digits) fleets")
    a = ap.parse_args(argv)
    if a.stage:
        rows = stage_vs_head(n=int(a.boards.split(",")[0]), seeds=a.seeds, split=a.split)
        print(stage_table(rows))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0
    if a.large:
        rows = large(a.model, a.large, a.per, a.every, engine=a.engine, strategies=a.strategies.split(","))
        print("| boards | engine | strategy | rounds | board's own head (mean, min-max) | fleet aggregate | seconds |")
        print("|--:|---|---|--:|---|---|--:|")
        for r in rows:
            fl = "—" if r["fleet"] is None else f"{r['fleet']:.3f}"
            print(f"| {r['n']} | {r['engine']} | {r['strategy']} | {r['rounds']} | {r['board']:.3f} "
                  f"({r['board_min']:.3f}-{r['board_max']:.3f}) | {fl} | {r['seconds']:.0f} |")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0
    model = load_model(a.model)
    Q, y, old_pool, ev = data(a.model)
    rows = []
    for n in [int(v) for v in a.boards.split(",")]:
        for name, mode, strategy, k in METHODS:
            runs = [run(model, Q, y, old_pool, ev, n, a.split, mode, strategy, k, seed) for seed in range(a.seeds)]
            r = {"n": n, "method": name, "rounds": runs[0]["rounds"]}
            for key in ("board", "board_min", "board_max", "board_old", "board_new", "fleet", "fleet_old",
                        "fleet_new"):
                vals = [x[key] for x in runs]
                r[key] = None if vals[0] is None else float(np.mean(vals))
            rows.append(r)
            print(f"{n} boards, {name}: {r}", file=sys.stderr)
    print(table(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

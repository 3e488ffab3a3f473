"""The adaptive stage's recipe (issue 19, item 3), measured on the numpy twin: which of idle-time
rehearsal, class-balanced replay and a learning-rate schedule pays, at digits' cuts.

    PYTHONPATH=host:studies python -m tinyol_studies.recipe --json docs/recipe.json
        # prints one line per configuration; docs/adaptive.md ("Recipe") quotes the numbers

Same protocol as tinyol_studies.depth (digits, backbone trained on 0-4, the stream of 5-9 in
an order per seed, the buffer pre-filled with 0-4, 8-bit replay, n_old = 16, lr = 0.03, test
on all ten classes, 3 stream orders). Each configuration is a set of plain keyword arguments
of the twin (tinyol.learn.stage: Settings.rehearse, the replay policy, StageConfig.lr_decay);
rehearsal runs the whole idle budget after every sample (a device that idles long enough
between samples, which the SAMPLE replies' rehearsal counts let a host check).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tinyol.learn import learner as L
from tinyol.model.export import export_model
from tinyol.targets import twin as S
from . import depth as D


def export(ds, cut: str, out: Path, capacity: int, train: str | None) -> S.Model:
    export_model(str(ds.keras_path), str(out), split=None if cut == "head" else cut,
                 calib=str(ds.calib), max_classes=ds.n_classes, replay_capacity=capacity,
                 replay_bits=D.BITS, name=f"{ds.name}_{cut}", stage_train=train)
    return S.load_model(out)


def run(ds, model: S.Model, Qtr, Qte, *, seed: int, capacity: int, rehearse: int = 0,
        policy: int = L.POLICY_RESERVOIR, lr: float = D.LR, lr_decay: float = 0.0) -> float:
    """study_depth.run with the recipe's knobs."""
    rng = np.random.default_rng(seed)
    old, new = np.flatnonzero(np.isin(ds.ytr, ds.old)), np.flatnonzero(np.isin(ds.ytr, ds.new))
    pre_idx, stream_idx = rng.permutation(old), rng.permutation(new)
    settings = L.Settings(lr=lr, n_new=1, n_old=16, mode=L.MODES["replay"], rehearse=rehearse)
    replay = dict(capacity=capacity, bits=D.BITS, policy=policy, seed=seed + 1, max_new=1)
    lrn = S.make_learner(model, settings, replay)
    if lr_decay:
        lrn.cfg.lr_decay = lr_decay  # twin only (StageConfig.lr_decay)
    res = S.run_classifier(lrn, Qtr[stream_idx], ds.ytr[stream_idx],
                           prefill=(Qtr[pre_idx], ds.ytr[pre_idx]), eval_set=(Qte, ds.yte))
    return res["final_accuracy"]


@dataclasses.dataclass
class Config:
    name: str
    rehearse: int = 0
    policy: int = L.POLICY_RESERVOIR
    lr: float = D.LR
    lr_decay: float = 0.0


GRID = [Config("reservoir"), Config("balanced", policy=L.POLICY_BALANCED),
        Config("reservoir + rehearse 1", rehearse=1), Config("reservoir + rehearse 2", rehearse=2),
        Config("reservoir + rehearse 4", rehearse=4),
        Config("balanced + rehearse 2", rehearse=2, policy=L.POLICY_BALANCED),
        Config("reservoir, lr 0.06 decay 1/200", lr=0.06, lr_decay=1 / 200),
        Config("reservoir, lr 0.03 decay 1/200", lr_decay=1 / 200)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=D.SEEDS)
    ap.add_argument("--cuts", default="embed:all:200,embed:all:40",
                    help="CUT:STAGE_TRAIN:CAPACITY,... (40 slots: what fits the NUCLEO-L476RG)")
    ap.add_argument("--only", default=None, help="configuration names separated by ;")
    ap.add_argument("--json", default=None, help="append the raw results here")
    a = ap.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    grid = [c for c in GRID if a.only is None or c.name in a.only.split(";")]
    results = json.loads(Path(a.json).read_text()) if a.json and Path(a.json).exists() else []
    with tempfile.TemporaryDirectory(prefix="tinyol-recipe-") as tmp:
        ds = D.digits_dataset(Path(tmp))
        for spec in a.cuts.split(","):
            cut, train, cap = spec.split(":")
            model = export(ds, cut, Path(tmp) / spec.replace(":", "_"), int(cap), train)
            Qtr, Qte = D._latents(model, ds.Xtr), D._latents(model, ds.Xte)
            for c in grid:
                t = time.time()
                accs = [run(ds, model, Qtr, Qte, seed=s, capacity=int(cap), rehearse=c.rehearse,
                            policy=c.policy, lr=c.lr, lr_decay=c.lr_decay)
                        for s in range(a.seeds)]
                print(f"{ds.name} {spec} {c.name}: {100 * np.mean(accs):.1f} ± "
                      f"{100 * np.std(accs):.1f} % ({time.time() - t:.0f} s)", flush=True)
                results.append({"dataset": ds.name, "cut": cut, "train": train,
                                "capacity": int(cap), **dataclasses.asdict(c), "acc": accs})
                if a.json:
                    Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

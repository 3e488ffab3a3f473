"""Issue 30's case: a model written the way users write them — a plain Keras Sequential Conv1D
IMU classifier (conv1 BN ReLU max-pool, conv2 pool, conv3 pool, Flatten, Dense 32 `embed`,
Dropout, head) pre-trained 30 epochs on 4 exercises of the watch set (subjects 1-7) — exported
for the NUCLEO-L476RG the way docs/adaptive.md says, and how each recipe learns the 3 new
exercises (one pass, replay pre-filled with the 4 known ones, test on all 7 exercises of
subjects 8-10, the depth study's split and protocol: tinyol_studies.depth / lean).

    PYTHONPATH=host:studies python -m tinyol_studies.usermodel --json docs/study_usermodel.json \\
        [--work DIR] [--only auto]

The row JOINT is the upper bound: the same architecture trained from scratch on all 7
exercises of subjects 1-7 (the training split the recipes prefill and stream), tested on
subjects 8-10, seeds 100-102 (the depth study's joint training: its epochs, optimizer, seeds).

The network is trained once per work folder (seed 0) and kept there; every export and run is
deterministic (fixed seeds). Rows already in the json are kept (delete one to re-run it).
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from tinyol.data.datasets import save_npz
from tinyol.learn import learner as L
from tinyol.model.export import export_model
from tinyol.targets import twin as S
from . import depth as D

BOARD = "nucleo_l476rg"
EPOCHS = 30
ORDERS = 3


def user_model(n_classes: int, seed: int):
    """The issue's network, as a user writes it (Sequential, BN, pooling, Dropout)."""
    import keras

    keras.utils.set_random_seed(seed)
    L_ = keras.layers
    return keras.Sequential([
        keras.Input((100, 6)),
        L_.Conv1D(16, 5, name="conv1"), L_.BatchNormalization(), L_.ReLU(), L_.MaxPooling1D(2),
        L_.Conv1D(32, 5, activation="relu", name="conv2"), L_.MaxPooling1D(2),
        L_.Conv1D(32, 3, activation="relu", name="conv3"), L_.MaxPooling1D(2),
        L_.Flatten(), L_.Dense(32, activation="relu", name="embed"), L_.Dropout(0.3),
        L_.Dense(n_classes, name="head")], name="imu")


def dataset(work: Path, echo) -> D.Dataset:
    """The depth study's watch split (train: subjects 1-7, test: subjects 8-10) with the user's
    network, trained here on the 4 pre-training exercises (kept in ``work``)."""
    w = D.watch_dataset(work, echo)   # its split, calibration file (the 4 known exercises)
    path = work / "imu.keras"
    if not path.exists():
        echo(f"training the user's Sequential network on exercises 0-3 ({EPOCHS} epochs, seed 0)")
        m = np.isin(w.ytr, D.WATCH_OLD)
        net = D._fit(user_model(len(D.WATCH_OLD), 0), w.Xtr[m].reshape(-1, 100, 6), w.ytr[m],
                     seed=0, epochs=EPOCHS)
        net.save(path)
    ds = D.Dataset("imu", path, w.Xtr.reshape(-1, 100, 6), w.ytr, w.Xte.reshape(-1, 100, 6),
                   w.yte, D.WATCH_OLD, D.WATCH_NEW, [], lambda s: user_model(7, s), work)
    return ds


def stage_data(ds: D.Dataset, work: Path) -> Path:
    """Labelled data of the new exercises too (the training split, every class)."""
    p = work / "imu_stage_data.npz"
    if not p.exists():
        save_npz(str(p), ds.Xtr.reshape(len(ds.ytr), -1), ds.ytr)
    return p


def export(ds: D.Dataset, out: Path, echo, **kw) -> tuple[S.Model, list[str]]:
    lines: list[str] = []
    export_model(str(ds.keras_path), str(out), calib=str(ds.calib), max_classes=ds.n_classes,
                 board=BOARD, lr=D.LR, name="imu", echo=lambda s: (lines.append(s), echo(s)), **kw)
    return S.load_model(out), lines

def run_stream(ds, model: S.Model, Qtr, Qte, *, seed: int, bits: int, policy: int = L.POLICY_RESERVOIR,
        rehearse: int = 0) -> float:
    """tinyol_studies.depth.run (replay) at the export's capacity and ``bits`` (with a replay
    policy and idle rehearsal steps: tinyol_studies.lean.run's)."""
    rng = np.random.default_rng(seed)
    old = np.flatnonzero(np.isin(ds.ytr, ds.old))
    new = np.flatnonzero(np.isin(ds.ytr, ds.new))
    pre_idx, stream_idx = rng.permutation(old), rng.permutation(new)
    cap = int(model.manifest["learner"]["replay_capacity"])
    settings = L.Settings(lr=D.LR, n_new=1, n_old=16, mode=L.MODE_REPLAY, rehearse=rehearse)
    replay = dict(capacity=cap, bits=bits, policy=policy, seed=seed + 1, max_new=1)
    lrn = S.make_learner(model, settings, replay)
    res = S.run_classifier(lrn, Qtr[stream_idx], ds.ytr[stream_idx],
                           prefill=(Qtr[pre_idx], ds.ytr[pre_idx]), eval_set=(Qte, ds.yte))
    return res["final_accuracy"]


def run(ds, model: S.Model, Q, orders: int = ORDERS) -> list[float]:
    """The depth study's protocol with the export's capacity, storage, policy and rehearsal."""
    m = model.manifest["learner"]
    return [run_stream(ds, model, *Q, seed=s, bits=int(m["replay_bits"]),
                      policy=L.POLICIES[m.get("replay_policy", "reservoir")],
                      rehearse=int(m.get("rehearse", 0)))
            for s in range(orders)]


RECIPES = {  # label -> export keyword arguments
    "last layer (defaults)": {},
    "split embed, auto (calib = 4 known exercises)": dict(split="embed", stage_train="auto"),
    "split conv3, auto (calib = 4 known exercises)": dict(split="conv3", stage_train="auto"),
    "split conv3, bias": dict(split="conv3", stage_train="bias"),
    "split embed, auto, --stage-data (7 exercises)": dict(split="embed", stage_train="auto",
                                                          stage_data="@stage_data"),
    "split conv3, auto, --stage-data (7 exercises)": dict(split="conv3", stage_train="auto",
                                                          stage_data="@stage_data"),
    "split conv3, auto, --stage-data (7 exercises), --replay-bits 4": dict(
        split="conv3", stage_train="auto", stage_data="@stage_data", replay_bits=4),
    # the recipe docs/study.md recommends for the NUCLEO-L476RG (lean16's codec searches: the
    # int16 stage, 4-bit replay, stage lr x10, class-balanced + 2 idle steps), what trains
    # chosen by auto; and the last layer with the same replay recipe, to compare on
    "last layer, --replay-bits 4 --replay-policy balanced --rehearse 2": dict(
        replay_bits=4, replay_policy="balanced", rehearse=2),
    "split conv3, auto, --stage-data (7 exercises), int16 stage, 4-bit, lr x10, balanced x2": dict(
        split="conv3", stage_train="auto", stage_data="@stage_data", replay_bits=4,
        stage_weights="int16", stage_lr_scale=10.0, replay_policy="balanced", rehearse=2),
}


JOINT = "joint training (7 exercises from scratch, subjects 1-7)"


def joint(ds: D.Dataset, echo, seeds: int = ORDERS) -> dict:
    """JOINT: tinyol_studies.depth's upper bound (``D._fit`` with its defaults) on this network."""
    accs = []
    for s in range(seeds):
        net = D._fit(ds.make_joint(100 + s), ds.Xtr, ds.ytr, seed=100 + s)
        accs.append(float(np.mean(np.argmax(net.predict(ds.Xte, verbose=0), 1) == ds.yte)))
        echo(f"{JOINT}, seed {100 + s}: {accs[-1]:.3f}")
    return {"acc": accs, "seeds": [100 + s for s in range(seeds)]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--only", default=None, help="run only the recipes whose label contains this")
    ap.add_argument("--export-only", action="store_true", help="export, do not stream")
    a = ap.parse_args(argv)
    res = json.loads(a.json.read_text()) if a.json.exists() else {}
    work = a.work or Path(tempfile.mkdtemp(prefix="tinyol-user-"))
    work.mkdir(parents=True, exist_ok=True)

    def echo(s):
        print(s, flush=True)

    try:
        ds = dataset(work, echo)
        sd = stage_data(ds, work)
        if JOINT not in res and (not a.only or a.only in JOINT) and not a.export_only:
            res[JOINT] = joint(ds, echo)
            a.json.write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
        for label, kw in RECIPES.items():
            if label in res or (a.only and a.only not in label):
                continue
            kw = {k: (str(sd) if v == "@stage_data" else v) for k, v in kw.items()}
            out = work / ("x_" + "".join(c if c.isalnum() else "_" for c in label))
            try:
                model, lines = export(ds, out, echo, **kw)
            except Exception as e:  # noqa: BLE001 - a refusal is a row
                res[label] = {"refused": str(e).splitlines()[0], "export_output": []}
                echo(f"{label}: refused: {e}")
                a.json.write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
                continue
            row = {"export_output": lines,
                   "slots": int(model.manifest["learner"]["replay_capacity"]),
                   "selection": model.manifest.get("stage", {}).get("selection")}
            if not a.export_only:
                Q = D._latents(model, ds.Xtr), D._latents(model, ds.Xte)
                row["acc"] = run(ds, model, Q)
                echo(f"{label}: {np.mean(row['acc']):.3f} ± {np.std(row['acc']):.3f}")
            res[label] = row
            a.json.write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
    finally:
        if a.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What `tinyol export --stage-train auto` chooses on the study's networks for the
NUCLEO-L476RG, and how the chosen stage learns against the hand-picked lean rows of
docs/study.md ("Last layer, float stage or lean stage?"), on one stream order (issue 19).

    PYTHONPATH=host:studies python -m tinyol_studies.auto --json docs/study_auto.json \\
        [--data digits,watch] [--work DIR]

Same protocol as tinyol_studies.lean (its networks, calibration data = the pre-training
classes, 200 int8 replay slots, lr 0.03, the new classes streamed once, the test split), one
stream order (order 0): the float stage and the lean stages by hand are re-run here on the same
order so that every row of a data set compares like with like. The auto export is given
`--board nucleo_l476rg` and no `--replay-capacity`: it keeps room for 200 slots (or as many as
fit with the classifier alone training) and chooses on the training split, every class
(`--stage-data`); the runs use 200 slots, as the hand rows do.
Rows already in the json are kept (delete an entry to re-run it).
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from tinyol.data.datasets import save_npz
from tinyol.model.export import export_model
from tinyol.targets import twin as S
from . import depth as D
from . import lean

BOARD = "nucleo_l476rg"
CUTS = {"digits": ["embed", "conv2"], "watch": ["embed", "conv3", "conv2"]}
# auto given --replay-capacity N (it must fit the board with N slots; the run uses N slots)
SLOTS = {("digits", "embed"): 40}


def stage_data(ds, work: Path) -> Path:
    """The data the choice is made on: the training split, every class (the pre-training
    classes and the new ones the device will stream; the test split is never seen)."""
    p = work / f"{ds.name}_stage_data.npz"
    save_npz(str(p), ds.Xtr.reshape(len(ds.ytr), -1), ds.ytr)
    return p


def auto_export(ds, cut: str, out: Path, echo, slots: int | None = None) -> tuple[S.Model, list[str]]:
    lines: list[str] = []
    export_model(str(ds.keras_path), str(out), split=cut, calib=str(ds.calib),
                 stage_data=str(stage_data(ds, out.parent)),
                 max_classes=ds.n_classes, replay_capacity=slots, replay_bits=D.BITS,
                 name=f"{ds.name}_{cut}_auto", stage_train="auto", board=BOARD, lr=D.LR,
                 echo=lambda s: (lines.append(s), echo(s)))
    return S.load_model(out), lines


def study(name: str, work: Path, res: dict, echo, save, auto_only: bool = False) -> None:
    ds = lean.dataset(name, work, echo)
    rows = res.setdefault(name, {})
    for cut in CUTS[name]:
        variants = [("auto", "auto")] + [(lbl, tr) for lbl, tr in lean.VARIANTS[name][cut]]
        n = SLOTS.get((name, cut))
        if n:
            variants.append((f"auto, {n} slots", "auto"))
        for label, train in variants:
            key = f"{cut} {label}"
            if key in rows or (auto_only and train != "auto"):
                continue
            out = work / f"{name}_{cut}_{label.replace(' ', '_').replace(':', '')}"
            slots = int(label.split()[1]) if label.startswith("auto, ") else None
            if train == "auto":
                model, lines = auto_export(ds, cut, out, echo, slots)
            else:
                model, lines = lean.export_variant(ds, cut, train, out), []
            Q = D._latents(model, ds.Xtr), D._latents(model, ds.Xte)
            acc = lean.run(ds, model, *Q, seed=0, capacity=slots or D.CAPACITY)
            man = model.manifest
            rows[key] = {"cut": cut, "variant": label,
                         "train": man["stage"].get("train_spec", "all"),
                         "trained": int(man["stage"]["trained"]),
                         "ram_200": D.learner_ram(model, D.CAPACITY, D.BITS), "run_slots": slots or D.CAPACITY,
                         "l476_slots": lean.l476_slots(out), "acc_order0": acc,
                         "selection": man["stage"].get("selection"), "export_output": lines}
            echo(f"{name} {key}: {rows[key]['train']}: {100 * acc:.1f}% (order 0)")
            save()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--data", default="digits,watch")
    ap.add_argument("--work", type=Path, default=None, help="keep exports and trained networks here")
    ap.add_argument("--auto-only", action="store_true", help="run the auto rows only")
    a = ap.parse_args(argv)
    res = json.loads(a.json.read_text()) if a.json.exists() else {}
    work = a.work or Path(tempfile.mkdtemp(prefix="tinyol-auto-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        def save():
            a.json.write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")

        for name in a.data.split(","):
            study(name, work, res, lambda s: print(s, flush=True), save, a.auto_only)
    finally:
        if a.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The lean stage against the float stage (issue 19): at each cut of the depth study's networks,
what does training fewer parameters (sparse update: biases only, or one layer's weights) cost
in accuracy, and what does it save in learner RAM?

    PYTHONPATH=host python -m tinyol.studies.lean --json docs/study_lean.json
        # replaces its section of docs/study.md, raw results in docs/study_lean.json

Same protocol as tinyol.studies.depth (its datasets, networks, exports, stream, replay of 200
int8 slots, lr, stream orders): each cut is exported three ways (`--stage-train all`, `bias`,
and the layer right below the classifier trained whole with the rest on biases) and the
stage's numpy twin (bit-identical with tol_stage.c) learns the new classes. Reported per
variant: final accuracy (mean ± std over stream orders), trained parameters, learner RAM at
200 slots (tinyol.memory, the firmware's static buffer) and the most replay slots with which
the whole firmware fits the NUCLEO-L476RG (tinyol.memory's board plan, the linker's verdict).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from .. import __version__, memory
from ..boards import BOARDS
from ..learn import learner as L
from ..learn.stage import F32
from ..model.export import export_model
from ..model.folder import read_manifest
from ..paths import project_root
from ..targets import simulation as S
from . import depth as D

MARK_BEGIN = "<!-- study_lean begin -->"
MARK_END = "<!-- study_lean end -->"
BOARD = "nucleo_l476rg"


def export_variant(ds, cut: str, train: str | None, out: Path) -> S.Model:
    export_model(str(ds.keras_path), str(out), split=None if cut == "head" else cut,
                 calib=str(ds.calib), max_classes=ds.n_classes, replay_capacity=D.CAPACITY,
                 replay_bits=D.BITS, name=f"{ds.name}_{cut}", stage_train=train)
    return S.load_model(out)


def l476_slots(out: Path) -> int:
    """The most replay slots with which this export fits the L476RG (0: none, or it does not
    fit even without)."""
    m = memory.Model.from_manifest(read_manifest(out))
    b = BOARDS[BOARD]
    return max(0, int(memory.largest_capacity(m, b.name, memory.board_regions(b))))


def study(ds, seeds: int, work: Path, echo, variants: dict) -> dict:
    out = {"name": ds.name, "n_stream": int(np.isin(ds.ytr, ds.new).sum()),
           "n_test": int(len(ds.yte)), "rows": []}
    for cut in ds.cuts:
        for label, train in (variants[cut] if cut in variants else [("last layer", None)]):
            d = work / f"{ds.name}_{cut}_{label.replace(' ', '_')}"
            model = export_variant(ds, cut, train, d)
            Qtr, Qte = D._latents(model, ds.Xtr), D._latents(model, ds.Xte)
            accs = [D.run(ds, model, Qtr, Qte, seed=s, mode="replay", lr=D.LR)
                    for s in range(seeds)]
            trained = (int(model.W.size + model.b.size) if model.stage is None
                       else int(sum(l.n_train for l in model.stage[0])))
            row = {"cut": cut, "variant": label, "train": train, "acc": accs,
                   "params": D.cut_row(model, cut)["params"], "trained": trained,
                   "ram": D.learner_ram(model, D.CAPACITY, D.BITS), "l476_slots": l476_slots(d),
                   "latent_dim": int(model.manifest["latent"]["dim"])}
            echo(f"{ds.name}: {cut} {label}: {np.mean(accs):.3f} ± {np.std(accs):.3f}, "
                 f"trained {trained}, RAM {row['ram']}, L476RG slots {row['l476_slots']}")
            out["rows"].append(row)
    return out


# --------------------------------------------------------------------------- recipe (twin only)
class _Rehearsing:
    """A learner that, after each streamed sample, makes `extra` more SGD steps on replayed
    samples alone (n_old each): rehearsal in the idle time between samples. Simulated on the
    twin (tinyol.learn.stage / tinyol.learn.learner); the firmware has no such mode yet."""

    def __init__(self, lrn, extra: int):
        self._l, self._extra = lrn, extra

    def __getattr__(self, k):
        return getattr(self._l, k)

    def learn(self, q, label):
        self._l.learn(q, label)
        st = self._l
        if st.replay is None or st.replay.fill == 0:
            return
        for _ in range(self._extra):
            n_old = st.settings.n_old
            w = F32(1.0) / F32(n_old)
            st.grads = np.zeros(st.n_params, F32)
            for _ in range(n_old):
                xr, yr = st.replay.get(st.replay.draw())
                st._activate(yr)
                st._grad_add(xr, yr, w)
            if st._step():
                st.updates += 1


def run_recipe(ds, model: S.Model, Qtr, Qte, *, seed: int, extra: int, policy: int) -> float:
    """study_depth.run with idle rehearsal steps and a replay policy."""
    rng = np.random.default_rng(seed)
    old, new = np.flatnonzero(np.isin(ds.ytr, ds.old)), np.flatnonzero(np.isin(ds.ytr, ds.new))
    pre_idx, stream_idx = rng.permutation(old), rng.permutation(new)
    settings = L.Settings(lr=D.LR, n_new=1, n_old=16, mode=L.MODES["replay"])
    replay = dict(capacity=D.CAPACITY, bits=D.BITS, policy=policy, seed=seed + 1, max_new=1)
    lrn = _Rehearsing(S.make_learner(model, settings, replay), extra)
    res = S.run_classifier(lrn, Qtr[stream_idx], ds.ytr[stream_idx],
                           prefill=(Qtr[pre_idx], ds.ytr[pre_idx]), eval_set=(Qte, ds.yte))
    return res["final_accuracy"]


def recipe(ds, cut: str, seeds: int, work: Path, echo) -> dict:
    model = export_variant(ds, cut, None, work / f"{ds.name}_{cut}_recipe")
    Qtr, Qte = D._latents(model, ds.Xtr), D._latents(model, ds.Xte)
    rows = []
    for label, extra, pol in (("reservoir, no rehearsal", 0, L.POLICY_RESERVOIR),
                              ("class-balanced replay", 0, L.POLICY_BALANCED),
                              ("reservoir + 2 idle rehearsal steps per sample", 2, L.POLICY_RESERVOIR)):
        accs = [run_recipe(ds, model, Qtr, Qte, seed=s, extra=extra, policy=pol)
                for s in range(seeds)]
        echo(f"{ds.name} recipe at {cut}: {label}: {np.mean(accs):.3f} ± {np.std(accs):.3f}")
        rows.append({"cut": cut, "variant": label, "extra": extra, "policy": pol, "acc": accs})
    return {"name": ds.name, "recipe": rows}


# the variants per cut: the float stage, biases only, one layer's weights + biases elsewhere
VARIANTS = {
    "digits": {"embed": [("float stage", "all"), ("lean: biases", "bias")],
               "conv2": [("float stage", "all"), ("lean: biases", "bias"),
                         ("lean: embed weights + biases", "embed")]},
    "watch": {"embed": [("float stage", "all"), ("lean: biases", "bias")],
              "conv3": [("float stage", "all"), ("lean: biases", "bias"),
                        ("lean: embed weights + biases", "embed")],
              "conv2": [("float stage", "all"), ("lean: biases", "bias"),
                        ("lean: embed weights + biases", "embed")]},
}


def markdown(results: list[dict], seeds: int) -> str:
    o = [MARK_BEGIN,
         f"<!-- generated by tinyol {__version__} (python -m tinyol.studies.lean) — do not edit -->",
         "## The lean stage: sparse updates at each cut", "",
         "Reproduce: `PYTHONPATH=host python -m tinyol.studies.lean --json docs/study_lean.json`.",
         "",
         f"The depth study's (next section) networks, data, stream and replay (200 int8 slots, n_old = 16, "
         f"lr = {D.LR}, momentum 0), {seeds} stream orders; each cut exported as the float "
         f"stage (`--stage-train all`), biases only below the classifier (`--stage-train "
         f"bias`) and `embed`'s weights plus biases elsewhere (`--stage-train embed`). What "
         f"does not train stays in flash. Learner RAM at 200 slots (tinyol.memory, the "
         f"firmware's static buffer); L476RG slots: the most replay slots with which the "
         f"whole firmware fits the NUCLEO-L476RG by the memory model the linker is held to "
         f"(0: it does not fit). No QEMU instruction counts in this table.", ""]
    for r in results:
        o += [f"### {r['name']}", "",
              f"Stream: {r['n_stream']} samples of the new classes; test: {r['n_test']} samples.",
              "",
              "| cut | variant | params | trained | learner RAM at 200 slots (B) | L476RG slots "
              "| final acc (%) |",
              "|---|---|---:|---:|---:|---:|---:|"]
        for c in r["rows"]:
            o.append(f"| {c['cut']} | {c['variant']} | {c['params']:,} | {c['trained']:,} | "
                     f"{c['ram']:,} | {c['l476_slots']} | {D._pm(c['acc'])} |")
        o.append("")
    o += ["### Reading", ""] + READING + ["", MARK_END]
    return "\n".join(o) + "\n"


# Observations on the committed run (docs/study_lean.json), written by hand as study_depth's.
READING = [
    "- Only digits was run in this session (the machine was shared by many jobs; the watch "
    "rows, `python -m tinyol.studies.lean --datasets watch`, were started and stopped before "
    "they finished): there are no watch numbers for the lean stage yet.",
    "- Biases alone do not pay on digits: at `embed` 86.0 ± 1.5 % and at `conv2` 86.4 ± 1.6 % "
    "against 86.1 ± 1.5 % for the last layer alone, while the float stage reaches 92.4 % / "
    "92.8 %. Shifting the ReLU thresholds of a frozen Dense/conv layer does not make the "
    "features of new classes separable; the weights must move.",
    "- The weights that move are what pays: at the `conv2` cut, `embed`'s weights plus "
    "`conv2`'s biases (8,570 trained parameters) give 92.5 ± 0.7 %, the float stage's "
    "92.8 ± 0.9 % within one std, for 9.2 KB less RAM (conv2's 1,152 weights and their "
    "gradients; 180,900 B vs 190,116 B at 200 slots). On digits almost all parameters of a "
    "cut are `embed`'s, so sparse update saves little there; it saves most where frozen "
    "convolutions sit between trained layers (the issue's IMU network at `conv3`: 7.0x "
    "without replay, docs/adaptive.md).",
    "- What fits the NUCLEO-L476RG on digits: the float stage at `embed` with 40 replay slots; "
    "`conv2` does not fit as a float stage and fits with 11 slots when only `embed` and "
    "biases train. Biases-only stages fit with 294 (`embed`) and 139 (`conv2`) slots, but "
    "gain nothing. Measured in the twin with 200 slots, so the L476RG's smaller buffers are "
    "not measured here.",
    "- Recipe, measured on the twin at digits' `embed` cut (float stage, same protocol, "
    "`python -m tinyol.studies.lean --recipe digits:embed`): class-balanced replay "
    "(tol_replay's existing balanced policy) 93.0 ± 0.5 % against reservoir's "
    "92.4 ± 0.8 %, +0.6 points, within the spread over three orders. Idle-time rehearsal "
    "(extra replay-only steps between samples) was not measured to the end and is not on "
    "the device. Joint training (97.3 %, the depth table below, not re-run here) stays 4.3 points above the best on-device digits "
    "configuration measured here: the issue's 2-point goal is not met.",
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=D.SEEDS)
    ap.add_argument("--datasets", default="digits,watch")
    ap.add_argument("--recipe", default=None, metavar="DATASET:CUT",
                    help="only the recipe table (twin-only rehearsal / balanced replay) at one cut")
    ap.add_argument("--out", default=str(project_root() / "docs/study.md"))
    ap.add_argument("--json", default=None, help="also write the raw results here")
    ap.add_argument("--from-json", default=None, help="only re-render the section from results")
    a = ap.parse_args(argv)
    if a.from_json:
        write_section(markdown(json.loads(Path(a.from_json).read_text()), a.seeds), Path(a.out))
        return 0
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    def echo(s):
        print(s, file=sys.stderr, flush=True)

    results = []
    if a.recipe:
        name, cut = a.recipe.split(":")
        with tempfile.TemporaryDirectory(prefix="tinyol-lean-") as tmp:
            ds = D.digits_dataset(Path(tmp)) if name == "digits" else D.watch_dataset(Path(tmp), echo)
            r = recipe(ds, cut, a.seeds, Path(tmp), echo)
        if a.json:
            Path(a.json).write_text(json.dumps(r, indent=1, default=float))
        return 0
    with tempfile.TemporaryDirectory(prefix="tinyol-lean-") as tmp:
        work = Path(tmp)
        for name in a.datasets.split(","):
            ds = D.digits_dataset(work) if name == "digits" else D.watch_dataset(work, echo)
            results.append(study(ds, a.seeds, work, echo, VARIANTS[name]))
            if a.json:
                Path(a.json).write_text(json.dumps(results, indent=1, default=float))
    write_section(markdown(results, a.seeds), Path(a.out))
    echo(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

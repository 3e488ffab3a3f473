"""Compressed latent replay (issue 30): how many replay slots each storage gives within the
NUCLEO-L476RG's RAM, and what they are worth, on digits and on the issue's Sequential IMU model.

    PYTHONPATH=host:studies python -m tinyol_studies.codec --json docs/study_codec.json [--work DIR]

Each (data set, cut, storage) is exported for the NUCLEO-L476RG exactly as a user would
(`tinyol export --board nucleo_l476rg --replay-bits B`, no --replay-capacity: the largest
buffer that fits, by tinyol.memory's board plan, the one the linker is held to); the twin
(bit-identical with the device at every storage, tests/device/test_replay4_device.py) learns the new
classes with the depth study's protocol (tinyol_studies.depth: replay pre-filled with the
pre-training classes, the new ones streamed once, n_new 1, n_old 16, lr 0.03, reservoir, the
test split), mean and std over 3 stream orders. Rows already in the json are kept.
Product-quantized rows (`--replay-codec pq:M`, the PQ list) are exported and run the same way;
docs/study_codec_pq.json holds them with the digits rows re-run under the current board plan
(`--json docs/study_codec_pq.json --only "digits |"`).
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from tinyol.learn import learner as L
from tinyol.memory import replay_codec_flash, replay_row_bytes
from tinyol.model.export import export_model
from tinyol.targets import twin as S
from . import depth as D
from . import usermodel as U
from .usermodel import run_stream as run

BOARD = "nucleo_l476rg"
ORDERS = 3
# (data set, cut label, export keywords); each at every storage in BITS
CUTS = [("digits", "last layer", {}),
        ("digits", "embed (float stage)", dict(split="embed")),
        ("imu", "last layer", {}),
        ("imu", "conv3 (conv3 trains)", dict(split="conv3", stage_train="conv3:all,embed:frozen"))]
BITS = (8, 7, 4)
# product-quantized rows: (data set, cut label, M sub-vectors), on the CUTS' exports but pq:M
PQ = [("digits", "last layer", 8), ("digits", "last layer", 16),
      ("digits", "embed (float stage)", 32), ("digits", "embed (float stage)", 64),
      ("digits", "embed (float stage)", 128)]
# the recipe rows: (data set, cut label, bits, policy, rehearsal steps), on the exports above
RECIPES = [("digits", "embed (float stage)", 4, "balanced", 2),
           ("digits", "embed (float stage)", 8, "balanced", 2),
           ("digits", "embed (float stage)", "pq:64", "balanced", 2)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--only", default=None)
    a = ap.parse_args(argv)
    res = json.loads(a.json.read_text()) if a.json.exists() else {}
    work = a.work or Path(tempfile.mkdtemp(prefix="tinyol-codec-"))
    work.mkdir(parents=True, exist_ok=True)

    def echo(s):
        print(s, flush=True)

    sets = {}
    try:
        jobs = [(name, cut, kw, bits) for name, cut, kw in CUTS for bits in BITS]
        jobs += [(name, cut, {**kw, "replay_codec": f"pq:{m}"}, f"pq:{m}")
                 for name, cut, m in PQ for n2, c2, kw in CUTS if (n2, c2) == (name, cut)]
        for name, cut, kw, bits in jobs:
            key = f"{name} | {cut} | {bits}"
            if key in res or (a.only and a.only not in key):
                continue
            if name not in sets:
                sets[name] = (D.digits_dataset(work) if name == "digits"
                              else U.dataset(work, echo))
            ds = sets[name]
            out = work / ("c_" + "".join(c if c.isalnum() else "_" for c in key))
            export_model(str(ds.keras_path), str(out), calib=str(ds.calib), board=BOARD,
                         max_classes=ds.n_classes, lr=D.LR, name=f"{name}_codec",
                         echo=lambda s: None, **({} if isinstance(bits, str) else
                                                 {"replay_bits": bits}), **kw)
            model = S.load_model(out)
            bits = int(model.manifest["learner"]["replay_bits"])
            Qtr, Qte = D._latents(model, ds.Xtr), D._latents(model, ds.Xte)
            acc = [run(ds, model, Qtr, Qte, seed=s, bits=bits) for s in range(ORDERS)]
            man = model.manifest
            dim = int(man["latent"]["dim"])
            res[key] = {"data": name, "cut": cut, "bits": bits,
                        "codebook_flash": replay_codec_flash(int(man["latent"]["dim"]), bits),
                        "slots": int(man["learner"]["replay_capacity"]), "latent": dim,
                        "slot_bytes": replay_row_bytes(dim, bits) + 2,
                        "learner_bytes": int(man["memory"]["learner_bytes"]), "acc": acc}
            echo(f"{key}: {res[key]['slots']} slots, {100 * np.mean(acc):.1f} ± "
                 f"{100 * np.std(acc):.1f}")
            a.json.write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
        for name, cut, bits, pol, reh in RECIPES:
            key = f"{name} | {cut} | {bits} | {pol} + rehearse {reh}"
            if key in res or (a.only and a.only not in key):
                continue
            base = f"{name} | {cut} | {bits}"
            if base not in res:
                continue
            ds = sets.get(name) or (D.digits_dataset(work) if name == "digits" else U.dataset(work, echo))
            sets[name] = ds
            model = S.load_model(work / ("c_" + "".join(c if c.isalnum() else "_" for c in base)))
            Qtr, Qte = D._latents(model, ds.Xtr), D._latents(model, ds.Xte)
            acc = [run(ds, model, Qtr, Qte, seed=s, bits=int(res[base]["bits"]), policy=L.POLICIES[pol],
                       rehearse=reh)
                   for s in range(ORDERS)]
            res[key] = {**res[base], "policy": pol, "rehearse": reh, "acc": acc}
            echo(f"{key}: {res[key]['slots']} slots, {100 * np.mean(acc):.1f} ± {100 * np.std(acc):.1f}")
            a.json.write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
    finally:
        if a.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

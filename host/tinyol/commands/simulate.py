"""`tinyol simulate`: run a labelled stream through the numpy reference learner.

The twin itself (model loading, latents, learners, prequential runs) is the library module
:mod:`tinyol.targets.simulation`; this module is its command line.
"""
from __future__ import annotations

import dataclasses
import json
import math

import click
import numpy as np

from ..checks import U32_MAX, Number
from ..data.datasets import check_labels, fit_layout
from ..learn import learner as L
from ..targets.simulation import (
    latents,
    learner_settings,
    load_data,
    load_model,
    make_learner,
    quantize_input,
    run_anomaly,
    run_classifier,
)


# --------------------------------------------------------------------------- CLI
def _print_classifier(res: dict, names: list[str]) -> None:
    name = lambda c: names[c] if c < len(names) else str(c)  # noqa: E731
    click.echo(f"samples            {res['samples']}")
    click.echo(f"prequential acc    {res['prequential_accuracy']:.4f}")
    click.echo(f"final acc          {res['final_accuracy']:.4f}"
               f"  (on {res.get('eval', 'the stream')})")
    click.echo("class  prequential  final")
    classes = sorted(set(res["prequential_per_class"]) | set(res["final_per_class"]))
    for c in classes:
        pq = res["prequential_per_class"].get(c)
        fi = res["final_per_class"].get(c)
        click.echo(f"{name(c):>5}  {'' if pq is None else f'{pq:11.4f}':>11}  "
                   f"{'' if fi is None else f'{fi:.4f}'}")
    st = res["stats"]
    click.echo(f"updates {st['updates']}, active classes {st['n_active']}, "
               f"replay {st['replay_fill']}/{st['replay_capacity']}")
    for k, v in res["errors"].items():
        click.echo(f"{v} samples rejected: {k}")


def _print_anomaly(res: dict) -> None:
    for k in ("samples", "anomalous", "warmup", "roc_auc", "roc_auc_after_warmup",
              "detection_rate", "false_positive_rate", "onset_index", "detection_delay",
              "missed_before_detection", "final_threshold"):
        v = res[k]
        click.echo(f"{k:<22} {v:.4f}" if isinstance(v, float) else f"{k:<22} {v}")


@click.command("simulate")
@click.option("--model", "model_dir", required=True, type=click.Path(file_okay=False),
              help="Model directory written by `tinyol export` (e.g. models/digits).")
@click.option("--data", "data", required=True, multiple=True,
              help="Stream source: digits:5-9@train, sensor:anomalies, file.csv, file.npz, ... "
                   "Repeat to concatenate sources in order.")
@click.option("--eval", "eval_spec", default=None,
              help="Held-out source for the final accuracy (default: the stream itself).")
@click.option("--prefill", "prefill_spec", default=None,
              help="Source whose latents pre-fill the replay buffer (e.g. digits:0-4@train).")
@click.option("--lr", type=Number(0.0, f32=True), default=None, help="Learning rate (default: manifest).")
@click.option("--momentum", type=Number(0.0, 1.0), default=None, help="SGD momentum (default: manifest).")
@click.option("--weight-decay", type=Number(0.0, f32=True), default=None, help="L2 on W (default: manifest).")
@click.option("--clip-norm", type=Number(0.0, f32=True), default=None, help="Global gradient-norm clip, 0 = off.")
@click.option("--replay-capacity", type=click.IntRange(0, 65535), default=None, help="Buffer slots, 0 = none.")
@click.option("--replay-bits", type=click.Choice(["32", "8", "7", "4"]), default=None,
              help="Buffer storage: float32, int8 or 7-bit packed.")
@click.option("--replay-n-new", type=click.IntRange(1, 65535), default=None, help="Fresh samples per update.")
@click.option("--replay-n-old", type=click.IntRange(0, 65535), default=None, help="Replayed samples per update.")
@click.option("--policy", type=click.Choice(sorted(L.POLICIES)), default=None,
              help="Buffer replacement policy (default reservoir).")
@click.option("--seed", type=click.IntRange(0, U32_MAX), default=None, help="Learner PRNG seed (default: manifest).")
@click.option("--order-seed", type=click.IntRange(0, U32_MAX), default=None,
              help="Shuffle the stream with this seed (default: source order).")
@click.option("--mode", type=click.Choice(sorted(L.MODES)), default=None,
              help="frozen, sgd (naive TinyOL) or replay (default: replay if a buffer).")
@click.option("--threshold-k", type=Number(f32=True), default=None, help="Anomaly: threshold in std devs.")
@click.option("--warmup", type=click.IntRange(0, U32_MAX), default=None, help="Anomaly: warm-up samples.")
@click.option("--layout", type=click.Choice(["channels-first", "flat"]), default=None,
              help="How the source's samples map to the model input when their shapes differ.")
@click.option("--log", type=click.Path(dir_okay=False), default=None,
              help="Write one JSON record per sample, as `tinyol stream --log` does (index: the "
                   "row in the --data sources, concatenated, before --order-seed; compare logs "
                   "with `tinyol compare`).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def cmd(model_dir, data, eval_spec, prefill_spec, lr, momentum, weight_decay, clip_norm,
        replay_capacity, replay_bits, replay_n_new, replay_n_old, policy, seed, order_seed,
        mode, threshold_k, warmup, layout, log, as_json):
    """Run a labelled stream through the reference learner (predict, then learn).

    Classifier models print prequential and final accuracy (per class);
    autoencoder models print ROC AUC of the reconstruction scores, detection
    rate, false-positive rate and the detection delay (samples from the first
    anomaly after the warm-up to the first one flagged). Labels != 0 are
    anomalous.

    \b
    Examples:
      tinyol simulate --model models/digits --data digits:5-9@train \\
          --prefill digits:0-4@train --eval digits@test --order-seed 0
      tinyol simulate --model models/anomaly --data sensor@train \\
          --data sensor:anomalies@test
    """
    model = load_model(model_dir)
    settings, replay = learner_settings(
        model, lr=lr, momentum=momentum, weight_decay=weight_decay, clip_norm=clip_norm,
        replay_capacity=replay_capacity,
        replay_bits=None if replay_bits is None else int(replay_bits),
        replay_n_new=replay_n_new, replay_n_old=replay_n_old, policy=policy, seed=seed,
        mode=mode, threshold_k=threshold_k, warmup=warmup)

    shape = model.manifest["input"]["shape"]
    n_out = int(model.W.shape[0])
    parts, names = [], None
    for spec in data:
        Xs, ys, nm = load_data(spec)
        Xs = fit_layout(Xs, shape, layout, where=spec)
        if not model.autoencoder:
            check_labels(ys, n_out, where=spec)
        parts.append((Xs.reshape(len(ys), -1), ys))
        names = names or nm
    X = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    rows = np.arange(len(y))  # source row index (across --data sources, in order)
    if order_seed is not None:
        perm = np.random.default_rng(order_seed).permutation(len(y))
        X, y, rows = X[perm], y[perm], rows[perm]
    Xq = quantize_input(X, *model.input_q)
    Q = latents(model, Xq)
    lrn = make_learner(model, settings, replay)
    logf = open(log, "w", buffering=1) if log else None

    def on_sample(i, r):
        if logf is not None:
            rec = dict(index=int(rows[i]), label=int(y[i]), **r)
            rec = {k: rec[k] for k in ("index", "label", "prediction", "confidence", "loss",
                                       "learned", "new_class", "error", "samples_seen")}
            for k in ("confidence", "loss"):
                if rec[k] is not None and not math.isfinite(rec[k]):
                    rec[k] = None
            logf.write(json.dumps(rec) + "\n")

    cb = on_sample if logf else None
    if model.autoencoder:
        res = run_anomaly(lrn, Q, Xq, y, on_sample=cb)
    else:
        pre = ev = None
        if prefill_spec:
            Xp, yp, _ = load_data(prefill_spec)
            Xp = fit_layout(Xp, shape, layout, where=prefill_spec)
            check_labels(yp, n_out, where=prefill_spec)
            pre = (latents(model, quantize_input(Xp, *model.input_q)), yp)
        if eval_spec:
            Xe, ye, _ = load_data(eval_spec)
            Xe = fit_layout(Xe, shape, layout, where=eval_spec)
            check_labels(ye, n_out, where=eval_spec)
            ev = (latents(model, quantize_input(Xe, *model.input_q)), ye)
        res = run_classifier(lrn, Q, y, prefill=pre, eval_set=ev, on_sample=cb)
        res["eval"] = eval_spec or "the stream"
    res["settings"] = dataclasses.asdict(settings)
    res["replay"] = {**replay, "policy": [k for k, v in L.POLICIES.items()
                                          if v == replay["policy"]][0],
                     "bytes": (L.replay_bytes(replay["capacity"], model.W.shape[1],
                                              replay["bits"], model.W.shape[0])
                               if replay["capacity"] and not model.autoencoder else 0)}
    if logf is not None:
        logf.close()
    if as_json:
        click.echo(json.dumps(res, indent=2, default=_jsonable))
    elif model.autoencoder:
        _print_anomaly(res)
    else:
        _print_classifier(res, names)


def _jsonable(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, np.ndarray):
        return v.tolist()
    raise TypeError(type(v))

"""`tinyol simulate`: run a labelled stream through the numpy reference learner.

The twin itself (model loading, latents, learners, prequential runs) is the library module
:mod:`tinyol.targets.twin`; this module is its command line. Its stream flags are
`tinyol stream`'s (--shuffle --seed, --limit, --epochs); an autoencoder's detections are
reported by :mod:`tinyol.learn.anomaly`.
"""
from __future__ import annotations

import dataclasses
import json
import math

import click
import numpy as np

from ..checks import U32_MAX, Number, output_file
from ..data.datasets import check_labels, fit_layout, sample_order
from ..errors import TinyolError
from ..learn import anomaly as A
from ..learn import learner as L
from ..link.stream import log_record
from ..targets.twin import (
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
    click.echo(f"before acc         {res['before_accuracy']:.4f}"
               f"  (the exported head, on {res.get('eval', 'the stream')})")
    click.echo(f"prequential acc    {res['prequential_accuracy']:.4f}")
    click.echo(f"final acc          {res['final_accuracy']:.4f}"
               f"  (on {res.get('eval', 'the stream')})")
    click.echo("class  before  prequential  final")
    classes = sorted(set(res["prequential_per_class"]) | set(res["final_per_class"]))
    for c in classes:
        bf = res["before_per_class"].get(c)
        pq = res["prequential_per_class"].get(c)
        fi = res["final_per_class"].get(c)
        click.echo(f"{name(c):>5}  {'' if bf is None else f'{bf:.4f}':>6}  "
                   f"{'' if pq is None else f'{pq:11.4f}':>11}  "
                   f"{'' if fi is None else f'{fi:.4f}'}")
    st = res["stats"]
    click.echo(f"updates {st['updates']}, active classes {st['n_active']}, "
               f"replay {st['replay_fill']}/{st['replay_capacity']}")
    for k, v in res["errors"].items():
        click.echo(f"{v} samples rejected: {k}")


def _f(v, fmt=".4f") -> str:
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, fmt)


def _print_anomaly(res: dict) -> None:
    t = res.get("tuning")
    if t:
        click.echo(f"tuned on           {t['source']}: threshold_k {t['k']:g} ({t['rule']})")
    c = res["counts_after_warmup"]
    click.echo(f"samples            {res['samples']} ({res['anomalous']} labelled anomalous; the "
               f"first {res['warmup']} are the warm-up, never flagged)")
    click.echo(f"threshold          mean + {res['threshold_k']:g} std of the normal scores so far; "
               f"{_f(res['final_threshold'], '.4g')} at the end")
    click.echo(f"flagged            {res['flagged']}: {c['tp']} true, {c['fp']} false alarms, "
               f"{c['fn']} missed (after the warm-up)")
    click.echo(f"precision          {_f(res['precision'])}   recall {_f(res['recall'])}   "
               f"F1 {_f(res['f1'])}   false positive rate {_f(res['false_positive_rate'])}")
    click.echo(f"ROC AUC            {_f(res['roc_auc'])} (of the scores, any threshold; "
               f"{_f(res['roc_auc_after_warmup'])} after the warm-up)")
    if res["onset_index"] is not None:
        click.echo(f"first detection    {_f(res['detection_delay'], 'd')} samples after the first "
                   f"anomaly (sample {res['onset_index']}); {_f(res['missed_before_detection'], 'd')}"
                   " anomalous samples before it")
    click.echo("scores")
    for line in A.score_lines(res["scores"]):
        click.echo("  " + line)
    if t:
        click.echo(f"set it on a device: tinyol set --port URL --threshold-k {t['k']:g}")


def _tune(model, settings, replay, spec, shape, layout, echo) -> dict:
    """Run the validation stream `spec` once per k of learn.anomaly.K_GRID, from the exported
    state each time, and choose k (learn.anomaly.choose_k)."""
    Xv, yv, _ = load_data(spec)
    Xv = fit_layout(Xv, shape, layout, where=spec)
    Xq = quantize_input(Xv.reshape(len(yv), -1), *model.input_q)
    Q = latents(model, Xq)
    runs = {}
    for k in A.K_GRID:
        lrn = make_learner(model, dataclasses.replace(settings, threshold_k=k), replay)
        r = run_anomaly(lrn, Q, Xq, yv)
        runs[k] = {**r["counts_after_warmup"], "f1": r["f1"]}
    k, rule = A.choose_k(runs)
    return {"source": spec, "k": k, "rule": rule, "grid": {str(g): v for g, v in runs.items()}}


@click.command("simulate")
@click.option("--model", "model_dir", required=True, type=click.Path(file_okay=False),
              help="Model directory written by `tinyol export` (e.g. models/digits).")
@click.option("--data", "data", required=True, multiple=True,
              help="Stream source: digits:5-9@train, kdd135@test, file.csv, file.npz, ... "
                   "Repeat to concatenate sources in order.")
@click.option("--eval", "eval_spec", default=None,
              help="Held-out source for the before/final accuracy (default: the stream itself).")
@click.option("--prefill", "prefill_spec", default=None,
              help="Source whose latents pre-fill the replay buffer (e.g. digits:0-4@train).")
@click.option("--tune", "tune_spec", default=None, metavar="SOURCE",
              help="Autoencoder: choose threshold_k on this labelled validation stream (never on "
                   "--data), then report --data with it. With anomalies in SOURCE: the best F1; "
                   "normal only: the smallest k without a false alarm.")
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
@click.option("--rehearse", type=click.IntRange(0, L.REHEARSE_MAX), default=None,
              help="Idle-time rehearsal steps between samples (as `tinyol set --rehearse`; "
                   "default: manifest).")
@click.option("--shuffle", is_flag=True, help="Shuffle the stream (with --seed), as `tinyol stream`.")
@click.option("--seed", type=click.IntRange(0, U32_MAX), default=None,
              help="With --shuffle: the shuffle seed (default 0), as `tinyol stream`. Without it "
                   "(older spelling): the learner's PRNG seed, now --learner-seed.")
@click.option("--order-seed", type=click.IntRange(0, U32_MAX), default=None,
              help="Older spelling of --shuffle --seed N.")
@click.option("--learner-seed", type=click.IntRange(0, U32_MAX), default=None,
              help="Learner PRNG seed (replay sampling; default: manifest).")
@click.option("--limit", "-n", type=click.IntRange(min=1), default=None,
              help="Send at most N samples (after --shuffle), as `tinyol stream`.")
@click.option("--epochs", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Send the stream N times (reshuffled each epoch with --shuffle), as `tinyol stream`.")
@click.option("--mode", type=click.Choice(sorted(L.MODES)), default=None,
              help="frozen, sgd (naive TinyOL) or replay (default: replay if a buffer).")
@click.option("--threshold-k", type=Number(f32=True), default=None, help="Anomaly: threshold in std devs.")
@click.option("--warmup", type=click.IntRange(0, U32_MAX), default=None, help="Anomaly: warm-up samples.")
@click.option("--layout", type=click.Choice(["channels-first", "flat"]), default=None,
              help="How the source's samples map to the model input when their shapes differ.")
@click.option("--log", type=click.Path(dir_okay=False), default=None,
              help="Write one JSON record per sample, as `tinyol stream --log` does (index: the "
                   "row in the --data sources, concatenated, before --shuffle; compare logs "
                   "with `tinyol compare`).")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Autoencoder: save score against threshold over time as PNG (as `tinyol "
                   "stream --plot`); classifier: the accuracy curve.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def cmd(model_dir, data, eval_spec, prefill_spec, tune_spec, lr, momentum, weight_decay,
        clip_norm, replay_capacity, replay_bits, replay_n_new, replay_n_old, policy, rehearse,
        shuffle, seed, order_seed, learner_seed, limit, epochs, mode, threshold_k, warmup, layout,
        log, plot, as_json):
    """Run a labelled stream through the reference learner (predict, then learn).

    Classifier models print the accuracy before (the exported head), prequential and final
    (per class); autoencoder models print the threshold, detections against the labels
    (precision, recall, F1, false-positive rate), ROC AUC of the scores, the detection delay
    and score statistics. Labels != 0 are anomalous.

    \b
    Examples:
      tinyol simulate --model models/digits --data digits:5-9@train \\
          --prefill digits:0-4@train --eval digits@test --shuffle --seed 0
      tinyol simulate --model models/kdd135 --data kdd135@test --tune kdd135@val
    """
    if order_seed is not None:
        if shuffle:
            raise TinyolError("--order-seed N is the older spelling of --shuffle --seed N: give one")
        shuffle, order_seed, learner_seed = True, order_seed, learner_seed if learner_seed is not None else seed
    elif shuffle:
        order_seed = 0 if seed is None else seed
    elif seed is not None:
        if learner_seed is not None:
            raise TinyolError("--seed without --shuffle is the older spelling of --learner-seed: give one")
        learner_seed = seed
    for path, what in ((log, "--log"), (plot, "--plot")):
        if path:
            output_file(path, what)
    model = load_model(model_dir)
    if tune_spec and not model.autoencoder:
        raise TinyolError("--tune chooses an autoencoder's threshold; this model is a classifier")
    if tune_spec and threshold_k is not None:
        raise TinyolError("--tune chooses --threshold-k: give one of them")
    settings, replay = learner_settings(
        model, lr=lr, momentum=momentum, weight_decay=weight_decay, clip_norm=clip_norm,
        replay_capacity=replay_capacity,
        replay_bits=None if replay_bits is None else int(replay_bits),
        replay_n_new=replay_n_new, replay_n_old=replay_n_old, policy=policy, seed=learner_seed,
        mode=mode, threshold_k=threshold_k, warmup=warmup, rehearse=rehearse)

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
    # source row index (across --data sources, in order), sent as `tinyol stream` sends them
    rows = sample_order(len(y), shuffle=shuffle, seed=order_seed or 0, limit=limit, epochs=epochs)
    X, y = X[rows], y[rows]
    tuning = None
    if tune_spec:
        tuning = _tune(model, settings, replay, tune_spec, shape, layout, click.echo)
        settings = dataclasses.replace(settings, threshold_k=tuning["k"])
    Xq = quantize_input(X, *model.input_q)
    Q = latents(model, Xq)
    lrn = make_learner(model, settings, replay)
    logf = open(log, "w", buffering=1) if log else None

    predictions = []

    def on_sample(i, r):
        predictions.append(r["prediction"])
        if logf is not None:
            rec = log_record(dict(index=int(rows[i]), label=int(y[i]), **r), model.autoencoder)
            logf.write(json.dumps(rec) + "\n")

    cb = on_sample if logf or plot else None
    if model.autoencoder:
        res = run_anomaly(lrn, Q, Xq, y, on_sample=cb)
        trace = res.pop("trace")
        if tuning:
            res["tuning"] = tuning
        if plot:
            from ..plotting import plot_anomaly_scores
            plot_anomaly_scores(trace["score"], trace["threshold"], trace["flag"], trace["label"],
                                plot, title=f"simulate: {', '.join(data)} on {model.path.name} "
                                            f"(k = {settings.threshold_k:g})")
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
        if plot:
            from ..plotting import plot_learning_curve
            recs = [{"label": int(t), "prediction": p} for t, p in zip(y, predictions)]
            plot_learning_curve(recs, plot, title=f"simulate: {', '.join(data)}", class_names=names)
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
    if plot and not as_json:
        click.echo(f"plot               {plot}")


def _jsonable(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, np.ndarray):
        return v.tolist()
    raise TypeError(type(v))

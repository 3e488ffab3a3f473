"""`tinyol stream`: send samples to a device, learn or evaluate, show accuracy live.

Modes: --train (SAMPLE: the device predicts, then learns; prequential accuracy),
--eval (PREDICT over a set: accuracy per class), --predict (PREDICT: print the
predictions). The engine is tinyol.link.stream (pipelined, exactly-once, resets
detected); --log and --resume are tinyol.link.resume's (the run's journal and how an
interrupted run is completed). docs/streaming.md describes both.
"""
from __future__ import annotations

import contextlib
import math
import sys

import click
import numpy as np
from tqdm import tqdm

from .._defs import Msg
from ..checks import Number, output_file
from ..data.datasets import check_labels, fit_layout, iter_source, load_source, sample_order
from ..errors import TinyolError
from ..learn.anomaly import score_lines
from ..link.device import Device
from ..link.protocol import DeviceError, Link
from ..link.resume import Resume, RunLog
from ..link.stream import DEFAULT_WINDOW, DEVICE_CACHE, Record, Stream, Summary, check_samples
from ..model.folder import input_q, load_manifest, quantize
from ..options import emit_json, json_option, model_option, port_option, resolve_port
from ..plotting import plot_anomaly_scores, plot_learning_curve


def load_rows(data: str, *, limit: int | None, shuffle: bool, seed: int, label_column=None,
              input_shape=None, layout: str | None = None, epochs: int = 1):
    """(rows iterator of (index, x, label), count or None, X, y, class names).

    index is the row's position in the source (before shuffling), so logs of different runs can
    be compared row by row. input_shape: the model's (checked, see datasets.fit_layout). epochs:
    the source is sent that many times (reshuffled each epoch with seed + epoch)."""
    if data == "-":  # live: one sample a line from stdin, sent as it arrives
        def rows():
            for i, (x, lab) in enumerate(iter_source("-", label_column=label_column)):
                if limit is not None and i >= limit:
                    return
                yield i, x, lab
        if shuffle or epochs != 1:
            raise TinyolError("--shuffle and --epochs need a whole data set, not stdin")
        return rows(), None, None, None, None
    X, y, names = load_source(data, label_column=label_column)
    if input_shape is not None:
        X = fit_layout(X, input_shape, layout, where=data)
    order = sample_order(len(y), shuffle=shuffle, seed=seed, limit=limit, epochs=epochs)
    rows = ((int(i), X[i], int(y[i])) for i in order)
    return rows, len(order), X[order], y[order], names


def print_summary(s: Summary, names: list[str] | None = None, echo=click.echo,
                  autoencoder: bool = False) -> None:
    name = (lambda c: names[c] if names and c < len(names) else str(c))  # noqa: E731
    state = " (interrupted)" if s.interrupted else f" (stopped: {s.stopped_by})" if s.stopped_by else ""
    sent = f" answered of {s.sent} sent" if s.sent != s.samples else ""
    echo(f"samples      {s.samples}{state}{sent}")
    if s.per_class:
        echo(f"accuracy     {s.accuracy:.4f}" + ("  (prequential: each sample predicted before it "
                                                  "is learned)" if s.mode == "train" else ""))
        for c, acc in s.class_accuracy().items():
            echo(f"  class {name(c):>4}  {acc:.4f}  ({s.per_class[c][1]} samples)")
    if autoencoder or s.anomaly_counts or s.flagged:
        print_anomaly_summary(s, echo)
    echo(f"throughput   {s.samples_per_s:.1f} samples/s, {s.bytes_per_s:.0f} bytes/s "
         f"({s.bytes_out} out, {s.bytes_in} in, {s.seconds:.2f} s)")
    rto = f", resend timeout {s.rto * 1e3:.0f} ms" if s.rto else ""
    extra = "".join([f", {s.late} slower than the timeout" if s.late else "",
                     f", {s.damaged} damaged frames" if s.damaged else ""])
    echo(f"link         {s.retries} resends, {s.duplicates} duplicates answered from the device's "
         f"cache{extra}{rto}")
    if s.device_samples_seen is not None and s.mode == "train":
        replay = f", replay buffer {s.replay_fill}" if s.replay_fill else ""
        source = "" if s.device_count_from in (None, "STATS") else f" (from {s.device_count_from})"
        if autoencoder:
            echo(f"device       {s.device_samples_seen} samples scored in total{source}{replay}")
        else:
            classes = f", {s.device_classes} classes active" if s.device_classes is not None else ""
            echo(f"device       {s.device_samples_seen} samples learned in total{source}{classes}{replay}")
    for k, v in s.rejected.items():
        echo(f"rejected     {v} x {k}")


def print_anomaly_summary(s: Summary, echo=click.echo) -> None:
    """An autoencoder's part of the summary: the device's threshold and settings, the
    detections (against the labels when the stream has them) and the score statistics."""
    rate = lambda v, what: (f"{v:.4f}" if math.isfinite(v)  # noqa: E731
                            else f"n/a (no {what} samples in the stream)")
    if s.threshold is not None:
        k = f"mean + {s.threshold_k:g} std" if s.threshold_k is not None else "mean + k std"
        warm = f", after a warm-up of {s.warmup} samples" if s.warmup is not None else ""
        now = (f"{s.threshold:.4g}" if math.isfinite(s.threshold)
               else "none yet (still warming up)")
        echo(f"threshold    {now} on the device now ({k} of the normal scores it has seen{warm}; "
             "tinyol set --threshold-k changes k)")
    rows = ", ".join(str(r) for r in s.flagged_rows)
    more = ", ..." if s.flagged > len(s.flagged_rows) else ""
    echo(f"anomalies    {s.flagged} flagged" + (f" (rows {rows}{more})" if s.flagged else ""))
    if s.anomaly_counts:
        d = s.detection
        echo(f"  {d['tp']} true, {d['fp']} false alarms, {d['fn']} missed after the warm-up (label 0 = normal): "
             f"precision {rate(d['precision'], 'flagged')}, recall {rate(d['recall'], 'anomalous')}, "
             f"F1 {rate(d['f1'], 'anomalous')}, false positive rate {rate(d['false_positive_rate'], 'normal')}")
    if s.scores and s.scores.get("all"):
        echo("scores       reconstruction MSE of this stream's samples")
        for line in score_lines(s.scores):
            echo("  " + line)


def _check_out_path(path, what: str) -> None:
    """Refuse before streaming when an output cannot be written (never create folders silently)."""
    if path:
        output_file(path, what)


def run_stream(port: str, data: str | None, mode: str, *, model_dir: str = "models/digits",
               limit=None, shuffle=False, seed=0, log=None, plot=None, encoding="int8",
               window=DEFAULT_WINDOW, timeout=1.0, progress=True, print_predictions=False,
               title=None, label_column=None, echo=click.echo, retries: int = 8,
               patience: float = 120.0, resume: str | None = None, layout=None, epochs=1,
               prefill=None, prefill_limit=None,
               resend_budget: int | None = None) -> tuple[Summary, list[Record]]:
    """The body of `tinyol stream` (also used by `tinyol demo`). data may be None with prefill
    (fill the replay buffer only).

    `resume`: the --log of an interrupted train run; its session (source, order, model,
    settings) is taken from LOG.wal, the samples it left in flight are settled first, and
    the rest is streamed, appending to LOG (tinyol.link.resume does all of it)."""
    res = None
    if resume:
        res = Resume(resume)
        session = res.session
        data, limit, shuffle, seed = session["data"], session["limit"], session["shuffle"], session["seed"]
        label_column, model_dir, encoding, mode = (session["label_column"], session["model"],
                                                   session["encoding"], "train")
        layout, epochs, prefill = session.get("layout"), int(session.get("epochs", 1)), None
        log = resume
    if not data and prefill is None:
        raise TinyolError("--data is required", hint="or --resume LOG to continue an interrupted run")
    _check_out_path(plot, "--plot")
    _check_out_path(log, "--log")
    manifest = load_manifest(model_dir)
    shape = manifest["input"].get("shape")
    classifier = manifest["head"]["mode"] == "classifier"
    pre = None
    if prefill is not None:
        pre = load_rows(prefill, limit=prefill_limit, shuffle=shuffle, seed=seed,
                        label_column=label_column, input_shape=shape, layout=layout)
        if pre[2] is None:
            raise TinyolError("--prefill needs a whole data set, not stdin")
        if classifier:
            check_labels(pre[3], int(manifest["head"]["max_classes"]), where=prefill)
    if data is None:
        rows, total, X, y, names = iter(()), 0, None, None, None
    else:
        rows, total, X, y, names = load_rows(data, limit=limit, shuffle=shuffle, seed=seed,
                                             label_column=label_column, input_shape=shape,
                                             layout=layout, epochs=epochs)
        if y is not None and classifier and mode in ("train", "eval"):
            check_labels(y, int(manifest["head"]["max_classes"]), where=data)
    names = names or [str(i) for i in range(int(manifest["head"].get("max_classes", 0)))]
    url = resolve_port(port)
    link = Link.open(url, timeout=max(timeout, 1.0), retries=retries, patience=patience)
    if res:
        try:
            rows = res.settle(link, list(rows), input_q(manifest), window=window, timeout=timeout,
                              retries=retries)
        except BaseException:
            link.close()
            raise
        total = len(rows)
        rows = iter(rows)
        if res.repaired:
            echo(f"repaired     {log}: its last line was cut by the interruption (removed; the "
                 "sample is settled again)")
    journal = None
    if res:
        journal = res.run_log()
    elif log:
        journal = RunLog.create(log, {"data": data, "limit": limit, "shuffle": shuffle, "seed": seed,
                                      "label_column": label_column, "model": str(model_dir),
                                      "encoding": encoding, "window": window, "layout": layout,
                                      "epochs": epochs}, train=mode == "train")
    with Device(link) as dev, journal or contextlib.nullcontext():
        if res:
            res.check(dev)
        st = Stream(dev, manifest, mode=mode, encoding=encoding, window=window, timeout=timeout,
                    model_dir=model_dir, retries=retries, patience=patience,
                    resend_budget=resend_budget)
        if pre is not None:
            prefill_replay(dev, manifest, pre, prefill, echo=echo)
        if data is None:
            return st.summary, st.records
        if X is not None:  # a whole data set: every row is checked before anything is sent
            check_samples(X, y if mode in ("train", "eval") else None, dev.info, mode)
        bar = None
        if progress:
            bar = tqdm(total=total, unit="sample", desc=mode, leave=False, dynamic_ncols=True,
                       file=sys.stderr)

        def on_record(r: Record) -> None:
            if print_predictions:
                lab = "" if r.label is None else f" label={r.label}"
                if r.error:  # the device refused it: no prediction to show
                    echo(f"{r.index} refused ({r.error}){lab}")
                elif r.autoencoder:
                    echo(f"{r.index} anomaly={r.prediction} score={r.score:.4g} "
                         f"threshold={r.threshold:.4g}{lab}")
                else:
                    echo(f"{r.index} prediction={r.prediction} confidence={r.confidence:.4f}{lab}")
            if bar is not None:
                bar.update(1)
                if st.summary.per_class and st.summary.samples % 10 == 0:
                    bar.set_postfix(acc=f"{st.summary.accuracy:.3f}")

        try:
            st.run(rows, on_record=on_record, live=X is None, journal=journal)
        finally:
            if bar is not None:
                bar.close()
            if plot and st.records and st.summary.per_class:
                plot_learning_curve(st.records, plot, title=title or f"{mode}: {data} on {dev.info.board}",
                                    class_names=names)
            elif plot and st.records and dev.info.head_mode == "autoencoder":
                ok = [r for r in st.records if r.score is not None]
                if ok:
                    plot_anomaly_scores([r.score for r in ok], [r.threshold for r in ok],
                                        [r.prediction == 1 for r in ok],
                                        None if any(r.label is None for r in ok) else [r.label for r in ok],
                                        plot, title=title or f"{mode}: {data} on {dev.info.board}")
    return st.summary, st.records


def prefill_replay(dev, manifest: dict, pre, source: str, echo=click.echo) -> tuple[int, int]:
    """REPLAY_ADD every row of `pre` (load_rows' result): the device stores each latent in its
    replay buffer (its policy decides which stay) without training. Returns (fill, capacity)."""
    rows, total = pre[0], pre[1]
    q = input_q(manifest)
    fill = cap = 0
    for n, (i, x, lab) in enumerate(rows):
        try:
            fill, cap = dev.replay_add(quantize(np.ravel(x), *q), int(lab))
        except DeviceError as e:
            raise TinyolError(f"--prefill {source}, row {i}: {e}",
                              hint="the firmware has no replay buffer: export with --replay-capacity N"
                              if "UNSUPPORTED" in str(e) else "see docs/protocol.md (REPLAY_ADD)") from None
    echo(f"prefill      {total} samples of {source} offered to the replay buffer (REPLAY_ADD, no "
         f"training): {fill}/{cap} slots filled")
    return fill, cap


@click.command("stream")
@port_option()
@click.option("--data", "-d", default=None, metavar="SOURCE",
              help="digits, digits:5-9@train, file.csv, file.npz, or - (stdin lines: features..., label).")
@click.option("--prefill", default=None, metavar="SOURCE",
              help="First fill the replay buffer with these samples (REPLAY_ADD: no training).")
@click.option("--prefill-limit", type=click.IntRange(min=1), default=None,
              help="Offer at most N --prefill samples (after --shuffle).")
@click.option("--epochs", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Send the source N times (reshuffled each epoch with --shuffle).")
@click.option("--layout", type=click.Choice(["channels-first", "flat"]), default=None,
              help="How the source's samples map to the model input when their shapes differ "
                   "(channels-first: (C, T) -> (T, C)); without it a mismatch is refused.")
@click.option("--train", "mode", flag_value="train", default=True,
              help="SAMPLE: the device predicts, then learns (prequential; default).")
@click.option("--eval", "mode", flag_value="eval", help="PREDICT over the set: accuracy per class.")
@click.option("--predict", "mode", flag_value="predict", help="PREDICT: print each prediction.")
@click.option("--limit", "-n", type=click.IntRange(min=1), default=None, help="Send at most N samples.")
@click.option("--shuffle", is_flag=True, help="Shuffle the source (with --seed).")
@click.option("--seed", type=int, default=0, show_default=True, help="Shuffle seed.")
@click.option("--log", type=click.Path(dir_okay=False), default=None,
              help="Write one JSON record per sample (jsonl).")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Save the accuracy curve (overall and per class) as PNG; for an autoencoder, "
                   "each sample's score against the threshold it met, flagged samples marked.")
@model_option()
@click.option("--encoding", type=click.Choice(["int8", "float32"]), default="int8", show_default=True,
              help="int8: quantized on the host (4x less traffic); float32: on the device.")
@click.option("--window", type=click.IntRange(1, DEVICE_CACHE), default=DEFAULT_WINDOW, show_default=True,
              help="Requests in flight (pipelining; the device caches 8 replies).")
@click.option("--timeout", type=Number(0.001, 3600.0), default=1.0, show_default=True,
              help="Initial (and largest) resend timeout in seconds; it adapts to the measured reply "
                   "time, as TCP's does.")
@click.option("--retries", type=click.IntRange(0, 100), default=8, show_default=True,
              help="Resends met by complete silence before the device counts as gone "
                   "(each waits twice as long as the one before).")
@click.option("--patience", type=Number(0.1, 86400.0), default=120.0, show_default=True,
              help="Seconds a live but damaged link may go without an answered request.")
@click.option("--resend-budget", type=click.IntRange(1, 10**7), default=None,
              help="Copies of one sample sent before the link counts as unusable (default: no "
                   "limit but --patience); the stream then stops, nothing lost: see --resume.")
@click.option("--resume", default=None, metavar="LOG", type=click.Path(dir_okay=False),
              help="Continue an interrupted --train run from its --log (LOG.wal): every sample "
                   "learned exactly once across the interruption.")
@click.option("--label-column", default=None, help="CSV: label column (name or index; default last).")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@json_option
def cmd(port, data, prefill, prefill_limit, epochs, layout, mode, limit, shuffle, seed, log, plot,
        model, encoding, window, timeout, retries, patience, resend_budget, resume, label_column,
        no_progress, as_json):
    """Stream labelled samples to a device and report accuracy.

    \b
    Examples:
      tinyol stream --port socket://127.0.0.1:4321 --data digits:5-9@train --shuffle --plot curve.png
      tinyol stream --port auto --data digits@test --eval
      sensor-reader | tinyol stream --port /dev/ttyACM0 --data - --log run.jsonl
      tinyol stream -p socket://127.0.0.1:4321 --prefill digits:0-4@train --prefill-limit 400 \
          --data digits:5-9@train --shuffle --epochs 2
    """
    if resume and (data or log or prefill):
        raise TinyolError("--resume LOG takes the source and the log from the interrupted run",
                          hint="drop --data/--log/--prefill (the run's settings are in LOG.wal)")
    if data is None and prefill is None and not resume:
        raise TinyolError("nothing to send: give --data SOURCE (and/or --prefill SOURCE)")
    try:
        summary, _ = run_stream(port, data, mode, model_dir=model, limit=limit, shuffle=shuffle,
                                seed=seed, log=log, plot=plot, encoding=encoding, window=window,
                                timeout=timeout, progress=not (no_progress or as_json),
                                print_predictions=(mode == "predict" and not as_json),
                                label_column=label_column, retries=retries, patience=patience,
                                resume=resume, layout=layout, epochs=epochs, prefill=prefill,
                                prefill_limit=prefill_limit, resend_budget=resend_budget,
                                echo=(lambda *a, **k: None) if as_json else click.echo)
    except TinyolError as e:
        s = getattr(e, "summary", None)
        if s is not None:  # the partial summary: what was sent, answered, learned
            print_summary(s, echo=lambda m: click.echo(m, err=True))
            if log or resume:
                click.echo(f"resume       tinyol stream --port {port} --resume {resume or log}", err=True)
        raise
    if data is None and not resume:
        return
    if as_json:
        emit_json(_clean(summary.as_dict()))
    else:
        autoencoder = load_manifest(model)["head"]["mode"] == "autoencoder"
        print_summary(summary, autoencoder=autoencoder)
        if plot and (summary.per_class or autoencoder and summary.samples):
            click.echo(f"plot         {plot}")
        if log:
            click.echo(f"log          {log}")
    if summary.interrupted:
        sys.exit(130)  # like an interrupted shell command (cli.main ignores click's Exit codes)
    if summary.rejected:  # a sample the device refused was not learned/predicted: not a success
        raise refused_error(summary)


def refused_error(s: Summary) -> TinyolError:
    """The run failed: the device refused some samples (they were not learned or predicted)."""
    n = sum(s.rejected.values())
    why = ", ".join(f"{v} x {k}" for k, v in s.rejected.items())
    busy = "ERR_BUSY" in s.rejected
    return TinyolError(
        f"the device refused {n} of {s.samples} samples ({why}): they were not "
        + ("learned" if s.mode == "train" else "predicted"),
        hint="a push was cut part way and fences the device: push again, or `tinyol load` / "
             "`tinyol reset` to roll back" if busy else "see docs/protocol.md for the status codes")


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    return v

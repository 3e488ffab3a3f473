"""`tinyol stream`: send samples to a device, learn or evaluate, show accuracy live.

Modes: --train (SAMPLE: the device predicts, then learns; prequential accuracy),
--eval (PREDICT over a set: accuracy per class), --predict (PREDICT: print the
predictions). The engine is tinyol.stream (pipelined, exactly-once, resets
detected); docs/streaming.md describes it.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click
import numpy as np

from ..errors import TinyolError
from ..options import emit_json, json_option, model_option, port_option, resolve_port
from ..stream import DEFAULT_WINDOW, DEVICE_CACHE, Record, Stream, Summary, check_samples


def load_manifest(model_dir: str) -> dict:
    p = Path(model_dir) / "manifest.json"
    try:
        manifest = json.loads(p.read_text())
    except FileNotFoundError:
        raise TinyolError(f"{model_dir}: no manifest.json (not a tinyol model directory)",
                          hint="pass the directory written by `tinyol export` with --model") from None
    except json.JSONDecodeError as e:
        raise TinyolError(f"{p}: not valid JSON ({e})") from None
    from ..versions import check_model

    check_model(manifest, str(model_dir))
    return manifest


def load_rows(data: str, *, limit: int | None, shuffle: bool, seed: int, label_column=None,
              input_shape=None, layout: str | None = None, epochs: int = 1):
    """(rows iterator of (index, x, label), count or None, X, y, class names).

    index is the row's position in the source (before shuffling), so logs of different runs can
    be compared row by row. input_shape: the model's (checked, see datasets.fit_layout). epochs:
    the source is sent that many times (reshuffled each epoch with seed + epoch)."""
    from ..datasets import fit_layout, iter_source, load_source

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
    base = np.random.default_rng(seed).permutation(len(y)) if shuffle else np.arange(len(y))
    base = base[:limit] if limit is not None else base  # --limit picks the rows once
    orders = [base] + [base[np.random.default_rng(seed + e).permutation(len(base))] if shuffle
                       else base for e in range(1, epochs)]
    order = np.concatenate(orders)
    rows = ((int(i), X[i], int(y[i])) for i in order)
    return rows, len(order), X[order], y[order], names


def print_summary(s: Summary, names: list[str] | None = None, echo=click.echo,
                  autoencoder: bool = False) -> None:
    name = (lambda c: names[c] if names and c < len(names) else str(c))  # noqa: E731
    state = " (interrupted)" if s.interrupted else ""
    echo(f"samples      {s.samples}{state}")
    if s.per_class:
        echo(f"accuracy     {s.accuracy:.4f}" + ("  (prequential: each sample predicted before it "
                                                  "is learned)" if s.mode == "train" else ""))
        for c, acc in s.class_accuracy().items():
            echo(f"  class {name(c):>4}  {acc:.4f}  ({s.per_class[c][1]} samples)")
    if autoencoder or s.anomaly_counts or s.flagged:
        echo(f"anomalies    {s.flagged} flagged")
        if s.anomaly_counts:
            rate = lambda v, what: (f"{v:.4f}" if math.isfinite(v)  # noqa: E731
                                    else f"n/a (no {what} samples in the stream)")
            echo(f"  detection rate {rate(s.detection_rate, 'anomalous')}, false positive rate "
                 f"{rate(s.false_positive_rate, 'normal')} (label 0 = normal)")
    echo(f"throughput   {s.samples_per_s:.1f} samples/s, {s.bytes_per_s:.0f} bytes/s "
         f"({s.bytes_out} out, {s.bytes_in} in, {s.seconds:.2f} s)")
    echo(f"link         {s.retries} resends, {s.duplicates} duplicates answered from the device's cache")
    if s.device_samples_seen is not None and s.mode == "train":
        replay = f", replay buffer {s.replay_fill}" if s.replay_fill else ""
        if autoencoder:
            echo(f"device       {s.device_samples_seen} samples scored in total{replay}")
        else:
            echo(f"device       {s.device_samples_seen} samples learned in total, "
                 f"{s.device_classes} classes active{replay}")
    for k, v in s.rejected.items():
        echo(f"rejected     {v} x {k}")


def run_stream(port: str, data: str, mode: str, *, model_dir: str = "models/digits",
               limit=None, shuffle=False, seed=0, log=None, plot=None, encoding="int8",
               window=DEFAULT_WINDOW, timeout=1.0, progress=True, print_predictions=False,
               title=None, label_column=None, echo=click.echo, layout=None, epochs=1,
               prefill=None, prefill_limit=None) -> tuple[Summary, list[Record]]:
    """The body of `tinyol stream` (also used by `tinyol demo`). data may be None with prefill
    (fill the replay buffer only)."""
    from ..datasets import check_labels
    from ..device import Device

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
    logf = open(log, "w", buffering=1) if log else None  # line-buffered: `tail -f` works
    with Device.open(resolve_port(port), timeout=max(timeout, 1.0)) as dev:
        st = Stream(dev, manifest, mode=mode, encoding=encoding, window=window, timeout=timeout,
                    model_dir=model_dir)
        if pre is not None:
            prefill_replay(dev, manifest, pre, prefill, echo=echo)
        if data is None:
            return st.summary, st.records
        if X is not None:  # a whole data set: every row is checked before anything is sent
            check_samples(X, y if mode in ("train", "eval") else None, dev.info, mode)
        bar = None
        if progress:
            from tqdm import tqdm
            bar = tqdm(total=total, unit="sample", desc=mode, leave=False, dynamic_ncols=True,
                       file=sys.stderr)

        def on_record(r: Record) -> None:
            if logf:
                logf.write(r.json() + "\n")
            if print_predictions:
                lab = "" if r.label is None else f" label={r.label}"
                echo(f"{r.index} prediction={r.prediction} confidence={r.confidence:.4f}{lab}")
            if bar is not None:
                bar.update(1)
                if st.summary.per_class and st.summary.samples % 10 == 0:
                    bar.set_postfix(acc=f"{st.summary.accuracy:.3f}")

        try:
            st.run(rows, on_record=on_record, live=X is None)
        finally:
            if bar is not None:
                bar.close()
            if logf:
                logf.close()
            if plot and st.records and st.summary.per_class:
                from ..plotting import plot_learning_curve
                plot_learning_curve(st.records, plot, title=title or f"{mode}: {data} on {dev.info.board}",
                                    class_names=names)
    return st.summary, st.records


def prefill_replay(dev, manifest: dict, pre, source: str, echo=click.echo) -> tuple[int, int]:
    """REPLAY_ADD every row of `pre` (load_rows' result): the device stores each latent in its
    replay buffer (its policy decides which stay) without training. Returns (fill, capacity)."""
    from ..device import quantize
    from ..protocol import DeviceError
    from ..stream import model_input_q

    rows, total = pre[0], pre[1]
    q = model_input_q(manifest)
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
@click.option("--epochs", type=click.IntRange(min=1), default=1, show_default=True,
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
              help="Save the accuracy curve (overall and per class) as PNG.")
@model_option()
@click.option("--encoding", type=click.Choice(["int8", "float32"]), default="int8", show_default=True,
              help="int8: quantized on the host (4x less traffic); float32: on the device.")
@click.option("--window", type=click.IntRange(1, DEVICE_CACHE), default=DEFAULT_WINDOW, show_default=True,
              help="Requests in flight (pipelining; the device caches 8 replies).")
@click.option("--timeout", type=float, default=1.0, show_default=True,
              help="Seconds before a request is resent.")
@click.option("--label-column", default=None, help="CSV: label column (name or index; default last).")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@json_option
def cmd(port, data, prefill, prefill_limit, epochs, layout, mode, limit, shuffle, seed, log, plot,
        model, encoding, window, timeout, label_column, no_progress, as_json):
    """Stream labelled samples to a device and report accuracy.

    \b
    Examples:
      tinyol stream --port socket://127.0.0.1:4321 --data digits:5-9@train --shuffle --plot curve.png
      tinyol stream --port auto --data digits@test --eval
      sensor-reader | tinyol stream --port /dev/ttyACM0 --data - --log run.jsonl
      tinyol stream -p socket://127.0.0.1:4321 --prefill digits:0-4@train --prefill-limit 400 \
          --data digits:5-9@train --shuffle --epochs 2
    """
    if data is None and prefill is None:
        raise TinyolError("nothing to send: give --data SOURCE (and/or --prefill SOURCE)")
    summary, _ = run_stream(port, data, mode, model_dir=model, limit=limit, shuffle=shuffle,
                            seed=seed, log=log, plot=plot, encoding=encoding, window=window,
                            timeout=timeout, progress=not (no_progress or as_json),
                            print_predictions=(mode == "predict" and not as_json),
                            label_column=label_column, layout=layout, epochs=epochs,
                            prefill=prefill, prefill_limit=prefill_limit,
                            echo=(lambda *a, **k: None) if as_json else click.echo)
    if data is None:
        return
    if as_json:
        emit_json(_clean(summary.as_dict()))
        return
    print_summary(summary, autoencoder=load_manifest(model)["head"]["mode"] == "autoencoder")
    if plot and summary.per_class:
        click.echo(f"plot         {plot}")
    if log:
        click.echo(f"log          {log}")
    if summary.interrupted:
        sys.exit(130)  # like an interrupted shell command (cli.main ignores click's Exit codes)


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    return v

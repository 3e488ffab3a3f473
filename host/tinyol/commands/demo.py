"""`tinyol demo` (and `make demo`): watch a board learn five new classes.

1. build the default model's firmware (models/digits: a CNN pretrained on
   digits 0-4) for the Nucleo-L476RG (test build) and boot it in QEMU (or run
   it natively with --emulator native);
2. measure accuracy on all ten classes (held-out digits@test, PREDICT);
3. stream a few hundred training digits of the known classes 0-4: the device
   learns them too, and they fill its latent replay buffer (the device keeps
   past backbone outputs only of samples it has learned);
4. stream digits 5-9 (training split, never seen in pretraining; shuffled with
   a fixed seed; each sample once): the device predicts, then learns;
5. measure again and print before/after per class; then reset the learner and
   repeat 3-5 without replay (naive TinyOL) to show what replay protects.
The learning curve goes to build/demo/curve.png, every sample to build/demo/run.jsonl.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import click
import numpy as np

from ..checks import U32_MAX, output_dir
from ..data.datasets import load_source
from ..errors import TinyolError
from ..link.device import Device
from ..link.stream import Stream
from ..memory import replay_storage
from ..model.folder import load_manifest
from ..options import resolve_model_option
from ..plotting import plot_learning_curve
from ..targets import emulator as emu
from ..targets.firmware import BuildConfig, build


def _title(text: str) -> None:
    click.secho(f"\n== {text}", bold=True)


def _rows(X, y, start=0):
    return ((start + i, X[i], int(y[i])) for i in range(len(y)))


def _eval(dev, manifest, X, y, window):
    st = Stream(dev, manifest, mode="eval", window=window, timeout=3.0)
    s = st.run(_rows(X, y))
    return s


def _train(dev, manifest, X, y, window, start=0, log=None, records=None):
    st = Stream(dev, manifest, mode="train", window=window, timeout=3.0)

    def on(r):
        if log:
            log.write(r.json() + "\n")

    s = st.run(_rows(X, y, start), on_record=on)
    if records is not None:
        records.extend(st.records)
    return s


@click.command("demo")
@click.option("--emulator", type=click.Choice(["qemu", "native"]), default="qemu", show_default=True,
              help="Run the firmware in QEMU (Cortex-M4, STM32L4 machine) or as a host process.")
@click.option("--board", default="nucleo_l476rg", show_default=True, help="Board (QEMU).")
@click.option("--model", "model_dir", default=None, metavar="DIR", callback=resolve_model_option,
              help="Model directory (pretrained on classes 0-4 of digits).  [default: the shipped digits]")
@click.option("--out", type=click.Path(file_okay=False), default="build/demo", show_default=True,
              help="Where the curve (PNG) and the per-sample log (jsonl) go.")
@click.option("--seed", type=click.IntRange(0, U32_MAX), default=1, show_default=True, help="Shuffle seed of the streams.")
@click.option("--prefill", type=click.IntRange(0, 100000), default=400, show_default=True,
              help="Class 0-4 training samples streamed first (they fill the replay buffer).")
@click.option("--compare/--no-compare", default=True, show_default=True,
              help="Also run without replay (naive TinyOL) for comparison.")
@click.option("--window", type=click.IntRange(1, 7), default=4, show_default=True, help="Requests in flight.")
def cmd(emulator, board, model_dir, out, seed, prefill, compare, window):
    """Build, boot in QEMU, stream digits 5-9 and show the board learn them."""
    t_start = time.monotonic()
    output_dir(out, "--out")
    manifest = load_manifest(model_dir)
    known = manifest["head"].get("classes", [])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    target_board = "native" if emulator == "native" else board

    _title(f"1/6 build the firmware: model {model_dir} ({manifest['name']}, pretrained on classes "
           f"{', '.join(known)}) for {target_board}")
    res = build(BuildConfig(target_board, model_dir, None, emulator == "qemu"))
    click.echo(f"   {res.elf if emulator == 'qemu' else res.program}")

    X_test, y_test, names = load_source("digits@test")
    X_new, y_new, _ = load_source("digits:5-9@train")
    X_old, y_old, _ = load_source("digits:0-4@train")
    rng = np.random.default_rng(seed)
    p = rng.permutation(len(y_new))
    X_new, y_new = X_new[p], y_new[p]
    p = rng.permutation(len(y_old))[:prefill]
    X_old, y_old = X_old[p], y_old[p]

    _title(f"2/6 boot it ({'QEMU ' + emu.QEMU_MACHINE if emulator == 'qemu' else 'native process'})")
    if emulator == "qemu":
        target = emu.start_qemu(board, res.elf, timeout=900)
    else:
        target = emu.start_native(res.program, timeout=900)
    log_path, curve_path = out / "run.jsonl", out / "curve.png"
    try:
        with target, Device.open(target.url, timeout=5) as dev:
            i = dev.info
            click.echo(f"   {i.board}: firmware {i.fw_version}, model {i.model} "
                       f"(hash 0x{i.model_hash:08x}), up to {i.max_classes} classes, "
                       f"replay {replay_storage(i.latent_dim, i.replay_bits)}, boot {i.boot_count}")
            settings = {k: dev.get(k) for k in ("mode", "lr", "n_new", "n_old")}
            click.echo(f"   learner: mode {settings['mode']} (2 = SGD + latent replay), "
                       f"lr {settings['lr']:g}, {settings['n_new']} new + {settings['n_old']} "
                       f"replayed samples per update")

            _title(f"3/6 accuracy before learning: {len(y_test)} held-out digits (digits@test), "
                   "all ten classes")
            before = _eval(dev, manifest, X_test, y_test, window)
            click.echo(f"   accuracy {before.accuracy:.3f} (classes 5-9 are unknown to the model)")

            records: list = []
            with open(log_path, "w") as log:
                _title(f"4/6 stream {len(y_old)} training digits of the known classes 0-4 "
                       "(they fill the replay buffer)")
                s_old = _train(dev, manifest, X_old, y_old, window, 0, log, records)
                st = dev.stats()
                click.echo(f"   prequential accuracy {s_old.accuracy:.3f}; replay buffer "
                           f"{st.replay_fill}/{st.replay_capacity}")
                _title(f"5/6 stream {len(y_new)} training digits of the NEW classes 5-9, each once "
                       f"(shuffled, seed {seed}): predict, then learn")
                s_new = _train(dev, manifest, X_new, y_new, window, len(y_old), log, records)
                st = dev.stats()
                click.echo(f"   prequential accuracy {s_new.accuracy:.3f} "
                           f"({s_new.samples_per_s:.0f} samples/s, {s_new.retries} resends); "
                           f"device learned {st.samples_seen} samples, {st.n_active} classes active")

            _title("6/6 accuracy after learning (digits@test)")
            after = _eval(dev, manifest, X_test, y_test, window)
            nore = None
            if compare:
                click.echo("   ... and the same streams again without replay (naive TinyOL): "
                           "RESET, MODE=1")
                dev.reset()
                dev.set("mode", 1)
                _train(dev, manifest, X_old, y_old, window)
                _train(dev, manifest, X_new, y_new, window)
                nore = _eval(dev, manifest, X_test, y_test, window)
                dev.reset()
                dev.set("mode", settings["mode"])
    except KeyboardInterrupt:
        raise TinyolError("demo interrupted") from None

    b, a = before.class_accuracy(), after.class_accuracy()
    n = nore.class_accuracy() if nore else {}
    head = f"   {'class':>5}  {'test n':>6}  {'before':>6}  {'after':>6}" + (
        "  no replay" if nore else "")
    click.echo(head)
    for c in sorted(a):
        tag = " (new)" if str(c) not in known else ""
        row = (f"   {names[c]:>5}  {before.per_class[c][1]:>6}  {b[c]:>6.2f}  {a[c]:>6.2f}"
               + (f"  {n[c]:>9.2f}" if nore else "") + tag)
        click.echo(row)
    click.echo(f"   {'all':>5}  {before.samples:>6}  {before.accuracy:>6.3f}  {after.accuracy:>6.3f}"
               + (f"  {nore.accuracy:>9.3f}" if nore else ""))
    plot_learning_curve(records, curve_path, class_names=names,
                        title=f"prequential accuracy on {target_board} "
                              f"({'QEMU' if emulator == 'qemu' else 'native'})",
                        marks={len(y_old) + 0.5: "new classes 5-9 start"})
    click.echo(f"\n   learning curve: {curve_path}\n   per-sample log: {log_path}")
    click.echo(f"   done in {time.monotonic() - t_start:.0f} s")
    summary = {"before": before.as_dict(), "after": after.as_dict(),
               "no_replay": nore.as_dict() if nore else None}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))

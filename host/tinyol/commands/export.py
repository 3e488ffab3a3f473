"""`tinyol export`: split a Keras model, quantize its backbone to int8, write C + head + config."""
from __future__ import annotations

import warnings

import click

from ..checks import U32_MAX, Number
from ..model.codegen import FC_WEIGHTS
from ..model.export import DEFAULT_LEARNER, REPLAY_POLICIES, ExportSettings, export_model


def _split_arg(value):
    return int(value) if value is not None and value.lstrip("-").isdigit() else value


@click.command("export")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--out", "-o", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Output directory (created if missing).")
@click.option("--split", default=None, metavar="LAYER",
              help="Head layer name or index (default: the last Dense layer; for a .tflite: its "
                   "last FULLY_CONNECTED, 'none' = use the whole file as the backbone).")
@click.option("--calib", default=None, metavar="SPEC",
              help="Calibration data: digits[:a-b][@train], sensor, FILE.csv, FILE.npz "
                   "(default: random inputs).")
@click.option("--label-column", default=None, help="CSV label column (name or index; default last).")
@click.option("--classes", type=click.IntRange(1, 65535), default=None,
              help="Initial classes (default: the head's outputs; required for a .tflite used whole).")
@click.option("--max-classes", type=click.IntRange(1, 65535), default=None,
              help="Head rows allocated on the device (classes it may learn; default --classes).")
@click.option("--mode", type=click.Choice(["auto", "classifier", "autoencoder"]), default="auto",
              show_default=True, help="Head mode; auto = autoencoder if the head rebuilds the input.")
@click.option("--name", default=None,
              help="The name the device reports in `tinyol info` (default: the --out folder's name, "
                   "so exports of one .keras into two folders are told apart).")
@click.option("--board", default=None, metavar="BOARD",
              help="Check the memory against this board (exactly as the firmware reserves it) and size "
                   "the replay buffer to it.")
@click.option("--replay-capacity", type=click.IntRange(0, 65535), default=None,
              help="Latents kept in the replay buffer (default: the largest that fits --board; "
                   f"{DEFAULT_LEARNER['replay_capacity']} without a board; none for an autoencoder).")
@click.option("--replay-bits", type=click.Choice(["32", "8", "7", "4"]),
              default=str(DEFAULT_LEARNER["replay_bits"]), show_default=True,
              help="Storage per latent value: 32 float, 8 int8, 7 packed, 4: 4-bit codes on per-channel grids fitted to the calibration latents (docs/adaptive.md).")
@click.option("--replay-codec", default=None, metavar="pq:M",
              help="Product-quantized replay (LifeLearner): the latent cut into M sub-vectors, each "
                   "stored as one byte, the index of its nearest of 256 codewords learned by k-means "
                   "on the calibration latents (the codebook, 256 B per latent value, in flash; "
                   "docs/adaptive.md). Replaces --replay-bits.")
@click.option("--replay-n-new", type=click.IntRange(1, 65535), default=DEFAULT_LEARNER["replay_n_new"], show_default=True)
@click.option("--replay-n-old", type=click.IntRange(0, 65535), default=DEFAULT_LEARNER["replay_n_old"], show_default=True)
@click.option("--lr", type=Number(0.0, f32=True), default=DEFAULT_LEARNER["lr"], show_default=True,
              help="Learning rate on the device.")
@click.option("--momentum", type=Number(0.0, 1.0), default=DEFAULT_LEARNER["momentum"], show_default=True)
@click.option("--weight-decay", type=Number(0.0, f32=True), default=DEFAULT_LEARNER["weight_decay"],
              show_default=True)
@click.option("--seed", type=click.IntRange(0, U32_MAX), default=DEFAULT_LEARNER["seed"], show_default=True,
              help="Device RNG seed (replay sampling).")
@click.option("--stage-train", default=None, metavar="SPEC",
              help="What of an adaptive stage (--split before the head) trains on the device: "
                   "'all' (default), 'bias' (the classifier all, every other layer its biases), "
                   "or LAYER[:all|bias|frozen],... (named layers as given, the others biases "
                   "only), or 'auto' (chosen from the --calib data to fit --board: "
                   "contribution analysis on the twin). What does not train stays in flash: "
                   "the lean stage (docs/adaptive.md).")
@click.option("--stage-data", default=None, metavar="SOURCE",
              help="With --stage-train auto: labelled data to choose on (default: --calib). "
                   "Samples of classes the model does not know yet (labels from its row count "
                   "up to --max-classes) are used as the new classes; without any, some known "
                   "classes are left out to play them.")
@click.option("--stage-budget", type=click.IntRange(1, None), default=None, metavar="BYTES",
              help="With --stage-train auto: the most learner RAM (bytes, without the replay "
                   "buffer) the chosen stage may take; the board's room is the other limit.")
@click.option("--stage-weights", type=click.Choice(["float32", "int16"]), default="float32",
              show_default=True,
              help="How an adaptive stage keeps its trained weights in RAM: float32 (with a gradient "
                   "buffer: 8 B per trained parameter) or int16 (power-of-two scales, each sample "
                   "updates them at once with stochastic rounding: 2 B per trained parameter, no "
                   "momentum; docs/adaptive.md, \"Lean trained weights\").")
@click.option("--stage-lr-scale", type=Number(0.0, f32=True), default=0.0, show_default=True,
              help="The adaptive stage's layers below the classifier learn at lr x this (0: at lr, "
                   "as the classifier).")
@click.option("--fc-weights", type=click.Choice(list(FC_WEIGHTS)), default=FC_WEIGHTS[0], show_default=True,
              help="How FULLY_CONNECTED weights are stored in flash: int8 (smallest) or int16, "
                   "pre-widened: twice their flash, fewer instructions (docs/kernels.md).")
@click.option("--conv-pixels", type=click.IntRange(0, 16), default=0, show_default=True, metavar="N",
              help="CONV_2D pixel blocks: each filter pair is read from flash once per N output "
                   "pixels (2-16, even; more RAM in the arena, fewer flash wait states). 0: the "
                   "largest block that leaves the arena as small as with 2 (docs/kernels.md).")
@click.option("--rehearse", type=click.IntRange(0, 255), default=DEFAULT_LEARNER["rehearse"],
              show_default=True,
              help="Classifier (head or adaptive stage): replay-only training steps the device runs "
                   "while idle after each learned sample (docs/adaptive.md, \"Recipe\"); "
                   "`tinyol set --rehearse` changes it on the device.")
@click.option("--replay-policy", type=click.Choice(list(REPLAY_POLICIES)),
              default=DEFAULT_LEARNER["replay_policy"], show_default=True,
              help="Which latents stay in the replay buffer: reservoir (a uniform sample of the "
                   "stream), balanced (class-balanced reservoir) or ar1 (Latent Replay's rule); "
                   "`tinyol set --replay-policy` changes it on the device.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the result line.")
def cmd(model, out_dir, split, calib, label_column, classes, max_classes, mode, name, board,
        replay_capacity, replay_bits, replay_codec, replay_n_new, replay_n_old, lr, momentum, weight_decay, seed,
        stage_train, stage_data, stage_budget, stage_weights, stage_lr_scale, fc_weights, conv_pixels,
        rehearse, replay_policy, quiet):
    """Export MODEL (.keras/.h5, or an int8 .tflite: a classifier is split at its last
    FULLY_CONNECTED, anything else is used whole as the backbone) to --out DIR.

    \b
    Examples:
      tinyol export models/digits/digits.keras --out build/digits --calib digits:0-4@train \\
          --max-classes 10 --board nucleo_l476rg
      tinyol export kws_int8.tflite --out build/kws --max-classes 14 --board nucleo_l476rg
      tinyol export backbone.tflite --out build/bb --split none --classes 12
    """
    warnings.filterwarnings("ignore")
    echo = (lambda s: None) if quiet else (lambda s: click.echo(s, err=True))
    settings = ExportSettings(split=_split_arg(split), calib=calib, classes=classes,
                              max_classes=max_classes, board=board, mode=mode, name=name,
                              label_column=label_column, replay_capacity=replay_capacity,
                              replay_bits=int(replay_bits), replay_codec=replay_codec, lr=lr, momentum=momentum,
                              weight_decay=weight_decay, replay_n_new=replay_n_new,
                              replay_n_old=replay_n_old, seed=seed,
                              stage_train=stage_train, stage_data=stage_data, stage_budget=stage_budget,
                              stage_weights=stage_weights, stage_lr_scale=stage_lr_scale,
                              fc_weights=fc_weights, conv_pixels=conv_pixels, rehearse=rehearse,
                              replay_policy=replay_policy)
    m = export_model(model, out_dir, settings, echo=echo)
    mem = m["memory"]
    click.echo(f"{m['name']}: {m['input']['size']} -> {m['latent']['dim']} -> "
               f"{m['head']['mode']} head ({m['head']['init_classes']}/{m['head']['max_classes']} rows), "
               f"{mem['macs']} MACs, RAM {mem['ram_bytes']} B, flash {mem['flash_bytes']} B"
               + (f", fits {board}" if board else "") + f" -> {out_dir}")

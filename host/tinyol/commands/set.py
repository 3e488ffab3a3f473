"""`tinyol set`: read or change a device's learner settings (SET/GET, docs/protocol.md)."""
from __future__ import annotations

import click

from .._defs import SETTING_TEXT, Setting
from ..checks import TIMEOUT, U32_MAX, Number
from ..errors import TinyolError
from ..learn.learner import POLICIES
from ..link.device import Device
from ..link.protocol import DeviceError
from ..options import emit_json, json_option, port_option, resolve_port

MODES = {"frozen": 0, "sgd": 1, "replay": 2}
MODE_NAMES = {v: k for k, v in MODES.items()}
POLICY_NAMES = {v: k for k, v in POLICIES.items()}
# settings given and shown by name: setting -> (name -> wire value, wire value -> name)
NAMED = {Setting.MODE: (MODES, MODE_NAMES), Setting.REPLAY_POLICY: (POLICIES, POLICY_NAMES)}
# settings a firmware from before them does not know (GET refused): left out when reading all
NEWER = (Setting.REHEARSE, Setting.REPLAY_POLICY)

# option name -> (setting, click type, help); the order is the order they are applied and shown
OPTIONS = [
    ("mode", Setting.MODE, click.Choice(list(MODES)),
     "frozen: predict only; sgd: TinyOL (fresh samples only); replay: SGD + latent replay."),
    ("lr", Setting.LR, Number(f32=True), SETTING_TEXT[Setting.LR]),
    ("momentum", Setting.MOMENTUM, Number(f32=True),
     SETTING_TEXT[Setting.MOMENTUM] + " (> 0 needs a firmware exported with --momentum > 0)."),
    ("weight-decay", Setting.WEIGHT_DECAY, Number(f32=True), SETTING_TEXT[Setting.WEIGHT_DECAY]),
    ("clip-norm", Setting.CLIP_NORM, Number(f32=True), SETTING_TEXT[Setting.CLIP_NORM]),
    ("n-new", Setting.N_NEW, click.IntRange(1, U32_MAX), SETTING_TEXT[Setting.N_NEW]),
    ("n-old", Setting.N_OLD, click.IntRange(0, U32_MAX), SETTING_TEXT[Setting.N_OLD]),
    ("threshold-k", Setting.THRESHOLD_K, Number(f32=True),
     "Anomaly threshold (autoencoder): flag scores above mean + k * std."),
    ("ema-alpha", Setting.EMA_ALPHA, Number(f32=True), SETTING_TEXT[Setting.EMA_ALPHA]),
    ("warmup", Setting.WARMUP, click.IntRange(0, U32_MAX), SETTING_TEXT[Setting.WARMUP]),
    ("train-anomalies", Setting.TRAIN_ANOMALIES, click.IntRange(0, 1), SETTING_TEXT[Setting.TRAIN_ANOMALIES]),
    ("autosave", Setting.AUTOSAVE, click.IntRange(0, U32_MAX), SETTING_TEXT[Setting.AUTOSAVE]),
    ("rehearse", Setting.REHEARSE, click.IntRange(0, 255),
     "Classifier: replay-only training steps the device runs while idle after each "
     "learned sample (0..255), 0 = off."),
    ("replay-policy", Setting.REPLAY_POLICY, click.Choice(list(POLICIES)),
     "Which latents stay in the replay buffer from now on: reservoir, balanced "
     "(class-balanced) or ar1; the latents already stored stay."),
]


def _hint(key: str, value, dev) -> str:
    """Why a device refuses a value it accepts in principle (what the firmware was built with)."""
    if key == "momentum" and value:
        return ("this firmware reserves no momentum buffers (exported with momentum 0): export again "
                "with --momentum > 0 to use momentum")
    if key == "n-old":
        return ("the firmware makes room for the --replay-n-old it was exported with; export again "
                "with a larger --replay-n-old")
    if key == "n-new":
        return "n_new must be 1..the --replay-n-new the model was exported with"
    if key == "rehearse":
        return ("idle rehearsal needs a classifier and a firmware of this tinyol or later (an "
                "adaptive stage's firmware had it first)")
    if key == "replay-policy":
        return "the replay policy is a setting in firmware of this tinyol or later"
    return "see `tinyol set --help` for each setting's range"


def read_all(dev) -> dict:
    out = {}
    for name, s, _, _ in OPTIONS:
        try:
            v = dev.get(s)
        except DeviceError:
            if s in NEWER:  # firmware from before the setting: it has none
                continue
            raise
        out[name.replace("-", "_")] = NAMED[s][1].get(v, v) if s in NAMED else v
    return out


def apply(dev, changes: dict) -> dict:
    """Apply {option name: value} in OPTIONS order; refusals become one line + hint."""
    for name, s, _, _ in OPTIONS:
        if name not in changes or changes[name] is None:
            continue
        value = changes[name]
        raw = NAMED[s][0][value] if s in NAMED else value
        try:
            dev.set(s, raw)
        except DeviceError as e:
            raise TinyolError(f"the device refused {name} = {value}: {e}",
                              hint=_hint(name, value, dev)) from None
    return read_all(dev)


def _options(f):
    for name, s, typ, text in reversed(OPTIONS):
        f = click.option(f"--{name}", name.replace("-", "_"), type=typ, default=None, help=text)(f)
    return f


@click.command("set")
@port_option()
@_options
@json_option
@click.option("--timeout", type=TIMEOUT, default=2.0, show_default=True, help="Seconds per attempt.")
def cmd(port, as_json, timeout, **values):
    """Change a device's learner settings; with no setting given, print them all.

    Settings apply at once (a partly filled mini-batch is dropped) and last until the device
    resets or `tinyol reset` restores the exported ones.

    \b
    Examples:
      tinyol set --port socket://127.0.0.1:4321 --mode sgd --lr 0.01
      tinyol set --port /dev/ttyACM0 --threshold-k 4
      tinyol set --port /dev/ttyACM0 --json
    """
    changes = {k.replace("_", "-"): v for k, v in values.items() if v is not None}
    with Device(resolve_port(port), timeout=timeout) as dev:
        now = apply(dev, changes) if changes else read_all(dev)
        head = dev.info.head_mode
    if as_json:
        emit_json(now)
        return
    for k, v in now.items():
        if head == "classifier" and k in ("threshold_k", "ema_alpha", "warmup", "train_anomalies"):
            continue
        mark = " *" if k.replace("_", "-") in changes else ""
        click.echo(f"{k:>16}: {v:g}{mark}" if isinstance(v, float) else f"{k:>16}: {v}{mark}")

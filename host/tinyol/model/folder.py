"""The exported model folder (``tinyol export --out DIR``): the one reader of its manifest.json.

Every tool that takes ``--model DIR`` asks this module, never the file:

* :func:`read_manifest`: the JSON, with one clear error for a missing or broken file;
* :func:`load_manifest`: read, then refuse another model format (:func:`check_format`) and
  fields streaming relies on that are missing or out of range (:func:`check_manifest`);
* :func:`check_learner`: the learner settings are numbers a board could hold (the numpy twin);
* :func:`input_q` / :func:`quantize`: the model's input quantization, as the device does it;
* :func:`check_device_model`: a connected device runs this folder's model (INFO's hash), so the
  host quantizes inputs with the right parameters.

The writer is tinyol.model.export (``export_model``, ``refresh_config``).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

from .. import __version__
from ..errors import TinyolError
from ..versions import model_format, parse

MANIFEST = "manifest.json"
_REEXPORT = "re-export the model (`tinyol export`); manifest.json is written by it, not by hand"


def read_manifest(model_dir: str | os.PathLike) -> dict:
    """The folder's manifest.json as a dict (no checks of its contents)."""
    p = Path(model_dir) / MANIFEST
    if Path(model_dir).exists() and not Path(model_dir).is_dir():
        raise TinyolError(f"--model {model_dir} is a file, not a model folder",
                          hint="pass the directory written by `tinyol export` with --model")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TinyolError(f"{model_dir}: no manifest.json (not a tinyol model directory)",
                          hint="pass the directory written by `tinyol export` with --model") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TinyolError(f"{p}: not valid JSON ({e})",
                          hint="re-export the model (`tinyol export`) to write it again") from None
    except OSError as e:
        raise TinyolError(f"cannot read {p}: {e.strerror or e}") from None


def load_manifest(model_dir: str | os.PathLike) -> dict:
    """The manifest of a folder this tinyol can build and stream (format and fields checked)."""
    manifest = read_manifest(model_dir)
    check_format(manifest, str(model_dir))
    check_manifest(manifest, Path(model_dir) / MANIFEST)
    return manifest


def check_format(manifest: dict, where: str) -> None:
    """Refuse a model exported by a tinyol with another model format (no version: accepted,
    it predates versioned manifests)."""
    exported = manifest.get("tinyol_version") if isinstance(manifest, dict) else None
    if exported is None:
        return
    if model_format(exported) != model_format(__version__):
        older = parse(exported) < parse(__version__)
        raise TinyolError(
            f"{where} was exported by tinyol {exported}; this tinyol {__version__} reads models of "
            f"format {'.'.join(map(str, model_format(__version__)))}.x only",
            hint=("re-export it with this tinyol: tinyol export MODEL.keras --out DIR" if older else
                  f"upgrade tinyol to {exported} or newer (pip install -U tinyol), or re-export "
                  "the model with this one"))


def check_manifest(manifest, where="manifest.json") -> None:
    """The fields streaming relies on, with types and sane values, before anything uses them."""
    def bad(what: str) -> TinyolError:
        return TinyolError(f"{where}: {what}", hint=_REEXPORT)
    if not isinstance(manifest, dict):
        raise bad("not a JSON object")
    h = manifest.get("model_hash")
    if not isinstance(h, int) or isinstance(h, bool) or not 0 <= h <= 0xFFFFFFFF:
        raise bad("no model_hash (a 32-bit integer)" if h is None else f"model_hash {h!r} is not a 32-bit integer")
    i = manifest.get("input")
    if not isinstance(i, dict) or not isinstance(i.get("scale"), (int, float)) \
            or not isinstance(i.get("zero_point"), int):
        raise bad("no input scale/zero_point")
    if not (math.isfinite(i["scale"]) and i["scale"] > 0) or not -128 <= i["zero_point"] <= 127:
        raise bad(f"input scale {i['scale']!r} / zero point {i['zero_point']!r} out of range")
    head = manifest.get("head", {})
    mc = head.get("max_classes", 0) if isinstance(head, dict) else None
    if not isinstance(mc, int) or not 0 <= mc <= 0xFFFF:
        raise bad(f"head.max_classes {mc!r} is not 0..65535")


# Bounds of the learner section: what the firmware's u16 fields and the device's RAM allow,
# checked before the twin sizes a replay buffer or a head from them.
_LEARNER_BOUNDS = {"replay_capacity": (0, 0xFFFF), "replay_bits": (4, 255), "replay_n_new": (1, 0xFFFF),
                   "replay_n_old": (0, 0xFFFF)}


def check_learner(manifest: dict, where: str) -> None:
    """The manifest's learner settings and head sizes are numbers a board could hold."""
    L_ = manifest.get("learner", {})
    if not isinstance(L_, dict):
        raise TinyolError(f"{where}: learner is not a JSON object", hint="re-export the model")
    for k, (lo, hi) in _LEARNER_BOUNDS.items():
        v = L_.get(k)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi):
            raise TinyolError(f"{where}: learner.{k} = {v!r} is not an integer {lo}..{hi}",
                              hint="re-export the model (`tinyol export`); manifest.json is written by it")
    dim = manifest.get("latent", {}).get("dim")
    if not isinstance(dim, int) or not 1 <= dim <= 0xFFFF:
        raise TinyolError(f"{where}: latent.dim = {dim!r} is not an integer 1..65535",
                          hint="re-export the model (`tinyol export`)")
    bits = L_.get("replay_bits")  # 32, 8, 7, 4 or PQ: 128 + a sub-vector length dividing dim
    if bits is not None and bits not in (32, 8, 7, 4) and not (bits > 128 and dim % (bits - 128) == 0):
        raise TinyolError(f"{where}: learner.replay_bits = {bits!r} is not 32, 8, 7, 4 or PQ "
                          f"(128 + a sub-vector length dividing latent.dim {dim})",
                          hint="re-export the model (`tinyol export`)")


def input_q(manifest: dict) -> tuple[float, int]:
    """(scale, zero_point) of the model's int8 input: real = scale * (q - zero_point)."""
    i = manifest["input"]
    return float(i["scale"]), int(i["zero_point"])


def quantize(x, scale: float, zero_point: int):
    """float -> int8 (numpy array) as the device's float path does: round half away from zero,
    saturate."""
    # lazy on purpose: `tinyol info --model` reads manifests without numpy and starts fast
    import numpy as np

    x = np.asarray(x, dtype=np.float32)
    if not np.all(np.isfinite(x)):
        raise TinyolError("input contains NaN or Inf")
    q = np.sign(x / np.float32(scale)) * np.floor(np.abs(x / np.float32(scale)) + np.float32(0.5))
    return np.clip(q + zero_point, -128, 127).astype(np.int8)


def check_device_model(info, manifest: dict, model_dir: str = "the model") -> None:
    """The device (its INFO) runs this folder's model: the host quantizes inputs with the
    manifest's parameters, so they must be the device's."""
    if "has_model" not in info.flags:
        raise TinyolError("the device's firmware has no model",
                          hint="build it with a model: tinyol build --model models/digits")
    check_manifest(manifest, f"{model_dir}/manifest.json")
    want = int(manifest["model_hash"])
    if info.model_hash != want:
        raise TinyolError(
            f"the device runs model {info.model!r} (hash 0x{info.model_hash:08x}) but {model_dir} "
            f"is {manifest.get('name')!r} (hash 0x{want:08x}); inputs would be quantized wrongly",
            hint="pass the model directory the firmware was built from (--model DIR), or flash it")

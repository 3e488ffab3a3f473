"""`tinyol verify`: the device's backbone against TFLM, bit for bit.

Sends int8 inputs (EMBED, pipelined), reads back the device's int8 latents and
compares them with TensorFlow Lite Micro's own runtime on the model's
backbone.tflite (the oracle the exporter and kernels are tested against).
Default inputs: the model's calibration data (manifest "calibration"), else
random int8 inputs; --data picks a source, --random forces random inputs.
"""
from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from ..boards import BOARDS
from ..checks import U32_MAX
from ..data.datasets import load_source
from ..errors import TinyolError
from ..link.device import Device
from ..link.stream import embed_all
from ..model.codegen import run_tflm
from ..model.folder import load_manifest, quantize
from ..options import emit_json, json_option, model_option, port_option, resolve_port


def verify_inputs(manifest: dict, n: int, data: str | None, random_inputs: bool,
                  seed: int) -> tuple[np.ndarray, str]:
    """int8 inputs [n, input_size] and a description of where they came from."""

    size = int(manifest["input"].get("size") or np.prod(manifest["input"]["shape"]))
    spec = data
    if spec is None and not random_inputs:
        spec = str(manifest.get("calibration", "")).split(" ")[0] or None
    if spec and not random_inputs:
        try:
            X, _, _ = load_source(spec)
        except TinyolError:
            if data is not None:
                raise
            spec = None
        else:
            if int(np.prod(X.shape[1:])) != size:
                raise TinyolError(f"{spec}: samples have {int(np.prod(X.shape[1:]))} values, "
                                  f"the model takes {size}")
            X = X.reshape(len(X), -1)[:n]
            scale, zp = float(manifest["input"]["scale"]), int(manifest["input"]["zero_point"])
            return np.stack([quantize(x, scale, zp) for x in X]), f"{len(X)} samples of {spec}"
    rng = np.random.default_rng(seed)
    return rng.integers(-128, 128, size=(n, size), dtype=np.int8), f"{n} random int8 inputs (seed {seed})"


def compare_latents(device_out: np.ndarray, tflm_out: np.ndarray) -> dict:
    diff = np.abs(device_out.astype(np.int16) - tflm_out.astype(np.int16))
    bad = np.flatnonzero(diff.reshape(len(diff), -1).max(axis=1) > 0) if diff.size else np.array([], int)
    return {"samples": int(len(device_out)), "mismatched_samples": int(len(bad)),
            "mismatched_values": int(np.count_nonzero(diff)), "first_mismatches": bad[:10].tolist(),
            "max_abs_diff": int(diff.max()) if diff.size else 0}


@click.command("verify")
@port_option()
@model_option()
@click.option("--n", "n", type=click.IntRange(min=1), default=200, show_default=True,
              help="Number of inputs.")
@click.option("--data", default=None, metavar="SOURCE",
              help="Inputs from a source (default: the model's calibration data).")
@click.option("--random", "random_inputs", is_flag=True, help="Random int8 inputs instead.")
@click.option("--seed", type=click.IntRange(0, U32_MAX), default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--window", type=click.IntRange(1, 8), default=4, show_default=True,
              help="Requests in flight.")
@json_option
def cmd(port, model, n, data, random_inputs, seed, window, as_json):
    """Check that the device's backbone outputs equal TFLM's, bit for bit.

    \b
    Example:
      tinyol verify --port socket://127.0.0.1:4321 --model models/digits --n 200
    """
    manifest = load_manifest(model)
    tflite = Path(model) / "backbone.tflite"
    if not tflite.is_file():
        raise TinyolError(f"{model}: no backbone.tflite")
    Xq, where = verify_inputs(manifest, n, data, random_inputs, seed)
    with Device.open(resolve_port(port)) as dev:
        got = embed_all(dev, Xq, manifest, window=window)
        board = dev.info.board
        simd = "simd_kernels" in dev.info.flags
    want = run_tflm(tflite, Xq.reshape((len(Xq),) + tuple(manifest["input"]["shape"])))
    want = want.reshape(len(Xq), -1)
    res = compare_latents(got, want)
    res.update(board=board, model=str(model), inputs=where)
    if as_json:
        emit_json(res)
    else:
        click.echo(f"inputs     {where}")
        click.echo(f"device     {board}, latent {got.shape[1]} int8 values per input")
        if res["mismatched_samples"] == 0:
            click.echo(f"result     all {res['samples']} latents equal TFLM's, bit for bit")
        else:
            click.echo(f"result     {res['mismatched_samples']} of {res['samples']} latents differ "
                       f"from TFLM ({res['mismatched_values']} values, max |diff| "
                       f"{res['max_abs_diff']}); first at inputs {res['first_mismatches']}")
    if res["mismatched_samples"]:
        raise TinyolError(f"{res['mismatched_samples']} of {res['samples']} latents differ from TFLM "
                          f"(first at inputs {res['first_mismatches'][:5]})",
                          hint=_narrow_down(board, str(model), simd))


def _narrow_down(board: str, model: str, simd: bool) -> str:
    """What to run next when the device's latents differ: the same model on the reference
    kernels (`emulate`/`flash` --kernels ref), so SIMD kernels (or an emulator's DSP
    instructions) and the rest can be told apart."""
    if not simd:
        return ("the firmware's backbone (reference kernels) is not bit-exact: report it, with the "
                "model folder and this output")
    if board in BOARDS:
        where = (f"`tinyol emulate --kernels ref --model {model} --board {board} --emulator renode` "
                 f"(or qemu), on the board `tinyol flash --kernels ref --model {model} --board {board}`")
    else:
        where = f"`tinyol emulate --kernels ref --model {model} --emulator native`"
    return (f"the backbone runs the SIMD kernels: start it with the reference ones ({where}) and "
            "verify again; "
            "exact with ref means the SIMD path, or the emulator's DSP instructions, is at fault: report it")

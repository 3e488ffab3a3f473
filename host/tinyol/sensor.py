"""A board's own sensor: raw readings -> the model's int8 windows, the host half.

C twin: mcu/src/tol_window.c (tol_window.h). The device scales each raw reading (int16 LSB) in
integer arithmetic, ``q = clamp((raw * mul + add + 2^(S-1)) >> S, -128, 127)`` with S =
``SHIFT``, and cuts rows into windows of the model's input length starting every ``stride``
rows. This module computes ``mul`` and ``add`` from three things (folded into one affine map):

* the sensor's sensitivity, unit per LSB per channel (``SENSORS``: the LSM6DSL of the
  B-L475E-IOT01A at its full-scale settings, in g and rad/s),
* the training-time normalisation of the model, ``x_model = (x - offset) / divisor`` per
  channel, carried in the model's manifest (``input.preprocess``; identity when absent),
* the model's int8 input quantization (``input.scale``, ``input.zero_point``),

and runs the same integer arithmetic (:func:`scale_raw`, :func:`windows`), so the host
and the device build identical bytes from the same raw readings. :func:`window_starts` is the
one windowing rule; the data sets (tinyol.datasets ``watch``) cut recordings with it too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import TinyolError

SHIFT = 20           # fraction bits of mul and add (TOL_WINDOW_SHIFT)
MAX_CHANNELS = 8     # TOL_WINDOW_MAX_CHANNELS
_INT32 = (-2 ** 31, 2 ** 31 - 1)


@dataclass(frozen=True)
class Sensor:
    name: str
    who_am_i: tuple[int, ...]        # accepted WHO_AM_I values
    channels: tuple[str, ...]        # row order the driver delivers
    units: tuple[str, ...]
    unit_per_lsb: tuple[float, ...]  # datasheet sensitivity at the driver's full scale
    rate_hz: float                   # output data rate the driver sets


_G_LSB = 0.061e-3                     # LSM6DSL/LSM6DSO, FS_XL = +-2 g: 0.061 mg/LSB
_DPS_LSB = 8.75e-3 * math.pi / 180.0  # FS_G = 250 dps: 8.75 mdps/LSB, in rad/s

SENSORS = {
    # ST LSM6DSL (B-L475E-IOT01A, I2C2 address 0x6A); LSM6DSO (WHO_AM_I 0x6C) shares the
    # registers the driver uses. Rows: ax ay az (g), gx gy gz (rad/s), 52 Hz.
    "lsm6dsl": Sensor("lsm6dsl", (0x6A, 0x6C), ("ax", "ay", "az", "gx", "gy", "gz"),
                      ("g",) * 3 + ("rad/s",) * 3, (_G_LSB,) * 3 + (_DPS_LSB,) * 3, 52.0),
}


def sensor(name: str) -> Sensor:
    try:
        return SENSORS[name]
    except KeyError:
        raise TinyolError(f"unknown sensor {name!r}", hint="choose one of: " + ", ".join(SENSORS)) from None


def preprocess(manifest: dict, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """(offset, divisor) per channel from manifest ``input.preprocess`` (``{"offset": [..],
    "divisor": [..]}``, x_model = (x - offset) / divisor); identity when the model has none."""
    pre = manifest.get("input", {}).get("preprocess") or {}
    off = np.asarray(pre.get("offset", [0.0] * channels), np.float64)
    div = np.asarray(pre.get("divisor", [1.0] * channels), np.float64)
    if off.shape != (channels,) or div.shape != (channels,):
        raise TinyolError(f"the manifest's input.preprocess has {off.size} offsets and {div.size} "
                          f"divisors; the sensor gives {channels} channels",
                          hint="export the model with one offset and divisor per sensor channel")
    if not np.all(np.isfinite(off)) or not np.all(np.isfinite(div)) or np.any(div == 0):
        raise TinyolError("the manifest's input.preprocess has a non-finite offset or a zero divisor")
    return off, div


def coefficients(unit_per_lsb, input_scale: float, zero_point: int, offset=None, divisor=None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(mul, add) int64 [C] in Q``SHIFT``: raw LSB -> int8 model input, i.e.
    q = raw * u / (d * s) + (zp - o / (d * s)) before rounding."""
    u = np.asarray(unit_per_lsb, np.float64)
    o = np.zeros_like(u) if offset is None else np.asarray(offset, np.float64)
    d = np.ones_like(u) if divisor is None else np.asarray(divisor, np.float64)
    if not 1 <= u.size <= MAX_CHANNELS:
        raise TinyolError(f"{u.size} channels: a window row holds 1..{MAX_CHANNELS}")
    step = d * float(input_scale)
    mul = np.round(u / step * 2 ** SHIFT)
    add = np.round((zero_point - o / step) * 2 ** SHIFT)
    if np.any((mul < _INT32[0]) | (mul > _INT32[1]) | (add < _INT32[0]) | (add > _INT32[1])):
        raise TinyolError("one LSB is more than 2048 input steps of the model (or the offset more "
                          "than 2048 steps): the sensor's full scale does not suit this model",
                          hint="choose a finer full scale or check the manifest's input.preprocess")
    if np.any(mul == 0):
        raise TinyolError("one LSB is under 1e-6 input steps of the model: the coefficients "
                          "would lose the signal", hint="check the sensor's full scale")
    return mul.astype(np.int64), add.astype(np.int64)


def scale_raw(raw: np.ndarray, mul, add) -> np.ndarray:
    """int16 raw rows [T, C] -> int8 [T, C] (the device's tol_window_scale, in int64)."""
    raw = np.asarray(raw)
    if raw.dtype != np.int16:
        raise TinyolError(f"raw readings must be int16 LSB, not {raw.dtype}")
    acc = raw.astype(np.int64) * np.asarray(mul, np.int64) + np.asarray(add, np.int64) \
        + (1 << (SHIFT - 1))
    return np.clip(acc >> SHIFT, -128, 127).astype(np.int8)


def window_starts(n_rows: int, length: int, stride: int) -> range:
    """Rows where windows start: 0, stride, 2*stride, ... while a whole window fits."""
    if length < 1 or not 1 <= stride <= length:
        raise TinyolError(f"window length {length}, stride {stride}: need 1 <= stride <= length")
    return range(0, n_rows - length + 1, stride)


def windows(rows: np.ndarray, length: int, stride: int) -> np.ndarray:
    """Rows [T, ...] -> windows [N, length, ...] at :func:`window_starts` (the device's order)."""
    rows = np.asarray(rows)
    starts = window_starts(len(rows), length, stride)
    if not len(starts):
        return np.zeros((0, length) + rows.shape[1:], rows.dtype)
    return np.stack([rows[s:s + length] for s in starts])


def to_raw(x: np.ndarray, unit_per_lsb) -> np.ndarray:
    """Physical rows [T, C] -> int16 LSB as a sensor with that sensitivity reports them
    (rounded to nearest, saturating)."""
    v = np.round(np.asarray(x, np.float64) / np.asarray(unit_per_lsb, np.float64))
    return np.clip(v, -32768, 32767).astype(np.int16)


def header(model_manifest: dict, sens: Sensor, stride: int, source: str) -> str:
    """The C header a sensor firmware includes (examples/imu_learner: imu_config.h)."""
    from . import __version__

    inp = model_manifest["input"]
    shape = [int(d) for d in inp["shape"]]
    c = len(sens.channels)
    if shape[-1] != c or int(np.prod(shape)) % c:
        raise TinyolError(f"the model input {shape} is not [length, {c}]: the {sens.name} gives "
                          f"{c} channels a row", hint="a sensor model's input is [time, channels]")
    length = int(np.prod(shape)) // c
    window_starts(length, length, stride)  # validates the stride
    off, div = preprocess(model_manifest, c)
    mul, add = coefficients(sens.unit_per_lsb, inp["scale"], int(inp["zero_point"]), off, div)
    arr = lambda a: "{" + ", ".join(str(int(v)) for v in a) + "}"  # noqa: E731
    return "\n".join([
        f"/* generated by tinyol {__version__} from {source} — do not edit */",
        "#ifndef IMU_CONFIG_H",
        "#define IMU_CONFIG_H",
        "",
        f"/* {sens.name}: rows {' '.join(sens.channels)} ({', '.join(sorted(set(sens.units)))}), "
        f"{sens.rate_hz:g} Hz; model {model_manifest.get('name', '?')} input {shape} */",
        f"#define IMU_CHANNELS {c}",
        f"#define IMU_WINDOW_LENGTH {length}",
        f"#define IMU_WINDOW_STRIDE {stride}",
        f"#define IMU_RATE_HZ {int(round(sens.rate_hz))}",
        "/* raw LSB -> int8 input, Q20: unit per LSB, (x - offset) / divisor, input scale/zero point */",
        f"#define IMU_SCALE_MUL {arr(mul)}",
        f"#define IMU_SCALE_ADD {arr(add)}",
        "",
        "#endif /* IMU_CONFIG_H */",
        "",
    ])

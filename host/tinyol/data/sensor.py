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
one windowing rule; the data sets (tinyol.data.datasets ``watch``) cut recordings with it too.
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from pathlib import Path

import numpy as np

from .. import __version__
from ..errors import TinyolError
from ..paths import monitor_path

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


_G_LSB = 0.244e-3                     # LSM6DSL/LSM6DSO, FS_XL = +-8 g: 0.244 mg/LSB
_DPS_LSB = 70e-3 * math.pi / 180.0    # FS_G = 2000 dps: 70 mdps/LSB, in rad/s

SENSORS = {
    # ST LSM6DSL (B-L475E-IOT01A, I2C2 address 0x6A); LSM6DSO (WHO_AM_I 0x6C) shares the
    # registers the driver uses. Rows: ax ay az (g), gx gy gz (rad/s), 52 Hz, +-8 g and
    # 2000 dps (wrist motion reaches 5 g and 30 rad/s in the watch data set).
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


# ---------------------------------------------------------------------------------------------
# Recorded motion for the emulated IMU: RESD files (Renode Sensor Data) + a label schedule

RESD_LEAD_NS = 1_000_000_000   # the feed starts this long after the Feed command (emulate)
G_UNIT = 1e6                   # RESD acceleration: micro-g (int32)
RAD_UNIT = 1e5                 # angular rate as Renode 1.15.3's LSM6DSO_IMU reads it: 1e-5 rad/s


def load_recording(path: str, rate: float | None = None) -> dict:
    """A labelled IMU recording: NPZ (``X`` [T, 3|6] in g and rad/s, optional ``t`` [T]
    seconds, optional ``y`` [T] integer labels, -1 = none) or CSV (header with ax ay az
    [gx gy gz], optional t and label). Returns {"X", "y", "rate"}; the rate comes from
    ``rate`` or from evenly spaced timestamps (refused when they are not)."""
    p = Path(path)
    if not p.is_file():
        raise TinyolError(f"{path}: no such file", hint="give a .npz or .csv IMU recording")
    if p.suffix == ".npz":
        try:
            with np.load(p, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
        except Exception as e:  # noqa: BLE001 - one line for any unreadable file
            raise TinyolError(f"{path}: not a readable .npz ({type(e).__name__}: {e})") from None
        if "X" not in data:
            raise TinyolError(f"{path}: no array X", hint="X [T, 3 or 6]: ax ay az (g) [gx gy gz (rad/s)]")
        X, t, y = (_numbers(data.get(k), path, k) for k in ("X", "t", "y"))
    elif p.suffix == ".csv":
        try:
            lines = [l for l in p.read_text().splitlines() if l.strip()]
        except (UnicodeDecodeError, OSError) as e:
            raise TinyolError(f"{path}: not a readable text file ({type(e).__name__})") from None
        if not lines:
            raise TinyolError(f"{path}: empty")
        head = [h.strip().lower() for h in lines[0].split(",")]
        axes = [a for a in ("ax", "ay", "az", "gx", "gy", "gz") if a in head]
        if axes not in (["ax", "ay", "az"], ["ax", "ay", "az", "gx", "gy", "gz"]):
            raise TinyolError(f"{path}: the header must name ax,ay,az (and gx,gy,gz), got {lines[0]!r}")
        try:
            rows = np.array([[float(v) for v in l.split(",")] for l in lines[1:]], np.float64)
        except ValueError as e:
            raise TinyolError(f"{path}: not a number ({e})") from None
        if rows.ndim != 2 or rows.shape[1] != len(head):
            raise TinyolError(f"{path}: every row needs {len(head)} values")
        X = rows[:, [head.index(a) for a in axes]]
        t = rows[:, head.index("t")] if "t" in head else None
        y = rows[:, head.index("label")] if "label" in head else None
    else:
        raise TinyolError(f"{path}: unknown recording format", hint="use .npz or .csv")
    if X.ndim != 2 or X.shape[1] not in (3, 6) or len(X) == 0:
        raise TinyolError(f"{path}: X has shape {list(X.shape)}; want [T, 3] or [T, 6]")
    if not np.all(np.isfinite(X)):
        raise TinyolError(f"{path}: NaN or Inf in the readings")
    big = np.abs(X) > RANGE_LIMIT
    if big.any():
        r, c = map(int, np.argwhere(big)[0])
        raise TinyolError(f"{path}: row {r}, column {c}: {X[r, c]:g} is beyond any IMU's range "
                          f"(|value| <= {RANGE_LIMIT:g} g or rad/s); units are g and rad/s",
                          hint="a reading in m/s^2 or deg/s? convert it; a corrupt row? drop it")
    if t is not None:
        if t.ndim != 1 or len(t) != len(X) or not np.all(np.isfinite(t)):
            raise TinyolError(f"{path}: t must be {len(X)} finite timestamps (seconds), one per row")
        dt = np.diff(np.asarray(t, np.float64))
        if len(dt) == 0 or np.any(dt <= 0) or np.ptp(dt) > 0.01 * np.median(dt):
            raise TinyolError(f"{path}: timestamps are not evenly spaced (within 1 %)",
                              hint="resample the recording to a constant rate first")
        rate = rate or 1.0 / float(np.median(dt))
    if rate is None or not (rate > 0 and math.isfinite(rate)):
        raise TinyolError(f"{path}: no sample rate" if rate is None else f"--rate {rate}: a positive number of Hz",
                          hint="give --rate HZ or a t column")
    if X.shape[1] == 3:
        X = np.concatenate([X, np.zeros_like(X)], axis=1)   # no gyroscope: rows of zero rate
    if y is not None and (np.issubdtype(y.dtype, np.floating) and not np.all(np.isfinite(y) & (y == np.round(y)))):
        raise TinyolError(f"{path}: labels must be whole numbers 0..254 (or -1: none)")
    y = np.full(len(X), -1, np.int64) if y is None else np.asarray(y).astype(np.int64)
    if y.shape != (len(X),):
        raise TinyolError(f"{path}: {len(y)} labels for {len(X)} rows")
    if np.any((y < -1) | (y > 254)):
        raise TinyolError(f"{path}: labels must be 0..254 (or -1: none)")
    return {"X": X, "y": y, "rate": float(rate)}


RANGE_LIMIT = 1000.0  # g or rad/s: beyond every IMU's full scale (16 g, 4000 dps = 70 rad/s) many times


def _numbers(a, path, name: str):
    """A recording's array as float64, or None; one line for anything that is not numbers."""
    if a is None:
        return None
    try:
        return np.asarray(a, np.float64)
    except (TypeError, ValueError):
        raise TinyolError(f"{path}: {name} is not numbers (dtype {np.asarray(a).dtype})") from None


def schedule(y: np.ndarray) -> list[tuple[int, int]]:
    """Row labels -> segments [(first row, label)] where the label changes (255 = none)."""
    segs = []
    for r, lab in enumerate(np.asarray(y).tolist()):
        lab = 255 if lab < 0 else int(lab)
        if not segs or segs[-1][1] != lab:
            segs.append((r, lab))
    return segs


def window_labels(segs: list[tuple[int, int]], n_windows: int, length: int, stride: int) -> list[int]:
    """The device's rule: window k learns the schedule's label when its first and last rows
    carry the same one (255 = not learned)."""
    def at(row):
        lab = 255
        for r, l in segs:
            if r > row:
                break
            lab = l
        return lab
    out = []
    for k in range(n_windows):
        a, b = at(k * stride), at(k * stride + length - 1)
        out.append(a if a == b else 255)
    return out


def resd_bytes(sample_type: int, values: np.ndarray, period_ns: int, start_ns: int) -> bytes:
    """One RESD v1 file: header, one constant-frequency block of int32 triples, no metadata."""
    v = np.ascontiguousarray(values, "<i4")
    body = struct.pack("<QQQ", start_ns, period_ns, 0) + v.tobytes()
    head = b"RESD" + bytes([1, 0, 0, 0])
    return head + struct.pack("<BHHQ", 2, sample_type, 0, len(body)) + body


def lsm6dso_lsb(X: np.ndarray) -> np.ndarray:
    """The int16 rows Renode 1.15.3's LSM6DSO_IMU reports for RESD values written by
    :func:`write_resd` at +-8 g / 2000 dps: micro-g / 1e6 * 32768 / 8, and 1e-5 rad/s as
    180 / pi (the double pi as a 15-digit decimal) degrees * 1000 / 70, each rounded half
    to even in decimal arithmetic (the model's C# decimal), saturated to int16."""
    acc, gyr = resd_values(X)
    out = np.zeros((len(X), 6), np.int16)
    with localcontext() as ctx:
        ctx.prec = 28
        r2d = Decimal(180) / Decimal("3.14159265358979")
        a_sens = Decimal(32768) / Decimal(8)
        g_sens = Decimal(1000) / Decimal(70)
        for i in range(len(X)):
            for c in range(3):
                a = (Decimal(int(acc[i, c])) / Decimal(1000000) * a_sens).to_integral_value(ROUND_HALF_EVEN)
                g = (r2d * Decimal(int(gyr[i, c])) / Decimal(100000) * g_sens).to_integral_value(ROUND_HALF_EVEN)
                out[i, c] = max(-32768, min(32767, int(a)))
                out[i, 3 + c] = max(-32768, min(32767, int(g)))
    return out


def resd_values(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """RESD integers: acceleration in micro-g, angular rate in 1e-5 rad/s."""
    X = np.asarray(X, np.float64)
    return (np.round(X[:, :3] * G_UNIT).astype(np.int64), np.round(X[:, 3:6] * RAD_UNIT).astype(np.int64))


def write_resd(rec: dict, out_dir, sens: Sensor, source: str) -> dict:
    """acc.resd, gyro.resd, raw.bin (the int16 rows the emulated sensor reports, for the native
    target and the twin) and sensor.json (rates, rows, label schedule) in out_dir.

    Rows are played one per output-data-rate tick of the sensor (52 Hz): a recording made at
    another rate is played faster or slower, row for row. The block starts RESD_LEAD_NS - P/2
    after the feed command, so every tick of Renode's feed thread lands mid-sample."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    period = int(round(1e9 / sens.rate_hz))
    start = RESD_LEAD_NS - period // 2
    acc, gyr = resd_values(rec["X"])
    if np.any(np.abs(acc) > 2 ** 31 - 1) or np.any(np.abs(gyr) > 2 ** 31 - 1):
        raise TinyolError("a reading is beyond the RESD range (int32)")
    (out / "acc.resd").write_bytes(resd_bytes(0x0002, acc, period, start))
    (out / "gyro.resd").write_bytes(resd_bytes(0x0003, gyr, period, start))
    raw = lsm6dso_lsb(rec["X"])
    (out / "raw.bin").write_bytes(raw.astype("<i2").tobytes())
    meta = {"_generated_by": f"generated by tinyol from {source} — do not edit",
            "sensor": sens.name, "rows": int(len(raw)), "recorded_hz": rec["rate"],
            "played_hz": sens.rate_hz, "period_ns": period, "lead_ns": RESD_LEAD_NS,
            "schedule": schedule(rec["y"])}
    (out / "sensor.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def check_folder(sensor_dir) -> dict:
    """A record-to-resd folder as `tinyol emulate --sensor` plays it, checked before anything
    starts: sensor.json readable with rows >= 1 and a schedule of [row, label] pairs,
    raw.bin exactly rows x 6 int16 readings, acc.resd and gyro.resd RESD files of that
    many samples. Returns sensor.json; a folder that is not one: TinyolError, one line."""
    d = Path(sensor_dir)
    missing = [f for f in ("acc.resd", "gyro.resd", "raw.bin", "sensor.json") if not (d / f).is_file()]
    if missing:
        raise TinyolError(f"{sensor_dir}: no {', '.join(missing)} (not a record-to-resd folder)",
                          hint="tinyol record-to-resd RECORDING --out DIR")
    again = f"make it again: tinyol record-to-resd RECORDING --out {sensor_dir}"
    try:
        meta = json.loads((d / "sensor.json").read_text())
        rows = meta["rows"]
        segs = meta["schedule"]
        if not (isinstance(rows, int) and not isinstance(rows, bool) and rows >= 1):
            raise ValueError(f"rows {rows!r}")
        if not (isinstance(segs, list) and segs and all(
                isinstance(g, list) and len(g) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in g)
                and 0 <= g[0] < rows and 0 <= g[1] <= 255 for g in segs)):
            raise ValueError("schedule")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise TinyolError(f"{d / 'sensor.json'}: not as record-to-resd writes it ({type(e).__name__}: {e})",
                          hint=again) from None
    n = (d / "raw.bin").stat().st_size
    if n != 12 * rows:
        raise TinyolError(f"{d / 'raw.bin'}: {n} bytes, sensor.json says {rows} rows ({12 * rows} bytes)",
                          hint=again)
    for f in ("acc.resd", "gyro.resd"):
        b = (d / f).read_bytes()
        if len(b) != 8 + 13 + 24 + 12 * rows or b[:4] != b"RESD":
            raise TinyolError(f"{d / f}: not a RESD file of {rows} samples ({len(b)} bytes)", hint=again)
    return meta


# ---------------------------------------------------------------------------------------------
# Driving a sensor firmware (examples/imu_learner) and the emulated IMU

IMU_PATH = "sysbus.i2c2.imu_i2c.imu"   # the LSM6DSO model in mcu/renode/stm32l475.repl


def schedule_bytes(segs: list[tuple[int, int]]) -> bytes:
    """The 's' commands of the label schedule (row u32 LE, label u8)."""
    return b"".join(b"s" + struct.pack("<IB", int(r), int(l)) for r, l in segs)


def go_bytes(rows: int) -> bytes:
    """The 'g' command: restart the FIFO, take `rows` rows (0: no limit)."""
    return b"g" + struct.pack("<I", int(rows))


def renode_feed_commands(sensor_dir) -> list[str]:
    """Monitor commands that feed a record-to-resd folder to the emulated IMU: both streams
    start RESD_LEAD_NS after the command, sample k at the k-th tick of the sensor's 52 Hz.
    Renode 1.15.3 feeds at the FIFO batch rate the firmware set (FIFO_CTRL3), so run them
    after the firmware has configured the sensor (its boot line)."""
    d = Path(sensor_dir)
    return [f"{IMU_PATH} Feed{kind}SamplesFromRESD {monitor_path(d / name)} 0 {RESD_LEAD_NS} "
            f"CurrentVirtualTime 0"
            for kind, name in (("Acceleration", "acc.resd"), ("AngularRate", "gyro.resd"))]


def start_recording(target, sock, sensor_dir) -> dict:
    """With the firmware booted on Renode (target, tinyol.targets.emulator.Target) and its console
    (a connected socket): send the label schedule, then with the machine paused feed the
    recording and send 'g' so the firmware starts with row 0 of it; resume. Returns the
    folder's sensor.json. Virtual time runs ahead when the core sleeps (AdvanceImmediately)."""
    meta = json.loads((Path(sensor_dir) / "sensor.json").read_text())
    sock.sendall(schedule_bytes(meta["schedule"]))
    target.monitor.execute("pause")
    for c in renode_feed_commands(sensor_dir):
        target.monitor.execute(c)
    sock.sendall(go_bytes(meta["rows"]))
    # the core sleeps between FIFO reads: let virtual time jump, in 1 ms quanta (the default
    # 0.1 ms quantum makes the host's per-quantum synchronisation the limit: ~real time)
    target.monitor.execute("emulation SetGlobalQuantum \"0.001\"")
    target.monitor.execute("emulation SetAdvanceImmediately true")
    target.monitor.execute("start")
    return meta


def parse_lines(lines: list[str]) -> dict:
    """A sensor firmware's output -> {"windows": [(index, crc, label, conf_e6)],
    "learned": [(index, label, samples)], "done": n or None}."""
    out = {"windows": [], "learned": [], "done": None}
    for l in lines:
        f = l.split()
        if f[:1] == ["w"] and len(f) == 5:
            out["windows"].append(tuple(int(v) for v in f[1:]))
        elif f[:1] == ["learned"] and len(f) == 4:
            out["learned"].append(tuple(int(v) for v in f[1:]))
        elif f[:1] == ["done"] and len(f) == 2:
            out["done"] = int(f[1])
    return out

"""A tinyol device as Python objects: the protocol's messages as methods.

Layouts follow docs/protocol.md; the device side is mcu/src/tol_app.c and
mcu/app/model.c. Inputs travel as int8 quantized on the host with the model's
input parameters (4x less traffic than float32) unless `encoding="float32"`.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from ._defs import SETTING_TYPE, Msg, Setting
from .errors import TinyolError
from .protocol import DeviceReset, Info, Link

INPUT_INT8, INPUT_FLOAT32 = 0, 1
FLAG_LEARNED, FLAG_NEW_CLASS, FLAG_ANOMALY = 0x01, 0x02, 0x04
NO_LABEL = 0xFFFF
CYCLES_INVALID = 0xFFFFFFFF


def quantize(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """float -> int8 as the device's float path does: round half away from zero, saturate."""
    x = np.asarray(x, dtype=np.float32)
    if not np.all(np.isfinite(x)):
        raise TinyolError("input contains NaN or Inf")
    q = np.sign(x / np.float32(scale)) * np.floor(np.abs(x / np.float32(scale)) + np.float32(0.5))
    return np.clip(q + zero_point, -128, 127).astype(np.int8)


@dataclass
class Result:
    """The device's answer to SAMPLE or PREDICT."""
    prediction: int        # class index (-1: none active) or 1/0 anomaly flag
    value: float           # classifier: softmax confidence; autoencoder: anomaly score
    loss: float            # cross-entropy before the update (classifier) / score
    learned: bool
    new_class: bool
    anomaly: bool
    samples_seen: int
    n_active: int

    @classmethod
    def parse(cls, p: bytes) -> "Result":
        pred, flags, value, loss, seen, active = struct.unpack_from("<hBxffIH", p)
        return cls(pred, value, loss, bool(flags & FLAG_LEARNED), bool(flags & FLAG_NEW_CLASS),
                   bool(flags & FLAG_ANOMALY), seen, active)


@dataclass
class Stats:
    frames_ok: int
    frames_bad: int
    duplicates: int
    rx_overflows: int
    uart_errors: int
    samples_seen: int = 0
    updates: int = 0
    rejected: int = 0
    anomalies: int = 0
    n_active: int = 0
    n_outputs: int = 0
    replay_fill: int = 0
    replay_capacity: int = 0
    threshold: float = 0.0
    cycles_backbone: int | None = None
    cycles_predict: int | None = None
    cycles_learn: int | None = None
    class_counts: list[int] | None = None

    @classmethod
    def parse(cls, p: bytes) -> "Stats":
        link = struct.unpack_from("<5I", p)
        if len(p) < 60:
            return cls(*link)
        v = struct.unpack_from("<4I4Hf3I", p, 20)
        cyc = [None if c == CYCLES_INVALID else c for c in v[9:12]]
        n = (len(p) - 60) // 4
        counts = list(struct.unpack_from(f"<{n}I", p, 60)) if n else []
        return cls(*link, *v[:9], *cyc, counts)


class Device:
    """Request/reply access to one device over a Link; detects resets."""

    def __init__(self, link: Link):
        self.link = link
        self.info: Info = link.info()
        self._boot = self.info.boot_count

    @classmethod
    def open(cls, url: str, **kw) -> "Device":
        return cls(Link.open(url, **kw))

    def close(self):
        self.link.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- session integrity -------------------------------------------------------------
    def check_same_boot(self) -> None:
        """Raise DeviceReset if the device rebooted since this session began."""
        info = self.link.info()
        if info.boot_count != self._boot or any(l.startswith("tinyol boot") for l in self.link.boot_lines):
            self.link.boot_lines.clear()
            old, self._boot = self._boot, info.boot_count
            raise DeviceReset(
                f"the device reset during the session (boot counter {old} -> {info.boot_count}); "
                "its learned state since the last save is gone",
                hint="restart the stream; results before and after the reset are not comparable")

    # ---- messages -------------------------------------------------------------------------
    def _input(self, x, encoding: str) -> bytes:
        x = np.asarray(x)
        n = self.info.input_size
        if x.size != n:
            raise TinyolError(f"input has {x.size} values, the model takes {n}")
        if encoding == "int8":
            if x.dtype != np.int8:
                raise TinyolError("int8 encoding needs an int8 array (quantize first)")
            return bytes([INPUT_INT8]) + x.astype(np.int8).tobytes()
        if encoding == "float32":
            x = x.astype("<f4").ravel()
            if not np.all(np.isfinite(x)):
                raise TinyolError("input contains NaN or Inf")
            return bytes([INPUT_FLOAT32]) + x.tobytes()
        raise TinyolError(f"unknown input encoding {encoding!r}")

    def sample(self, x, label: int, encoding: str = "int8") -> Result:
        if not 0 <= label < 0xFFFF:
            raise TinyolError(f"label {label} out of range")
        return Result.parse(self.link.request(Msg.SAMPLE, struct.pack("<H", label) + self._input(x, encoding)))

    def predict(self, x, encoding: str = "int8") -> Result:
        return Result.parse(self.link.request(Msg.PREDICT, struct.pack("<H", NO_LABEL) + self._input(x, encoding)))

    def embed(self, x, encoding: str = "int8") -> np.ndarray:
        return np.frombuffer(self.link.request(Msg.EMBED, self._input(x, encoding)), dtype=np.int8).copy()

    def set(self, setting: Setting | str, value) -> float | int:
        s = Setting[setting.upper()] if isinstance(setting, str) else Setting(setting)
        raw = struct.pack("<f", float(value)) if SETTING_TYPE[s] == "f" else struct.pack("<I", int(value))
        return self._setting_value(s, self.link.request(Msg.SET, bytes([s]) + raw))

    def get(self, setting: Setting | str) -> float | int:
        s = Setting[setting.upper()] if isinstance(setting, str) else Setting(setting)
        return self._setting_value(s, self.link.request(Msg.GET, bytes([s])))

    @staticmethod
    def _setting_value(s: Setting, p: bytes):
        return struct.unpack_from("<f" if SETTING_TYPE[s] == "f" else "<I", p, 1)[0]

    def stats(self) -> Stats:
        return Stats.parse(self.link.request(Msg.STATS))

    def reset(self) -> None:
        self.link.request(Msg.RESET)

    def get_head(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(W [rows, D], b [rows], active [rows]) read row by row."""
        rows = self.info.max_classes if self.info.head_mode == "classifier" else self.info.input_size
        d = self.info.latent_dim
        w = np.zeros((rows, d), np.float32)
        b = np.zeros(rows, np.float32)
        active = np.zeros(rows, bool)
        for r in range(rows):
            off = 0
            while True:
                p = self.link.request(Msg.GET_HEAD, struct.pack("<HH", r, off))
                row, offset, act, n, bias = struct.unpack_from("<HHBxHf", p)
                w[r, offset:offset + n] = np.frombuffer(p, "<f4", n, 12)
                b[r], active[r] = bias, bool(act)
                off = offset + n
                if off >= d or n == 0:
                    break
        return w, b, active

    def bench(self, region: int, param: int = 0) -> int | None:
        ticks, valid = struct.unpack_from("<IB", self.link.request(Msg.BENCH, struct.pack("<BH", region, param)))
        return ticks if valid else None

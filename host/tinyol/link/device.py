"""A tinyol device as Python objects: the protocol's messages as methods.

Layouts follow docs/protocol.md; the device side is mcu/src/tol_server.c and
mcu/app/model.c. Inputs travel as int8 quantized on the host with the model's
input parameters (4x less traffic than float32) unless `encoding="float32"`.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from .._defs import SETTING_TYPE, STATS_SHORT, Msg, Setting, Status
from ..errors import TinyolError
from ..model.folder import quantize  # noqa: F401  (tinyol.link.device.quantize, as before)
from .protocol import DeviceError, Info, Link

INPUT_INT8, INPUT_FLOAT32 = 0, 1
FLAG_LEARNED, FLAG_NEW_CLASS, FLAG_ANOMALY = 0x01, 0x02, 0x04
NO_LABEL = 0xFFFF
CYCLES_INVALID = 0xFFFFFFFF


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
    # idle-time rehearsal steps the device ran since the last learned sample, before this
    # request (an adaptive stage's SET key REHEARSE; 0 otherwise and from older firmware)
    rehearsed: int = 0

    @classmethod
    def parse(cls, p: bytes) -> "Result":
        pred, flags, rehearsed, value, loss, seen, active = struct.unpack_from("<hBBffIH", p)
        return cls(pred, value, loss, bool(flags & FLAG_LEARNED), bool(flags & FLAG_NEW_CLASS),
                   bool(flags & FLAG_ANOMALY), seen, active, rehearsed)


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
    persist: "PersistStats | None" = None
    record: "RecordStats | None" = None   # firmware before the record block: None

    @classmethod
    def parse(cls, p: bytes, classes: int | None = None) -> "Stats":
        """`classes`: class counts in the reply (max_classes for a classifier, 0 for an
        autoencoder); then the 32-byte persistence block follows, if present."""
        link = struct.unpack_from("<5I", p)
        if len(p) < 60:
            return cls(*link)
        v = struct.unpack_from("<4I4Hf3I", p, 20)
        cyc = [None if c == CYCLES_INVALID else c for c in v[9:12]]
        n = (len(p) - 60) // 4 if classes is None else classes
        # STATS' short form (Device.stats(short=True)) ends before the class counts: None
        counts = None if len(p) < 60 + 4 * n else list(struct.unpack_from(f"<{n}I", p, 60)) if n else []
        persist = record = None
        if classes is not None and len(p) >= 60 + 4 * n + PersistStats.SIZE:
            persist = PersistStats.parse(p[60 + 4 * n:])
            at = 60 + 4 * n + PersistStats.SIZE
            if len(p) >= at + RecordStats.SIZE + 2 * n:
                record = RecordStats.parse(p[at:], n)
        return cls(*link, *v[:9], *cyc, counts, persist, record)


from .protocol import STORE_STATES  # noqa: E402  (re-exported for callers)

RATED_ERASE_CYCLES = 10_000  # per page, STM32L4 data sheets


@dataclass
class PersistStats:
    """The persistence block at the end of STATS (docs/protocol.md)."""
    SIZE = 32
    store: str             # what happened at boot: STORE_STATES
    last_status: int       # status of the last SAVE/LOAD/auto-save (0 ok)
    pages_per_save: int    # pages a save erases (the last one, else the current state's)
    seq: int               # record the learner state matches (0: none)
    saves: int             # saves since boot
    erases: int            # page erases in the store region over its life
    slots: int             # record slots in the region (saves rotate through them)
    pages_per_slot: int
    bytes_per_save: int    # last record, header included (0: none yet)
    saves_left: int        # saves until the slots' pages reach the rated cycles (rated x slots - seq)
    autosave_updates: int  # auto-save period in updates (0 off)

    @classmethod
    def parse(cls, p: bytes) -> "PersistStats":
        st, last, pages, seq, saves, erases, slots, pps, nbytes, left, auto = struct.unpack_from("<BBH3I2H3I", p)
        return cls(STORE_STATES[st] if st < len(STORE_STATES) else str(st), last, pages, seq, saves,
                   erases, slots, pps, nbytes, left, auto)

    @property
    def cycles_per_page(self) -> float:
        """Erase cycles each page has seen (round-robin spreads them evenly)."""
        return self.erases / max(1, self.slots * self.pages_per_slot)

    def lifetime_days(self, saves_per_minute: float = 1.0) -> float:
        """Days until the rated erase cycles are used up at `saves_per_minute`."""
        return self.saves_left / saves_per_minute / (60 * 24)


@dataclass
class RecordStats:
    """The record block after STATS' persistence block (docs/protocol.md): the stored record the
    learner's state matches, what a save would write now, the anomaly score statistics and the
    replay buffer per class."""
    SIZE = 28
    origin: str            # "none", "saved" (since boot) or "loaded" (at boot or by LOAD)
    parts: int             # the record's parts: 1 replay buffer, 2 momentum
    slot: int
    replay_left_out: bool  # the last save wanted the replay buffer; a slot could not hold it
    bytes: int             # the record's size in flash, header included (0: none)
    updates_since: int     # committed updates since that record (its age)
    slot_bytes: int        # a store slot (0: no store)
    save_bytes: int        # header + the state with the replay buffer as it is now
    score_mean: float      # autoencoder: the threshold's score statistics (0 for a classifier)
    score_std: float
    replay_per_class: list[int]  # replay slots holding each class

    ORIGINS = ("none", "saved", "loaded")

    @classmethod
    def parse(cls, p: bytes, classes: int) -> "RecordStats":
        frm, parts, slot, left, nbytes, since, slot_b, save_b, mean, std = struct.unpack_from("<4B4I2f", p)
        per = list(struct.unpack_from(f"<{classes}H", p, cls.SIZE)) if classes else []
        return cls(cls.ORIGINS[frm] if frm < len(cls.ORIGINS) else str(frm), parts, slot, bool(left),
                   nbytes, since, slot_b, save_b, mean, std, per)

    @property
    def has_replay(self) -> bool:
        return bool(self.parts & 1)

    @property
    def replay_fits(self) -> bool:
        """A save now would keep the replay buffer (its state fits a slot)."""
        return self.slot_bytes > 0 and self.save_bytes <= self.slot_bytes


@dataclass
class SaveResult:
    seq: int           # record sequence number
    bytes: int         # record size in flash (header + payload)
    slot: int
    parts: int         # 1 replay buffer included, 2 momentum included
    pages: int         # pages erased for it
    cycles: int | None # time the save took, at cpu_hz

    @classmethod
    def parse(cls, p: bytes) -> "SaveResult":
        seq, n, slot, parts, pages, cyc = struct.unpack_from("<IIBBHI", p)
        return cls(seq, n, slot, parts, pages, None if cyc == CYCLES_INVALID else cyc)


@dataclass
class LoadResult:
    seq: int
    bytes: int
    slot: int
    n_active: int
    samples_seen: int

    @classmethod
    def parse(cls, p: bytes) -> "LoadResult":
        seq, n, slot, active, seen = struct.unpack_from("<IIBxHI", p)
        return cls(seq, n, slot, active, seen)


@dataclass
class BoardReport:
    """BOARD reply (docs/protocol.md): the clock, console and flash as the firmware set them up."""
    cycles: int            # cycle counter now (at cpu_hz)
    cycles_epoch: int      # changes when the counter was disturbed (QEMU receive workaround)
    cpu_hz: int            # the clock the firmware assumes (its cycle counter and UART maths)
    sysclk_hz: int         # SYSCLK as the clock registers read back (0: unknown, native)
    uart_baud: int         # console baud from BRR and that clock (0: unknown, native)
    flash_page_bytes: int  # erase unit of the store region (tol_flash_region)
    store_start: int       # first byte of the store region
    store_bytes: int       # its size
    flash_status: int      # tol_flash_region's status: 0 ok, else why saving is unavailable
    # the core's boot self-test (tol_cpu.h); None from firmware older than it (34-byte reply)
    cpu_checked: int | None = None    # bit i: check i ran (tinyol.armdsp.CPU_CHECKS)
    cpu_faults: int | None = None     # bit i: the core gave an answer the architecture does not
    cpu_fallbacks: int | None = None  # the faults the kernels route around (portable path)

    FMT = struct.Struct("<IIIIIIIIBx")
    CPU = struct.Struct("<III")

    @classmethod
    def parse(cls, p: bytes) -> "BoardReport":
        if len(p) < cls.FMT.size:
            raise TinyolError(f"BOARD reply of {len(p)} bytes, expected {cls.FMT.size}")
        cpu = cls.CPU.unpack_from(p, cls.FMT.size) if len(p) >= cls.FMT.size + cls.CPU.size else ()
        return cls(*cls.FMT.unpack_from(p), *cpu)



class Device:
    """Request/reply access to one device over a Link; detects resets."""

    def __init__(self, link: "Link | str", **kw):
        """`link`: an open Link, or a pyserial URL (``Device("socket://127.0.0.1:4321")``,
        ``Device("/dev/ttyACM0", timeout=2)``; keyword arguments go to Link.open)."""
        if isinstance(link, str):
            link = Link.open(link, **kw)
        self.link = link
        # the handshake does not wait a slow request's timeout (e.g. SAVE's 30 s): a port
        # without a tinyol device behind it is named within seconds
        self.info: Info = link.info(timeout=min(link.timeout, 0.5))
        self._short_stats: bool | None = None  # does the firmware know STATS' short form?

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

    def replay_add(self, x, label: int, encoding: str = "int8") -> tuple[int, int]:
        """Put the latent of `x` into the replay buffer without training; (fill, capacity)."""
        if not 0 <= label < 0xFFFF:
            raise TinyolError(f"label {label} out of range")
        p = self.link.request(Msg.REPLAY_ADD, struct.pack("<H", label) + self._input(x, encoding))
        return struct.unpack_from("<HH", p)

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

    def stats(self, short: bool = False) -> Stats:
        """STATS. `short`: its short form, the counters only (the first STATS_SHORT_BYTES bytes:
        no class counts, persistence or record block; those fields are None), 72 bytes on the
        wire instead of ~200 (what a stream needs to begin and end: on a noisy line a reply
        comes through whole the less often the longer it is). Firmware older than the short
        form answers ERR_LENGTH; it is then asked for the whole reply (docs/protocol.md)."""
        classes = self.info.max_classes if self.info.head_mode == "classifier" else 0
        if short and self._short_stats is not False:
            try:
                payload = self.link.request(Msg.STATS, bytes([STATS_SHORT]))
            except DeviceError as e:
                if e.status != Status.ERR_LENGTH or e.request != Msg.STATS:
                    raise
                self._short_stats = False   # older firmware: the whole reply from now on
            else:
                self._short_stats = True
                return Stats.parse(payload, classes)
        return Stats.parse(self.link.request(Msg.STATS), classes)

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

    # ---- the adaptive stage (docs/adaptive.md) -----------------------------------------
    def get_stage(self) -> bytes:
        """The stage image (every parameter as float32 LE, then the active flags) via GET_STAGE."""
        out = bytearray()
        total = None
        while total is None or len(out) < total:
            p = self.link.request(Msg.GET_STAGE, struct.pack("<I", len(out)))
            offset, total, n = struct.unpack_from("<IIH", p)
            if offset != len(out) or n == 0 and len(out) < total:
                raise TinyolError(f"GET_STAGE reply out of order (offset {offset}, have {len(out)})")
            out += p[12:12 + n]
        return bytes(out)

    def set_stage(self, image: bytes) -> int:
        """Write a whole stage image with SET_STAGE; the device stages it and commits it with
        the last slice (all or nothing). Returns the active class count after the commit."""
        per = max(1, self.info.max_payload - 4)
        committed, n_active = 0, 0
        self.stage_written = 0  # slices the device took (a cut push leaves it fenced)
        for off in range(0, max(len(image), 1), per):
            p = self.link.request(Msg.SET_STAGE, struct.pack("<I", off) + image[off:off + per])
            self.stage_written += 1
            _, staged, total, committed, n_active = struct.unpack_from("<IIIBxH", p)
            if total != len(image):
                raise TinyolError(f"stage image has {len(image)} bytes, the device's {total}",
                                  hint="pull and push between devices running the same export")
        if not committed:
            raise TinyolError("SET_STAGE did not commit the stage image")
        return n_active

    def bench(self, region: int, param: int = 0) -> int | None:
        ticks, valid = struct.unpack_from("<IB", self.link.request(Msg.BENCH, struct.pack("<BH", region, param)))
        return ticks if valid else None

    def board(self) -> BoardReport:
        """BOARD: cycle counter, clock, console baud and flash geometry (`tinyol doctor`)."""
        return BoardReport.parse(self.link.request(Msg.BOARD))

    # ---- persistence (docs/persistence.md) ---------------------------------------------
    def save(self, replay: bool = True, timeout: float = 30.0) -> SaveResult:
        """SAVE: store the learned state in flash (replay=False leaves the replay buffer out)."""
        opts = b"" if replay else b"\x01"
        return SaveResult.parse(self.link.request(Msg.SAVE, opts, timeout=timeout))

    def load(self, timeout: float = 30.0) -> LoadResult:
        """LOAD: replace the learned state with the newest stored record."""
        return LoadResult.parse(self.link.request(Msg.LOAD, timeout=timeout))

    def store_status(self) -> tuple[str, int]:
        """(state at boot, seq of the record loaded then) from the end of INFO."""
        info = self.link.info()
        return info.store, info.store_seq

    def set_head(self, w: np.ndarray, b: np.ndarray, active: np.ndarray) -> int:
        """Write the whole head (W [rows, D], b [rows], active [rows]) with SET_HEAD slices,
        staged until the last one commits; returns the number of slices. After a failure,
        `head_written` says how many the device acknowledged."""
        rows = self.info.max_classes if self.info.head_mode == "classifier" else self.info.input_size
        d = self.info.latent_dim
        w = np.asarray(w, np.float32)
        b = np.asarray(b, np.float32).reshape(-1)
        active = np.asarray(active).reshape(-1)
        if w.shape != (rows, d) or b.shape != (rows,) or active.shape != (rows,):
            raise TinyolError(f"head shape mismatch: the device's head is W[{rows}, {d}], b[{rows}]; "
                              f"got W{list(w.shape)}, b{list(b.shape)}, active{list(active.shape)}")
        if not (np.all(np.isfinite(w)) and np.all(np.isfinite(b))):
            raise TinyolError("head contains NaN or Inf")
        per = max(1, (self.info.max_payload - 12) // 4)
        slices = [(r, off, min(per, d - off)) for r in range(rows) for off in range(0, d, per)]
        self.head_written = 0  # slices the device acknowledged
        for k, (r, off, n) in enumerate(slices):
            # every slice but the last is staged: the device fences the head (no learning,
            # no prediction, no save) until the last one commits it, or RESET/LOAD/a reboot
            staged = int(k < len(slices) - 1)
            self.link.request(Msg.SET_HEAD, struct.pack("<HHBBHf", r, off, int(bool(active[r])), staged, n, b[r])
                              + w[r, off:off + n].astype("<f4").tobytes())
            self.head_written = k + 1
        return len(slices)

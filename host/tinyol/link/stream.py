"""Streaming samples to a device: a data set through a :class:`~tinyol.link.pipeline.Pipeline`
(pipelined, exactly-once, reset-aware; tinyol.link.pipeline explains how).

:func:`stream` drives a whole data set through a Device in one of three modes
(train = SAMPLE, prequential; eval / predict = PREDICT) and returns a
:class:`Summary` (tinyol.bench.stream measures the throughput with it).
"""
from __future__ import annotations

import json
import math
import queue
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from .._defs import Msg, Setting, Status
from ..errors import TinyolError
from ..learn.anomaly import detection, score_stats
from ..model.folder import check_device_model, input_q, quantize
from .device import INPUT_FLOAT32, INPUT_INT8, NO_LABEL, Device, Result, Stats
from .pipeline import DEFAULT_WINDOW, DEVICE_CACHE, NOT_YET, Completion, Pipeline
from .protocol import DeviceError, DeviceGone, DeviceReset, Info, Link, LinkTimeout

MODES = ("train", "eval", "predict")
FLAGGED_ROWS = 20  # flagged samples whose rows the summary keeps


# --------------------------------------------------------------------------- live sources
class Prefetch:
    """Read an iterator in a background thread (stdin, a sensor): ``next()`` returns
    :data:`NOT_YET` instead of blocking, so replies to samples already sent are handled
    (and shown) while the source waits for its next sample."""

    _END = object()

    def __init__(self, iterable: Iterable, wait: float = 0.05):
        self._q: "queue.Queue" = queue.Queue(maxsize=64)
        self._empty = queue.Empty
        self._wait = wait
        self._done = False

        def pump():
            try:
                for item in iterable:
                    self._q.put(item)
            except BaseException as e:  # noqa: BLE001 - handed to the consumer
                self._q.put(e)
            self._q.put(self._END)

        threading.Thread(target=pump, daemon=True).start()

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        try:
            item = self._q.get(timeout=self._wait)
        except self._empty:
            return NOT_YET
        if item is self._END:
            self._done = True
            raise StopIteration
        if isinstance(item, BaseException):
            self._done = True
            raise item
        return item


# --------------------------------------------------------------------------- samples
def check_samples(X: np.ndarray, y: np.ndarray | None, info: Info, mode: str,
                  first_row: int = 0) -> None:
    """Reject, before anything is sent, what the device would refuse (naming the row)."""
    X = np.asarray(X)
    n_in = int(np.prod(X.shape[1:])) if X.ndim > 1 else X.shape[0]
    if n_in != info.input_size:
        raise TinyolError(f"samples have {n_in} values, the device's model takes {info.input_size}")
    flat = X.reshape(len(X), -1)
    bad = ~np.isfinite(flat.astype(np.float64))
    if bad.any():
        r = int(np.argwhere(bad)[0][0])
        raise TinyolError(f"row {first_row + r}: NaN or Inf in the features (nothing was sent)")
    if y is not None and mode in ("train", "eval") and info.head_mode == "classifier":
        y = np.asarray(y)
        over = np.flatnonzero((y < 0) | (y >= info.max_classes))
        if len(over):
            r = int(over[0])
            raise TinyolError(
                f"row {first_row + r}: label {int(y[r])} is out of range for the device "
                f"(it has room for classes 0..{info.max_classes - 1}; nothing was sent)",
                hint="export the model with more classes (max_classes) or filter the source")


def encode_input(x: np.ndarray, encoding: str, input_q: tuple[float, int]) -> bytes:
    """The `input` field of SAMPLE/PREDICT/EMBED: encoding byte + int8 or float32 values."""
    if encoding == "int8":
        return bytes([INPUT_INT8]) + quantize(np.ravel(x), *input_q).tobytes()
    if encoding == "float32":
        return bytes([INPUT_FLOAT32]) + np.asarray(x, "<f4").ravel().tobytes()
    raise TinyolError(f"unknown encoding {encoding!r}", hint="use int8 or float32")


# --------------------------------------------------------------------------- records/summary
@dataclass
class Record:
    index: int
    label: int | None
    prediction: int | None
    confidence: float | None
    loss: float | None
    learned: bool
    new_class: bool
    latency: float
    error: str | None = None
    samples_seen: int | None = None
    autoencoder: bool = False  # the reply's floats are the score and the threshold it met

    @property
    def score(self) -> float | None:
        """Autoencoder: the anomaly score (reconstruction MSE); None for a classifier."""
        return self.confidence if self.autoencoder else None

    @property
    def threshold(self) -> float | None:
        """Autoencoder: the threshold the score was compared with (inf during the warm-up)."""
        return self.loss if self.autoencoder else None

    def json(self) -> str:
        return json.dumps(log_record(self.__dict__, self.autoencoder))


def log_record(r: dict, autoencoder: bool) -> dict:
    """One line of a per-sample log (stream --log, simulate --log): a classifier's floats are
    `confidence` and `loss`, an autoencoder's `score` and `threshold` (its `prediction` is the
    anomaly flag, 1 or 0); floats that are not finite (a threshold during the warm-up) are null."""
    keys = ("index", "label", "prediction", "confidence", "loss", "learned", "new_class",
            "latency", "error", "samples_seen")
    d = {k: r[k] for k in keys if k in r}
    for k in ("confidence", "loss"):
        if d.get(k) is not None and not math.isfinite(d[k]):
            d[k] = None
    if "latency" in d:
        d["latency"] = round(d["latency"], 6)
    if autoencoder:
        d = {("score" if k == "confidence" else "threshold" if k == "loss" else k): v
             for k, v in d.items()}
    return d


@dataclass
class Summary:
    mode: str
    samples: int = 0
    correct: int = 0
    per_class: dict = field(default_factory=dict)   # label -> [correct, total]
    seconds: float = 0.0
    bytes_out: int = 0
    bytes_in: int = 0
    retries: int = 0
    duplicates: int = 0          # retransmissions the device answered from its cache
    device_samples_seen: int | None = None
    device_classes: int | None = None        # active outputs after the stream
    replay_fill: str | None = None           # "fill/capacity" of the replay buffer
    rejected: dict = field(default_factory=dict)     # status name -> count
    interrupted: bool = False
    stopped_by: str | None = None   # "gone", "link", "reset", "error" when the stream aborted
    sent: int = 0                   # samples transmitted (some may be unanswered when aborted)
    device_count_from: str | None = None  # where device_samples_seen came from: STATS or its last reply
    rto: float | None = None        # adaptive resend timeout at the end (s)
    late: int = 0                   # replies slower than the timeout (resent although not lost)
    damaged: int = 0                # damaged frames seen by the host or reported by the device
    # autoencoder heads: samples flagged as anomalies; with labels (0 normal, else anomalous)
    flagged: int = 0
    anomaly_counts: dict = field(default_factory=dict)  # "tp", "fp", "tn", "fn" after the warm-up
    flagged_rows: list = field(default_factory=list)    # source rows of the first flagged samples
    threshold: float | None = None       # the device's threshold after the stream (STATS)
    threshold_k: float | None = None     # its settings: mean + k std, after a warm-up of
    warmup: int | None = None            # this many samples
    scores: dict | None = None           # learn.anomaly.score_stats of this stream's scores

    @property
    def detection(self) -> dict:
        """Precision, recall, F1, false-positive rate of the flags against the labels."""
        c = self.anomaly_counts
        return detection(c.get("tp", 0), c.get("fp", 0), c.get("fn", 0), c.get("tn", 0))

    @property
    def detection_rate(self) -> float:
        c = self.anomaly_counts
        pos = c.get("tp", 0) + c.get("fn", 0)
        return c.get("tp", 0) / pos if pos else math.nan

    @property
    def false_positive_rate(self) -> float:
        c = self.anomaly_counts
        neg = c.get("fp", 0) + c.get("tn", 0)
        return c.get("fp", 0) / neg if neg else math.nan

    @property
    def accuracy(self) -> float:
        labelled = sum(t for _, t in self.per_class.values())
        return self.correct / labelled if labelled else math.nan

    def class_accuracy(self) -> dict[int, float]:
        return {c: (k / n if n else math.nan) for c, (k, n) in sorted(self.per_class.items())}

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else math.nan

    @property
    def bytes_per_s(self) -> float:
        return (self.bytes_out + self.bytes_in) / self.seconds if self.seconds > 0 else math.nan

    def as_dict(self) -> dict:
        return {
            "mode": self.mode, "samples": self.samples, "accuracy": self.accuracy,
            "per_class": {str(c): a for c, a in self.class_accuracy().items()},
            "class_counts": {str(c): n for c, (_, n) in sorted(self.per_class.items())},
            "seconds": self.seconds, "samples_per_s": self.samples_per_s,
            "bytes_out": self.bytes_out, "bytes_in": self.bytes_in, "bytes_per_s": self.bytes_per_s,
            "retries": self.retries, "duplicates": self.duplicates,
            "device_samples_seen": self.device_samples_seen, "device_classes": self.device_classes,
            "replay_fill": self.replay_fill, "rejected": self.rejected,
            "interrupted": self.interrupted, "stopped_by": self.stopped_by, "sent": self.sent,
            "device_count_from": self.device_count_from, "rto": self.rto, "late": self.late,
            "damaged": self.damaged,
            "flagged": self.flagged, "anomaly_counts": self.anomaly_counts,
            "detection_rate": self.detection_rate, "false_positive_rate": self.false_positive_rate,
            **({"precision": self.detection["precision"], "recall": self.detection["recall"],
                "f1": self.detection["f1"]} if self.anomaly_counts else {}),
            "flagged_rows": self.flagged_rows, "threshold": self.threshold,
            "threshold_k": self.threshold_k, "warmup": self.warmup, "scores": self.scores,
        }


class Stream:
    """One streaming session on a Device (open it with :meth:`Device.open`)."""

    def __init__(self, device: Device, manifest: dict | None = None, *, mode: str = "train",
                 encoding: str = "int8", window: int = DEFAULT_WINDOW, timeout: float = 1.0,
                 retries: int = 8, model_dir: str = "the model", patience: float = 120.0):
        if mode not in MODES:
            raise TinyolError(f"unknown mode {mode!r}", hint="train, eval or predict")
        self.device = device
        self.info = device.info
        self.mode = mode
        self.encoding = encoding
        if manifest is not None:
            check_device_model(self.info, manifest, model_dir)
            self.input_q = input_q(manifest)
        elif encoding == "int8":
            raise TinyolError("int8 encoding needs the model's manifest (input scale/zero point)")
        else:
            self.input_q = (1.0, 0)
        if encoding == "float32" and 3 + 4 * self.info.input_size > self.info.max_payload:
            raise TinyolError(f"the device takes int8 inputs only for this model "
                              f"({4 * self.info.input_size} float32 bytes > its {self.info.max_payload})",
                              hint="use --encoding int8")
        self.window, self.timeout, self.retries, self.patience = window, timeout, retries, patience
        self.records: list[Record] = []
        self.summary = Summary(mode)
        self._last_seen = self._base_seen = 0
        self._counters: set[int] = set()

    def _requests(self, rows: Iterable[tuple[int, np.ndarray, int | None]]):
        msg = Msg.SAMPLE if self.mode == "train" else Msg.PREDICT
        for index, x, label in rows:
            x = np.asarray(x)
            check_samples(x[None], None if label is None else np.array([label]), self.info,
                          self.mode, index)
            lab = NO_LABEL if msg == Msg.PREDICT or label is None else int(label)
            if msg == Msg.SAMPLE and label is None:
                raise TinyolError(f"row {index}: training needs a label")
            yield (index, label), msg, struct.pack("<H", lab) + encode_input(x, self.encoding, self.input_q)

    def _record(self, c: Completion) -> Record:
        index, label = c.tag
        if c.status:
            name = Status(c.status).name if c.status in set(Status) else str(c.status)
            self.summary.rejected[name] = self.summary.rejected.get(name, 0) + 1
            if c.status in (Status.ERR_LABEL, Status.ERR_NONFINITE, Status.ERR_LENGTH,
                            Status.ERR_ARG, Status.ERR_UNSUPPORTED):
                e = DeviceError(c.status, c.msg)
                raise TinyolError(f"row {index}: {e}") from None
            return Record(index, label, None, None, None, False, False, c.latency, name,
                          autoencoder=self.info.head_mode == "autoencoder")
        r = Result.parse(c.payload)
        if self.mode == "train" and r.learned:
            # the device learns in send order (ERR_ORDER refuses a SAMPLE past a gap), but a
            # resumed session's resends may run late (each exactly once): counters are then a
            # permutation within the window, never repeated, never far back
            if r.samples_seen in self._counters or r.samples_seen <= self._base_seen \
                    or r.samples_seen < self._last_seen - DEVICE_CACHE:
                raise DeviceReset(
                    f"the device reset during the stream (its sample counter went back from "
                    f"{self._last_seen} to {r.samples_seen}) after {self.summary.samples} samples",
                    hint="restart the stream; results before and after a reset are not comparable")
            self._counters.add(r.samples_seen)
            self._last_seen = max(self._last_seen, r.samples_seen)
        ae = self.info.head_mode == "autoencoder"
        return Record(index, label, r.prediction, r.value,
                      r.loss if self.mode == "train" or ae else None,
                      r.learned, r.new_class, c.latency, None, r.samples_seen, ae)

    def _count(self, rec: Record) -> None:
        s = self.summary
        s.samples += 1
        if self.info.head_mode == "autoencoder" and rec.prediction is not None:
            s.flagged += int(rec.prediction == 1)
            if rec.prediction == 1 and len(s.flagged_rows) < FLAGGED_ROWS:
                s.flagged_rows.append(rec.index)
            if rec.label is not None and rec.threshold is not None and math.isfinite(rec.threshold):
                # counted after the warm-up, as `tinyol simulate` counts (nothing is flagged in it)
                key = ("t" if (rec.prediction == 1) == (rec.label != 0) else "f") + \
                      ("p" if rec.prediction == 1 else "n")
                s.anomaly_counts[key] = s.anomaly_counts.get(key, 0) + 1
        if rec.label is not None and rec.prediction is not None and self.info.head_mode == "classifier":
            k, n = s.per_class.get(rec.label, [0, 0])
            ok = int(rec.prediction == rec.label)
            s.per_class[rec.label] = [k + ok, n + 1]
            s.correct += ok

    def run(self, rows: Iterable[tuple[int, np.ndarray, int | None]], *,
            on_record: Callable[[Record], None] | None = None, live: bool = False,
            on_send: Callable[[object, int], None] | None = None,
            on_check: Callable[[], None] | None = None,
            resumed: "Resumed | None" = None) -> Summary:
        """Stream (index, x, label) rows; Ctrl-C stops cleanly (summary.interrupted).

        `live`: the rows come from a source that may block (stdin, a sensor); they are
        read in a background thread so every reply is handled as soon as it arrives.
        `on_send(tag, seq)` is called before each sample is first transmitted (a
        write-ahead log for --resume). `resumed`: a session continued by :func:`resume`.
        Whatever ends the stream, ``summary.device_samples_seen`` is the device's own count
        (STATS, or the counter in its last reply when STATS cannot be had), and the
        exception carries the partial summary as ``e.summary``."""
        link = self.device.link
        st0 = self.device.stats()
        b_out, b_in, r0 = link.stats.bytes_out, link.stats.bytes_in, link.stats.retries
        self._last_seen = self._base_seen = st0.samples_seen
        self.base_frames = st0.frames_ok  # requests the device executed before this session's first
        self.end_frames: int | None = None  # ... and when its closing STATS ran
        self._counters: set[int] = set()
        if resumed is not None:
            self._base_seen = resumed.base_seen
            self._counters = set(resumed.counters)
            self._last_seen = max(self._counters, default=self._base_seen)
        link.boot_lines.clear()
        pipe = Pipeline(link, self.info.boot_count, window=self.window, timeout=self.timeout,
                        retries=self.retries, patience=self.patience)
        pipe.on_send = on_send
        pipe.on_check = on_check
        self.pipeline = pipe
        t0 = time.monotonic()

        def take(c: Completion) -> None:
            rec = self._record(c)
            self.records.append(rec)
            self._count(rec)
            if on_record:
                on_record(rec)

        s = self.summary
        try:
            try:
                if resumed is not None:
                    for c in resumed.completions:
                        take(c)
                reqs = self._requests(rows)
                for c in pipe.run(Prefetch(reqs) if live else reqs):
                    take(c)
            except KeyboardInterrupt:
                s.interrupted = True
                for c in pipe.drain():
                    take(c)
        except BaseException as e:
            s.stopped_by = ("gone" if isinstance(e, DeviceGone) else "link" if isinstance(e, LinkTimeout)
                            else "reset" if isinstance(e, DeviceReset) else "error")
            self._finish(s, t0, b_out, b_in, r0, pipe)
            self._account(s, st0, alive=s.stopped_by not in ("gone", "reset"))
            if isinstance(e, TinyolError):
                e.summary = s
            if isinstance(e, (DeviceGone, LinkTimeout)) and "after" not in str(e):
                e2 = type(e)(f"{e} after {s.samples} samples", hint=e.hint)
                e2.summary = s
                raise e2 from None
            raise
        self._finish(s, t0, b_out, b_in, r0, pipe)
        if self.info.head_mode == "autoencoder":
            ok = [r for r in self.records if r.score is not None]
            s.scores = score_stats([r.score for r in ok],
                                   None if any(r.label is None for r in ok) else [r.label for r in ok])
        try:
            self._account(s, st0, alive=True)
        except KeyboardInterrupt:
            s.interrupted = True
        return s

    def _finish(self, s: Summary, t0: float, b_out: int, b_in: int, r0: int, pipe: "Pipeline") -> None:
        link = self.device.link
        s.seconds = time.monotonic() - t0
        s.bytes_out = link.stats.bytes_out - b_out
        s.bytes_in = link.stats.bytes_in - b_in
        s.retries = link.stats.retries - r0
        s.sent = pipe.stats.requests
        s.rto = pipe.rto
        s.late = pipe.stats.late
        s.damaged = pipe.stats.damaged + pipe.stats.link_errors

    def _account(self, s: Summary, st0, *, alive: bool) -> None:
        """The device's own count of samples learned: STATS if it answers (a short budget
        when the stream failed), else the counter in its last reply."""
        s.device_samples_seen, s.device_count_from = self._last_seen, "its last reply"
        if not alive:
            return
        link = self.device.link
        saved = link.timeout, link.retries
        if s.stopped_by is not None:
            link.timeout, link.retries = min(link.timeout, 0.5), min(link.retries, 3)
        try:
            st1 = self.device.stats()
        except TinyolError:
            return
        finally:
            link.timeout, link.retries = saved
        s.duplicates = st1.duplicates - st0.duplicates
        self.end_frames = st1.frames_ok
        s.device_samples_seen, s.device_count_from = st1.samples_seen, "STATS"
        s.device_classes = st1.n_active
        if st1.replay_capacity:
            s.replay_fill = f"{st1.replay_fill}/{st1.replay_capacity}"
        if self.info.head_mode == "autoencoder":
            s.threshold = st1.threshold
            try:
                s.threshold_k = float(self.device.get(Setting.THRESHOLD_K))
                s.warmup = int(self.device.get(Setting.WARMUP))
            except TinyolError:  # older firmware, or the link failed: the counts still stand
                pass


# --------------------------------------------------------------------------- resume
WAL_SUFFIX = ".wal"


@dataclass
class Resumed:
    """What :func:`resend_pending` recovered of an interrupted session."""
    base_seen: int                 # the device's sample counter when the first session began
    counters: list[int]            # sample counters of every sample learned so far
    completions: list[Completion]  # replies to the samples in flight when it stopped


@dataclass
class Journal:
    """An interrupted run as its files tell it (:meth:`WriteAhead.read`). Positions count
    the samples in the order they were first sent (rows repeat across epochs, positions do
    not); the log's records come in that order, so record n is position n."""
    session: dict
    sent: list[tuple[int, int]]          # (source row, seq) per position sent
    done: list[tuple[int, int | None]]   # (source row, samples_seen if learned) per log record
    checkpoint: tuple[int, int] | None   # (device frames_ok, log records) as the last session began
    end: tuple[int, int] | None          # (frames_ok, records) at its clean end (after its last STATS)
    log_keep: int                        # bytes of LOG that are whole lines
    log_size: int                        # bytes of LOG (more than log_keep: its last line was cut)
    checks: int = 0                      # INFO checks the last session made (after timeouts)
    check_sent: list[int] | None = None  # for each of them: positions sent before it was

    @property
    def pending(self) -> list[int]:
        """Positions sent whose reply is not in the log."""
        return list(range(len(self.done), len(self.sent)))


class WriteAhead:
    """`LOG.wal`, the record that makes a stream resumable (`tinyol stream --resume LOG`).

    Line 1: the session (source, model, device boot and counter at the start). Each
    session then writes ``{"checkpoint": {"frames_ok": F, "records": n}}`` (the device's
    count of executed requests and the log's length as it starts sending) and, for each
    sample, ``{"sent": index, "seq": seq}`` *before* its frame is first transmitted.
    A sample is done when its record is in LOG (one line, written by one system call, after
    its reply). A sample sent but not done may or may not have been learned; resending its
    identical frame (same seq) settles it on the device: answered from the reply cache if
    it ran, run now if it did not. :func:`reconcile` decides, before anything is resent,
    whether that is safe."""

    def __init__(self, path, header: dict | None = None):
        self.path = str(path)
        self.header = header
        self._f = open(self.path, "a", buffering=1)  # line-buffered: on disk before the frame leaves
        self._wrote_header = header is not None  # resumed: the header is there
        self._wrote_checkpoint = False

    def start(self, header: dict) -> None:
        if not self._wrote_header:
            self._f.write(json.dumps({"session": header}) + "\n")
            self._wrote_header = True

    def checkpoint(self, frames_ok: int, records: int) -> None:
        """Once per session, before its first new sample is sent."""
        if self._wrote_header and not self._wrote_checkpoint:
            self._f.write(json.dumps({"checkpoint": {"frames_ok": frames_ok, "records": records}}) + "\n")
            self._wrote_checkpoint = True

    def sent(self, tag, seq: int) -> None:
        self._f.write(json.dumps({"sent": tag[0], "seq": seq}) + "\n")

    def check(self) -> None:
        """An INFO check (after a timeout) is about to be sent: one request that is no sample."""
        if self._wrote_checkpoint:
            self._f.write('{"check": 1}\n')

    def end(self, frames_ok: int, records: int) -> None:
        """The session ended cleanly (finished or Ctrl-C); its closing STATS saw `frames_ok`."""
        if self._wrote_header:
            self._f.write(json.dumps({"end": {"frames_ok": frames_ok, "records": records}}) + "\n")

    def close(self) -> None:
        self._f.close()

    @staticmethod
    def read(log) -> Journal:
        """The interrupted run from LOG.wal and LOG. A cut last line (a killed writer) is
        recognised (``log_keep < log_size``) and left out; any other line that tinyol did not
        write is refused."""
        wal, logp = Path(str(log) + WAL_SUFFIX), Path(log)
        for p in (logp, wal):
            if not p.is_file():
                raise TinyolError(f"{p}: no such file", hint="--resume takes the --log file of an "
                                  f"interrupted --train run (and its write-ahead log LOG{WAL_SUFFIX})")
        session, sent, done, checkpoint, end, checks, check_sent = None, [], [], None, None, 0, []
        raw = logp.read_bytes()
        keep = raw.rfind(b"\n") + 1  # whole lines end with a newline; a cut one does not
        for p, data in ((wal, wal.read_bytes()), (logp, raw[:keep])):
            lines = data.split(b"\n")
            if lines and lines[-1] == b"":
                lines.pop()
            for n, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                    if not isinstance(d, dict):
                        raise ValueError("not an object")
                    if p is wal and "session" in d:
                        if not isinstance(d["session"], dict):
                            raise ValueError("session is not an object")
                        session = session or d["session"]
                    elif p is wal and "checkpoint" in d:
                        checkpoint = (int(d["checkpoint"]["frames_ok"]), int(d["checkpoint"]["records"]))
                        end, checks, check_sent = None, 0, []
                    elif p is wal and "check" in d:
                        checks += 1
                        check_sent.append(len(sent))
                    elif p is wal and "end" in d:
                        end = (int(d["end"]["frames_ok"]), int(d["end"]["records"]))
                    elif p is wal and "sent" in d:
                        sent.append((int(d["sent"]), int(d["seq"])))
                    elif p is logp and "index" in d:
                        seen = d.get("samples_seen") if d.get("learned") else None
                        done.append((int(d["index"]), None if seen is None else int(seen)))
                    else:
                        raise ValueError("unknown record")
                except (ValueError, TypeError, KeyError, UnicodeDecodeError):
                    if p is wal and n == len(lines) and not data.endswith(b"\n"):
                        break  # the WAL's last line of a killed writer may be cut (not yet sent)
                    raise TinyolError(f"{p}:{n}: not a line tinyol stream wrote",
                                      hint="--resume takes the files of `tinyol stream --log` "
                                           "unchanged") from None
        if session is None:
            raise TinyolError(f"{wal}: no session header (not written by `tinyol stream --log`)")
        return Journal(session, sent, done, checkpoint, end, keep, len(raw), checks, check_sent)


def reconcile(j: Journal, stats: Stats, log: str = "LOG") -> int:
    """Decide, before anything is resent, whether the interrupted run can be completed with
    every sample learned exactly once. `stats`: the device's STATS, asked for as the first
    request of the resumed session (it takes one slot of the device's 8-reply cache).
    Returns how many of the samples in flight the device learned; raises when the log,
    its WAL and the device disagree, or when resending could teach a sample twice.

    The proof: the device's `samples_seen` minus the counters in the log are the samples in
    flight it learned (k). Resending them is safe only while their replies are still in the
    device's cache, i.e. no request the run did not send executed since (`frames_ok`, which
    counts executed requests, equals the checkpoint plus the log's new records plus k) and
    fewer than 8 executed after the oldest of them."""
    from .protocol import DeviceReset

    wal = f"{log}{WAL_SUFFIX}"
    d, s = len(j.done), len(j.sent)
    if d > s:
        raise TinyolError(f"{log} has {d} records but {wal} sent only {s} samples: they are not "
                          "one run's files", hint="start the stream again (without --resume)")
    for n, ((row, _), (sent_row, _)) in enumerate(zip(j.done, j.sent), 1):
        if row != sent_row:
            raise TinyolError(f"{log}, record {n} is row {row} but {wal} sent row {sent_row} there: "
                              "they are not one run's files", hint="start the stream again (without --resume)")
    base = int(j.session["base_seen"])
    learned = [v for _, v in j.done if v is not None]
    top = max(learned, default=base)
    seen = stats.samples_seen
    if seen < top:
        raise DeviceReset(
            f"the device was reset since the interrupted run: it has learned {seen - base} samples "
            f"since the run began, the log already holds {top - base} (a `tinyol reset`, a LOAD or "
            "a power cycle put the learner back)",
            hint="start the stream again (without --resume); what was learned since is gone")
    extra = sorted(set(range(base + 1, seen + 1)) - set(learned))
    k, pending = len(extra), s - d
    if k > pending:
        raise TinyolError(
            f"the device has learned {seen - base} samples since the run began, the log accounts for "
            f"{len(learned)} and {pending} more were in flight: something else trained it in between",
            hint="resume only a device no other client used; start the stream again")
    if k == 0:
        return 0  # none of those in flight was learned: resending cannot teach one twice
    why = None
    if j.checkpoint is None:
        why = f"{wal} has no checkpoint (written by an older tinyol)"
    elif d < j.checkpoint[1]:
        why = f"{log} lost records written before its last session began"
    else:
        frames, records = j.checkpoint
        others = "request(s) the run did not send (another client, e.g. `tinyol pull`)"
        if j.end is not None:  # a clean end: its closing STATS was its only request besides samples
            ran, ours = j.end[0] - frames, j.end[1] - records + 1 + j.checks
            since = stats.frames_ok - j.end[0] - 1        # this STATS not counted
            if ran != ours:
                why = f"the device executed {ran - ours} request(s) during the run that it did not log"
            elif since:
                why = f"the device executed {since} {others} since the run ended"
        else:
            ran = stats.frames_ok - frames - 1            # executed since the checkpoint, this STATS not counted
            ours = d - records + k + j.checks             # the run's: new records, learned in flight, checks
            if ran > ours:
                why = f"the device executed {ran - ours} {others}"
            elif ran < ours:
                why = f"the device's request counter went back ({ran} < {ours}): it restarted"
        if why is None:
            after = (seen - extra[0] + sum(v is None for _, v in j.done[records:])
                     + _checks_after(j, d) + (j.end is not None) + 1)
            if after > DEVICE_CACHE - 1:
                why = f"{after} requests executed after the oldest of them (the cache keeps {DEVICE_CACHE})"
    if why:
        raise TinyolError(
            f"{k} of the {pending} samples in flight were learned, but their replies may have left "
            f"the device's reply cache ({why}): resending them could teach them twice; nothing was sent",
            hint="the run cannot be completed exactly once: start the stream again without --resume "
                 "(the device keeps what it learned), or `tinyol load` a saved state first")
    return k


def _checks_after(j: Journal, oldest: int) -> int:
    """INFO checks that may have executed after the sample at position `oldest` (the oldest
    in flight): those sent after it, and those sent fewer than DEVICE_CACHE positions before
    it (an unanswered check is resent while at most that many requests follow it). Checks
    of the session long before it ran before it and hold no cache slot it needs. A journal
    without positions for its checks (built by hand): every check counts."""
    if j.check_sent is None or len(j.check_sent) != j.checks:
        return j.checks
    return sum(1 for c in j.check_sent if c > oldest - DEVICE_CACHE)


def resend_pending(link: Link, j: Journal, payloads: dict[int, tuple[tuple, bytes]], *,
                   window: int = DEFAULT_WINDOW, timeout: float = 1.0, retries: int = 8) -> Resumed:
    """Settle the samples an interrupted session left in flight (after :func:`reconcile`):
    resend each identical frame (its seq, its payload) before any new sample, so the reply
    cache answers those that ran. `payloads`: position -> (tag, SAMPLE payload) rebuilt from
    the same source."""
    pipe = Pipeline(link, int(j.session["boot_count"]), window=window, timeout=timeout,
                    retries=retries)
    pipe.info_check = False  # an INFO would take a cache slot
    reqs = ((payloads[p][0], Msg.SAMPLE, payloads[p][1], False, j.sent[p][1]) for p in j.pending)
    completions = list(pipe.run(reqs))
    counters = [v for _, v in j.done if v is not None]
    return Resumed(int(j.session["base_seen"]), counters, completions)


def stream(device: Device, X: np.ndarray, y: np.ndarray | None, manifest: dict | None, *,
           mode: str = "train", **kw) -> tuple[Summary, list[Record]]:
    """Stream a whole data set (validated before anything is sent)."""
    st = Stream(device, manifest, mode=mode, **kw)
    check_samples(X, y, st.info, mode)
    rows = ((i, X[i], None if y is None else int(y[i])) for i in range(len(X)))
    summary = st.run(rows)
    return summary, st.records


def embed_all(device: Device, Xq: np.ndarray, manifest: dict | None = None, *,
              window: int = DEFAULT_WINDOW, timeout: float = 2.0) -> np.ndarray:
    """The device's int8 latents [N, latent_dim] for int8 inputs Xq [N, input_size] (EMBED)."""
    info = device.info
    if manifest is not None:
        check_device_model(info, manifest)
    Xq = np.asarray(Xq, np.int8).reshape(len(Xq), -1)
    if Xq.shape[1] != info.input_size:
        raise TinyolError(f"inputs have {Xq.shape[1]} values, the device's model takes {info.input_size}")
    out = np.empty((len(Xq), info.latent_dim), np.int8)
    pipe = Pipeline(device.link, info.boot_count, window=window, timeout=timeout)
    reqs = ((i, Msg.EMBED, bytes([INPUT_INT8]) + Xq[i].tobytes()) for i in range(len(Xq)))
    for c in pipe.run(reqs):
        if c.status:
            raise TinyolError(f"input {c.tag}: {DeviceError(c.status, c.msg)}")
        out[c.tag] = np.frombuffer(c.payload, np.int8)
    return out

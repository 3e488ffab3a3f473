"""Streaming samples to a device: a data set through a :class:`~tinyol.link.pipeline.Pipeline`
(pipelined, exactly-once, reset-aware; tinyol.link.pipeline explains how).

:func:`stream` drives a whole data set through a Device in one of three modes
(train = SAMPLE, prequential; eval / predict = PREDICT) and returns a
:class:`Summary` (tinyol.bench.stream measures the throughput with it). A run that
keeps a log hands :meth:`Stream.run` one journal (:class:`StreamJournal`, written by
tinyol.link.resume, which also owns resuming an interrupted run).
"""
from __future__ import annotations

import json
import math
import queue
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

import numpy as np

from .._defs import Msg, Setting, Status
from ..errors import TinyolError
from ..learn.anomaly import detection, score_stats
from ..model.folder import check_device_model, input_q, quantize
from .device import INPUT_FLOAT32, INPUT_INT8, NO_LABEL, Device, Result, Stats
from .pipeline import DEFAULT_WINDOW, DEVICE_CACHE, NOT_YET, Completion, Pipeline, WriteAheadLog
from .protocol import DeviceError, DeviceGone, DeviceReset, Info, LinkTimeout

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


def sample_payload(x: np.ndarray, label: int, encoding: str, input_q: tuple[float, int]) -> bytes:
    """A SAMPLE or PREDICT payload: the label (NO_LABEL for PREDICT), then the input."""
    return struct.pack("<H", label) + encode_input(x, encoding, input_q)


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


class StreamJournal(WriteAheadLog, Protocol):
    """What a stream tells the run's journal (tinyol.link.resume.RunLog writes LOG and
    LOG.wal from it); the Pipeline is handed the same object (``before_send``,
    ``before_check``: the write-ahead part)."""

    #: a session continued after an interruption: tinyol.link.resume.Resumed (the base
    #: counter, the counters logged so far, the replies to the samples it left in flight)
    resumed: object | None

    def began(self, info: Info, base_seen: int, base_frames: int) -> None:
        """After the opening STATS: the device's sample counter and executed requests."""

    def acked(self, record: Record) -> None:
        """A sample's reply came (in send order); `record` is what it says."""

    def ended(self, frames_ok: int) -> None:
        """The session ended cleanly (finished or Ctrl-C); its closing STATS saw `frames_ok`."""


class Stream:
    """One streaming session on a Device (open it with :meth:`Device.open`)."""

    def __init__(self, device: Device, manifest: dict | None = None, *, mode: str = "train",
                 encoding: str = "int8", window: int = DEFAULT_WINDOW, timeout: float = 1.0,
                 retries: int = 8, model_dir: str = "the model", patience: float = 120.0,
                 baud: int | None = None, resend_budget: int | None = None):
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
        self.baud = baud   # the line's rate when the URL does not tell (a tty is 115200 unless said)
        self.resend_budget = resend_budget  # copies of one sample before the stream stops (LinkTimeout)
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
            yield (index, label), msg, sample_payload(x, lab, self.encoding, self.input_q)

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
            journal: StreamJournal | None = None) -> Summary:
        """Stream (index, x, label) rows; Ctrl-C stops cleanly (summary.interrupted).

        `live`: the rows come from a source that may block (stdin, a sensor); they are
        read in a background thread so every reply is handled as soon as it arrives.
        `journal`: the run's log (:class:`StreamJournal`): told of each sample before it is
        first transmitted and of each reply before `on_record` sees it; its ``resumed``
        continues an interrupted session (tinyol.link.resume). Whatever ends the stream,
        ``summary.device_samples_seen`` is the device's own count (STATS, or the counter in
        its last reply when STATS cannot be had), and the exception carries the partial
        summary as ``e.summary``."""
        link = self.device.link
        st0 = self.device.stats(short=True)  # the counters only: a short reply gets through noise
        b_out, b_in, r0 = link.stats.bytes_out, link.stats.bytes_in, link.stats.retries
        self._last_seen = self._base_seen = st0.samples_seen
        self.base_frames = st0.frames_ok  # requests the device executed before this session's first
        self.end_frames: int | None = None  # ... and when its closing STATS ran
        self._counters: set[int] = set()
        resumed = journal.resumed if journal is not None else None
        if resumed is not None:
            self._base_seen = resumed.base_seen
            self._counters = set(resumed.counters)
            self._last_seen = max(self._counters, default=self._base_seen)
        if journal is not None:
            journal.began(self.info, self._base_seen, self.base_frames)
        link.boot_lines.clear()
        pipe = Pipeline(link, self.info.boot_count, window=self.window, timeout=self.timeout,
                        retries=self.retries, patience=self.patience, baud=self.baud,
                        journal=journal, resend_budget=self.resend_budget)
        self.pipeline = pipe
        t0 = time.monotonic()

        def take(c: Completion) -> None:
            rec = self._record(c)
            self.records.append(rec)
            self._count(rec)
            if journal is not None:
                journal.acked(rec)
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
        if journal is not None and self.end_frames is not None:
            journal.ended(self.end_frames)
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
            st1 = self.device.stats(short=True)
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

"""Resuming an interrupted `tinyol stream --train --log LOG` run: the one owner of resume.

A run keeps two files. LOG holds one record per answered sample; LOG.wal, its write-ahead
log, holds the session (source, order, model, the device's boot and sample counters at the
start), a checkpoint per session, each sample's seq *before* its frame is first transmitted,
each INFO check and a clean end. :class:`RunLog` writes both while a
:class:`~tinyol.link.stream.Stream` runs: it is the one journal object Stream and its
Pipeline are handed (``before_send``, ``before_check``, ``acked``, ...). :class:`Journal` is
what the two files tell after an interruption. :class:`Resume` takes ``--resume LOG`` from
those files to the first new sample: :func:`reconcile` (may the samples in flight be resent
without teaching one twice?), :func:`check_same_device`, :func:`resend_pending` (their
identical frames, before any new sample), then :func:`check_resumed` (the device's counters
are exactly the log's). The command only parses options, opens the session and prints.

No C twin: the device's side of it is the reply cache of mcu/src/tol_server.c (docs/protocol.md,
"Exactly once"). docs/streaming.md ("Resuming") and docs/reliability.md (G1) explain it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .._defs import Msg
from ..errors import TinyolError
from .device import Device, Result, Stats
from .pipeline import DEFAULT_WINDOW, DEVICE_CACHE, Completion, Pipeline
from .protocol import DeviceReset, Info, Link
from .stream import Record, sample_payload

WAL_SUFFIX = ".wal"
#: what a session line must hold for the run to be rebuilt from it
SESSION_KEYS = ("data", "limit", "shuffle", "seed", "label_column", "model", "encoding",
                "boot_count", "model_hash", "base_seen")


@dataclass
class Resumed:
    """What :func:`resend_pending` recovered of an interrupted session."""
    base_seen: int                 # the device's sample counter when the first session began
    counters: list[int]            # sample counters of every sample learned so far
    completions: list[Completion]  # replies to the samples in flight when it stopped


# --------------------------------------------------------------------------- writing
class RunLog:
    """LOG and LOG.wal as one session writes them; the journal a Stream is handed.

    Stream calls :meth:`began` after its opening STATS, :meth:`acked` once per answered
    sample and :meth:`ended` after a clean closing STATS; its Pipeline calls
    :meth:`before_send` before a sample's frame is first transmitted and :meth:`before_check`
    before an INFO check. :meth:`close` whatever happened. A sample is *done* when its record
    is in LOG (one line, written by one system call, after its reply). A sample sent but not
    done may or may not have been learned: :class:`Resume` settles it.

    WAL lines: ``{"session": {...}}`` once (the run's `settings` and the device's boot
    counter, model hash and sample counter at the start), then per session
    ``{"checkpoint": {"frames_ok": F, "records": n}}`` (the device's count of executed
    requests and the log's length as it starts sending), ``{"sent": index, "seq": seq}`` per
    sample, ``{"check": 1}`` per INFO check and ``{"end": {"frames_ok": F, "records": n}}``
    after a clean end. Use :meth:`create` (a new run) or :meth:`Resume.run_log`."""

    def __init__(self, path, settings: dict | None, *, wal: bool, append: bool = False,
                 records: int = 0, resumed: Resumed | None = None):
        self.path = str(path)
        self.settings = settings       # None: the WAL already holds the session (resumed)
        self.records = records         # records in LOG (those of earlier sessions included)
        self.resumed = resumed         # the in-flight samples an earlier session left, settled
        self._log = open(self.path, "a" if append else "w", buffering=1)  # line-buffered: `tail -f`
        self._wal = None
        if wal:
            if not append:
                open(self.path + WAL_SUFFIX, "w").close()
            self._wal = open(self.path + WAL_SUFFIX, "a", buffering=1)  # on disk before the frame leaves
        self._wrote_header = settings is None
        self._wrote_checkpoint = False
        self._device: dict = {}
        self._base_frames = 0

    @classmethod
    def create(cls, path, settings: dict, *, train: bool) -> RunLog:
        """A new run's LOG (and, training, its LOG.wal), both emptied."""
        return cls(path, dict(settings), wal=train)

    # -- the journal interface (Stream, Pipeline)
    def began(self, info: Info, base_seen: int, base_frames: int) -> None:
        """The session's opening STATS: the device's sample counter and executed requests."""
        self._device = {"boot_count": info.boot_count, "model_hash": info.model_hash,
                        "base_seen": base_seen}
        self._base_frames = base_frames

    def before_send(self, tag, seq: int) -> None:
        if self._wal is None:
            return
        if not self._wrote_header:
            self._wal.write(json.dumps({"session": {**self.settings, **self._device}}) + "\n")
            self._wrote_header = True
        self._checkpoint()
        self._wal.write(json.dumps({"sent": tag[0], "seq": seq}) + "\n")

    def before_check(self) -> None:
        """An INFO check is one request that is no sample: --resume counts it."""
        if self._wal is not None and self._wrote_checkpoint:
            self._wal.write('{"check": 1}\n')

    def acked(self, record: Record) -> None:
        self._log.write(record.json() + "\n")
        self.records += 1

    def ended(self, frames_ok: int) -> None:
        """The session ended cleanly (finished or Ctrl-C); its closing STATS saw `frames_ok`."""
        if self._wal is not None and self._wrote_header:
            self._checkpoint()  # when this session sent no new sample
            self._wal.write(json.dumps({"end": {"frames_ok": frames_ok, "records": self.records}}) + "\n")

    def close(self) -> None:
        self._log.close()
        if self._wal is not None:
            self._wal.close()

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _checkpoint(self) -> None:
        """Once per session, before its first new sample is sent."""
        if self._wrote_header and not self._wrote_checkpoint:
            self._wal.write(json.dumps({"checkpoint": {"frames_ok": self._base_frames,
                                                       "records": self.records}}) + "\n")
            self._wrote_checkpoint = True


# --------------------------------------------------------------------------- reading
@dataclass
class Journal:
    """An interrupted run as its files tell it (:meth:`read`). Positions count the samples
    in the order they were first sent (rows repeat across epochs, positions do not); the
    log's records come in that order, so record n is position n."""
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


# --------------------------------------------------------------------------- resuming
class Resume:
    """`tinyol stream --resume LOG`, from the files to the first new sample.

    ``Resume(LOG)`` reads and checks the files (``session``: the run's source, order, model
    and settings, for the caller to rebuild its rows); :meth:`settle` is the resumed
    session's first exchange with the device: one STATS, :func:`reconcile`, the resends;
    :meth:`check` follows once the Device is open; :meth:`run_log` appends to the files."""

    def __init__(self, log):
        self.log = str(log)
        j = Journal.read(log)
        if j.session.get("data") == "-":
            raise TinyolError("a stream from stdin cannot be resumed (its samples are gone)")
        missing = [k for k in SESSION_KEYS if k not in j.session]
        if missing:
            raise TinyolError(f"{log}{WAL_SUFFIX}: the session header lacks {', '.join(missing)}",
                              hint="--resume takes the files of `tinyol stream --log` unchanged")
        self.journal, self.session = j, j.session
        self.resumed: Resumed | None = None
        self.repaired = False  # LOG's last line was cut by the interruption and is now removed

    def settle(self, link: Link, ordered: list, input_q: tuple[float, int], *,
               window: int = DEFAULT_WINDOW, timeout: float = 1.0, retries: int = 8) -> list:
        """Before anything reaches the device but one STATS: reconcile the log, its WAL and
        the device's counters, then settle what the last session left in flight. `ordered`:
        the run's rows (index, x, label) in the order first sent, every epoch, rebuilt from
        the session. Returns the rows not yet sent."""
        j, log = self.journal, self.log
        if len(j.sent) > len(ordered) or any(ordered[p][0] != row for p, (row, _) in enumerate(j.sent)):
            raise TinyolError(f"{log}{WAL_SUFFIX} sent rows that {self.session['data']} (as the run "
                              "read it) does not hold in that order: the source changed since the run",
                              hint="resume with the same source files, or start the stream again")
        enc = self.session["encoding"]
        payloads = {p: ((ordered[p][0], ordered[p][2]),
                        sample_payload(ordered[p][1], ordered[p][2], enc, input_q)) for p in j.pending}
        learned_in_flight = reconcile(j, Stats.parse(link.request(Msg.STATS)), log)
        if learned_in_flight == 0:  # the reply cache is not needed: check the boot first
            check_same_device(link.info(), self.session)
        self.resumed = resend_pending(link, j, payloads, window=window, timeout=timeout,
                                      retries=retries)
        if j.log_keep < j.log_size:  # the kill cut the last line: drop it, then append
            with open(log, "r+b") as f:
                f.truncate(j.log_keep)
            self.repaired = True
        return ordered[len(j.sent):]

    def check(self, dev: Device) -> None:
        """After :meth:`settle`, on the session's Device: :func:`check_resumed`."""
        check_resumed(dev, self.session, self.resumed)

    def run_log(self) -> RunLog:
        """LOG and LOG.wal opened for appending: the resumed session's journal."""
        return RunLog(self.log, None, wal=True, append=True, records=len(self.journal.done),
                      resumed=self.resumed)


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


def check_same_device(info: Info, session: dict) -> None:
    """The device must run the log's model and must not have restarted since."""
    if info.model_hash != int(session["model_hash"]):
        raise TinyolError(f"the device now runs another model (hash 0x{info.model_hash:08x}, the log's "
                          f"is 0x{int(session['model_hash']):08x}): cannot resume")
    if info.boot_count != int(session["boot_count"]):
        raise DeviceReset(
            f"the device reset since the interrupted run (boot counter {session['boot_count']} -> "
            f"{info.boot_count}): what it learned since its last save is gone, so the run cannot "
            "be resumed exactly once", hint="start the stream again (without --resume)")


def check_resumed(dev: Device, session: dict, resumed: Resumed) -> None:
    """The device must be where the log says: same boot, same model, and its sample
    counter at the last sample the log (and the settled in-flight ones) accounts for."""
    check_same_device(dev.info, session)
    counters = list(resumed.counters)
    for c in resumed.completions:
        if not c.status:
            r = Result.parse(c.payload)
            if r.learned:
                counters.append(r.samples_seen)
    expect = max(counters, default=resumed.base_seen)
    seen = dev.stats().samples_seen
    if seen != expect:
        raise TinyolError(
            f"the device has learned {seen - resumed.base_seen} samples since the run began, the log "
            f"accounts for {expect - resumed.base_seen}: something else trained it in between",
            hint="resume only a device no other client used; start the stream again")
    missing = sorted(set(range(resumed.base_seen + 1, seen + 1)) - set(counters))
    if missing:  # e.g. another client's requests pushed an in-flight reply out of the cache
        raise TinyolError(
            f"the device learned {len(missing)} sample(s) the log cannot account for (its counters "
            f"{missing[:5]}{'...' if len(missing) > 5 else ''} belong to no logged sample): a sample "
            "in flight at the interruption may have been learned twice",
            hint="another client used the device between the interruption and --resume; "
                 "start the stream again")

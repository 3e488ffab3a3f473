"""Pipelined requests over one Link: exactly-once, reset-aware (the engine of tinyol.link.stream).

:class:`Pipeline` keeps up to ``window`` requests in flight over one
:class:`~tinyol.link.protocol.Link` so the serial line never idles while the device
computes. Every request keeps its frame; when its reply is missing the
*identical* frame is sent again and the device answers from its reply cache
(docs/protocol.md, "Exactly once"), so a SAMPLE is never learned twice.

How a missing reply is noticed:

* order: the device handles requests one at a time, in arrival order, and
  replies in that order. A reply to request E proves that every request sent
  before E (whose reply has not come) was lost on the way, in either direction:
  it is resent at once (like TCP's fast retransmit);
* time: a request without a reply after ``timeout`` s is resent, and an INFO
  request checks the boot counter (a reset device is reported, never fed on);
* a ``tinyol boot`` line, or a ``samples_seen`` that repeats or goes back by
  more than a window, means the device reset: :class:`~tinyol.link.protocol.DeviceReset`.

Order: the device learns the samples in the order sent, lost frames or not.
When a request is lost on the way, the SAMPLEs sent after it reach the device
first; it refuses them unexecuted with ``ERR_ORDER`` (docs/protocol.md, "Order")
and the host sends the missing request again, then each refused one, in send
order (go-back-N: :meth:`Pipeline._go_back`). Every SAMPLE reply carries the
device's sample counter after it (``Record.samples_seen``, logged by `--log`).

The device caches the replies of its last 8 executed requests. A resend is
safe only while fewer than 8 others can have executed after the request, so a
new request goes out only while, for every unanswered request, the others sent
or resent since it (a resend may be a first execution) plus those unanswered
stay below the window (:meth:`Pipeline._exposure`); one of the 8 slots is kept
for the INFO check: at most 7 samples in flight.
"""
from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Iterable, Iterator, Protocol

from .._defs import RX_AHEAD, Msg, Status
from ..errors import TinyolError
from .protocol import REPLY_FLAG, DeviceGone, DeviceReset, Frame, Link, LinkTimeout, info_reply

DEVICE_CACHE = 8          # TOL_SERVER_REPLY_CACHE: requests a host may have in flight
MAX_WINDOW = DEVICE_CACHE - 1   # one slot is kept for the INFO check after a timeout
DEFAULT_WINDOW = 4
UART_BAUD = 115200


# --------------------------------------------------------------------------- pipeline
class WriteAheadLog(Protocol):
    """What a write-ahead log hears from the pipeline, each call *before* the frame it
    names can reach the device (tinyol.link.resume.RunLog is the one tinyol has)."""

    def before_send(self, tag: object, seq: int) -> None:
        """A sample (not a control request) is about to be transmitted for the first time."""

    def before_check(self) -> None:
        """An INFO check (after a timeout) is about to be transmitted."""


@dataclass
class _Pending:
    tag: object
    frame: Frame
    wire: bytes
    first_tx: int = 0
    last_tx: int = 0
    t_first: float = 0.0
    t_last: float = 0.0
    attempts: int = 0
    done: bool = False
    reply: Frame | None = None
    control: bool = False
    latency: float = 0.0
    seq_tx: int = 0           # transmission number of the current seq's first transmission
    silent: int = 0           # timeouts in a row with not a byte received since the last transmission
    spurious: bool = False    # a second reply came: the resend was needless
    damaged: bool = False     # resent because of damage (its replies say nothing of the timeout)
    owed_before: int = 0      # frames sent before its last copy whose answers had not come then
    rx_mark: int = 0          # frames received (whole or damaged) when its last copy went out
    quiet: bool = False       # resent once because its copy's answer was overdue on a damaging link


@dataclass
class Completion:
    """One request's outcome, delivered in submission order."""
    tag: object
    msg: int
    payload: bytes            # reply payload (empty on error)
    status: int = 0           # 0, or the device's error status for this request
    latency: float = 0.0      # seconds from the first transmission to the reply
    attempts: int = 1


@dataclass
class PipelineStats:
    requests: int = 0
    resends: int = 0
    resend_order: int = 0     # resent because a later reply arrived first
    resend_timeout: int = 0   # resent after the timeout
    resend_damage: int = 0    # resent at once because a damaged frame came back
    damage_held: int = 0      # damaged frames that found the oldest request's copy still in flight
    answers: int = 0          # frames received, whole or damaged (each answers one frame sent)
    resend_quiet: int = 0     # resent after a quiet of measured round trips (Pipeline._overdue)
    resend_gap: int = 0       # resent because the device refused it as out of order (ERR_ORDER)
    info_checks: int = 0
    link_errors: int = 0      # seq-0 ERROR replies (the device saw a damaged frame)
    damaged: int = 0          # frames from the device that failed their checks on the host
    late: int = 0             # resends found needless (a second reply came): the device was slow, not lost
    rto: float = 0.0          # resend timeout at the end (adaptive, seconds)
    srtt: float = 0.0         # smoothed reply time (seconds)


class Pipeline:
    """Pipelined request/reply over a Link with exactly-once resends.

    Use :meth:`run` with an iterable of ``(tag, msg, payload)``; it yields one
    :class:`Completion` per request in the same order. ``boot_count`` is the
    device's boot counter at session start (INFO); a change raises DeviceReset.
    """

    RTO_MIN = 0.2             # s: floor of the adaptive resend timeout (Linux TCP's; below it,
                              # scheduling pauses of a busy host cause needless resends)
    RTO_BACKOFF_MAX = 64      # a request's timeout doubles per resend, up to this factor

    def __init__(self, link: Link, boot_count: int, *, window: int = DEFAULT_WINDOW,
                 timeout: float = 1.0, retries: int = 8, patience: float = 120.0,
                 adaptive: bool = True, baud: int | None = None,
                 journal: WriteAheadLog | None = None, resend_budget: int | None = None):
        if not 1 <= window <= DEVICE_CACHE:
            raise TinyolError(f"window must be 1..{DEVICE_CACHE}, got {window}")
        self.link = link
        self.boot_count = boot_count
        self.window = min(window, MAX_WINDOW)
        self.timeout = timeout        # initial resend timeout (and the cap of the adaptive one)
        self.retries = retries        # resends met by complete silence before the device counts as gone
        self.patience = patience      # s without any answered request before a live but damaged link gives up
        self.adaptive = adaptive
        # a real UART adds the frame's transmission time at `baud` (8N1); emulators' sockets do not
        url = getattr(link, "url", "") or ""
        self.byte_time = 10.0 / baud if baud else (0.0 if "://" in url or not url else 10.0 / UART_BAUD)
        self.resend_budget = resend_budget  # copies of one request, at most (then LinkTimeout); None: no limit
        self.journal = journal    # told of each sample and INFO check before it is transmitted
        self.info_check = True    # an INFO check after a timeout (off while resuming)
        self.rto = timeout
        self.rto_floor = min(timeout, self.RTO_MIN)
        self._srtt: float | None = None
        self._rttvar = 0.0
        self._last_rx = time.monotonic()
        self._last_progress = time.monotonic()
        self._recent: dict[int, _Pending] = {}  # delivered resent requests, by seq
        self.stats = PipelineStats()
        self._tx = 0
        self._history: collections.deque[int] = collections.deque(maxlen=4 * DEVICE_CACHE)
        self._info_armed = True  # one INFO check per stall, re-armed by a data reply
        self._queue: collections.deque[_Pending] = collections.deque()  # send order
        self._by_seq: dict[int, _Pending] = {}
        self._boot_lines = len(link.boot_lines)
        self._owed = 0            # frames sent whose answer (a reply or a damage report) has not come
        self._deferred: tuple[_Pending, int, float] | None = None  # a damage resend put off: (q, its copy, when)
        self.completed = 0        # requests delivered to the caller (data, not control)

    # -- sending
    def _transmit(self, p: _Pending, fresh: bool = False) -> None:
        self._tx += 1
        now = time.monotonic()
        if fresh:
            p.seq_tx = self._tx
        if not p.attempts:
            p.first_tx, p.t_first = self._tx, now
        else:
            if self.resend_budget is not None and p.attempts > self.resend_budget:
                self._over_budget(p)
            self.stats.resends += 1
            self.link.stats.retries += 1
        p.last_tx, p.t_last = self._tx, now
        p.owed_before, p.rx_mark = self._owed, self.stats.answers
        self._owed += 1
        p.attempts += 1
        self.link.write(p.wire)

    def _new(self, tag, msg: int, payload: bytes, control: bool = False,
             seq: int | None = None) -> _Pending:
        """A new request; `seq` given: a request of an earlier session sent again with its
        own seq (the identical frame: the device answers it from its cache if it ran)."""
        resend = seq is not None
        while seq is None or seq in self._by_seq:
            seq = self.link.next_seq()
        f = Frame(int(msg), seq, bytes(payload))
        p = _Pending(tag, f, f.encode(), control=control, attempts=int(resend))
        self._queue.append(p)
        self._by_seq[seq] = p
        self.link.stats.requests += 1
        if not control:
            self.stats.requests += 1
            if self.journal is not None:
                self.journal.before_send(tag, seq)  # write-ahead: logged before it can reach the device
        self._transmit(p, fresh=True)
        if resend:
            p.first_tx, p.t_first = p.last_tx, p.t_last
        return p

    def _exposure(self, x: _Pending) -> int:
        """How many other requests may execute on the device after `x` did, at most.

        The device keeps the replies of its last DEVICE_CACHE executed requests, so `x` may
        be resent safely only while fewer than DEVICE_CACHE others executed after it. Any
        of them was transmitted after x's seq was first sent, or is still unanswered (and
        will be resent): count those, answered ones from a short history included. A resend
        can be a request's *first* execution (its first copy was lost), so resends count."""
        n = sum(1 for q in self._queue if q is not x and (not q.done or q.last_tx > x.seq_tx))
        return n + sum(1 for t in self._history if t > x.seq_tx)

    def _fits(self, payload: bytes) -> bool:
        """Flow (docs/protocol.md): on a UART, may a request of this payload go out now? While
        the device executes one request it buffers RX_AHEAD bytes of the next ones; what a
        host sends beyond that is lost (issue 34: a 27 KB input sent behind another lost all
        but 2 KB). So the unanswered requests after the oldest plus this one must fit; a
        request with none unanswered always goes. Emulators' sockets hold bytes back
        (their UART models wait for the firmware to read), so there is no limit there."""
        if not self.byte_time:
            return True
        waiting = [q for q in self._queue if not q.done]
        if not waiting:
            return True
        ahead = sum(len(q.wire) for q in waiting[1:])
        wire = len(payload) + 10 + (len(payload) + 10) // 254 + 2  # COBS + delimiter, at most
        return ahead + wire <= RX_AHEAD

    def _may_send(self, limit: int, exclude: _Pending | None = None) -> bool:
        """May one more new request go out, keeping every unanswered request's exposure
        below `limit` (DEVICE_CACHE: the device's cache; the window for samples)?"""
        return all(self._exposure(q) + 1 <= limit - 1
                   for q in self._queue if not q.done and q is not exclude)

    # -- receiving
    def _check_lines(self) -> None:
        lines = self.link.boot_lines
        if len(lines) > self._boot_lines:
            raise DeviceReset(
                f"the device reset during the stream ({lines[-1]!r}) after {self.completed} "
                "samples; its learned state since the last save is gone",
                hint="restart the stream; results before and after a reset are not comparable")
        # a fault report is a reset too (the device reboots or exits after it)
        for line in self.link.stats.device_lines[-3:]:
            if line.startswith("tinyol fault"):
                raise DeviceReset(f"the device crashed after {self.completed} samples: {line}",
                                  hint="this is a firmware bug; please report the line above")

    def _spurious(self, p: _Pending) -> None:
        """A second reply to a resent request: both copies reached the device, so the
        resend was needless and the first reply answered the *first* copy (the device
        replies in order). Its latency is then a true round-trip sample (Karn's rule
        excludes resent requests only because that is unknown), and the timeout was too
        short: feed it in (as TCP's Eifel/F-RTO detection of spurious timeouts does)."""
        p.spurious = True
        self.stats.late += 1
        if self.adaptive and not p.damaged:  # after damage, the first reply may answer any copy
            r = p.latency - self._wire_time(p)
            # the floor learns the longest stall seen (a busy host, an emulator), so one
            # stall does not cost a resend of every request in flight each time it recurs
            self.rto_floor = min(self.timeout, max(self.rto_floor, 1.5 * r))
            self._rtt_update(r)

    def _resend_oldest(self, since: float) -> None:
        """A damaged frame arrived (from the device, or reported by it): the oldest
        unanswered request's exchange is the likeliest casualty. Resend it (fast retransmit
        on evidence; an unneeded resend is answered from the device's cache), within a
        budget: only once the answer to its last copy came (:meth:`_answered`, counted in
        frames) and not sooner than half a round trip after it (:meth:`_copy_time`; sooner: put
        off to then), so one copy is in flight. Damage seen sooner belongs to an older copy, and one damaged copy
        often draws several damage notices (a flipped delimiter splits it); resending on
        every one put a further copy on the line for each, every copy drew more damage, and
        a noisy link was flooded (issue 34: 570,199 resends for 30 samples at 5 % bit
        flips). What damage does not resend, the timer (:meth:`_timeouts`) does."""
        for q in self._queue:
            if not q.done:
                if since < q.t_last or not self._answered(q):
                    self.stats.damage_held += 1   # an older copy's answer: this one's is to come
                elif since - q.t_last >= self._copy_time(q):
                    self._damage_resend(q)
                else:   # sooner than its copy's time: resend at that time (paced, not dropped:
                    self.stats.damage_held += 1   # nothing else might come but the timer)
                    self._deferred = (q, q.last_tx, q.t_last + self._copy_time(q))
                return

    def _damage_resend(self, q: _Pending) -> None:
        q.damaged = True
        self.stats.resend_damage += 1
        self._deferred = None
        self._transmit(q)

    def _run_deferred(self) -> None:
        """The damage resend :meth:`_resend_oldest` put off, once its time has come (if no copy
        went out since); and the oldest request's copy whose answer is overdue (:meth:`_overdue`)."""
        if self._deferred is not None:
            q, tx, due = self._deferred
            if q.done or q.last_tx != tx:
                self._deferred = None
            elif time.monotonic() >= due:
                self._damage_resend(q)
        q = self._overdue()
        if q is not None and time.monotonic() >= self._overdue_at(q):
            q.quiet = True
            self.stats.resend_quiet += 1
            self._owed = 0   # the quiet shows it: the answers still owed are not coming
            self._damage_resend(q)

    def _overdue(self) -> _Pending | None:
        """The oldest request, when its last copy was a damage resend whose answer may be lost
        (the noise swallowed it: a flipped delimiter merges two frames), after a measured round
        trip: resent once after 8 round trips of quiet rather than the resend timeout's
        floor (RTO_MIN, 200 times a socket's round trip; a sample at 5 % flips takes ~280
        copies, and 1 in ~10 answers is swallowed). Once per quiet: a second goes to the timer,
        which counts silence (:meth:`_timeouts`)."""
        if self._rtt() is None:
            return None
        for q in self._queue:
            if not q.done:
                return q if q.damaged and not q.quiet and not self._answered(q) else None
        return None

    def _overdue_at(self, q: _Pending) -> float:
        return max(q.t_last, self._last_rx) + 8 * (self._rtt() or 0.0) + 2 * self._wire_time(q)

    def _rtt(self) -> float | None:
        """The round trip as measured: the smoothed reply time, or before the pipeline timed a
        reply of its own the link's (its last request before the stream, Link.request; at most
        the timeout: a slow request such as SAVE says nothing of the line); None before any."""
        if self._srtt is not None:
            return self._srtt
        r = self.link.stats.reply_time
        return None if r is None else min(r, self.timeout)

    def _answered(self, q: _Pending) -> bool:
        """Has the answer to `q`'s last copy come? The device answers each frame it receives
        with one frame, in arrival order (its reply, or a damage report for a damaged one), so
        after the answers owed when the copy went out comes the copy's own. Counting frames,
        whole or damaged, paces damage resends by what the link delivers, whatever its rate:
        one copy of the oldest request on the way (on a socket without a rate the copy's time is
        0, and every damage notice was a further copy: issue 34's 1.41 M resends for 30 samples
        at 5 % flips). A frame the noise swallowed (a flipped delimiter merges two) leaves an
        answer owed: resent after a quiet (:meth:`_overdue`) or by the timer; one it splits
        counts twice (one copy early: :meth:`_copy_time` keeps it from becoming a second chain
        of copies)."""
        return self.stats.answers - q.rx_mark > q.owed_before

    def _answer(self, n: int) -> None:
        """`n` frames came from the device (whole or damaged): each answers one frame sent."""
        self.stats.answers += n
        self._owed = max(0, self._owed - n)

    def _over_budget(self, p: _Pending) -> None:
        what = "sample" if not p.control else "request"
        raise LinkTimeout(
            f"a {what} (seq {p.frame.seq}) was sent {p.attempts} times without an answer, the "
            f"resend budget, after {self.completed} samples; the device is alive but the link "
            f"damages nearly every frame ({self.observed()})",
            hint="check the cable, the baud rate and electrical noise; a larger --resend-budget "
                 "keeps trying (samples in flight are settled by --resume LOG, never learned twice)")

    def _copy_time(self, q: _Pending) -> float:
        """How long after its last copy went out damage can be that copy's answer: its wire
        time and half the measured round trip (:meth:`_rtt`; none before any). With
        it no two copies of the oldest request travel within half a round trip of each other,
        so at most two are on the way whatever :meth:`_answered` was told by a damaged frame
        that split in two (counted as two answers)."""
        return self._wire_time(q) + 0.5 * (self._rtt() or 0.0)

    def _rtt_sample(self, p: _Pending) -> None:
        """Jacobson/Karels (RFC 6298): SRTT, RTTVAR from replies to requests sent once
        (Karn: a resent request's reply may answer either copy); RTO = SRTT + 4 RTTVAR."""
        if p.attempts != 1 or not self.adaptive:
            return
        self._rtt_update(p.latency - self._wire_time(p))

    def _rtt_update(self, r: float) -> None:
        if self._srtt is None:
            self._srtt, self._rttvar = r, r / 2
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self._srtt - r)
            self._srtt = 0.875 * self._srtt + 0.125 * r
        self.rto = min(self.timeout, max(self.rto_floor, self._srtt + 4 * self._rttvar))
        self.stats.rto, self.stats.srtt = self.rto, self._srtt

    def _wire_time(self, p: _Pending) -> float:
        """Seconds the request and a reply of the same size spend on a UART (0 on sockets)."""
        return self.byte_time * (len(p.wire) + 32)

    def _deadline(self, p: _Pending) -> float:
        """When `p` is resent: the adaptive timeout plus its frame's wire time, doubled per
        resend met by silence (exponential backoff, as TCP; a damaged reply shows the device
        is there, so it does not back off)."""
        back = min(2 ** p.silent, self.RTO_BACKOFF_MAX)  # back off on silence, not on damage
        # counted from the last byte received too: while replies flow, a lost request is
        # found by order (a later one answered first), the timer is for silence
        wait = min(self.rto * back, max(4 * self.timeout, self.rto))  # silence is named within ~30 s
        return max(p.t_last, self._last_rx) + wait + self._wire_time(p)

    def _on_frame(self, f: Frame) -> None:
        if f.seq == 0:
            if f.type == Msg.ERROR:
                self.stats.link_errors += 1  # something we sent was damaged: resend the oldest
                self._resend_oldest(self._last_rx)  # seen when its bytes came (several in one read: one resend)
            return
        p = self._by_seq.get(f.seq) or self._recent.get(f.seq)
        if p is None or p.done:
            if p is not None and p.attempts > 1 and f.seq == p.frame.seq and not p.spurious:
                self._spurious(p)
            return  # a stale or repeated reply
        if f.type != Msg.ERROR and f.type != p.frame.type | REPLY_FLAG:
            return  # cannot be ours (a corrupted frame that passed CRC is not expected)
        if f.type == Msg.ERROR and f.payload[:1] and f.payload[0] == Status.ERR_FULL \
                and p.attempts > 1 and p.frame.type in (Msg.PREDICT, Msg.EMBED, Msg.INFO, Msg.STATS):
            # the device executed it but no longer keeps that (large) reply
            if p.control:
                pass  # an INFO check without a verdict: done; the next timeout asks again
            elif self._may_send(DEVICE_CACHE, exclude=p):
                self._reissue(p)  # idempotent: run it again under a new seq
                return
            else:
                return  # no room in the device's cache yet: the timeout resends, then we retry
        if f.type == Msg.ERROR and f.payload[:1] and f.payload[0] == Status.ERR_ORDER:
            if p.attempts == 1:  # a round trip all the same (short: at 5 % flips the one
                p.latency = time.monotonic() - p.t_first   # reply that often comes through whole)
                self._rtt_sample(p)
            self._go_back(p)  # refused, not executed: an earlier request is missing
            return
        p.done, p.reply = True, f
        p.latency = time.monotonic() - p.t_first
        self._last_progress = time.monotonic()
        self._rtt_sample(p)
        # order: everything transmitted before this request's first transmission was lost
        for q in self._queue:
            if q is p:
                break
            if not q.done and q.last_tx < p.first_tx:
                self.stats.resend_order += 1
                self._transmit(q)

    def _go_back(self, p: _Pending) -> None:
        """The device refused `p` unexecuted (ERR_ORDER): a request sent before it has not
        reached the device. Resend the missing ones not sent again since `p` was, then `p`
        (go-back-N): the device learns in the order sent, each sample once."""
        missing = False
        for q in self._queue:
            if q is p:
                break
            if not q.done:
                missing = True
                if q.last_tx < p.last_tx:
                    self.stats.resend_order += 1
                    self._transmit(q)
        if not missing:
            raise TinyolError(
                f"the device refuses request seq {p.frame.seq} as out of order (ERR_ORDER), but "
                "every request sent before it was answered",
                hint="another program may be talking to the device; restart the stream")
        self.stats.resend_gap += 1
        self._transmit(p)

    def _reissue(self, p: _Pending) -> None:
        """Send an idempotent request again under a fresh seq (its old reply is gone)."""
        del self._by_seq[p.frame.seq]
        self._history.append(p.last_tx)  # the old seq executed: it holds a cache slot
        seq = self.link.next_seq()
        p.frame = Frame(p.frame.type, seq, p.frame.payload)
        p.wire = p.frame.encode()
        self._by_seq[seq] = p
        self._transmit(p, fresh=True)

    def _on_info(self, p: _Pending) -> None:
        if p.reply.type == Msg.ERROR:
            return  # no verdict (e.g. ERR_FULL for a stale INFO); the next timeout asks again
        info = info_reply(p.reply.payload)
        if info.boot_count != self.boot_count:
            raise DeviceReset(
                f"the device reset during the stream (boot counter {self.boot_count} -> "
                f"{info.boot_count}) after {self.completed} samples; its learned state since the "
                "last save is gone",
                hint="restart the stream; results before and after a reset are not comparable")

    def observed(self) -> str:
        s = self.stats
        parts = [f"{s.damaged} damaged frames from the device",
                 f"{s.link_errors} reports of damaged frames it received",
                 f"{self.link.stats.bytes_in} bytes received in all"]
        if s.late:
            parts.append(f"{s.late} replies slower than the timeout")
        return ", ".join(parts)

    def _timeouts(self) -> None:
        now = time.monotonic()
        late = [p for p in self._queue if not p.done and now >= self._deadline(p)]
        if not late:
            return
        self._owed = 0  # a timeout's worth of quiet: the answers still owed are not coming
        for p in late:
            if self._last_rx < p.t_last:
                p.silent += 1   # not one byte since it was (re)sent
            else:
                p.silent = 0
            if p.silent > self.retries:
                raise DeviceGone(
                    f"the device went silent after {self.completed} samples: not one byte came "
                    f"back during {p.silent} resends over {now - self._last_rx:.1f} s "
                    f"(before that: {self.observed()})",
                    hint="the board was unplugged or hung, or the emulator stopped; "
                         "a slow device needs a larger --timeout or --retries")
        if now - self._last_progress > self.patience:
            damaged = self.stats.damaged + self.stats.link_errors
            what = ("the link damages nearly every frame" if damaged
                    else "the device answers, but not these requests")
            raise LinkTimeout(
                f"no request answered for {now - self._last_progress:.0f} s after {self.completed} "
                f"samples; the device is alive but {what} ({self.observed()})",
                hint="check the cable, the baud rate and electrical noise; --patience waits longer")
        if self.info_check and self._info_armed and not any(q.control and not q.done for q in self._queue) \
                and self._may_send(DEVICE_CACHE):
            self._info_armed = False
            self.stats.info_checks += 1
            if self.journal is not None:
                self.journal.before_check()  # write-ahead: --resume counts the requests the run made
            self._new("info-check", Msg.INFO, b"", control=True)
        for p in late:
            if not p.done:
                self.stats.resend_timeout += 1
                self._transmit(p)


    def _pump(self, wait: float) -> None:
        """Handle what arrives within `wait` seconds; returns early once the oldest is answered."""
        deadline = time.monotonic() + wait
        link = self.link
        while True:
            due = self._deferred[2] if self._deferred is not None else deadline
            q = self._overdue()
            if q is not None:
                due = min(due, self._overdue_at(q))
            data = link.read(min(deadline, due) - time.monotonic())
            if data:
                self._last_rx = time.monotonic()
                for q in self._queue:
                    q.quiet = False
                g = link.stats.garbage_frames
                seen = link.deframer.garbage
                for f in link.receive(data):  # every complete frame, none left behind
                    self._answer(link.deframer.garbage - seen + 1)  # the damaged ones before it too
                    seen = link.deframer.garbage
                    self._on_frame(f)
                self._answer(link.deframer.garbage - seen)
                damaged = link.stats.garbage_frames - g
                self.stats.damaged += damaged
                if damaged:
                    self._resend_oldest(self._last_rx)
                self._check_lines()
            self._run_deferred()
            if (self._queue and self._queue[0].done) or time.monotonic() >= deadline:
                break
        self._timeouts()

    def _deliver(self) -> Iterator[Completion]:
        while self._queue and self._queue[0].done:
            p = self._queue.popleft()
            self._history.append(p.last_tx)
            if p.attempts > 1 and p.frame.seq not in self._recent:  # for spurious-timeout detection
                self._recent[p.frame.seq] = p
                while len(self._recent) > 4 * DEVICE_CACHE:
                    self._recent.pop(next(iter(self._recent)))
            if not p.control:
                self._info_armed = True
            del self._by_seq[p.frame.seq]
            if p.control:
                self._on_info(p)
                continue
            f = p.reply
            status = f.payload[0] if f.type == Msg.ERROR else 0
            self.completed += 1
            yield Completion(p.tag, p.frame.type, b"" if status else f.payload, status,
                             p.latency, p.attempts)

    def run(self, requests: Iterable[tuple[object, int, bytes]]) -> Iterator[Completion]:
        """Send every request (keeping the window full); yield completions in order.

        `requests` may yield :data:`NOT_YET` when no request is ready (a live source,
        see :class:`Prefetch`); replies keep being handled meanwhile."""
        it = iter(requests)
        more, held = True, None
        while more or held is not None or self._queue:
            while (more or held is not None) and self._may_send(self.window):
                if held is None:
                    try:
                        item = next(it)
                    except StopIteration:
                        more = False
                        break
                else:
                    item, held = held, None
                if item is NOT_YET:
                    break
                if not self._fits(item[2]):
                    held = item  # flow: it goes once the device has taken what is ahead of it
                    break
                self._new(*item)  # (tag, msg, payload) or (tag, msg, payload, False, seq)
            yield from self._deliver()
            if self._queue:
                self._pump(min(self.rto, 0.05) if self._queue[0].done else self._wait_for_oldest())
                yield from self._deliver()

    def _wait_for_oldest(self) -> float:
        """How long _pump may wait: until the earliest resend deadline (at least 1 ms)."""
        now = time.monotonic()
        nxt = min((self._deadline(q) for q in self._queue if not q.done), default=now + self.rto)
        return min(max(0.001, nxt - now), max(self.rto, 0.001))

    def drain(self, limit: float | None = None) -> list[Completion]:
        """Collect the replies still in flight (after Ctrl-C), giving up after `limit` s."""
        out: list[Completion] = []
        deadline = time.monotonic() + (limit if limit is not None else 3 * self.timeout)
        while self._queue and time.monotonic() < deadline:
            self._pump(min(0.05, self.timeout))
            out.extend(self._deliver())
        return out


NOT_YET = object()  # from a live source: no request ready yet

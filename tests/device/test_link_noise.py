"""The link under noise (issue 34): a burst of damage reports resends once, --patience
holds from the first request, a resumed run counts only the checks that matter, a tty is
opened exclusively.

Oracles: the native firmware behind a fault-injecting TCP proxy (tests/_stream_util.py),
the device's own counters (STATS), pyserial's exclusive open on a real pseudo-terminal.
"""
from __future__ import annotations

import os
import time

import pytest
from _stream_util import FaultProxy, noisy_rows, quiet_after
from conftest import ROOT
from tinyol.errors import TinyolError
from tinyol.link.protocol import Frame, Link, LinkTimeout, open_serial
from tinyol.targets import emulator

MODEL = "models/digits"



@pytest.fixture(scope="module")
def native_fw(firmware):
    return firmware("native", model=MODEL)


# --------------------------------------------------------------------------- patience from the first byte
@pytest.mark.slow
def test_the_opening_request_honours_patience(native_fw, tmp_path):
    """A live link that damages nearly every frame (10 % of the bytes flipped: an INFO reply
    arrives whole about one time in 500): the stream's first request gives up after
    --patience, not after Link's default 20 s (silence would be another matter: it is
    counted in --retries, never cut short)."""
    from tinyol.commands.stream import run_stream
    with emulator.start_native(native_fw.program, timeout=300) as t, FaultProxy(t.url, flip=0.1, seed=3) as px:
        t0 = time.monotonic()
        with pytest.raises(LinkTimeout):
            run_stream(px.url, "digits:5-9@train", "train", model_dir=str(ROOT / MODEL), limit=3,
                       patience=1.0, timeout=0.2, retries=3, progress=False, echo=lambda *a, **k: None)
        took = time.monotonic() - t0
    assert took < 12.0, took   # Link's own patience is 20 s


# --------------------------------------------------------------------------- one resend per burst of damage
class _ScriptedPort:
    """A serial port whose reads hand out what the script says, all of a burst in one read
    (what a UART's driver does with bytes that arrived together); it records every write."""

    def __init__(self, bursts):
        self.bursts, self.writes, self.timeout = list(bursts), [], 0.05

    def write(self, data):
        self.writes.append(bytes(data))
        return len(data)

    def read(self, n=1):
        if self.bursts:
            return self.bursts.pop(0)
        time.sleep(self.timeout)
        return b""

    @property
    def in_waiting(self):
        return 0

    def close(self):
        pass


def test_damage_reported_in_one_burst_resends_once():
    """Three damage reports from the device arriving in one read (it saw our frame split
    into three damaged pieces) are one piece of evidence: the request is resent once, not
    three times (each resend drew more reports: a flood on a noisy line)."""
    from tinyol._defs import Msg, Status
    from tinyol.link.pipeline import Pipeline
    err = Frame(Msg.ERROR, 0, bytes([Status.ERR_CRC, 0, 0, 0])).encode()
    port = _ScriptedPort([err * 3])
    link = Link(port, timeout=0.2, seed=1)
    pipe = Pipeline(link, 0, window=1, timeout=0.2, patience=0.6)
    pipe.info_check = False
    with pytest.raises((LinkTimeout, TinyolError)):
        list(pipe.run([("a", Msg.STATS, b"")]))
    assert pipe.stats.link_errors == 3
    assert pipe.stats.resend_damage == 1, pipe.stats


# --------------------------------------------------------------------------- resume: the checks that matter
def test_resume_counts_only_the_checks_after_the_oldest_in_flight():
    """A long run on a noisy link made 10 INFO checks early on; killed with 4 samples in
    flight, 2 of them learned. Those checks ran long before the samples in flight and took
    no slot of the reply cache they need: the resume goes ahead (it was refused: every
    check of the session was counted as executed after the oldest). Checks close to it
    still count."""
    from tinyol.link.device import Stats
    from tinyol.link.resume import Journal, reconcile
    sent = [(i, 1000 + i) for i in range(44)]
    done = [(i, i + 1) for i in range(40)]
    stats = Stats(100 + 42 + 1 + 10, 0, 0, 0, 0, samples_seen=42)
    early = Journal({"base_seen": 0}, sent, done, (100, 0), None, 0, 0, 10, [3 * i for i in range(10)])
    assert reconcile(early, stats) == 2
    late = Journal({"base_seen": 0}, sent, done, (100, 0), None, 0, 0, 10, [5] * 4 + [40] * 6)
    with pytest.raises(TinyolError, match="executed after the oldest"):
        reconcile(late, stats)


# --------------------------------------------------------------------------- a tty is tinyol's alone
@pytest.mark.skipif(os.name != "posix", reason="pseudo-terminals and flock are POSIX")
def test_a_tty_in_use_is_refused_in_one_line(capsys):
    """A second `tinyol info` on the port a stream holds used to be answered (the two read
    each other's replies); a real pseudo-terminal opened by tinyol is now refused to a
    second tinyol (pyserial's exclusive open, an flock)."""
    from tinyol.cli import main
    from tinyol.link.protocol import PortBusy
    master, slave = os.openpty()
    name = os.ttyname(slave)
    first = open_serial(name)
    try:
        with pytest.raises(PortBusy, match="in use by another program"):
            open_serial(name)
        assert main(["info", "--port", name]) == 1
        err = capsys.readouterr().err
        assert "in use by another program" in err and "Traceback" not in err
    finally:
        first.close()
        os.close(master)
        os.close(slave)


# --------------------------------------------------------------------------- a diverged sample counts nowhere
def test_a_diverged_sample_counts_nowhere_on_the_device(native_fw):
    """Issue 34: a SAMPLE answered ERR_DIVERGED still advanced samples_seen (and its class
    count), so the counter in the next reply and STATS claimed one sample more than the head
    learned, and a resumed run's reconciliation counted a learned sample that was not. On the
    native firmware: a learning rate and weight decay of 3e38 make the step overflow; the device's
    STATS must equal its STATS before, but for `rejected`; the next sample is counter + 1."""
    import numpy as np
    from tinyol._defs import Status
    from tinyol.data.datasets import load_source
    from tinyol.link import Device
    from tinyol.link.protocol import DeviceError
    from tinyol.model.folder import load_manifest, quantize
    man = load_manifest(ROOT / MODEL)
    X, y, _ = load_source("digits:5-9@train")
    q = [quantize(x.ravel(), float(man["input"]["scale"]), int(man["input"]["zero_point"])) for x in X[:3]]
    with emulator.start_native(native_fw.program, timeout=120) as t, Device.open(t.url, timeout=2) as dev:
        assert dev.sample(q[0], int(y[0])).samples_seen == 1
        before = dev.stats()
        lr, wd = dev.get("lr"), dev.get("weight_decay")
        dev.set("lr", 3e38)
        dev.set("weight_decay", 3e38)
        with pytest.raises(DeviceError) as e:
            dev.sample(q[1], 9)   # class 9: not active yet (the exported head has 0-4)
        assert e.value.status == Status.ERR_DIVERGED
        after = dev.stats()
        assert after.samples_seen == before.samples_seen == 1
        assert after.class_counts == before.class_counts and after.class_counts[9] == 0
        assert after.n_active == before.n_active
        assert after.rejected == before.rejected + 1 and after.updates == before.updates
        dev.set("lr", lr)
        dev.set("weight_decay", wd)
        r = dev.sample(q[2], int(y[2]))
        assert r.samples_seen == 2 and r.learned
        assert dev.stats().class_counts == (np.bincount([y[0], y[2]], minlength=10)).tolist()


# --------------------------------------------------------------------------- 5 % flips on a real line's rate
def _stop_after_bytes(px, limit: int):
    """Stop the stream as Ctrl-C does once the proxy carried `limit` bytes (a bound on bytes,
    not on time: the stream before the fix flooded the line for minutes)."""
    import _thread
    import threading
    done = threading.Event()

    def watch():
        while not done.wait(0.2):
            if px.carried["up"] + px.carried["down"] > limit:
                px.enabled = False  # the closing STATS goes clean
                _thread.interrupt_main()
                return
    threading.Thread(target=watch, daemon=True).start()
    return done


@pytest.mark.slow
def test_five_percent_flips_at_115200_baud_deliver_at_a_bounded_overhead(native_fw):
    """Issue 34: at 5 % of the bytes bit-flipped (one bit of a byte, with probability 0.05,
    both ways) on a 115200-baud line (tests/_stream_util.FaultProxy paced at the baud; the
    faults from the first sample to the last reply: _stream_util.noisy_rows) that the host
    reaches as a socket (a serial-to-network bridge: no rate told), 5 digits samples arrive,
    each learned once, in send order, within 80 KB of line traffic per sample (a sample's
    exchange is ~110 bytes and comes through whole about 1 time in 240 at this noise: ~26 KB
    at best). How many resends the 0.2 s timer drives is not held here: it depends on how fast
    the loaded machine runs the proxy (a clean-clone run at load 5-7 gave 145 timer against
    1,316 damage resends for 5 samples; the idle machine 0-3 %). The test line ran at
    ~900 bytes/s, not 11,520 (_stream_util._Line: one byte per wake-up of the proxy), so a
    round trip took ~110 ms and the 0.2 s timer resent 16-19 % of the copies (375 timer, 2,322
    damage resends for 10 samples; ~40 s per sample); at the line's rate 0-3 % (~3 s per
    sample, docs/reliability.md). The stream stops (as Ctrl-C does) once the line carried n
    times the bytes bound."""
    import numpy as np
    from tinyol.data.datasets import load_source
    from tinyol.link import Device
    from tinyol.link.stream import Stream
    from tinyol.model.folder import load_manifest
    n, per_sample = 5, 80_000
    X, y, _ = load_source("digits:5-9@train")
    order = np.random.default_rng(11).permutation(len(y))[:n]
    with emulator.start_native(native_fw.program, timeout=900) as t, \
            FaultProxy(t.url, flip=0.05, seed=5, baud=115200) as px:
        px.enabled = False
        with Device.open(px.url, timeout=0.2, patience=300) as dev:
            st = Stream(dev, load_manifest(ROOT / MODEL), window=4, timeout=0.2, patience=300)
            watch = _stop_after_bytes(px, n * per_sample)
            try:
                rows = ((i, X[j], int(y[j])) for i, j in enumerate(order))
                s = st.run(noisy_rows(px, rows), on_record=quiet_after(px, st.records, n))
            finally:
                watch.set()
            seen = dev.stats()
    assert px.counts["flip"] > 0.04 * px.noisy, (px.counts, px.noisy)
    assert not s.interrupted and s.samples == n, (s.samples, s.retries, s.bytes_out + s.bytes_in)
    assert seen.samples_seen == n
    assert [r.samples_seen for r in st.records] == list(range(1, n + 1))
    assert seen.class_counts == np.bincount(y[order], minlength=10).tolist()
    assert (px.carried["up"] + px.carried["down"]) / n < per_sample


def test_a_sample_over_the_resend_budget_is_named_never_dropped():
    """A request the link never lets through (every reply a damage report): after the resend
    budget (--resend-budget; none by default) the stream stops with one line naming the budget
    and what to do (there was no budget: it resent for as long as --patience allowed)."""
    from tinyol._defs import Msg, Status
    from tinyol.link.pipeline import Pipeline
    err = Frame(Msg.ERROR, 0, bytes([Status.ERR_CRC, 0, 0, 0])).encode()
    port = _ScriptedPort([err] * 10_000)
    link = Link(port, timeout=0.2, seed=1)
    pipe = Pipeline(link, 0, window=1, timeout=0.2, patience=600, resend_budget=5)
    pipe.info_check = False
    with pytest.raises(LinkTimeout, match="resend budget") as e:
        list(pipe.run([("a", Msg.SAMPLE, b"\0" * 8)]))
    assert "--resend-budget" in e.value.hint and "--resume" in e.value.hint
    assert len(port.writes) == 6 and pipe.completed == 0


# --------------------------------------------------------------------------- 5 % flips on a socket without a rate
FLIP = 0.05


def _wire(msg: int, payload: int) -> int:
    """Bytes a frame of `payload` bytes takes on the wire (COBS of a payload with no zero run
    longer than 254 and the delimiter)."""
    return len(Frame(msg, 1, b"\1" * payload).encode())


def _floor(*wires: int) -> float:
    """The fewest line bytes an exchange of these frames costs on average at FLIP per byte: each
    attempt carries them all (w bytes) and gets through whole (1 - FLIP)^w of the time, so
    w / (1 - FLIP)^w (a policy that never resends before the answer to its last copy came
    pays about this; one that floods pays any multiple of it)."""
    w = sum(wires)
    return w / (1 - FLIP) ** w


def _sample_floor(input_size: int) -> float:
    from tinyol._defs import Msg
    return _floor(_wire(Msg.SAMPLE, 3 + input_size), _wire(Msg.SAMPLE | 0x80, 18))


@pytest.mark.slow
def test_five_percent_flips_on_a_socket_deliver_at_a_bounded_overhead(native_fw):
    """Issue 34's flood: at 5 % of the bytes bit-flipped both ways on a socket, which has no
    rate (the emulators', a serial-to-network bridge's), each damage notice was a further copy of
    the oldest request, each copy drew more notices: 1.41 M resends and 135 MB for 30 samples
    (4.5 MB, on this machine 0.9 MB, per sample: scripts/measure_link_noise.py). Damage resends
    are now paced by what the link delivers (one copy of the oldest request on the way, counted in
    answers, and half a measured round trip between copies): 20 samples arrive, each learned once,
    in send order, within twice the floor of a sample's exchange (_floor: ~35 KB for the digits
    model's 81 + 31 bytes; measured ~25 KB: a damaged request draws a 16-byte report, not the
    reply). The flood grows as it goes (main: 64 KB per sample for 5 samples, 273 KB for 20), so
    20 samples. The faults run from the first sample to the last reply; the stream is stopped (as
    Ctrl-C does) once the line carried n times the bound: a bound on bytes, not time."""
    import numpy as np
    from tinyol.data.datasets import load_source
    from tinyol.link import Device
    from tinyol.link.stream import Stream
    from tinyol.model.folder import load_manifest
    n = 20
    X, y, _ = load_source("digits:5-9@train")
    order = np.random.default_rng(11).permutation(len(y))[:n]
    with emulator.start_native(native_fw.program, timeout=600) as t, FaultProxy(t.url, flip=FLIP, seed=5) as px:
        px.enabled = False
        with Device.open(px.url, timeout=0.2, patience=300) as dev:
            bound = 2 * _sample_floor(dev.info.input_size)
            st = Stream(dev, load_manifest(ROOT / MODEL), window=4, timeout=0.2, patience=300)
            watch = _stop_after_bytes(px, n * bound)
            try:
                rows = ((i, X[j], int(y[j])) for i, j in enumerate(order))
                s = st.run(noisy_rows(px, rows), on_record=quiet_after(px, st.records, n))
            finally:
                watch.set()
            seen = dev.stats()
    assert px.counts["flip"] > 0.04 * px.noisy, (px.counts, px.noisy)
    assert not s.interrupted and s.samples == n, (s.samples, s.retries, px.carried)
    assert seen.samples_seen == n and [r.samples_seen for r in st.records] == list(range(1, n + 1))
    assert seen.class_counts == np.bincount(y[order], minlength=10).tolist()
    assert (px.carried["up"] + px.carried["down"]) / n < bound, (px.carried, bound)


@pytest.mark.slow
def test_a_stream_starts_with_five_percent_flips_from_the_first_byte(native_fw):
    """Issue 34: with the faults from the first byte, a stream could not begin: its opening STATS
    reply (~200 bytes on the wire with 10 classes) comes through whole at 5 % flips about 1 time in
    20,000. It opens and closes with STATS' short form now (72 bytes: docs/protocol.md): INFO,
    STATS, 3 samples and the closing STATS, every byte of them at 5 % flips on a socket, within 3
    times the floor of each exchange (_floor); stopped, as Ctrl-C does, once the line carried
    that bound (before: the opening STATS alone costs ~11 MB on average)."""
    import numpy as np
    from tinyol._defs import STATS_SHORT_BYTES, Msg
    from tinyol.data.datasets import load_source
    from tinyol.link import Device
    from tinyol.link.stream import Stream
    from tinyol.model.folder import load_manifest
    n = 3
    X, y, _ = load_source("digits:5-9@train")
    order = np.random.default_rng(11).permutation(len(y))[:n]
    with emulator.start_native(native_fw.program, timeout=600) as t:
        with Link.open(t.url, timeout=1.0) as clean:   # the INFO reply's size, on a clean line
            info = clean.info()
            info_wire = _wire(Msg.INFO | 0x80, len(clean.request(Msg.INFO)))
        stats = _floor(_wire(Msg.STATS, 1), _wire(Msg.STATS | 0x80, STATS_SHORT_BYTES))
        bound = 3 * (_floor(_wire(Msg.INFO, 0), info_wire) + 2 * stats + n * _sample_floor(info.input_size))
        with FaultProxy(t.url, flip=FLIP, seed=5) as px:
            watch = _stop_after_bytes(px, bound)
            try:
                with Device.open(px.url, timeout=0.2, patience=300) as dev:
                    st = Stream(dev, load_manifest(ROOT / MODEL), window=4, timeout=0.2, patience=300)
                    s = st.run((i, X[j], int(y[j])) for i, j in enumerate(order))
            except KeyboardInterrupt:   # stopped before the stream began: INFO or the opening STATS
                pytest.fail(f"no stream began within {bound:,.0f} bytes ({px.carried})")
            finally:
                watch.set()
    assert px.counts["flip"] > 0.04 * px.noisy, (px.counts, px.noisy)
    assert not s.interrupted and s.samples == n, (s.samples, s.retries, px.carried)
    assert s.device_count_from == "STATS" and s.device_samples_seen == n
    assert [r.samples_seen for r in st.records] == list(range(1, n + 1))
    assert px.carried["up"] + px.carried["down"] < bound, (px.carried, bound)


def test_a_paced_test_line_sends_from_idle_whatever_the_clock(monkeypatch):
    """The paced FaultProxy line (tests/_stream_util._Line) once sent nothing, ever, when
    the monotonic clock made (now - (now - byte_time)) / byte_time round to just under 1
    (e.g. now = 2048.21 s at 115200 baud): every 115200-baud test then failed at the first INFO."""
    import _stream_util
    sent = []

    class _Sock:
        def sendall(self, b):
            sent.append(bytes(b))
    monkeypatch.setattr(_stream_util.time, "monotonic", lambda: 2048.21)
    line = _stream_util._Line(10 / 115200)
    line.queue += b"abc"
    assert line.send(_Sock()) == 1 and sent == [b"a"]


def test_a_paced_test_line_runs_at_its_baud_while_bytes_wait(monkeypatch):
    """The paced FaultProxy line let one byte leave per wake-up of the proxy's loop (~1 ms)
    whatever waited: its clock was reset to `now` at every send, as if the line were idle, so
    a "115200-baud" line carried ~900 bytes/s, not 11,520, and an INFO round trip took ~110 ms
    instead of ~9 (issue 34's "30 s per sample, line mostly idle" at 115200 was this). A busy
    line runs at the rate: 1,000 bytes waiting, sent from at 20 wake-ups 1 ms apart: 219 bytes (was 20)."""
    import _stream_util
    now = [100.0]
    sent = bytearray()

    class _Sock:
        def sendall(self, b):
            sent.extend(b)
    monkeypatch.setattr(_stream_util.time, "monotonic", lambda: now[0])
    line = _stream_util._Line(10 / 115200)
    line.queue += bytes(1000)
    for _ in range(20):
        line.send(_Sock())
        now[0] += 0.001
    assert 215 <= len(sent) <= 222, len(sent)   # 19 ms at 11,520 bytes/s: 218 (+1: the first at once)
    line.queue.clear()
    line.send(_Sock())
    now[0] += 1.0   # idle for a second: the line does not save up time
    line.queue += bytes(100)
    n = line.send(_Sock())
    assert n == 1, n

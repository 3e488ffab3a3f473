"""STATS' short form (issue 34): the counters a session needs, in a reply short enough to come
through a noisy line, Python <-> C.

Oracles: the firmware's protocol stack with the digits model compiled for the host
(tests/_stream_util.compile_device), its whole STATS reply (the short form must be its first
bytes, nothing else), and its own answer to a STATS payload it does not know (ERR_LENGTH, what
firmware before the short form answered a 1-byte payload) for the host's fallback.
"""
from __future__ import annotations

import numpy as np
import pytest
from _stream_util import CPort, compile_device
from conftest import ROOT
from tinyol._defs import STATS_SHORT, STATS_SHORT_BYTES, Msg, Status
from tinyol.data.datasets import load_source
from tinyol.link import Device
from tinyol.link.device import Stats
from tinyol.link.protocol import Deframer, Frame, Link
from tinyol.model.folder import load_manifest, quantize


@pytest.fixture(scope="module")
def lib():
    return compile_device()


@pytest.fixture
def device(lib):
    """A fresh device that learned 3 digits samples (class counts, updates to compare)."""
    assert lib.sim_setup(64 * 1024, 2048, 0xFF, 0) == 0
    lib.tol_test_init()
    X, y, _ = load_source("digits:5-9@train")
    m = load_manifest(ROOT / "models/digits")
    q = float(m["input"]["scale"]), int(m["input"]["zero_point"])
    with Device(Link(CPort(lib), timeout=0.2, seed=1)) as dev:
        for x, t in zip(X[:3], y[:3]):
            dev.sample(quantize(x.ravel(), *q), int(t))
    return lib


def _exchange(lib, frame: Frame) -> tuple[Frame, int]:
    """The device's one reply frame to `frame`, and its bytes on the wire."""
    port = CPort(lib)
    port.buf.clear()
    port.write(frame.encode())
    wire = bytes(port.buf)
    (reply,) = [f for f in Deframer().feed(wire) if isinstance(f, Frame)]
    return reply, len(wire)


def test_the_short_form_is_the_first_bytes_of_the_whole_reply(device):
    whole, whole_wire = _exchange(device, Frame(Msg.STATS, 40))
    short, short_wire = _exchange(device, Frame(Msg.STATS, 41, bytes([STATS_SHORT])))
    assert short.type == Msg.STATS | 0x80 and short.seq == 41
    assert len(short.payload) == STATS_SHORT_BYTES == 60 and len(whole.payload) >= 180
    # the same counters: frames_ok moved by one (the whole STATS ran in between); the rest is equal
    # but the cycle counts of the last request (48..60), which the whole STATS' own run replaced
    assert int.from_bytes(short.payload[:4], "little") == int.from_bytes(whole.payload[:4], "little") + 1
    assert short.payload[4:48] == whole.payload[4:48]
    assert short_wire <= 72 < 180 <= whole_wire   # what must come through whole at the opening
    a, b = Stats.parse(short.payload, 10), Stats.parse(whole.payload, 10)
    assert (a.samples_seen, a.updates, a.n_active, a.replay_fill, a.threshold) == \
        (b.samples_seen, b.updates, b.n_active, b.replay_fill, b.threshold)
    assert a.samples_seen == 3
    assert a.class_counts is None and a.persist is None and a.record is None
    assert sum(b.class_counts) == 3 and b.persist is not None and b.record is not None


def test_a_short_form_it_does_not_know_is_refused(device):
    (err, _) = _exchange(device, Frame(Msg.STATS, 50, bytes([STATS_SHORT + 1])))
    assert err.type == Msg.ERROR and err.seq == 50 and err.payload[0] == Status.ERR_ARG
    (err, _) = _exchange(device, Frame(Msg.STATS, 51, bytes([STATS_SHORT, 0])))
    assert err.type == Msg.ERROR and err.seq == 51 and err.payload[0] == Status.ERR_LENGTH


class _OlderFirmware(CPort):
    """The firmware before the short form: it answered STATS with any payload ERR_LENGTH. The
    real device gives that answer to a 2-byte payload, so a STATS with a payload goes on with one
    byte more (under its own seq: the reply is the device's own)."""

    def write(self, data: bytes) -> int:
        out = bytearray()
        for item in Deframer().feed(bytes(data)):
            if isinstance(item, Frame) and item.type == Msg.STATS and item.payload:
                item = Frame(item.type, item.seq, item.payload + b"\0")
            out += item.encode()
        return super().write(bytes(out))


def test_a_host_asks_older_firmware_for_the_whole_reply(device):
    dev = Device(Link(_OlderFirmware(device), timeout=0.2, seed=2))
    st = dev.stats(short=True)
    assert st.samples_seen == 3 and st.class_counts is not None and sum(st.class_counts) == 3
    sent = dev.link.stats.requests
    st = dev.stats(short=True)   # known now: one request, the whole STATS
    assert dev.link.stats.requests == sent + 1 and st.class_counts is not None
    new = Device(Link(CPort(device), timeout=0.2, seed=3))
    assert new.stats(short=True).class_counts is None and new._short_stats is True
    assert np.array_equal(new.stats().class_counts, st.class_counts)

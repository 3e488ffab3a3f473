"""Flow on a UART (issue 34, docs/protocol.md "Flow"): a host keeps at most RX_AHEAD bytes on the
way beyond its oldest unanswered request, because that is what the device buffers while it
executes one (its 2 KB receive ring, mcu/boards/stm32l4/hal_stm32l4.c); small requests are
still pipelined, and sockets (emulators, whose UART models hold bytes back) have no limit.

The device here is a scripted one on the far side of a fake tty: it takes frames in arrival
order, executes each for a fixed time and answers in order. The oracle is the wire itself:
at every write, the bytes sent but not yet answered, the oldest request excepted.
"""
from __future__ import annotations

import time

import pytest
from tinyol._defs import RX_AHEAD, Msg
from tinyol.link.pipeline import Pipeline
from tinyol.link.protocol import Deframer, Frame, Link

EXEC_S = 0.15      # the scripted device's time per request (well over the host's to send one)


class _SlowDevicePort:
    """A serial port to a device that executes one request at a time, EXEC_S each, and
    replies in order. It records, at each write, how many bytes of unanswered requests other
    than the oldest were on the way (what a real device would have to buffer meanwhile)."""

    def __init__(self):
        self.timeout = 0.01
        self.deframer = Deframer()
        self.pending: list[tuple[Frame, int]] = []   # (request, wire bytes), arrival order
        self.done_at = float("inf")                  # when the oldest pending one is answered
        self.out = bytearray()
        self.ahead: list[int] = []
        self.in_flight: list[int] = []

    def _run(self) -> None:
        while self.pending and time.monotonic() >= self.done_at:
            f, _ = self.pending.pop(0)
            self.out += Frame(f.type | 0x80, f.seq, b"\0" * 18).encode()
            self.done_at = self.done_at + EXEC_S if self.pending else float("inf")

    def write(self, data: bytes) -> int:
        self._run()
        for f in self.deframer.feed(bytes(data)):
            if not self.pending:
                self.done_at = time.monotonic() + EXEC_S
            self.pending.append((f, len(data)))
        self.ahead.append(sum(n for _, n in self.pending[1:]))
        self.in_flight.append(len(self.pending))
        return len(data)

    def read(self, n: int = 1) -> bytes:
        self._run()
        if not self.out:
            time.sleep(0.001)
            self._run()
        d = bytes(self.out[:n])
        del self.out[:n]
        return d

    @property
    def in_waiting(self) -> int:
        return len(self.out)

    def close(self):
        pass


def _run(payload_bytes: int, url: str, n: int = 8, window: int = 4) -> _SlowDevicePort:
    port = _SlowDevicePort()
    link = Link(port, timeout=1.0, seed=5)
    link.url = url
    pipe = Pipeline(link, 1, window=window, timeout=1.0)
    reqs = [(i, Msg.SAMPLE, bytes([i % 5, 0, 0]) + bytes(payload_bytes)) for i in range(n)]
    done = [c.tag for c in pipe.run(reqs)]
    assert done == list(range(n)) and pipe.stats.resends == 0
    return port


@pytest.mark.parametrize("payload", [27648, 3072, 1500])
def test_large_requests_wait_for_room_on_a_uart(payload):
    port = _run(payload, "/dev/ttyACM9")
    assert max(port.ahead) <= RX_AHEAD, port.ahead
    assert max(port.in_flight) <= 1 + RX_AHEAD // (payload + 12)


def test_small_requests_are_still_pipelined_on_a_uart():
    port = _run(300, "/dev/ttyACM9", window=7)
    assert max(port.ahead) <= RX_AHEAD
    assert max(port.in_flight) >= 4    # 6 x 315 bytes fit behind the one executing


def test_sockets_have_no_flow_limit():
    """Before the rule a tty behaved like this too: 3 requests of 27 KB on the way behind the
    one executing, of which a device's ring holds 2 KB."""
    port = _run(27648, "socket://127.0.0.1:1")
    assert max(port.ahead) > 2 * 27648

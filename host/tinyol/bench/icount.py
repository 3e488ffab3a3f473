"""Deterministic cost measurement: instruction counts under QEMU -icount.

With ``-icount shift=S,align=off,sleep=off`` QEMU's virtual clock advances
2^S ns per executed instruction, and SysTick (the firmware's cycle counter
under QEMU, clocked at INFO.cpu_hz) advances with it. A region that the
firmware reports as ``c`` counter ticks therefore executed

    instructions = c * 1e9 / (cpu_hz * 2^S)

instructions. We use S = 7: at 80 MHz one instruction is 10.24 ticks, so the
±1 tick phase jitter of where the region starts is < 0.1 instruction and the
rounded count is identical run to run. The cost of reading the counter
(region 0) is subtracted. SysTick wraps every 2^24 ticks (1.6 M instructions);
each wrap adds its interrupt (~12 instructions) to the region that spans it.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from .._defs import Msg
from ..errors import TinyolError
from ..link.protocol import Link
from ..targets import emulator

SHIFT = 7


def ticks_to_instructions(ticks: int, cpu_hz: int, shift: int = SHIFT) -> float:
    return ticks * 1e9 / (cpu_hz * (1 << shift))


@dataclass
class Session:
    """A firmware booted in QEMU with -icount; measure regions by BENCH requests."""
    board: str
    elf: Path
    shift: int = SHIFT
    timeout: float = 600.0

    def __enter__(self):
        self.target = emulator.start_qemu(self.board, self.elf, icount_shift=self.shift, timeout=self.timeout)
        self.link = Link.open(self.target.url, timeout=30.0)
        self.info = self.link.info()
        self._overhead = None
        self._overhead = self.region_ticks(0, 0)
        return self

    def __exit__(self, *exc):
        self.link.close()
        self.target.stop()

    def region_ticks(self, region: int, param: int = 0) -> int:
        reply = self.link.request(Msg.BENCH, struct.pack("<BH", region, param), timeout=60.0)
        ticks, valid = struct.unpack_from("<IB", reply)
        if not valid:
            raise TinyolError("a UART receive disturbed the measurement; retry")
        return ticks

    def instructions(self, region: int, param: int = 0) -> int:
        """Instructions executed by one run of `region`, measurement overhead removed."""
        ticks = self.region_ticks(region, param)
        return round(ticks_to_instructions(ticks, self.info.cpu_hz, self.shift)) - round(
            ticks_to_instructions(self._overhead or 0, self.info.cpu_hz, self.shift))

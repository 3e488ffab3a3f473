"""The Renode RCC stand-in (mcu/renode/rcc.py) refuses the clock settings silicon cannot run.

Runs the script under CPython in the scope Renode gives it (tests/host/test_renode_static.py's
Peripheral), with a system bus that answers what the script reads: FLASHSIZE (the part),
PWR_CR1.VOS / PWR_CR5.R1MODE (the voltage range) and FLASH_ACR.LATENCY. The expected
limits are typed here from the reference manuals, independently of the script:
- RM0351 (L47x) / RM0394 (L43x), "number of wait states according to HCLK": range 1
  0 WS <= 16 MHz, 1 <= 32, 2 <= 48, 3 <= 64, 4 <= 80; range 2: 0 <= 6, 1 <= 12, 2 <= 18, 3 <= 26.
- RM0432 (L4R5): range 1 boost 0 <= 20, 1 <= 40, 2 <= 60, 3 <= 80, 4 <= 100, 5 <= 120;
  range 1 normal up to 3 WS / 80 MHz; range 2: 0 <= 8, 1 <= 16, 2 <= 26.
- PLL: VCO input 4..16 MHz (L4R5: 2.66..16), VCO output 64..344 MHz, PLLN 8..86 (L4R5 8..127),
  PLLM 1..8 (L4R5 1..16), PLLR 2/4/6/8.
The firmware's own setting (hal_stm32l4.c: TOL_PLL_N, TOL_FLASH_LATENCY) passes on every part;
the same refusals on a real Renode are tests/device/test_doctor.py's broken builds.
"""
from __future__ import annotations

import re

import pytest
from conftest import ROOT
from test_renode_static import Peripheral

RCC_CR, RCC_CFGR, RCC_PLLCFGR = 0x00, 0x08, 0x0C
DIAG_SYSCLK, DIAG_REASON, DIAG_HZ = 0x3F0, 0x3F4, 0x3F8
OK, LATENCY, RANGE, SOURCE_OFF = 0, 1, 2, 3
MHZ = 1_000_000
PLLON, PLLRDY, HSION, HSEON = 1 << 24, 1 << 25, 1 << 8, 1 << 16
SRC_MSI, SRC_HSI, SRC_HSE = 1, 2, 3


class ClockBus:
    """What rcc.py reads over the system bus: FLASHSIZE, PWR_CR1, PWR_CR5, FLASH_ACR."""

    def __init__(self, part: str, vrange: int | str, latency: int):
        self.flashsize_kb = 2048 if part == "L4R" else 1024
        self.vos = 2 if vrange == 2 else 1
        self.r1mode = 0 if vrange == "boost" else 1
        self.latency = latency

    def ReadWord(self, address):  # noqa: N802 (Renode's API name)
        assert address == 0x1FFF75E0, hex(address)
        return self.flashsize_kb

    def ReadDoubleWord(self, address):  # noqa: N802
        regs = {0x40007000: self.vos << 9, 0x40007080: self.r1mode << 8,
                0x40022000: 0x600 | self.latency}
        assert address in regs, hex(address)
        return regs[address]


def pll(src: int, m: int, n: int, r: int) -> int:
    return src | ((m - 1) << 4) | (n << 8) | (1 << 24) | ((r // 2 - 1) << 25)


def bring_up(rcc, pllcfgr: int, extra_cr: int = 0) -> tuple[int, int]:
    """The firmware's sequence: PLL off, configure, PLLON, SW = PLL. (SWS, the first refusal's
    reason: a PLL refused at PLLON is then also refused as a switch source that is not ready)."""
    rcc.write(RCC_CR, (rcc.read(RCC_CR) | extra_cr) & ~PLLON)
    rcc.write(RCC_PLLCFGR, pllcfgr)
    rcc.write(RCC_CR, rcc.read(RCC_CR) | PLLON)
    first = rcc.read(DIAG_REASON)
    rcc.write(RCC_CFGR, (rcc.read(RCC_CFGR) & ~3) | 3)
    if first != OK:
        assert rcc.read(DIAG_REASON) == SOURCE_OFF
    return (rcc.read(RCC_CFGR) >> 2) & 3, first or rcc.read(DIAG_REASON)


def board(part, vrange, latency):
    return Peripheral("rcc.py", ClockBus(part, vrange, latency))


# PLL from MSI 4 MHz (reset range), M = 1: f = 4 * N / R MHz
def msi_pll(f_mhz: int) -> int:
    for r in (2, 4, 6, 8):
        n = f_mhz * r // 4
        if f_mhz * r % 4 == 0 and 64 <= 4 * n <= 344:
            return pll(SRC_MSI, 1, n, r)
    raise AssertionError(f_mhz)


# (part, voltage range, MHz, fewest wait states); typed from the reference manuals' tables
WAIT_STATES = [
    ("L4", 1, 80, 4), ("L4", 1, 64, 3), ("L4", 1, 48, 2), ("L4", 1, 32, 1), ("L4", 1, 16, 0),
    ("L4", 1, 72, 4), ("L4", 1, 40, 2),
    ("L4", 2, 24, 3), ("L4", 2, 16, 2),
    ("L4R", "boost", 120, 5), ("L4R", "boost", 100, 4), ("L4R", "boost", 80, 3), ("L4R", "boost", 24, 1),
    ("L4R", 1, 80, 3), ("L4R", 1, 60, 2),
    ("L4R", 2, 24, 2), ("L4R", 2, 16, 1),
]


@pytest.mark.parametrize("part,vrange,mhz,ws", WAIT_STATES)
def test_switch_needs_the_wait_states_of_the_table(part, vrange, mhz, ws):
    rcc = board(part, vrange, ws)
    assert bring_up(rcc, msi_pll(mhz)) == (3, OK)
    assert rcc.read(DIAG_SYSCLK) == mhz * MHZ
    if ws == 0:
        return
    rcc = board(part, vrange, ws - 1)
    sws, reason = bring_up(rcc, msi_pll(mhz))
    assert (sws, reason) == (0, LATENCY), "one wait state too few must be refused"
    assert rcc.read(DIAG_HZ) == mhz * MHZ and rcc.read(DIAG_SYSCLK) == 4 * MHZ   # still on MSI
    assert rcc.read(RCC_CFGR) & 3 == 3       # SW reads what was written, SWS did not follow


@pytest.mark.parametrize("part,vrange,mhz", [("L4", 2, 32), ("L4R", 1, 100), ("L4R", 2, 32)])
def test_switch_above_the_ranges_maximum_is_refused_at_any_latency(part, vrange, mhz):
    sws, reason = bring_up(board(part, vrange, 15), msi_pll(mhz))
    assert (sws, reason) == (0, RANGE)


@pytest.mark.parametrize("part,cfg,why", [
    ("L4", pll(SRC_MSI, 1, 44, 2), "PLLCLK 88 MHz above the L4's 80 MHz"),
    ("L4R", pll(SRC_MSI, 1, 64, 2), "PLLCLK 128 MHz above the L4R5's 120 MHz"),
    ("L4", pll(SRC_MSI, 1, 15, 2), "VCO 60 MHz below 64"),
    ("L4", pll(SRC_HSI, 1, 22, 8), "VCO 352 MHz above 344 (and VCO input 16 MHz is fine)"),
    ("L4", pll(SRC_MSI, 2, 40, 2), "VCO input 2 MHz below the L4's 4 MHz"),
    ("L4", pll(SRC_HSI, 6, 100, 8), "PLLN 100 above the L4's 86"),
    ("L4", pll(SRC_HSI, 1, 7, 2), "PLLN 7 below 8"),
])
def test_pll_outside_its_ranges_never_locks(part, cfg, why):
    rcc = board(part, "boost" if part == "L4R" else 1, 15)
    sws, reason = bring_up(rcc, cfg, extra_cr=HSION)
    assert reason == RANGE, why
    assert not rcc.read(RCC_CR) & PLLRDY and sws == 0, why


def test_the_l4r5_takes_what_the_l47x_refuses():
    """HSI16 / M 6 = 2.67 MHz in, N 100: VCO 267 MHz, R 4: 66.7 MHz. L4R5: within its ranges."""
    cfg = pll(SRC_HSI, 6, 100, 4)
    assert bring_up(board("L4R", "boost", 3), cfg, extra_cr=HSION) == (3, OK)
    assert bring_up(board("L4", 1, 4), cfg, extra_cr=HSION)[1] == RANGE


def test_pll_from_a_source_that_is_off_never_locks():
    rcc = board("L4", 1, 4)
    sws, reason = bring_up(rcc, pll(SRC_HSE, 1, 20, 2))   # HSEON never set
    assert (sws, reason) == (0, SOURCE_OFF) and not rcc.read(RCC_CR) & PLLRDY


def test_switch_to_a_pll_that_is_off_is_refused():
    rcc = board("L4", 1, 4)
    rcc.write(RCC_PLLCFGR, msi_pll(80))
    rcc.write(RCC_CFGR, 3)                                   # PLLON never set
    assert (rcc.read(RCC_CFGR) >> 2) & 3 == 0 and rcc.read(DIAG_REASON) == SOURCE_OFF


def test_refusal_is_named_for_the_log():
    rcc = board("L4", 1, 3)
    bring_up(rcc, msi_pll(80))
    text = rcc.fn("rcc_refusal_text")(rcc.scope["tol_rcc"], (("L4", 1, 3)))
    assert "wait states" in text and "80000000 Hz" in text and "LATENCY=3" in text


def test_without_a_bus_the_register_file_is_permissive():
    """The bare register file (no machine, as in test_renode_static.py) keeps its old behaviour."""
    rcc = Peripheral("rcc.py")
    assert bring_up(rcc, pll(SRC_MSI, 1, 60, 2)) == (3, OK)   # 120 MHz: unchecked without a bus


@pytest.mark.parametrize("part,vrange", [("L4", 1), ("L4R", 1), ("L4R", "boost")])
def test_the_firmwares_own_clock_setting_passes(part, vrange):
    src = (ROOT / "mcu" / "boards" / "stm32l4" / "hal_stm32l4.c").read_text()
    n = int(re.search(r"#define TOL_PLL_N (\d+)u", src).group(1))
    latency = int(re.search(r"#define TOL_FLASH_LATENCY (\d+)u", src).group(1))
    rcc = board(part, vrange, latency)
    assert bring_up(rcc, pll(SRC_MSI, 1, n, 2)) == (3, OK)
    assert rcc.read(DIAG_SYSCLK) == 80 * MHZ

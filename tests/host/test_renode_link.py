"""The Renode GPIO stand-in and console wire (mcu/renode/gpio.py), under CPython.

The script's register file and the wire's maths are plain functions; Renode's own test of
the wire (a wrong BRR or PLL garbles the link, a pin out of its alternate function cuts it)
is in tests/device/test_doctor.py. Expected values are typed here from the sources named:
- reset values: RM0351 / RM0432 section 8.4 (GPIOA_MODER 0xABFFFFFF, GPIOB_MODER 0xFFFFFEBF,
  others 0xFFFFFFFF; GPIOA_PUPDR 0x64000000, GPIOB_PUPDR 0x00000100, GPIOA_OSPEEDR 0x0C000000);
- UART sampling: a receiver samples mid-bit (16x oversampling); with 10-bit frames it decodes
  while the accumulated drift over 9.5 bit times stays under half a bit: about +-5 % of
  baud mismatch in this model (ST's AN4908 puts the real tolerance near 3.75-4.5 %);
- console pins: the boards' user manuals (which UART reaches the ST-LINK VCP) and the parts'
  datasheets (alternate-function tables): checked against the firmware's board files here.
"""
from __future__ import annotations

import ast
import re

import pytest
from conftest import ROOT
from test_renode_static import RENODE_DIR, Peripheral

GPIO = 0x48000000
MODER, PUPDR, ODR, BSRR, AFRL, AFRH, BRR = 0x00, 0x0C, 0x14, 0x18, 0x20, 0x24, 0x28


def gpio():
    return Peripheral("gpio.py")


def port(letter: str) -> int:
    return "ABCDEFGHI".index(letter) * 0x400


def test_reset_values():
    g = gpio()
    assert g.read(port("A") + MODER) == 0xABFFFFFF
    assert g.read(port("A") + PUPDR) == 0x64000000
    assert g.read(port("A") + 0x08) == 0x0C000000
    assert g.read(port("B") + MODER) == 0xFFFFFEBF
    assert g.read(port("B") + PUPDR) == 0x00000100
    for p in "CDEFGHI":
        assert g.read(port(p) + MODER) == 0xFFFFFFFF and g.read(port(p) + PUPDR) == 0


def test_registers_read_back_and_bsrr_brr_drive_odr():
    g = gpio()
    g.write(port("G") + AFRL, 0x80000000)
    assert g.read(port("G") + AFRL) == 0x80000000
    g.write(port("C") + BSRR, (1 << 3) | (1 << 5))
    assert g.read(port("C") + ODR) == 0x28
    g.write(port("C") + BSRR, 1 << (16 + 3))
    assert g.read(port("C") + ODR) == 0x20
    g.write(port("C") + BRR, 1 << 5)
    assert g.read(port("C") + ODR) == 0
    assert g.read(port("C") + BSRR) == 0 and g.read(port("C") + 0x10) == 0   # write-only, IDR


def test_byte_write_to_afrh():
    g = gpio()
    g.write(port("A") + AFRH + 3, 0x30, length=1)     # PA15 -> AF3 (the L432's RX)
    assert g.read(port("A") + AFRH) == 0x30000000


@pytest.mark.parametrize("byte", range(256))
def test_same_baud_passes_every_byte(byte):
    resample = gpio().fn("resample")
    assert resample(byte, 115200, 115200) == byte
    assert resample(byte, 115274, 115200) == byte       # the firmware's BRR 694 at 80 MHz


def test_small_mismatch_decodes_large_mismatch_garbles():
    resample = gpio().fn("resample")
    for ratio in (0.97, 0.98, 1.02, 1.03):
        assert all(resample(b, 115200 * ratio, 115200) == b for b in range(256)), ratio
    for ratio in (0.9, 0.5, 1.12, 2.0):
        wrong = sum(resample(b, 115200 * ratio, 115200) != b for b in range(256))
        assert wrong >= 128, (ratio, wrong)


def test_a_slow_transmitter_reads_as_the_receiver_sees_it():
    """A frame sent at half the receiver's baud, worked by hand: receiver sample k (mid-bit)
    sees transmitter bit floor((k + 0.5) / 2) of [start 0, b0..b7, stop 1]."""
    resample = gpio().fn("resample")
    # 0x55 (b0=1, b1=0, b2=1, b3=0): samples k=1..8 see start,b0,b0,b1,b1,b2,b2,b3 = 0,1,1,0,0,1,1,0,
    # the stop sample k=9 sees b3 = 0: a framing error, the byte is dropped
    assert resample(0x55, 57600, 115200) is None
    # 0xFF: data samples see 0,1,1,1,1,1,1,1 (LSB first) = 0xFE, the stop sample sees b3 = 1
    assert resample(0xFF, 57600, 115200) == 0xFE


def test_wire_needs_pins_and_direction():
    wire = gpio().fn("wire")
    assert wire(0x41, 115274, True, True) == 0x41 and wire(0x41, 115274, True, False) == 0x41
    assert wire(0x41, 115274, False, True) is None and wire(0x41, 115274, False, False) is None
    assert wire(0x00, 57595, True, True) is None    # a NUL sent at half speed: stop bit sampled low


def test_console_pins_need_af_mode_function_and_vddio2():
    g = gpio()
    ok = g.fn("console_pins_ok")
    regs = g.scope["tol_gpio"]
    pins = (("G", 7, 8), ("G", 8, 8))
    assert not ok(regs, pins, True)                        # reset: analog mode
    g.write(port("G") + MODER, (0xFFFFFFFF & ~(3 << 14) & ~(3 << 16)) | (2 << 14) | (2 << 16))
    assert not ok(regs, pins, True)                        # AF mode but AF0
    g.write(port("G") + AFRL, 8 << 28)
    assert not ok(regs, pins, True)                        # PG8 still AF0
    g.write(port("G") + AFRH, 8)
    assert ok(regs, pins, True)
    assert not ok(regs, pins, False)                       # PWR_CR2.IOSV clear: port G unpowered


def test_uart_baud_from_brr():
    baud = gpio().fn("uart_baud")
    assert baud(80_000_000, 694, False) == 115274
    assert baud(80_000_000, 177778, True) == 115200        # LPUART1: BRR = 256 f / baud
    assert baud(80_000_000, 0, False) == 0


def _board_pins(board: str):
    text = (ROOT / "mcu" / "boards" / "stm32l4" / f"board_{board}.c").read_text()
    uart = re.search(r"\.uart_base = TOL_(\w+)_BASE", text).group(1)
    pins = tuple((p, int(n), int(af)) for p, n, af in
                 re.findall(r"\.(?:tx|rx) = \{TOL_GPIO(\w)_BASE, (\d+), (\d+)\}", text))
    return uart, pins


@pytest.mark.parametrize("board,part", [("nucleo_l476rg", "L47"), ("disco_l475vg_iot01a", "L47"),
                                        ("nucleo_l432kc", "L43"), ("nucleo_l4r5zi", "L4R")])
def test_board_files_use_the_datasheet_pins(board, part):
    """The firmware's console pins (board_<env>.c) are the ones the wire accepts."""
    consoles = gpio().scope["CONSOLES"]
    uart, pins = _board_pins(board)
    assert consoles[(uart, part)] == pins


def test_part_from_flashsize():
    part_of = gpio().fn("part_of")
    assert (part_of(256), part_of(1024), part_of(2048)) == ("L43", "L47", "L4R")


def test_script_is_ascii_python2_safe_and_imports_only_renode_names():
    raw = (RENODE_DIR / "gpio.py").read_bytes()
    assert all(b < 0x80 for b in raw)
    tree = ast.parse(raw.decode("ascii"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert [a.name for a in node.names] == ["clr"], node.lineno
        if isinstance(node, ast.ImportFrom):
            assert node.module.startswith("Antmicro.Renode"), node.lineno
        assert not isinstance(node, (ast.JoinedStr, ast.AnnAssign, ast.NamedExpr, ast.Nonlocal)), node.lineno
    # the request dispatch is the same copy as in the other scripts
    def fns(name):
        t = ast.parse((RENODE_DIR / name).read_text(encoding="ascii"))
        return {n.name: ast.dump(n) for n in t.body if isinstance(n, ast.FunctionDef)}
    for fn in ("_req", "_set_value", "_access"):
        assert fns("gpio.py")[fn] == fns("rcc.py")[fn], fn

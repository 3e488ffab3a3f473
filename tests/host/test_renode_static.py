"""Checks of the Renode support files (mcu/renode/, tests/renode/) that need no Renode.

The real runs are tests/device/test_renode_real.py, the Robot suite among them (skipped
without a Renode). These complement them wherever Renode is absent, and reach corners a
firmware run does not exercise:
- the Python peripheral scripts (RCC, flash interface, PWR) run under CPython in a scope
  holding exactly what Renode 1.15 gives a script (`request`, `self`, `size`; the bus only
  as `self.GetMachine().SystemBus`), the whole file executed again per access in one
  persistent scope; expected values come from the reference manuals (RM0351, RM0394,
  RM0432), typed here independently of the scripts: register corners (wrong keys, mass
  erase, option bytes, 8 KB pages) that the firmware never drives;
- the scripts import nothing and stay ASCII / Python-2 compatible (Renode's IronPython);
- every address, IRQ and size in the .repl/.resc files is cross-checked against the
  firmware's board header and linker scripts and host/tinyol/boards.py;
- the Robot suite passes `robot --dryrun` (with the stub keywords) and covers every board;
- host/tinyol/targets/renode.py builds the expected command line.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tinyol.boards import BOARDS
from tinyol.errors import TinyolError
from tinyol.targets import renode as tol_renode
from tinyol.targets.firmware import BuildConfig, BuildResult

ROOT = Path(__file__).resolve().parents[2]
RENODE_DIR = ROOT / "mcu" / "renode"
BOARD_H = ROOT / "mcu" / "boards" / "stm32l4" / "stm32l4.h"
LD_DIR = ROOT / "mcu" / "boards" / "stm32l4" / "ld"
ROBOT_SUITE = ROOT / "tests" / "renode" / "tinyol.robot"
ROBOT_STUBS = ROOT / "tests" / "renode" / "dryrun" / "renode_keywords.resource"
SCRIPTS = ["rcc.py", "flash.py", "pwr.py"]

KB = 1024
FLASH_BASE = 0x08000000


# ---------------------------------------------------------------------------
# Running a PythonPeripheral script the way Renode does
# ---------------------------------------------------------------------------

class LowerRequest:
    """Renode 1.15's PythonRequest: isInit/isRead/isWrite, offset, value, length."""

    def __init__(self):
        self.isInit = self.isRead = self.isWrite = False
        self.offset = 0
        self.value = 0
        self.length = 4

    def set(self, kind, offset=0, value=0, length=4):
        self.isInit, self.isRead, self.isWrite = kind == "init", kind == "read", kind == "write"
        self.offset, self.value, self.length = offset, value, length

    def result(self):
        return self.value


class PascalRequest:
    """Later Renode releases: IsInit/IsRead/IsWrite, Offset, Value, Length."""

    def __init__(self):
        self.IsInit = self.IsRead = self.IsWrite = False
        self.Offset = 0
        self.Value = 0
        self.Length = 4

    def set(self, kind, offset=0, value=0, length=4):
        self.IsInit, self.IsRead, self.IsWrite = kind == "init", kind == "read", kind == "write"
        self.Offset, self.Value, self.Length = offset, value, length

    def result(self):
        return self.Value


class MockBus:
    """The slice of Renode's SystemBus the flash script uses, over a flash array that
    starts out programmed with 0x00 bytes and a FLASHSIZE half-word."""

    def __init__(self, flash_bytes, flashsize_kb):
        self.flash = bytearray(flash_bytes)
        self.flashsize_kb = flashsize_kb
        self.writes = 0

    def ReadWord(self, address):  # noqa: N802 (Renode's API name)
        assert address == 0x1FFF75E0, hex(address)
        return self.flashsize_kb

    def WriteDoubleWord(self, address, value):  # noqa: N802
        offset = address - FLASH_BASE
        assert 0 <= offset <= len(self.flash) - 4 and offset % 4 == 0, hex(address)
        assert 0 <= value <= 0xFFFFFFFF
        self.flash[offset:offset + 4] = value.to_bytes(4, "little")
        self.writes += 1

    def erased(self, start, length):
        off = start - FLASH_BASE
        return self.flash[off:off + length] == b"\xff" * length

    def untouched(self, start, length):
        off = start - FLASH_BASE
        return self.flash[off:off + length] == b"\x00" * length


class _Machine:
    """What `self.GetMachine()` returns in Renode, reduced to the one member the scripts use."""

    def __init__(self, bus):
        self.SystemBus = bus


class _PeripheralSelf:
    """Renode's `self` in a PythonPeripheral script: the peripheral, whose machine holds
    the system bus. `bus=None`: a peripheral not attached to a machine (GetMachine fails)."""

    def __init__(self, bus):
        self._bus = bus

    def GetMachine(self):  # noqa: N802 (Renode's API name)
        if self._bus is None:
            raise AttributeError("peripheral is not registered on a machine")
        return _Machine(self._bus)


class Peripheral:
    """One PythonPeripheral instance: compiled script + persistent scope. The scope holds
    exactly the names Renode 1.15 gives a script: `request`, `self` and `size`."""

    def __init__(self, name, bus=None, request_cls=LowerRequest, with_bus=True):
        path = RENODE_DIR / name
        self.code = compile(path.read_text(encoding="ascii"), str(path), "exec")
        self.request = request_cls()
        self.scope = {"request": self.request, "self": _PeripheralSelf(bus if with_bus else None),
                      "size": 0x400}
        self.init()

    def _run(self):
        exec(self.code, self.scope)

    def init(self):
        self.request.set("init")
        self._run()

    def read(self, offset, length=4):
        self.request.set("read", offset, 0, length)
        self._run()
        return self.request.result()

    def write(self, offset, value, length=4):
        self.request.set("write", offset, value, length)
        self._run()

    def fn(self, name):
        return self.scope[name]


# ---------------------------------------------------------------------------
# Parsing our .repl / .resc / header / linker files
# ---------------------------------------------------------------------------

def parse_repl(path):
    """Entries of a .repl (the subset our files use): name -> dict(type, addresses,
    attrs, irqs, init); plus Tag ranges from `sysbus: init:` as entries 'tag:<NAME>'."""
    text = path.read_text(encoding="ascii")
    lines = [re.sub(r"//.*$", "", line).rstrip() for line in text.splitlines()]
    entries, current, block = {}, None, None
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if indent == 0:
            m = re.fullmatch(r"(\w+):\s*(.*)", body)
            assert m, f"{path.name}: cannot parse {line!r}"
            name, rest = m.groups()
            if rest.endswith("{"):  # multi-registration block
                while not rest.rstrip().endswith("}"):
                    rest += " " + lines[i].strip()
                    i += 1
            current = entries.setdefault(name, {"type": None, "addresses": [], "attrs": {},
                                                "irqs": [], "init": []})
            block = None
            m = re.fullmatch(r"([\w.]+)?\s*(?:@\s*(.*))?", rest)
            assert m, f"{path.name}: cannot parse registration {rest!r}"
            current["type"] = m.group(1) or current["type"]
            reg = m.group(2) or ""
            current["addresses"] += [int(a, 16) for a in re.findall(r"sysbus\s+<?(0x[0-9A-Fa-f]+)", reg)]
            continue
        if indent == 4:
            block = None
            if body in ("init:", "init add:"):
                block = "init"
                continue
            m = re.fullmatch(r"IRQ\s*->\s*(\w+)@(\d+)", body)
            if m:
                current["irqs"].append((m.group(1), int(m.group(2))))
                continue
            m = re.fullmatch(r"(\w*)\s*->\s*(\w+)@(\d+)", body)  # a named or the default GPIO out
            if m:
                current.setdefault("gpio", []).append((m.group(1), m.group(2), int(m.group(3))))
                continue
            m = re.fullmatch(r"(\w+):\s*(.+)", body)
            assert m, f"{path.name}: cannot parse attribute {body!r}"
            value = m.group(2)
            if re.fullmatch(r"0x[0-9A-Fa-f]+|\d+", value):
                value = int(value, 0)
            current["attrs"][m.group(1)] = value
            continue
        assert indent == 8 and block == "init", f"{path.name}: unexpected indentation: {line!r}"
        current["init"].append(body)
        m = re.fullmatch(r'Tag <(0x[0-9A-Fa-f]+), (0x[0-9A-Fa-f]+)> "(\w+)"', body)
        if m:
            lo, hi = int(m.group(1), 16), int(m.group(2), 16)
            entries["tag:" + m.group(3)] = {"type": "Tag", "addresses": [lo], "size": hi - lo + 1}
    return entries


def parse_resc(board):
    text = (RENODE_DIR / f"{board}.resc").read_text(encoding="ascii")
    info = {"text": text}
    info["repls"] = re.findall(r"^machine LoadPlatformDescription \$ORIGIN/(\w+\.repl)$", text, re.M)
    # the store's script is $flash_store: flash.py unless the host names a copy (emulate --state)
    store_default = re.findall(r"^\$flash_store\?=\$ORIGIN/(\w+\.py)$", text, re.M)
    info["pydevs"] = {
        m[5]: {"file": m[0] or (store_default[0] if store_default else "?"), "address": int(m[2], 16),
               "size": int(m[3], 16), "initable": m[4]}
        for m in re.findall(
            r'^machine PyDevFromFile (?:\$ORIGIN/(\w+\.py)|(\$flash_store)) (0x[0-9A-Fa-f]+) (0x[0-9A-Fa-f]+) '
            r'(\w+) "(\w+)"$', text, re.M)
    }
    info["connect"] = re.findall(r"^connector Connect sysbus\.(\w+) (\w+)$", text, re.M)
    info["terminal"] = re.findall(r'^emulation CreateServerSocketTerminal \$port "(\w+)" (\w+)$', text, re.M)
    info["mach"] = re.findall(r'^mach create "(\w+)"$', text, re.M)
    info["elf"] = re.findall(r"^\$elf\?=(\S+)$", text, re.M)
    info["port"] = re.findall(r"^\$port\?=(\d+)$", text, re.M)
    return info


def board_chip_repl(board):
    repls = parse_resc(board)["repls"]
    assert repls[0] == "stm32l4.repl" and len(repls) == 2, repls
    return parse_repl(RENODE_DIR / repls[1])


def common_repl():
    return parse_repl(RENODE_DIR / "stm32l4.repl")


def parse_board_header():
    if not BOARD_H.is_file():
        pytest.skip(f"{BOARD_H.relative_to(ROOT)} not on this branch yet (lead's file): merge main")
    text = BOARD_H.read_text()
    bases = {m[0]: int(m[1], 16) for m in re.findall(r"#define TOL_(\w+)_BASE\s+(0x[0-9A-Fa-f]+)u", text)}
    irqs = {m[0]: int(m[1]) for m in re.findall(r"#define TOL_(\w+)_IRQN\s+(\d+)", text)}
    return bases, irqs


def parse_ld(board):
    path = LD_DIR / f"{board}.ld"
    if not path.is_file():
        pytest.skip(f"{path.relative_to(ROOT)} not on this branch yet (lead's file): merge main")
    regions = {}
    for name, origin, length, unit in re.findall(
            r"^\s*(\w+)\s*\([rwx]+\)\s*:\s*ORIGIN\s*=\s*(0x[0-9A-Fa-f]+),\s*LENGTH\s*=\s*(\d+)([KM]?)",
            path.read_text(), re.M):
        regions[name] = (int(origin, 16), int(length) * {"": 1, "K": KB, "M": KB * KB}[unit])
    return regions


BOARD_NAMES = sorted(BOARDS)


# ---------------------------------------------------------------------------
# The scripts are IronPython-2 safe: no imports, ASCII, no Python-3-only syntax
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", SCRIPTS)
def test_script_imports_nothing_and_is_python2_safe(name):
    raw = (RENODE_DIR / name).read_bytes()
    assert all(b < 0x80 for b in raw), "IronPython rejects non-ASCII source without a coding line"
    tree = ast.parse(raw.decode("ascii"))
    banned = (ast.Import, ast.ImportFrom, ast.JoinedStr, ast.AnnAssign, ast.NamedExpr,
              ast.Nonlocal, ast.AsyncFunctionDef, ast.Await, ast.YieldFrom)
    for node in ast.walk(tree):
        assert not isinstance(node, banned), f"{name}:{node.lineno}: {type(node).__name__}"
        if isinstance(node, ast.FunctionDef):
            args = node.args
            assert node.returns is None and not args.kwonlyargs and not args.posonlyargs
            assert all(a.annotation is None for a in args.args)
        if isinstance(node, ast.Name):
            assert node.id not in ("print", "nonlocal", "bytes"), f"{name}:{node.lineno}: {node.id}"
    assert not re.search(r"\d_\d", raw.decode("ascii").split("#")[0]), "digit separators are Python 3 only"


def test_script_dispatch_is_identical_in_every_script():
    """The request dispatch is duplicated (no imports possible); keep the copies equal."""
    def functions(name):
        tree = ast.parse((RENODE_DIR / name).read_text(encoding="ascii"))
        return {n.name: ast.dump(n) for n in tree.body if isinstance(n, ast.FunctionDef)}

    copies = [functions(n) for n in SCRIPTS]
    for fn in ("_req", "_set_value", "_access"):
        assert all(fn in c for c in copies), fn
        assert len({c[fn] for c in copies}) == 1, f"{fn} differs between {SCRIPTS}"


# ---------------------------------------------------------------------------
# RCC (RM0351 section 6.4)
# ---------------------------------------------------------------------------

RCC_CR, RCC_CFGR, RCC_PLLCFGR, RCC_APB1ENR1, RCC_CSR, RCC_BDCR = 0x00, 0x08, 0x0C, 0x58, 0x94, 0x90
CR_BITS = {  # ON bit -> RDY bit
    "MSI": (0, 1), "HSI": (8, 10), "HSE": (16, 17), "PLL": (24, 25),
    "PLLSAI1": (26, 27), "PLLSAI2": (28, 29),
}


@pytest.mark.parametrize("request_cls", [LowerRequest, PascalRequest])
def test_rcc_reset_values(request_cls):
    rcc = Peripheral("rcc.py", request_cls=request_cls)
    assert rcc.read(RCC_CR) == 0x00000063      # MSION, MSIRDY, MSIRANGE = 4 MHz
    assert rcc.read(RCC_CFGR) == 0x00000000
    assert rcc.read(RCC_PLLCFGR) == 0x00001000
    assert rcc.read(RCC_CSR) == 0x0C000600


@pytest.mark.parametrize("clock", sorted(CR_BITS))
def test_rcc_ready_bit_follows_enable_bit(clock):
    on, rdy = CR_BITS[clock]
    rcc = Peripheral("rcc.py")
    cr = rcc.read(RCC_CR)
    rcc.write(RCC_CR, cr | (1 << on))
    assert rcc.read(RCC_CR) & (1 << rdy)
    rcc.write(RCC_CR, rcc.read(RCC_CR) & ~(1 << on))
    assert not rcc.read(RCC_CR) & (1 << rdy)


def test_rcc_ready_bits_are_read_only():
    rcc = Peripheral("rcc.py")
    rdy_mask = sum(1 << r for _, r in CR_BITS.values())
    rcc.write(RCC_CR, rdy_mask)  # every RDY bit, no ON bit
    assert rcc.read(RCC_CR) & rdy_mask == 0


@pytest.mark.parametrize("sw", [0, 1, 2, 3])
def test_rcc_sws_follows_sw(sw):
    rcc = Peripheral("rcc.py")
    hpre_ppre = (0b1000 << 4) | (0b100 << 8)  # AHB /2, APB1 /2 read back unchanged
    rcc.write(RCC_CFGR, hpre_ppre | sw)
    cfgr = rcc.read(RCC_CFGR)
    assert (cfgr >> 2) & 3 == sw and cfgr & 3 == sw
    assert cfgr & ~0xF == hpre_ppre


def test_rcc_other_registers_read_back():
    rcc = Peripheral("rcc.py")
    for offset, value in [(RCC_PLLCFGR, 0x01002811), (RCC_APB1ENR1, 0x10060000), (0x88, 0x0000000C)]:
        rcc.write(offset, value)
        assert rcc.read(offset) == value


def test_rcc_byte_write_sets_pll_and_byte_read():
    rcc = Peripheral("rcc.py")
    rcc.write(RCC_CR + 3, 0x01, length=1)  # PLLON is bit 24: byte 3, bit 0
    assert rcc.read(RCC_CR) == 0x63 | (1 << 24) | (1 << 25)
    assert rcc.read(RCC_CR + 3, length=1) == 0x03


def test_rcc_rmvf_clears_reset_flags_and_lsi_lse_ready():
    rcc = Peripheral("rcc.py")
    rcc.write(RCC_CSR, rcc.read(RCC_CSR) | (1 << 23) | 1)  # RMVF + LSION
    assert rcc.read(RCC_CSR) == 0x00000600 | 0b11
    rcc.write(RCC_BDCR, 1)  # LSEON
    assert rcc.read(RCC_BDCR) == 0b11


def test_rcc_firmware_clock_sequence_terminates():
    """The polling loops of mcu/boards/stm32l4/hal_stm32l4.c (MSI, PLL off/on, SW=PLL)."""
    rcc = Peripheral("rcc.py")

    def poll(offset, mask, want):
        for _ in range(3):
            if rcc.read(offset) & mask == want:
                return
        raise AssertionError(f"firmware would spin on {offset:#x} & {mask:#x} != {want:#x}")

    rcc.write(RCC_CR, rcc.read(RCC_CR) | 1)
    poll(RCC_CR, 1 << 1, 1 << 1)
    rcc.write(RCC_CR, rcc.read(RCC_CR) & ~(1 << 24))
    poll(RCC_CR, 1 << 25, 0)
    rcc.write(RCC_PLLCFGR, 1 | (40 << 8) | (1 << 24))
    rcc.write(RCC_CR, rcc.read(RCC_CR) | (1 << 24))
    poll(RCC_CR, 1 << 25, 1 << 25)
    rcc.write(RCC_CFGR, (rcc.read(RCC_CFGR) & ~3) | 3)
    poll(RCC_CFGR, 3 << 2, 3 << 2)


def test_rcc_init_request_resets_state():
    rcc = Peripheral("rcc.py")
    rcc.write(RCC_CFGR, 3)
    rcc.init()
    assert rcc.read(RCC_CFGR) == 0


# ---------------------------------------------------------------------------
# Flash interface (RM0351 / RM0394 / RM0432 section 3.7)
# ---------------------------------------------------------------------------

F_ACR, F_KEYR, F_OPTKEYR, F_SR, F_CR, F_OPTR = 0x00, 0x08, 0x0C, 0x10, 0x14, 0x20
KEY1, KEY2 = 0x45670123, 0xCDEF89AB
OPTKEY1, OPTKEY2 = 0x08192A3B, 0x4C5D6E7F
CR_LOCK, CR_OPTLOCK = 1 << 31, 1 << 30
CR_PG, CR_PER, CR_MER1, CR_BKER, CR_MER2, CR_STRT, CR_EOPIE = 1, 2, 4, 1 << 11, 1 << 15, 1 << 16, 1 << 24
SR_EOP, SR_OPERR, SR_PGSERR, SR_BSY = 1, 2, 1 << 7, 1 << 16


def cr_page(pnb, bank=0):
    return CR_PER | (pnb << 3) | (CR_BKER if bank else 0)


def flash_for(board, request_cls=LowerRequest):
    """Flash interface of `board`, FLASHSIZE taken from the board's chip .repl."""
    chip = board_chip_repl(board)
    init = " ".join(chip["signature"]["init"])
    m = re.fullmatch(r"WriteWord 0x5E0 (\d+)", init)
    assert m, init
    bus = MockBus(chip["flash"]["attrs"]["size"], int(m.group(1)))
    return Peripheral("flash.py", bus, request_cls), bus


def unlock(flash):
    flash.write(F_KEYR, KEY1)
    flash.write(F_KEYR, KEY2)


def wait_idle(flash, limit=10_000):
    """Poll SR until BSY falls, as a driver does; the operation must have been busy first."""
    polls = 0
    while flash.read(F_SR) & SR_BSY:
        polls += 1
        assert polls < limit, "BSY never falls"
    assert polls > 0, "an erase must keep SR.BSY set for a while"
    return polls


@pytest.mark.parametrize("request_cls", [LowerRequest, PascalRequest])
def test_flash_reset_and_acr_read_back(request_cls):
    flash, _ = flash_for("nucleo_l476rg", request_cls)
    assert flash.read(F_CR) == CR_LOCK | CR_OPTLOCK
    assert flash.read(F_ACR) == 0x600
    flash.write(F_ACR, 0x600 | (1 << 8) | 4)  # what the firmware writes at 80 MHz
    assert flash.read(F_ACR) & 0xF == 4
    assert flash.read(F_ACR + 1, length=1) == 0x07
    assert flash.read(F_SR) == 0


@pytest.mark.parametrize("request_cls", [LowerRequest, PascalRequest])
def test_flash_unlock_and_relock(request_cls):
    flash, _ = flash_for("nucleo_l476rg", request_cls)
    unlock(flash)
    assert not flash.read(F_CR) & CR_LOCK
    flash.write(F_CR, CR_LOCK)
    assert flash.read(F_CR) & CR_LOCK
    unlock(flash)  # relocking by software does not block the keys
    assert not flash.read(F_CR) & CR_LOCK
    assert flash.read(F_KEYR) == 0  # write-only


@pytest.mark.parametrize("keys", [(0x12345678,), (KEY2, KEY1), (KEY1, 0x0), (KEY1, KEY1, KEY2)])
def test_flash_wrong_key_sequence_locks_until_reset(keys):
    flash, _ = flash_for("nucleo_l476rg")
    for key in keys:
        flash.write(F_KEYR, key)
    assert flash.read(F_CR) & CR_LOCK
    unlock(flash)
    assert flash.read(F_CR) & CR_LOCK, "a wrong sequence must lock FLASH_CR until reset"
    flash.init()  # system reset
    unlock(flash)
    assert not flash.read(F_CR) & CR_LOCK


def test_flash_cr_ignores_writes_while_locked():
    flash, bus = flash_for("nucleo_l476rg")
    flash.write(F_CR, cr_page(1) | CR_STRT)
    assert flash.read(F_CR) == CR_LOCK | CR_OPTLOCK
    assert bus.writes == 0


# page erase: (board, pnb, bank) -> expected page address and size, from the RMs' memory maps
ERASE_CASES = [
    ("nucleo_l476rg", 5, 0, 0x08002800, 2 * KB),        # RM0351: bank 1, 2 KB pages
    ("nucleo_l476rg", 3, 1, 0x08081800, 2 * KB),        # bank 2 starts at 0x08080000
    ("nucleo_l476rg", 255, 1, 0x080FF800, 2 * KB),      # last page
    ("disco_l475vg_iot01a", 7, 1, 0x08083800, 2 * KB),
    ("nucleo_l432kc", 5, 0, 0x08002800, 2 * KB),        # RM0394: one bank, 128 pages
    ("nucleo_l432kc", 127, 0, 0x0803F800, 2 * KB),
    ("nucleo_l432kc", 5, 1, 0x08002800, 2 * KB),        # BKER has no effect on one bank
    ("nucleo_l4r5zi", 5, 0, 0x08005000, 4 * KB),        # RM0432, DBANK=1: 4 KB pages
    ("nucleo_l4r5zi", 3, 1, 0x08103000, 4 * KB),        # bank 2 starts at 0x08100000
    ("nucleo_l4r5zi", 255, 1, 0x081FF000, 4 * KB),
]


@pytest.mark.parametrize("board,pnb,bank,address,page", ERASE_CASES)
def test_flash_page_erase_fills_the_right_page(board, pnb, bank, address, page):
    flash, bus = flash_for(board)
    unlock(flash)
    flash.write(F_CR, cr_page(pnb, bank) | CR_STRT)
    wait_idle(flash)
    assert bus.erased(address, page)
    assert bus.untouched(FLASH_BASE, address - FLASH_BASE)
    assert bus.untouched(address + page, FLASH_BASE + len(bus.flash) - address - page)
    cr = flash.read(F_CR)
    assert not cr & CR_STRT, "STRT self-clears"
    assert flash.read(F_SR) == 0, "no EOP without EOPIE, no error"
    assert BOARDS[board].page_bytes == page


def test_flash_l4r5_single_bank_option_gives_8k_pages():
    flash, bus = flash_for("nucleo_l4r5zi")
    unlock(flash)
    flash.write(F_OPTKEYR, OPTKEY1)
    flash.write(F_OPTKEYR, OPTKEY2)
    assert not flash.read(F_CR) & CR_OPTLOCK
    flash.write(F_OPTR, flash.read(F_OPTR) & ~(1 << 22))  # DBANK = 0
    flash.write(F_CR, cr_page(2) | CR_STRT)
    wait_idle(flash)
    assert bus.erased(0x08004000, 8 * KB)
    assert bus.untouched(FLASH_BASE, 0x4000) and bus.untouched(0x08006000, 0x1000)


def test_flash_option_registers_need_optkeys():
    flash, _ = flash_for("nucleo_l4r5zi")
    unlock(flash)
    optr = flash.read(F_OPTR)
    flash.write(F_OPTR, 0)
    assert flash.read(F_OPTR) == optr
    flash.write(F_OPTKEYR, OPTKEY2)  # wrong order: blocked until reset
    flash.write(F_OPTKEYR, OPTKEY1)
    flash.write(F_OPTKEYR, OPTKEY2)
    assert flash.read(F_CR) & CR_OPTLOCK


def test_flash_mass_erase_bank1_only():
    flash, bus = flash_for("nucleo_l476rg")
    unlock(flash)
    flash.write(F_CR, CR_MER1 | CR_STRT | CR_EOPIE)
    wait_idle(flash)
    assert bus.erased(FLASH_BASE, 512 * KB) and bus.untouched(0x08080000, 512 * KB)
    assert flash.read(F_SR) == SR_EOP


def test_flash_mass_erase_bank2():
    flash, bus = flash_for("nucleo_l4r5zi")
    unlock(flash)
    flash.write(F_CR, CR_MER2 | CR_STRT)
    wait_idle(flash)
    assert bus.untouched(FLASH_BASE, 1024 * KB) and bus.erased(0x08100000, 1024 * KB)


def test_flash_sr_write_one_to_clear_and_eop():
    flash, _ = flash_for("nucleo_l476rg")
    unlock(flash)
    flash.write(F_CR, cr_page(1) | CR_STRT | CR_EOPIE)
    wait_idle(flash)
    assert flash.read(F_SR) == SR_EOP
    flash.write(F_SR, 0)
    assert flash.read(F_SR) == SR_EOP, "writing 0 leaves flags alone"
    flash.write(F_SR, SR_EOP)
    assert flash.read(F_SR) == 0


def test_flash_pgserr_on_bad_sequence_blocks_erase_until_cleared():
    flash, bus = flash_for("nucleo_l476rg")
    unlock(flash)
    flash.write(F_CR, CR_PG | cr_page(1) | CR_STRT)  # PG and PER together
    assert flash.read(F_SR) == SR_PGSERR and bus.writes == 0
    flash.write(F_CR, cr_page(1) | CR_STRT)  # refused while PGSERR is pending
    assert bus.writes == 0
    flash.write(F_SR, SR_PGSERR)
    assert flash.read(F_SR) == 0
    flash.write(F_CR, cr_page(1) | CR_STRT)
    wait_idle(flash)
    assert bus.erased(0x08000800, 2 * KB)


def test_flash_page_past_the_end_is_a_sequence_error():
    flash, bus = flash_for("nucleo_l432kc")
    unlock(flash)
    flash.write(F_CR, cr_page(128) | CR_STRT)  # the L432 has pages 0..127
    assert flash.read(F_SR) == SR_PGSERR and bus.writes == 0


def test_flash_without_system_bus_reports_operr():
    flash = Peripheral("flash.py", with_bus=False)
    unlock(flash)
    flash.write(F_CR, cr_page(1) | CR_STRT)
    assert flash.read(F_SR) == SR_OPERR


# ---------------------------------------------------------------------------
# PWR (RM0351 section 5.4, RM0432 section 6.4)
# ---------------------------------------------------------------------------

def test_pwr_voltage_scaling_ready_and_read_back():
    pwr = Peripheral("pwr.py")
    assert pwr.read(0x00) == 0x200  # VOS = range 1
    pwr.write(0x00, 0x400)  # VOS = range 2
    assert pwr.read(0x00) == 0x400
    assert not pwr.read(0x14) & (1 << 10), "VOSF must read 0 (ready)"
    pwr.write(0x04, 1 << 9)  # CR2.IOSV: port G supply valid on L4R5
    assert pwr.read(0x04) == 1 << 9
    pwr.write(0x00, 0x200 | (1 << 14))  # LPR -> REGLPF
    assert pwr.read(0x14) & (1 << 9)
    assert pwr.read(0x80) == 0x100  # CR5.R1MODE


# ---------------------------------------------------------------------------
# Platform files: syntax and internal consistency
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(RENODE_DIR.glob("*.repl")), ids=lambda p: p.name)
def test_repl_syntax(path):
    text = path.read_text(encoding="ascii")
    assert "\t" not in text
    for line in text.splitlines():
        code = re.sub(r"//.*$", "", line)
        assert not code.lstrip().startswith("#"), f"{path.name}: .repl comments are //, not #"
        indent = len(code) - len(code.lstrip(" "))
        assert indent % 4 == 0, f"{path.name}: indentation must be a multiple of 4: {line!r}"
    assert text.count("{") == text.count("}")
    parse_repl(path)  # parses


def test_common_repl_peripherals():
    repl = common_repl()
    assert repl["cpu"]["type"] == "CPU.CortexM" and repl["cpu"]["attrs"]["cpuType"] == '"cortex-m4f"'
    assert repl["nvic"]["addresses"] == [0xE000E000] and repl["nvic"]["irqs"] == [("cpu", 0)]
    assert repl["dwt"]["type"] == "Miscellaneous.DWT" and repl["dwt"]["addresses"] == [0xE0001000]
    uarts = {n: e for n, e in repl.items() if e.get("type") == "UART.STM32F7_USART"}
    assert set(uarts) == {"usart1", "usart2", "usart3", "lpuart1"}
    for entry in uarts.values():
        assert entry["attrs"]["frequency"] > 0
    assert repl["lpuart1"]["attrs"].get("lowPowerMode") == "true"


@pytest.mark.parametrize("board", BOARD_NAMES)
def test_resc_structure(board):
    info = parse_resc(board)
    assert info["mach"] == [board]
    # the default is what `tinyol build --board <board>` writes (default model)
    default = BuildResult(BuildConfig(board), ROOT / ".pio" / "variants" / BuildConfig(board).variant() / board)
    assert info["elf"] == ["$ORIGIN/../../" + default.elf.relative_to(ROOT).as_posix()]
    assert len(info["port"]) == 1
    assert info["terminal"] == [("console", "false")], "raw socket: no telnet negotiation"
    assert info["connect"] == [(BOARDS[board].console.lower(), "console")]
    assert set(info["pydevs"]) == {"rcc", "flash_ctrl", "pwr", "gpio", "flash_store"}
    # real GPIO ports a repl declares (the disco's port C, for its user button)
    real_ports = [int(b, 16) for repl in info["repls"] for b in re.findall(
        r"GPIOPort\.STM32_GPIOPort\s*@\s*sysbus\s*<\s*(0x[0-9A-Fa-f]+)", (RENODE_DIR / repl).read_text())]
    for name, dev in info["pydevs"].items():
        assert (RENODE_DIR / dev["file"]).is_file()
        assert dev["initable"] == "true"
        if name == "flash_store":
            continue
        if name != "gpio":
            assert dev["size"] == 0x400
            continue
        # gpio.py: ports A..I, 0x400 each (tests/host/test_renode_link.py), ending below the first real
        # port, and covering the console's pins
        assert dev["size"] == min([0x2400] + [b - 0x48000000 for b in real_ports])
        console_port = {"USART1": "B", "USART2": "A", "LPUART1": "G"}[BOARDS[board].console]
        assert "ABCDEFGHI".index(console_port) * 0x400 < dev["size"], "the console's pins lie outside gpio.py"
    # flash.py also serves the store region (the last eighth of flash, stm32l4_common.ld's
    # default) plus its 0x400-byte register window right after the end of flash; the code
    # region before it stays plain memory, aliased at 0
    flash, store = BOARDS[board].flash_bytes, BOARDS[board].flash_bytes // 8
    dev = info["pydevs"]["flash_store"]
    assert (dev["file"], dev["address"], dev["size"]) == ("flash.py", FLASH_BASE + flash - store, store + 0x400)
    assert "sysbus Unregister sysbus.flash" in info["text"]
    code = re.search(r'"flash_code: Memory.MappedMemory @ \{ sysbus 0x08000000; sysbus 0x00000000 \} '
                     r'\{ size: (0x[0-9A-Fa-f]+) \}"', info["text"])
    assert code and int(code.group(1), 16) == flash - store
    for repl in info["repls"]:
        assert (RENODE_DIR / repl).is_file()
    assert "sysbus LoadELF $elf" in info["text"]
    assert not re.search(r"^start\s*$", info["text"], re.M), "the caller starts the machine"
    assert all(ord(c) < 128 for c in info["text"])


# ---------------------------------------------------------------------------
# Cross-checks: .repl/.resc vs host/tinyol/boards.py, the board header, the linker scripts
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("board", BOARD_NAMES)
def test_chip_memories_match_boards_py(board):
    b = BOARDS[board]
    chip = board_chip_repl(board)
    assert chip["flash"]["addresses"] == [FLASH_BASE, 0x0]
    assert chip["flash"]["attrs"]["size"] == b.flash_bytes
    assert chip["sram1"]["addresses"] == [0x20000000]
    assert chip["sram1"]["attrs"]["size"] == b.ram_bytes
    # SRAM2 at 0x10000000 and aliased right after SRAM1
    assert chip["sram2"]["addresses"] == [0x10000000, 0x20000000 + b.ram_bytes]
    assert chip["sram2"]["attrs"]["size"] == b.ram2_bytes
    assert chip["signature"]["init"] == [f"WriteWord 0x5E0 {b.flash_bytes // KB}"]


@pytest.mark.parametrize("board", BOARD_NAMES)
def test_flash_script_geometry_matches_boards_py(board):
    flash, _ = flash_for(board)
    optr = flash.read(F_OPTR)
    geometry = flash.fn("flash_geometry")(BOARDS[board].flash_bytes // KB, optr)
    assert geometry["page"] == BOARDS[board].page_bytes
    assert geometry["size"] == BOARDS[board].flash_bytes


def test_boards_console_uarts_exist_in_repl():
    repl = common_repl()
    for board in BOARD_NAMES:
        assert BOARDS[board].console.lower() in repl


def test_repl_addresses_and_irqs_match_board_header():
    bases, irqs = parse_board_header()
    repl = common_repl()
    pydevs = parse_resc("nucleo_l476rg")["pydevs"]
    pydevs.pop("flash_store")              # per part: the store region (test_resc_structure)
    for board in BOARD_NAMES:
        mine = parse_resc(board)["pydevs"]
        mine.pop("flash_store")
        theirs = {k: dict(v, size=None) if k == "gpio" else v for k, v in mine.items()}
        ours = {k: dict(v, size=None) if k == "gpio" else v for k, v in pydevs.items()}
        assert theirs == ours, "every board maps the same stand-ins (gpio.py's extent: test_resc_structure)"
    for uart in ("USART1", "USART2", "USART3", "LPUART1"):
        assert repl[uart.lower()]["addresses"] == [bases[uart]], uart
        assert repl[uart.lower()]["irqs"] == [("nvic", irqs[uart])], uart
    assert pydevs["rcc"]["address"] == bases["RCC"]
    assert pydevs["flash_ctrl"]["address"] == bases["FLASH_R"]
    assert pydevs["pwr"]["address"] == bases["PWR"]
    gpios = [p for p in bases if re.fullmatch(r"GPIO[A-Z]", p)]
    assert gpios, "no GPIO bases in the header"
    for port in gpios:
        assert repl["tag:" + port]["addresses"] == [bases[port]], port
    if "DWT" in bases:
        assert repl["dwt"]["addresses"] == [bases["DWT"]]
    if "SCS" in bases:
        assert repl["nvic"]["addresses"] == [bases["SCS"]]


@pytest.mark.parametrize("board", BOARD_NAMES)
def test_repl_memories_match_linker_script(board):
    regions = parse_ld(board)
    chip = board_chip_repl(board)
    assert regions["FLASH"] == (chip["flash"]["addresses"][0], chip["flash"]["attrs"]["size"])
    assert regions["RAM"] == (chip["sram1"]["addresses"][0], chip["sram1"]["attrs"]["size"])
    if "RAM2" in regions:
        assert regions["RAM2"] == (chip["sram2"]["addresses"][0], chip["sram2"]["attrs"]["size"])


# ---------------------------------------------------------------------------
# Robot suite
# ---------------------------------------------------------------------------

def _robot_available():
    try:
        import robot  # noqa: F401
    except ImportError:
        return False
    return True


def _dryrun(*extra):
    cmd = [sys.executable, "-m", "robot", "--dryrun", "--output", "NONE", "--report", "NONE",
           "--log", "NONE", "--consolecolors", "off", *extra, str(ROBOT_SUITE)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.skipif(not _robot_available(), reason="robotframework not installed (pip install 'robotframework>=7,<8')")
def test_robot_suite_dryrun_passes_with_keyword_stubs():
    result = _dryrun("--variable", f"TOL_RENODE_KEYWORDS:{ROBOT_STUBS}")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(not _robot_available(), reason="robotframework not installed (pip install 'robotframework>=7,<8')")
def test_robot_suite_dryrun_checks_keywords():
    """Without the stubs, Renode's keywords are unknown: the dry run must fail."""
    result = _dryrun()
    assert result.returncode != 0
    assert "Execute Command" in result.stdout + result.stderr


def test_robot_suite_covers_every_board_with_its_console():
    text = ROBOT_SUITE.read_text()
    rows = re.findall(r"^    (?:\$\{url\}=\s+Start Board\s+)?(\w+)\s+sysbus\.(\w+)\s+(\d+)\s*$", text, re.M)
    for template in ("Firmware Boots And Answers INFO", "Learned State Survives A Reset"):
        boards = re.findall(r"\[Template\]\s+" + template + r"\n\s+(\w+)\s+sysbus\.(\w+)", text)
        assert dict(boards) == {b: BOARDS[b].console.lower() for b in BOARD_NAMES}, template
    assert all(BOARDS[b].console.lower() == uart for b, uart, _ in rows)
    ports = [p for _, _, p in rows]
    assert len(ports) >= 10 and len(set(ports)) == len(ports), "each test needs its own socket port"


# ---------------------------------------------------------------------------
# host/tinyol/targets/renode.py
# ---------------------------------------------------------------------------

def test_renode_command_line(tmp_path):
    elf = tmp_path / "my fw.elf"
    elf.write_bytes(b"\x7fELF")
    cmd = tol_renode.renode_command("nucleo_l476rg", elf, 4321, renode="renode")
    resc = RENODE_DIR.resolve() / "nucleo_l476rg.resc"
    escaped_elf = str(elf.resolve()).replace(" ", "\\ ")
    assert cmd == [
        "renode", "--disable-xwt", "--console", "--hide-log",
        "-e", f"set elf @{escaped_elf}",
        "-e", "set port 4321",
        "-e", f"include @{resc}",
        "-e", "start",
    ]
    paused = tol_renode.renode_command("nucleo_l4r5zi", elf, 1, renode="/opt/renode/renode",
                                       start=False, hide_log=False, log_file=tmp_path / "r.log")
    assert paused[:5] == ["/opt/renode/renode", "--disable-xwt", "--console",
                          "-e", f"logFile @{(tmp_path / 'r.log').resolve()}"]
    assert paused[-2:] == ["-e", f"include @{RENODE_DIR.resolve() / 'nucleo_l4r5zi.resc'}"]
    assert tol_renode.serial_url(4321) == "socket://127.0.0.1:4321"


@pytest.mark.parametrize("board,elf_exists,port,message", [
    ("nucleo_f401re", True, 4321, "unknown board"),
    ("nucleo_l476rg", False, 4321, "firmware not found"),
    ("nucleo_l476rg", True, 0, "invalid TCP port"),
    ("nucleo_l476rg", True, 70000, "invalid TCP port"),
    ("nucleo_l476rg", True, "4321", "invalid TCP port"),
])
def test_renode_command_errors(tmp_path, board, elf_exists, port, message):
    elf = tmp_path / "firmware.elf"
    if elf_exists:
        elf.write_bytes(b"\x7fELF")
    with pytest.raises(TinyolError, match=message):
        tol_renode.renode_command(board, elf, port, renode="renode")


def test_renode_command_quantum(tmp_path):
    """`quantum` sets the board scripts' $quantum before they are included (a `set` after the
    include would come too late: the script's `?=` default has run); a bad one is refused."""
    elf = tmp_path / "firmware.elf"
    elf.write_bytes(b"\x7fELF")
    cmd = tol_renode.renode_command("nucleo_l476rg", elf, 4321, renode="renode", quantum=0.0001)
    i = cmd.index('set quantum "0.0001000"')
    assert i < next(k for k, a in enumerate(cmd) if a.startswith("include @"))
    for script in ("nucleo_l476rg", "nucleo_l432kc", "disco_l475vg_iot01a", "nucleo_l4r5zi"):
        lines = (RENODE_DIR / f"{script}.resc").read_text().splitlines()
        q = lines.index("emulation SetGlobalQuantum $quantum")
        assert lines[q - 1] == '$quantum?="0.01"' and q < lines.index(next(l for l in lines if l.startswith("mach create")))
    for bad in (0, -1, 2, True, "0.01"):
        with pytest.raises(TinyolError, match="invalid Renode quantum"):
            tol_renode.renode_command("nucleo_l476rg", elf, 4321, renode="renode", quantum=bad)


def test_renode_command_needs_the_platform_files(tmp_path):
    elf = tmp_path / "firmware.elf"
    elf.write_bytes(b"\x7fELF")
    with pytest.raises(TinyolError, match="no Renode script"):
        tol_renode.renode_command("nucleo_l476rg", elf, 4321, renode="renode", renode_dir=tmp_path)


def test_find_and_require_renode(tmp_path, monkeypatch):
    monkeypatch.delenv("TINYOL_RENODE", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert tol_renode.find_renode() is None
    with pytest.raises(TinyolError) as err:
        tol_renode.require_renode()
    assert "not on PATH" in str(err.value)
    assert "renode/renode/releases" in err.value.hint and "PyPI" in err.value.hint
    launcher = tmp_path / "renode"
    launcher.write_text("#!/bin/sh\n")
    launcher.chmod(0o755)
    assert tol_renode.find_renode() == str(launcher)
    assert tol_renode.require_renode() == str(launcher)
    assert tol_renode.find_renode(launcher) == str(launcher)
    assert tol_renode.find_renode(tmp_path / "missing") is None
    elf = tmp_path / "firmware.elf"
    elf.write_bytes(b"\x7fELF")
    assert tol_renode.renode_command("nucleo_l432kc", elf, 5000)[0] == str(launcher)  # found on PATH
    monkeypatch.setenv("PATH", "")
    with pytest.raises(TinyolError, match="not on PATH"):
        tol_renode.renode_command("nucleo_l432kc", elf, 5000)
    with pytest.raises(TinyolError, match="not an executable"):
        tol_renode.require_renode(tmp_path / "missing")
    monkeypatch.setenv("TINYOL_RENODE", str(launcher))       # checked before PATH
    assert tol_renode.find_renode() == str(launcher)


def test_monitor_path_escapes_spaces(tmp_path):
    path = tmp_path / "a b" / "c.resc"
    assert tol_renode.monitor_path(path) == "@" + str(path.resolve()).replace(" ", "\\ ")
    assert " " not in tol_renode.monitor_path(path).replace("\\ ", "")

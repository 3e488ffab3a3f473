"""Persistence against the Renode FLASH model (mcu/renode/flash.py) under CPython.

Runs without Renode (the real runs, SAVE/reset/restore on every board and a power-cut
sweep on the firmware itself, are tests/test_renode_real.py): (1) the register offsets, keys and bits
that flash_stm32l4.c uses are cross-checked with the model's; (2) the driver's
register sequence (transliterated below, using the C file's own constants) erases
every store page of every board on the model, at the address the linker script's
geometry says; (3) tol_store.c runs on top of that model (ctypes callbacks) and
survives a power cut at every step of a save, like on the C flash simulator.
"""
from __future__ import annotations

import ctypes as C
import random
import re
import shutil
import subprocess

import pytest
from conftest import ROOT, compile_shared
from test_renode_static import FLASH_BASE, KB, Peripheral, flash_for

from tinyol.boards import BOARDS

DRIVER = ROOT / "mcu/boards/stm32l4/flash_stm32l4.c"
LD_COMMON = ROOT / "mcu/boards/stm32l4/ld/stm32l4_common.ld"
OK, ERR_FLASH, CUT = 0, 13, -1


def driver_constants() -> dict[str, int]:
    """FL_* macros of flash_stm32l4.c, evaluated."""
    text = re.sub(r"\\\n", " ", DRIVER.read_text())
    raw = dict(re.findall(r"^#define (FL_\w+)\s+(.+?)\s*(?:/\*.*)?$", text, re.M))
    values: dict[str, int] = {}

    def ev(name):
        if name not in values:
            expr = re.sub(r"\b(0x[0-9A-Fa-f]+|\d+)u\b", r"\1", raw[name])
            expr = re.sub(r"\bFL_\w+\b", lambda m: str(ev(m.group(0))), expr)
            values[name] = int(eval(expr, {"__builtins__": {}}))  # noqa: S307 (our own header)
        return values[name]

    for name, expr in raw.items():
        if "(" in name or "TOL_REG" in expr:
            continue
        ev(name)
    return values


def model_constants() -> dict[str, int]:
    scope = {"request": None}
    src = (ROOT / "mcu/renode/flash.py").read_text()
    body = src.split("# ---- Renode request dispatch")[0]
    exec(compile(body, "flash.py", "exec"), scope)  # noqa: S102 (our own script, no side effects)
    return {k: v for k, v in scope.items() if k.isupper() and isinstance(v, int)}


def test_driver_register_map_matches_the_renode_model():
    c, m = driver_constants(), model_constants()
    pairs = {"FL_KEYR": "FLASH_KEYR", "FL_SR": "FLASH_SR", "FL_CR": "FLASH_CR", "FL_KEY1": "KEY1",
             "FL_KEY2": "KEY2", "FL_CR_PG": "CR_PG", "FL_CR_PER": "CR_PER", "FL_CR_PNB_POS": "CR_PNB_SHIFT",
             "FL_CR_PNB_MASK": "CR_PNB_MASK", "FL_CR_BKER": "CR_BKER", "FL_CR_STRT": "CR_STRT",
             "FL_CR_LOCK": "CR_LOCK", "FL_SR_EOP": "SR_EOP", "FL_SR_OPERR": "SR_OPERR",
             "FL_SR_PROGERR": "SR_PROGERR", "FL_SR_WRPERR": "SR_WRPERR", "FL_SR_PGAERR": "SR_PGAERR",
             "FL_SR_SIZERR": "SR_SIZERR", "FL_SR_PGSERR": "SR_PGSERR", "FL_SR_MISERR": "SR_MISERR",
             "FL_SR_FASTERR": "SR_FASTERR", "FL_SR_RDERR": "SR_RDERR", "FL_SR_OPTVERR": "SR_OPTVERR"}
    diffs = {k: (hex(c[k]), hex(m[v])) for k, v in pairs.items() if c[k] != m[v]}
    assert not diffs
    # the model's write-1-to-clear set covers every flag the driver clears
    assert c["FL_SR_ERRORS"] | c["FL_SR_EOP"] == m["SR_W1C"]
    # known difference: the model has no BSY flag (its erase is instantaneous), the driver polls it
    assert c["FL_SR_BSY"] == 1 << 16 and "SR_BSY" not in m
    # the driver's ACR cache bits are inside what the model's ACR reads back
    for bit in ("FL_ACR_ICEN", "FL_ACR_DCEN", "FL_ACR_ICRST", "FL_ACR_DCRST"):
        assert c[bit] & m["ACR_MASK"] == c[bit]


def geometry(board: str) -> dict:
    """The store geometry stm32l4_common.ld computes (formulas checked against its text)."""
    ld = LD_COMMON.read_text()
    assert "_flash_page_bytes = LENGTH(FLASH) >= 2048K ? 4K : 2K;" in ld
    assert "_flash_bank_bytes = LENGTH(FLASH) >= 1024K ? LENGTH(FLASH) / 2 : LENGTH(FLASH);" in ld
    assert "DEFINED(TOL_STORE_BYTES) ? TOL_STORE_BYTES : LENGTH(FLASH) / 8;" in ld
    size = BOARDS[board].flash_bytes
    page = 4 * KB if size >= 2048 * KB else 2 * KB
    bank = size // 2 if size >= 1024 * KB else size
    store = size // 8
    return {"page": page, "bank": bank, "start": FLASH_BASE + size - store, "bytes": store}


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_linker_geometry_agrees_with_boards_py(board):
    g = geometry(board)
    assert g["page"] == BOARDS[board].page_bytes
    assert g["bytes"] % (2 * g["page"]) == 0 and g["start"] % g["page"] == 0


class Driver:
    """flash_stm32l4.c's register sequence on the Renode model (flash.py + a mock system bus).
    CPU stores into flash are plain memory writes there (Renode's MappedMemory)."""

    def __init__(self, board: str):
        self.k = driver_constants()
        self.fl, self.bus = flash_for(board)
        self.g = geometry(board)
        self.steps, self.cut_at = 0, None

    def step(self) -> bool:
        """False when the power is cut at this step."""
        if self.cut_at is not None and self.steps == self.cut_at:
            return False
        self.steps += 1
        return True

    def lock(self) -> bool:
        k = self.k
        self.fl.write(k["FL_CR"], k["FL_CR_LOCK"])
        return bool(self.fl.read(k["FL_CR"]) & k["FL_CR_LOCK"])

    def begin(self) -> int:
        k = self.k
        if not self.lock():
            return ERR_FLASH
        assert not self.fl.read(k["FL_SR"]) & k["FL_SR_BSY"]
        self.fl.write(k["FL_SR"], k["FL_SR_ERRORS"] | k["FL_SR_EOP"])
        self.fl.write(k["FL_KEYR"], k["FL_KEY1"])
        self.fl.write(k["FL_KEYR"], k["FL_KEY2"])
        return ERR_FLASH if self.fl.read(k["FL_CR"]) & k["FL_CR_LOCK"] else OK

    def end(self, st: int) -> int:
        k = self.k
        sr = self.fl.read(k["FL_SR"])
        self.fl.write(k["FL_SR"], sr & (k["FL_SR_ERRORS"] | k["FL_SR_EOP"]))
        self.lock()
        return st

    def wait(self) -> int:
        sr = self.fl.read(self.k["FL_SR"])
        return ERR_FLASH if sr & self.k["FL_SR_ERRORS"] else OK

    def mem(self, addr, n) -> bytes:
        off = addr - FLASH_BASE
        return bytes(self.bus.flash[off:off + n])

    def erase(self, addr: int) -> int:
        k, g = self.k, self.g
        if not self.step():
            return CUT
        off = addr - FLASH_BASE
        bank, pnb = off // g["bank"], (off % g["bank"]) // g["page"]
        st = self.begin()
        if st:
            return st
        cr = k["FL_CR_PER"] | ((pnb << k["FL_CR_PNB_POS"]) & k["FL_CR_PNB_MASK"]) | (k["FL_CR_BKER"] if bank else 0)
        self.fl.write(k["FL_CR"], cr)
        self.fl.write(k["FL_CR"], cr | k["FL_CR_STRT"])
        st = self.wait()
        self.fl.write(k["FL_CR"], 0)
        st = self.end(st)
        if st:
            return st
        return OK if self.mem(addr, g["page"]) == b"\xff" * g["page"] else ERR_FLASH

    def program(self, addr: int, data: bytes) -> int:
        k = self.k
        if self.mem(addr, len(data)) != b"\xff" * len(data):
            return ERR_FLASH
        st = self.begin()
        if st:
            return st
        self.fl.write(k["FL_CR"], k["FL_CR_PG"])
        for i in range(0, len(data), 8):
            if not self.step():
                return CUT
            off = addr + i - FLASH_BASE
            self.bus.flash[off:off + 8] = data[i:i + 8]
            st = self.wait()
            if st:
                break
        self.fl.write(k["FL_CR"], 0)
        st = self.end(st)
        if st:
            return st
        return OK if self.mem(addr, len(data)) == data else ERR_FLASH


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_driver_erases_every_store_page_on_the_model(board):
    d = Driver(board)
    g = d.g
    pages = range(g["start"], g["start"] + g["bytes"], g["page"])
    for addr in pages:
        assert d.erase(addr) == OK
    assert d.bus.erased(g["start"], g["bytes"])
    assert d.bus.untouched(FLASH_BASE, g["start"] - FLASH_BASE), "an erase landed outside the store"
    assert d.fl.read(d.k["FL_SR"]) == 0 and d.fl.read(d.k["FL_CR"]) & d.k["FL_CR_LOCK"]
    # dual-bank parts keep the store in bank 2 (read-while-write: code in bank 1 keeps running)
    if g["bank"] < BOARDS[board].flash_bytes:
        assert g["start"] >= FLASH_BASE + g["bank"]


def test_driver_refuses_a_flash_interface_that_does_not_lock():
    """QEMU's flash interface reads 0: the lock probe fails, nothing is attempted."""
    d = Driver("nucleo_l476rg")
    d.fl = Peripheral("flash.py", d.bus)
    d.fl.read = lambda offset, length=4: 0  # registers read 0, like QEMU's unimplemented device
    assert d.lock() is False
    assert d.erase(d.g["start"]) == ERR_FLASH and d.bus.writes == 0


@pytest.fixture(scope="module")
def pylib():
    lib = compile_shared([ROOT / "mcu/src/tol_store.c", ROOT / "mcu/src/tol_crc32.c", ROOT / "mcu/src/tol_status.c",
                          ROOT / "tests/c/flash_sim_py.c"], [ROOT / "mcu/include"])
    lib.py_save.argtypes = [C.c_char_p, C.c_uint32, C.c_uint32, C.c_uint32]
    lib.py_boot.argtypes = [C.c_uint32, C.c_char_p, C.c_uint32, C.POINTER(C.c_uint32), C.POINTER(C.c_uint32)]
    return lib


ERASE = C.CFUNCTYPE(C.c_int, C.c_uint32)
PROGRAM = C.CFUNCTYPE(C.c_int, C.c_uint32, C.POINTER(C.c_uint8), C.c_uint32)
READ = C.CFUNCTYPE(None, C.c_uint32, C.POINTER(C.c_uint8), C.c_uint32)


class Store:
    def __init__(self, lib, board):
        self.lib, self.d = lib, Driver(board)
        d = self.d

        def read(addr, dst, n):
            C.memmove(dst, d.mem(addr, n), n)

        self.cbs = (ERASE(d.erase), PROGRAM(lambda a, p, n: d.program(a, C.string_at(p, n))), READ(read))
        lib.py_attach(d.g["start"], d.g["bytes"], d.g["page"], *self.cbs)

    def save(self, data, cut_at=None):
        self.d.steps, self.d.cut_at = 0, cut_at
        rc = self.lib.py_save(data, len(data), 0x1234, 13)
        self.d.cut_at = None
        return rc, self.d.steps

    def boot(self):
        buf = C.create_string_buffer(64 * 1024)
        n, seq = C.c_uint32(), C.c_uint32()
        rc = self.lib.py_boot(0x1234, buf, len(buf), C.byref(n), C.byref(seq))
        return rc, (buf.raw[:n.value] if rc == 0 else None), seq.value


@pytest.mark.parametrize("board", ["nucleo_l476rg", "nucleo_l432kc", "nucleo_l4r5zi"])
def test_store_survives_a_power_cut_at_every_step_on_the_renode_model(pylib, board):
    st = Store(pylib, board)
    assert st.boot()[0] == 14  # Renode's flash starts as 0x00: no record, no garbage
    rnd = random.Random(board)
    old, prev, new = (rnd.randbytes(900 + i) for i in range(3))
    assert st.save(old)[0] == OK and st.save(prev)[0] == OK
    image = bytes(st.d.bus.flash)
    rc, total = st.save(new)
    assert rc == OK and st.boot()[1] == new
    for k in range(total):
        st.d.bus.flash[:] = image
        assert st.save(new, cut_at=k)[0] == CUT
        rc, got, seq = st.boot()
        assert (rc, got, seq) == (OK, prev, 2), f"cut at step {k}"
    st.d.bus.flash[:] = image
    assert st.save(new)[0] == OK and st.boot()[1:] == (new, 3)


@pytest.mark.slow
@pytest.mark.parametrize("board", sorted(BOARDS))
def test_firmware_symbols_match_the_geometry(firmware, board):
    nm = shutil.which("arm-none-eabi-nm")
    if not nm:
        pytest.skip("arm-none-eabi-nm not installed")
    elf = firmware(board, "models/digits", test_build=False).elf
    syms = {}
    for line in subprocess.run([nm, str(elf)], capture_output=True, text=True, check=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 3:
            syms[parts[2]] = int(parts[0], 16)
    g = geometry(board)
    assert syms["_store_start"] == g["start"] and syms["_store_end"] == g["start"] + g["bytes"]
    assert syms["_flash_page_bytes"] == g["page"] and syms["_flash_bank_bytes"] == g["bank"]
    assert syms["_eflash_used"] <= syms["_store_start"]
    assert "tol_flash_erase_page" in syms

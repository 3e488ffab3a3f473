"""Persistence against the Renode FLASH model (mcu/renode/flash.py), without Renode.

(1) the register offsets, keys and bits that flash_stm32l4.c uses are cross-checked with the
model's; (2) the linker script's store geometry agrees with boards.py; (3) the C driver itself,
compiled for Cortex-M4 and run under Unicorn (tests/host/test_persist_unicorn.py, which also holds
the power-cut sweeps), erases every store page of every geometry on the model. The real runs
(SAVE/reset/restore on every board, power cuts on the firmware) are tests/device/test_renode_real.py.
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from conftest import ROOT
from test_renode_static import FLASH_BASE, KB
from tinyol.boards import BOARDS

DRIVER = ROOT / "mcu/boards/stm32l4/flash_stm32l4.c"
LD_COMMON = ROOT / "mcu/boards/stm32l4/ld/stm32l4_common.ld"
OK = 0


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
    assert c["FL_SR_BSY"] == m["SR_BSY"] == 1 << 16
    assert (c["FL_ECCR"], c["FL_ECCR_ECCD"]) == (m["FLASH_ECCR"], m["ECCR_ECCD"])
    assert (c["FL_OPTR"], c["FL_OPTR_DBANK"]) == (m["FLASH_OPTR"], m["OPTR_DBANK"])
    assert c["FL_FLASHSIZE_ADDR"] == m["FLASHSIZE_ADDR"]
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


@pytest.mark.parametrize("board", ["disco_l475vg_iot01a", "nucleo_l432kc", "nucleo_l476rg", "nucleo_l4r5zi",
                                   "nucleo_l4r5zi_dbank0"])
def test_c_driver_erases_every_store_page_on_the_model(board, tmp_path_factory):
    """flash_stm32l4.c itself (Cortex-M4 code under Unicorn, tests/host/test_persist_unicorn.py) against
    flash.py: every page of the store is erased where the part's geometry puts it, nothing else."""
    pytest.importorskip("unicorn")
    if not shutil.which("arm-none-eabi-gcc"):
        pytest.skip("arm-none-eabi-gcc not installed")
    from test_persist_unicorn import GEOMETRIES, Board, M, build
    b = Board(build(tmp_path_factory, board), board)
    g = GEOMETRIES[board]
    arr = b.state["array"]
    n = len(arr["st"])
    b.restore(([0] * n, [0] * n, [M["PROGRAMMED"]] * n))
    for addr in range(b.store, b.store_end, g["page"]):
        assert b.call("arm_erase", addr) == OK
        i = (addr - b.store) // 8 + g["page"] // 8
        assert set(arr["st"][:i]) == {M["ERASED"]} and set(arr["st"][i:]) <= {M["PROGRAMMED"]}, hex(addr)
    assert b.state["regs"][M["FLASH_SR"]] == 0 and b.state["regs"][M["FLASH_CR"]] & M["CR_LOCK"]
    # dual-bank parts keep the store in bank 2 (read-while-write: code in bank 1 keeps running)
    if g["bank"] < g["kb"] * KB:
        assert b.store >= FLASH_BASE + g["bank"]


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

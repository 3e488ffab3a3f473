"""The strict flash model (mcu/renode/flash.py) refuses what STM32L4 silicon refuses.

One test per rule, each stated from the reference manuals (RM0351 3.3.7-3.7, RM0394, RM0432
3.3.8 and 3.7.5 FLASH_SR, 3.7.6 FLASH_ECCR) and ST's errata, not from the model's code: a store
without PG (PGSERR), a locked interface, byte and half-word stores (SIZERR), a double-word not
written as two aligned words in order (PGAERR), a double-word programmed since its erase, even
with 0xFF (PROGERR; all-zero is the exception the RM names), a write-protected page (WRPERR),
BSY while an operation runs, a torn double-word reading with ECCD + NMI, the data-cache hazard
with DCEN on, and the L4R5's DBANK page sizes. The same functions serve every bus master: the
CPU's stores under Unicorn (tests/host/test_persist_unicorn.py) and any other access routed to them.
"""
from __future__ import annotations

import pytest
from _persist_util import load_flash_model as load_model

M = load_model()
STORE, STORE_BYTES = 0x080E0000, 0x20000          # the L476's store region (bank 2)
SR, CR, KEYR, ACR, ECCR, OPTR, OPTKEYR = 0x10, 0x14, 0x08, 0x00, 0x18, 0x20, 0x0C
PG, PER, STRT, BKER, LOCK = 1, 2, 1 << 16, 1 << 11, 1 << 31
EOP, PROGERR, WRPERR, PGAERR, SIZERR, PGSERR, BSY = 1, 1 << 3, 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 16
DCEN, DCRST, ECCD = 1 << 10, 1 << 12, 1 << 31


def part(kb=1024, dbank=True, dcen=False):
    """A part with DCEN off (as the driver makes it while programming), unless dcen."""
    s = M["flash_reset"]()
    s["flash_kb"] = kb
    if not dcen:
        s["regs"][ACR] &= ~DCEN
    if not dbank:
        s["regs"][OPTR] &= ~(1 << 22)
    size = kb * 1024
    M["flash_attach_array"](s, 0x08000000 + size - size // 8, size // 8)
    return s


def unlock(s):
    M["flash_write"](s, KEYR, 0x45670123)
    M["flash_write"](s, KEYR, 0xCDEF89AB)
    assert not M["flash_read"](s, CR) & LOCK


def idle(s):
    """Poll SR until BSY falls; how many polls saw it set."""
    n = 0
    while M["flash_read"](s, SR) & BSY:
        n += 1
        assert n < 10_000
    return n


def program(s, off, lo, hi):
    M["array_write"](s, off, lo)
    M["array_write"](s, off + 4, hi)
    return idle(s)


def word(s, off):
    return M["array_read"](s, off)


def sr(s):
    return M["flash_read"](s, SR)


@pytest.fixture
def s():
    st = part()
    unlock(st)
    M["flash_write"](st, CR, PG)
    return st


def test_factory_array_is_erased_and_a_program_takes_two_words_and_time(s):
    assert word(s, 0) == word(s, 4) == 0xFFFFFFFF
    M["array_write"](s, 0, 0x11111111)
    assert word(s, 0) == 0xFFFFFFFF, "the first word alone programs nothing"
    M["array_write"](s, 4, 0x22222222)
    assert sr(s) & BSY, "the second word starts the program: BSY"
    assert idle(s) >= 1
    assert (word(s, 0), word(s, 4), sr(s)) == (0x11111111, 0x22222222, 0)


def test_store_without_pg_is_pgserr_and_lands_nowhere():
    s = part()
    unlock(s)
    M["array_write"](s, 0, 0)
    assert sr(s) == PGSERR and word(s, 0) == 0xFFFFFFFF
    s = part()                                   # locked: PG cannot even be set
    M["flash_write"](s, CR, PG)
    assert M["flash_read"](s, CR) & PG == 0
    M["array_write"](s, 8, 0)
    M["array_write"](s, 12, 0)
    assert sr(s) == PGSERR and word(s, 8) == 0xFFFFFFFF


def test_byte_and_half_word_stores_are_sizerr(s):
    M["array_write"](s, 0, 0x12, 1)
    assert sr(s) == SIZERR
    M["flash_write"](s, SR, SIZERR)
    M["array_write"](s, 0, 0x1234, 2)
    assert sr(s) == SIZERR and word(s, 0) == 0xFFFFFFFF


def test_words_out_of_order_or_of_two_double_words_are_pgaerr(s):
    M["array_write"](s, 4, 0)                    # the odd word first
    assert sr(s) == PGAERR
    M["flash_write"](s, SR, PGAERR)
    M["array_write"](s, 8, 0)
    M["array_write"](s, 20, 0)                   # second word of another double-word
    assert sr(s) == PGAERR and word(s, 8) == word(s, 20) == 0xFFFFFFFF


def test_a_double_word_programs_once_per_erase_even_with_0xff(s):
    program(s, 0, 0xFFFFFFFF, 0xFFFFFFFF)
    assert sr(s) == 0 and word(s, 0) == 0xFFFFFFFF, "0xFF programmed reads like erased..."
    program(s, 0, 0x5A5A5A5A, 0x5A5A5A5A)
    assert sr(s) == PROGERR and word(s, 0) == 0xFFFFFFFF, "... but is not erased"
    M["flash_write"](s, SR, PROGERR)
    program(s, 8, 0x01234567, 0x89ABCDEF)
    program(s, 8, 0x01234567, 0x89ABCDEF)       # the same value again
    assert sr(s) == PROGERR
    M["flash_write"](s, SR, PROGERR)
    program(s, 8, 0, 0)                          # RM: "except if the data to write is 0x0000 0000"
    assert sr(s) == 0 and word(s, 8) == 0


def test_a_pending_error_blocks_the_next_program_until_cleared(s):
    program(s, 0, 1, 1)
    program(s, 0, 2, 2)
    assert sr(s) == PROGERR
    program(s, 8, 3, 3)
    assert sr(s) & PGSERR and word(s, 8) == 0xFFFFFFFF
    M["flash_write"](s, SR, PROGERR | PGSERR)
    program(s, 8, 3, 3)
    assert sr(s) == 0 and word(s, 8) == 3


def test_write_protected_page_is_wrperr():
    s = part()
    unlock(s)
    M["flash_write"](s, OPTKEYR, 0x08192A3B)
    M["flash_write"](s, OPTKEYR, 0x4C5D6E7F)
    M["flash_write"](s, 0x4C, (0xC1 << 16) | 0xC0)   # WRP2AR: bank-2 pages 192..193 protected
    M["flash_write"](s, CR, PG)
    program(s, 0, 0, 0)                               # 0x080E0000 = bank 2, page 192
    assert sr(s) & WRPERR and word(s, 0) == 0xFFFFFFFF
    M["flash_write"](s, SR, sr(s))
    M["flash_write"](s, CR, PER | BKER | (192 << 3) | STRT)
    assert sr(s) == WRPERR
    M["flash_write"](s, SR, WRPERR)
    M["flash_write"](s, CR, PG)
    program(s, 2 * 2048, 7, 7)                        # page 194 is not protected
    assert sr(s) == 0 and word(s, 2 * 2048) == 7


def test_erase_is_busy_then_erases_exactly_its_page(s):
    for off in range(0, 3 * 2048, 8):
        program(s, off, off, ~off & 0xFFFFFFFF)
    M["flash_write"](s, CR, 0)
    M["flash_write"](s, CR, PER | BKER | (193 << 3) | STRT)   # bank 2 page 193 = store page 1
    assert idle(s) > 10, "an erase keeps BSY far longer than a program"
    assert word(s, 2048 - 8) == 2048 - 8 and word(s, 2 * 2048) == 2 * 2048
    assert all(word(s, off) == 0xFFFFFFFF for off in range(2048, 2 * 2048, 4))
    M["flash_write"](s, CR, PG)
    program(s, 2048, 1, 2)
    assert sr(s) == 0 and word(s, 2048) == 1, "erased again: programmable again"


def test_a_power_cut_while_programming_tears_the_double_word_and_its_read_raises_nmi(s):
    nmis = []
    s["nmi_hook"] = lambda: nmis.append(1)
    M["array_write"](s, 16, 0)
    M["array_write"](s, 20, 0)
    assert sr(s) & BSY
    s2 = M["flash_power_cut"](s)
    assert s2["regs"][CR] & LOCK, "the interface starts over locked"
    assert s2["array"]["st"][2] == M["TORN"]
    assert not s2["regs"][ECCR] & ECCD and nmis == []
    bits = (word(s2, 16), word(s2, 20))
    assert bits != (0xFFFFFFFF, 0xFFFFFFFF), "some of the zeros landed"
    assert s2["regs"][ECCR] & ECCD and nmis == [1, 1], "each read of it: double ECC error, NMI"
    assert s2["regs"][ECCR] & 0x7FFFF == (STORE + 16 - 0x08080000), "ADDR_ECC: offset in bank 2"
    assert s2["regs"][ECCR] & (1 << 19), "BK_ECC: bank 2"
    M["flash_write"](s2, ECCR, ECCD)
    assert not s2["regs"][ECCR] & ECCD, "ECCD is write-1-to-clear"
    unlock(s2)
    M["flash_write"](s2, CR, PG)
    program(s2, 16, 1, 1)
    assert sr(s2) == PROGERR, "a torn double-word is not erased either"


def test_a_cut_between_the_two_words_programs_nothing(s):
    M["array_write"](s, 0, 0)
    s2 = M["flash_power_cut"](s)
    assert s2["array"]["st"][0] == M["ERASED"] and word(s2, 0) == 0xFFFFFFFF


def test_a_cut_during_an_erase_leaves_the_page_mixed(s):
    for off in range(0, 2 * 2048, 8):
        program(s, off, 0, 0)
    M["flash_write"](s, CR, 0)
    M["flash_write"](s, CR, PER | BKER | (192 << 3) | STRT)
    assert sr(s) & BSY
    s2 = M["flash_power_cut"](s)
    states = s2["array"]["st"][:256]
    assert M["TORN"] in states and M["ERASED"] in states, "some double-words erased, some torn"
    assert s2["array"]["st"][256] == M["PROGRAMMED"], "the next page is untouched"


def test_data_cache_on_during_a_program_reads_stale_until_reset():
    s = part(dcen=True)
    assert M["flash_read"](s, ACR) & DCEN
    unlock(s)
    M["flash_write"](s, CR, PG)
    program(s, 0, 0xA5A5A5A5, 0x5A5A5A5A)
    assert word(s, 0) == 0xFFFFFFFF, "read-while-write with DCEN on: a stale line (ST errata)"
    acr = M["flash_read"](s, ACR)
    M["flash_write"](s, ACR, acr | DCRST)          # reset while enabled: no effect (RM)
    assert word(s, 0) == 0xFFFFFFFF
    M["flash_write"](s, ACR, acr & ~DCEN)
    assert word(s, 0) == 0xA5A5A5A5, "with the data cache off the array is read"
    M["flash_write"](s, ACR, (acr & ~DCEN) | DCRST)
    M["flash_write"](s, ACR, acr)
    assert word(s, 0) == 0xA5A5A5A5, "reset, then enabled again: fresh"
    M["flash_write"](s, ACR, acr & ~DCEN)           # the HAL's order: DCEN off first
    program(s, 8, 1, 2)
    M["flash_write"](s, ACR, (acr & ~DCEN) | DCRST)
    M["flash_write"](s, ACR, acr)
    assert word(s, 8) == 1


@pytest.mark.parametrize("dbank,page,pnb,address", [(True, 4096, 3, 0x08103000), (False, 8192, 3, 0x08006000)])
def test_l4r5_page_size_follows_dbank(dbank, page, pnb, address):
    s = part(2048, dbank)
    base = s["array"]["base"]
    unlock(s)
    M["flash_write"](s, CR, PG)
    for off in range(0, 0x40000, 0x1000):
        program(s, off, 0, 0)
    M["flash_write"](s, CR, 0)
    # a page inside the store: the last pages of the part
    last = (0x08200000 - page - (0x08100000 if dbank else 0x08000000)) // page
    M["flash_write"](s, CR, PER | (BKER if dbank else 0) | (last << 3) | STRT)
    idle(s)
    start = 0x08200000 - page - base
    assert all(s["array"]["st"][i] == M["ERASED"] for i in range(start // 8, (start + page) // 8))
    assert s["array"]["st"][(start - 0x1000) // 8] == M["PROGRAMMED"]
    g = M["flash_geometry"](2048, s["regs"][OPTR])
    assert (g["page"], M["flash_page_address"](g, pnb, 1 if dbank else 0)) == (page, address)


# ---- the array kept in a file (tinyol emulate --state; docs/renode.md) -------------------------
# The image format is the native target's flash.bin (mcu/boards/native/flash_native.c): the store's
# bytes, then one state byte per double-word: 0 erased, 1 programmed, 2 torn.

def _imaged(tmp_path, fill: bytes | None = None):
    st = part()
    path = tmp_path / "flash.bin"
    path.write_bytes(fill if fill is not None else b"\xff" * STORE_BYTES + bytes(STORE_BYTES // 8))
    M["flash_image_open"](st, str(path))
    unlock(st)
    M["flash_write"](st, CR, PG)
    return st, path


def _dword(path, i):
    data = path.read_bytes()
    return data[8 * i:8 * i + 8], data[STORE_BYTES + i]


def test_the_image_takes_every_change_of_the_array(tmp_path):
    s, path = _imaged(tmp_path)
    program(s, 8 * 5, 0x11223344, 0x55667788)
    assert _dword(path, 5) == (bytes.fromhex("4433221188776655"), 1)       # little-endian, programmed
    program(s, 8 * 6, 0xFFFFFFFF, 0xFFFFFFFF)                             # 0xFF programmed: state 1
    assert _dword(path, 6) == (b"\xff" * 8, 1)
    # a program cut by the power: torn in the file, and still torn when the file is opened again
    M["array_write"](s, 8 * 7, 0)
    M["array_write"](s, 8 * 7 + 4, 0)
    s = M["flash_power_cut"](s)
    assert _dword(path, 7)[1] == 2
    again = part()
    M["flash_image_open"](again, str(path))
    assert word(again, 8 * 5) == 0x11223344 and again["array"]["st"][6] == 1
    word(again, 8 * 7)
    assert again["nmi"] == 1 and M["flash_read"](again, ECCR) & ECCD, "a torn double-word reads with ECCD"
    # a page erase (page 0 of bank 2 is the store's first page) erases the file's page too
    s = again
    unlock(s)
    M["flash_write"](s, CR, cr := PER | BKER | (((STORE - 0x08080000) // 2048) << 3))
    M["flash_write"](s, CR, cr | STRT)
    idle(s)
    assert all(_dword(path, i) == (b"\xff" * 8, 0) for i in (5, 6, 7))


def test_an_image_of_the_wrong_size_or_state_is_never_taken_as_data(tmp_path):
    with pytest.raises(ValueError, match="has 131072 bytes, the store needs 147456"):
        _imaged(tmp_path, b"\x00" * STORE_BYTES)
    s, path = _imaged(tmp_path, b"\x00" * STORE_BYTES + bytes([7]) * (STORE_BYTES // 8))
    assert s["array"]["st"][0] == 2, "an unknown state reads as torn (an ECC error), never as data"

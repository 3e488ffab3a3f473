# tinyol: STM32L4 embedded-flash interface for Renode, with a strict model of the array
# (RM0351 / RM0394 / RM0432 section 3). One semantics, used three ways:
#   * Renode runs this file as a Python.PythonPeripheral at 0x40022000 (0x400 bytes): the
#     interface registers;
#   * the same functions serve the flash array when a host routes array accesses to them:
#     tests/host/test_persist_unicorn.py maps the store region of the Cortex-M4 emulator onto
#     array_read/array_write, so the firmware's own stores and loads (and any other bus
#     master's) meet the rules below;
#   * tests/host/test_flash_model.py checks each rule against what the reference manuals say.
#
# Registers:
#   ACR      reads back (LATENCY, PRFTEN, ICEN, DCEN, ...). DCRST/ICRST act only while the
#            cache is disabled (RM: "can be written only when the cache is disabled").
#   KEYR     0x45670123 then 0xCDEF89AB clears CR.LOCK; a wrong key or order keeps CR locked
#            until the next reset. OPTKEYR likewise clears CR.OPTLOCK (only while CR is unlocked).
#   CR       ignored while locked; LOCK/OPTLOCK set by a write, cleared only by keys. STRT with
#            PER erases page PNB of bank BKER, with MER1/MER2 a bank. STRT self-clears.
#   SR       BSY is set while an erase or a double-word program runs: for ERASE_POLLS or
#            PROGRAM_POLLS reads of SR (each poll of the driver's wait loop is a few
#            instructions). An array access or register write meanwhile stalls until the
#            operation ends (as the AHB does). Error and EOP flags are write-1-to-clear.
#   ECCR     ECCD (bit 31) with ADDR_ECC/BK_ECC of the first double ECC error, write-1-to-clear.
#   OPTR...  read back, writable only while OPTLOCK is clear. OPTR.DBANK picks the L4R5 layout.
#
# Array (only the part a host attached with flash_attach_array; each double-word has a state
# ERASED / PROGRAMMED / TORN):
#   * programming is by aligned 64-bit double-words: a 32-bit store to the even word, then one
#     to the odd word of the same double-word; the second store starts the program.
#   * a store with CR.PG clear (or CR locked, or PER/MER set, or an error flag pending): PGSERR;
#     a byte or half-word store: SIZERR; a second word of another double-word, or an odd word
#     first: PGAERR; inside a WRP area: WRPERR; a double-word that is not ERASED (programmed
#     since its erase, whatever its value, 0xFF included, or torn): PROGERR, except an all-zero
#     double-word (RM: "except if the data to write is 0x0000 0000"). Nothing refused lands.
#   * a read of a TORN double-word returns its bits, sets ECCR.ECCD and raises NMI (the host
#     delivers it: state["nmi"] counts them, state["nmi_hook"] is called if set).
#   * data-cache hazard (ST errata, read-while-write): a program or erase that completes while
#     ACR.DCEN is set leaves the data cache with the old contents of the double-words it changed;
#     reads with DCEN set return those until the data cache is reset (DCRST with DCEN clear).
#   * flash_power_cut(state): the power fails now. A program in progress leaves its double-word
#     TORN with some of its zero bits landed; an erase in progress leaves each double-word of
#     the page erased, untouched or TORN. The interface, a half-written double-word and the
#     cache are lost; the array keeps its bits. A Renode machine reset does the same.
# Pages outside the attached array are erased through the system bus (plain memory there).
#
# Kept in a file (tinyol emulate --state DIR): a host runs, as the array instance, a copy of this
# file whose first line sets tol_flash_image to the path of an image of the array: its bytes,
# then one state byte per double-word (0 erased, 1 programmed, 2 torn): the native target's
# flash.bin format. The host creates the image (erased) and checks its size before Renode starts;
# the array is read from it once, and every change of the array (a program or erase that ends, a
# power cut, the test-only tear) is written through to it, so the store outlives Renode as it
# outlives a machine reset.
#
# Geometry comes from the part, as the firmware gets it: FLASHSIZE (16-bit, KB, 0x1FFF75E0)
# and, on 2 MB L4R/S parts, OPTR.DBANK: 2 KB pages on L43x/L45x (one bank) and L47x/L49x (two
# 512 KB banks); 4 KB pages in two 1 MB banks with DBANK=1 (factory default), 8 KB pages in one
# bank with DBANK=0.
# Not modelled: read-out protection, PCROP, fast programming, option-byte loading, bank swap,
# single ECC errors, timing in seconds.
#
# Runs in Renode's IronPython 2 and must import nothing (no standard library on its path).
# The file is executed again on every access in a scope that keeps its globals; state lives
# in the global `tol_flash`. Renode's scope holds only `request`, `self` (this peripheral)
# and `size`: the bus is `self.GetMachine().SystemBus`. Keep this file ASCII-only.

FLASH_ACR = 0x00
FLASH_PDKEYR = 0x04
FLASH_KEYR = 0x08
FLASH_OPTKEYR = 0x0C
FLASH_SR = 0x10
FLASH_CR = 0x14
FLASH_ECCR = 0x18
FLASH_OPTR = 0x20

KEY1 = 0x45670123
KEY2 = 0xCDEF89AB
OPTKEY1 = 0x08192A3B
OPTKEY2 = 0x4C5D6E7F

CR_PG = 1 << 0
CR_PER = 1 << 1
CR_MER1 = 1 << 2
CR_PNB_SHIFT = 3
CR_PNB_MASK = 0xFF << 3
CR_BKER = 1 << 11
CR_MER2 = 1 << 15
CR_STRT = 1 << 16
CR_OPTSTRT = 1 << 17
CR_EOPIE = 1 << 24
CR_OBL_LAUNCH = 1 << 27
CR_OPTLOCK = 1 << 30
CR_LOCK = 1 << 31
CR_LOCKS = CR_LOCK | CR_OPTLOCK
CR_ONE_SHOT = CR_STRT | CR_OPTSTRT | CR_OBL_LAUNCH

SR_EOP = 1 << 0
SR_OPERR = 1 << 1
SR_PROGERR = 1 << 3
SR_WRPERR = 1 << 4
SR_PGAERR = 1 << 5
SR_SIZERR = 1 << 6
SR_PGSERR = 1 << 7
SR_MISERR = 1 << 8
SR_FASTERR = 1 << 9
SR_RDERR = 1 << 14
SR_OPTVERR = 1 << 15
SR_BSY = 1 << 16
SR_W1C = (SR_EOP | SR_OPERR | SR_PROGERR | SR_WRPERR | SR_PGAERR | SR_SIZERR | SR_PGSERR
          | SR_MISERR | SR_FASTERR | SR_RDERR | SR_OPTVERR)
SR_PROGRAM_ERRORS = SR_PROGERR | SR_WRPERR | SR_PGAERR | SR_SIZERR | SR_PGSERR | SR_MISERR | SR_FASTERR

ECCR_ECCC = 1 << 30
ECCR_ECCD = 1 << 31

ACR_MASK = 0x7F0F                    # LATENCY[3:0], PRFTEN, ICEN, DCEN, ICRST, DCRST, RUN_PD, SLEEP_PD
ACR_ICEN = 1 << 9
ACR_DCEN = 1 << 10
ACR_ICRST = 1 << 11
ACR_DCRST = 1 << 12
OPTR_DBANK = 1 << 22

FLASH_BASE = 0x08000000
FLASHSIZE_ADDR = 0x1FFF75E0          # flash size in KB, 16 bits (device electronic signature)
DEFAULT_FLASH_KB = 1024              # used when FLASHSIZE cannot be read

PROGRAM_POLLS = 3                    # SR reads that see BSY during a double-word program
ERASE_POLLS = 24                     # ... during a page or bank erase
ERASED, PROGRAMMED, TORN = 0, 1, 2   # double-word states
ERASED_WORD = 0xFFFFFFFF

# Reset values: factory-default option bytes (no protection, DBANK = 1).
FLASH_RESET_VALUES = {
    FLASH_ACR: 0x00000600,           # ICEN | DCEN
    FLASH_SR: 0x00000000,
    FLASH_CR: CR_LOCKS,
    FLASH_ECCR: 0x00000000,
    FLASH_OPTR: 0xFFEFF8AA,          # RDP level 0, BOR level 0, DUALBANK/DBANK = 1, BFB2 = 0
    0x24: 0xFFFF0000,                # PCROP1SR
    0x28: 0x0FFF0000,                # PCROP1ER
    0x2C: 0xFF00FFFF,                # WRP1AR (start > end: no protection)
    0x30: 0xFF00FFFF,                # WRP1BR
    0x44: 0xFFFF0000,                # PCROP2SR
    0x48: 0x0FFF0000,                # PCROP2ER
    0x4C: 0xFF00FFFF,                # WRP2AR
    0x50: 0xFF00FFFF,                # WRP2BR
}
OPTION_OFFSETS = (FLASH_OPTR, 0x24, 0x28, 0x2C, 0x30, 0x44, 0x48, 0x4C, 0x50)


def flash_reset(state=None):
    """Interface state after a system reset. With `state`, the option registers and the
    attached array survive (they are non-volatile); everything else starts over."""
    regs = {}
    for offset in FLASH_RESET_VALUES:
        regs[offset] = FLASH_RESET_VALUES[offset]
    new = {"regs": regs, "key_stage": 0, "key_blocked": False, "optkey_stage": 0,
           "optkey_blocked": False, "array": None, "half": None, "op": None, "busy": 0,
           "stale": {}, "nmi": 0, "nmi_hook": None, "rng": 0x1234567, "bus": None,
           "flash_kb": None, "image": None, "program_end": 0}
    if state is not None:
        for offset in OPTION_OFFSETS:
            regs[offset] = state["regs"][offset]
        for key in ("array", "rng", "nmi_hook", "bus", "flash_kb", "nmi", "image"):  # nmi: a test counter
            new[key] = state[key]
    return new


def flash_attach_array(state, base, nbytes, fill=ERASED_WORD):
    """Model the array bytes [base, base + nbytes) (double-word multiple). fill=0xFFFFFFFF:
    erased (factory state); any other value: programmed with that word."""
    n = nbytes // 8
    st = ERASED
    if fill != ERASED_WORD:
        st = PROGRAMMED
    state["array"] = {"base": base, "bytes": nbytes, "lo": [fill] * n, "hi": [fill] * n, "st": [st] * n}


def flash_image_open(state, path):
    """Keep the attached array in the image file `path` (see the header): read it, then write
    every change through. The file must exist with 9 bytes per double-word of the array."""
    arr = state["array"]
    n = len(arr["st"])
    f = open(path, "r+b")
    data = bytearray(f.read())
    if len(data) != 9 * n:
        f.close()
        raise ValueError("tinyol flash image %s has %d bytes, the store needs %d" % (path, len(data), 9 * n))
    for i in range(n):
        k = 8 * i
        arr["lo"][i] = data[k] | (data[k + 1] << 8) | (data[k + 2] << 16) | (data[k + 3] << 24)
        arr["hi"][i] = data[k + 4] | (data[k + 5] << 8) | (data[k + 6] << 16) | (data[k + 7] << 24)
        st = data[8 * n + i]
        if st > TORN:
            st = TORN                     # an unknown state reads as an ECC error, never as data
        arr["st"][i] = st
    state["image"] = f


def _image_sync(state, first, end):
    """Write double-words [first, end) of the array (bytes and states) through to the image."""
    f = state["image"]
    if f is None or end <= first:
        return
    arr = state["array"]
    n = len(arr["st"])
    buf = bytearray(8 * (end - first))
    for i in range(first, end):
        k = 8 * (i - first)
        lo = arr["lo"][i]
        hi = arr["hi"][i]
        for b in range(4):
            buf[k + b] = (lo >> (8 * b)) & 0xFF
            buf[k + 4 + b] = (hi >> (8 * b)) & 0xFF
    f.seek(8 * first)
    f.write(buf)
    f.seek(8 * n + first)
    f.write(bytearray(arr["st"][first:end]))
    f.flush()


def _image_sync_range(state, dwords):
    if len(dwords):
        _image_sync(state, dwords[0], dwords[-1] + 1)


def flash_geometry(flash_kb, optr):
    """Array layout from FLASHSIZE (KB) and OPTR: dict base, size, page, banks, bank_size."""
    if flash_kb <= 0 or flash_kb >= 0xFFFF:
        flash_kb = DEFAULT_FLASH_KB
    size = flash_kb * 1024
    if flash_kb >= 2048:                  # L4R/L4S
        if optr & OPTR_DBANK:
            page, banks = 4096, 2
        else:
            page, banks = 8192, 1
    elif flash_kb >= 1024:                # L47x / L49x: always two banks
        page, banks = 2048, 2
    else:                                 # L43x / L44x / L45x: one bank
        page, banks = 2048, 1
    return {"base": FLASH_BASE, "size": size, "page": page, "banks": banks,
            "bank_size": size // banks}


def flash_page_address(geometry, pnb, bank):
    """Address of page `pnb` of bank `bank` (0 or 1), or None if there is no such page."""
    pages_per_bank = geometry["bank_size"] // geometry["page"]
    if geometry["banks"] == 1:
        bank = 0
    if pnb < 0 or pnb >= pages_per_bank:
        return None
    return geometry["base"] + bank * geometry["bank_size"] + pnb * geometry["page"]


def _flash_kb(state):
    if state["flash_kb"] is None:
        bus = state["bus"]
        kb = DEFAULT_FLASH_KB
        if bus is not None:
            kb = int(bus.ReadWord(FLASHSIZE_ADDR)) & 0xFFFF
        state["flash_kb"] = kb
    return state["flash_kb"]


def _geometry(state):
    return flash_geometry(_flash_kb(state), state["regs"][FLASH_OPTR])


def _rand(state):
    """xorshift32 (no `random` module in Renode's IronPython)."""
    x = state["rng"]
    x ^= (x << 13) & 0xFFFFFFFF
    x ^= x >> 17
    x ^= (x << 5) & 0xFFFFFFFF
    if x == 0:
        x = 1
    state["rng"] = x
    return x


def _dwords_in(state, address, count):
    """Indices of the attached array's double-words inside [address, address + count)."""
    arr = state["array"]
    if arr is None:
        return range(0)
    lo = max(address, arr["base"])
    hi = min(address + count, arr["base"] + arr["bytes"])
    if lo >= hi:
        return range(0)
    return range((lo - arr["base"]) // 8, (hi - arr["base"]) // 8)


def _fill_erased_outside(state, address, count):
    """Erase what lies outside the attached array through the system bus (plain memory)."""
    bus = state["bus"]
    arr = state["array"]
    end = address + count
    if bus is None:
        return
    while address < end:
        inside = arr is not None and arr["base"] <= address < arr["base"] + arr["bytes"]
        if not inside:
            bus.WriteDoubleWord(address, ERASED_WORD)
        address += 4


def _remember_old(state, i):
    """DCEN on while the array changes: the data cache keeps the double-word's old contents."""
    arr = state["array"]
    if state["regs"][FLASH_ACR] & ACR_DCEN and i not in state["stale"]:
        state["stale"][i] = (arr["lo"][i], arr["hi"][i])


def _finish(state):
    """The operation in progress ends (BSY falls)."""
    op = state["op"]
    if op is None:
        return
    state["op"] = None
    state["busy"] = 0
    arr = state["array"]
    regs = state["regs"]
    if op["kind"] == "program":
        i = op["i"]
        _remember_old(state, i)
        arr["lo"][i] = op["lo"]
        arr["hi"][i] = op["hi"]
        arr["st"][i] = PROGRAMMED
        _image_sync(state, i, i + 1)
        state["program_end"] = _cpu_instructions(state)
    else:
        dwords = _dwords_in(state, op["address"], op["count"])
        for i in dwords:
            _remember_old(state, i)
            arr["lo"][i] = ERASED_WORD
            arr["hi"][i] = ERASED_WORD
            arr["st"][i] = ERASED
        _image_sync_range(state, dwords)
        _fill_erased_outside(state, op["address"], op["count"])
    if regs[FLASH_CR] & CR_EOPIE:
        regs[FLASH_SR] |= SR_EOP


def _cpu_instructions(state):
    """The CPU's executed-instruction count now (low 32 bits), 0 without a Renode bus: the
    PROGRAM_END test window reads it as it was when the last double-word program ended."""
    bus = state["bus"]
    if bus is None or not hasattr(bus, "GetCPUs"):
        return 0
    for cpu in bus.GetCPUs():
        return int(cpu.ExecutedInstructions) & 0xFFFFFFFF
    return 0


def flash_power_cut(state):
    """The power fails now: tear the operation in progress, lose the volatile state."""
    op = state["op"]
    arr = state["array"]
    if op is not None and op["kind"] == "program":
        i = op["i"]
        mask_lo = _rand(state) | 1            # at least one bit of the double-word lands
        mask_hi = _rand(state)
        arr["lo"][i] = arr["lo"][i] & ~(~op["lo"] & mask_lo) & 0xFFFFFFFF
        arr["hi"][i] = arr["hi"][i] & ~(~op["hi"] & mask_hi) & 0xFFFFFFFF
        arr["st"][i] = TORN
        _image_sync(state, i, i + 1)
    elif op is not None:
        dwords = _dwords_in(state, op["address"], op["count"])
        for i in dwords:
            r = _rand(state) % 3
            if r == 0:
                arr["lo"][i] = ERASED_WORD
                arr["hi"][i] = ERASED_WORD
                arr["st"][i] = ERASED
            elif r == 1:
                arr["lo"][i] = arr["lo"][i] | _rand(state)
                arr["hi"][i] = arr["hi"][i] | _rand(state)
                arr["st"][i] = TORN
        _image_sync_range(state, dwords)
    state["op"] = None
    return flash_reset(state)


def _start_op(state, op, polls):
    state["op"] = op
    state["busy"] = polls


def _start(state, cr):
    """CR.STRT was written: start the requested erase (or flag the sequence error)."""
    regs = state["regs"]
    if not cr & (CR_PER | CR_MER1 | CR_MER2):
        return
    if (cr & CR_PG) or (regs[FLASH_SR] & SR_PROGRAM_ERRORS):
        regs[FLASH_SR] |= SR_PGSERR
        return
    if state["bus"] is None and state["array"] is None:   # cannot reach the array
        regs[FLASH_SR] |= SR_OPERR
        return
    geometry = _geometry(state)
    if cr & CR_PER:
        pnb = (cr & CR_PNB_MASK) >> CR_PNB_SHIFT
        bank = 0
        if cr & CR_BKER:
            bank = 1
        address = flash_page_address(geometry, pnb, bank)
        if address is None:
            regs[FLASH_SR] |= SR_PGSERR
            return
        if _write_protected(state, geometry, address):
            regs[FLASH_SR] |= SR_WRPERR
            return
        _start_op(state, {"kind": "erase", "address": address, "count": geometry["page"]}, ERASE_POLLS)
    else:
        address = geometry["base"]
        count = 0
        if cr & CR_MER1:
            count = geometry["bank_size"]
        if (cr & CR_MER2) and geometry["banks"] == 2:
            if count == 0:
                address = geometry["base"] + geometry["bank_size"]
            count += geometry["bank_size"]
        if count:
            _start_op(state, {"kind": "erase", "address": address, "count": count}, ERASE_POLLS)


def _write_protected(state, geometry, address):
    """Inside a WRP area (WRPxyR: start page [7:0], end page [23:16] of its bank)?"""
    regs = state["regs"]
    off = address - geometry["base"]
    bank = off // geometry["bank_size"]
    page = (off % geometry["bank_size"]) // geometry["page"]
    areas = (0x2C, 0x30)
    if bank == 1:
        areas = (0x4C, 0x50)
    for reg in areas:
        value = regs[reg]
        start = value & 0xFF
        end = (value >> 16) & 0xFF
        if start <= page <= end:
            return True
    return False


def _key_write(state, value):
    regs = state["regs"]
    if state["key_blocked"] or not regs[FLASH_CR] & CR_LOCK:
        return
    if state["key_stage"] == 0 and value == KEY1:
        state["key_stage"] = 1
    elif state["key_stage"] == 1 and value == KEY2:
        state["key_stage"] = 0
        regs[FLASH_CR] &= ~CR_LOCK
    else:
        state["key_stage"] = 0
        state["key_blocked"] = True       # locked until the next reset


def _optkey_write(state, value):
    regs = state["regs"]
    if state["optkey_blocked"] or regs[FLASH_CR] & CR_LOCK or not regs[FLASH_CR] & CR_OPTLOCK:
        return
    if state["optkey_stage"] == 0 and value == OPTKEY1:
        state["optkey_stage"] = 1
    elif state["optkey_stage"] == 1 and value == OPTKEY2:
        state["optkey_stage"] = 0
        regs[FLASH_CR] &= ~CR_OPTLOCK
    else:
        state["optkey_stage"] = 0
        state["optkey_blocked"] = True


def flash_locked(state):
    return (state["regs"][FLASH_CR] & CR_LOCK) != 0


def flash_read(state, offset):
    """Value the CPU reads at register `offset` (word aligned)."""
    if offset in (FLASH_PDKEYR, FLASH_KEYR, FLASH_OPTKEYR):
        return 0
    if offset == FLASH_SR:
        sr = state["regs"][FLASH_SR]
        if state["op"] is not None:
            state["busy"] -= 1
            if state["busy"] >= 0:
                return sr | SR_BSY
            _finish(state)
            return state["regs"][FLASH_SR]
        return sr
    return state["regs"].get(offset, 0)


def flash_write(state, offset, value, bus=None):
    """Apply a 32-bit write of `value` at register `offset`."""
    if bus is not None:
        state["bus"] = bus
    regs = state["regs"]
    value = value & 0xFFFFFFFF
    if offset != FLASH_SR:
        _finish(state)                    # the bus stalls until the operation ends
    if offset == FLASH_ACR:
        acr = value & ACR_MASK
        if acr & ACR_DCRST and not acr & ACR_DCEN:
            state["stale"] = {}
        regs[FLASH_ACR] = acr
    elif offset == FLASH_KEYR:
        _key_write(state, value)
    elif offset == FLASH_OPTKEYR:
        _optkey_write(state, value)
    elif offset == FLASH_PDKEYR:
        pass
    elif offset == FLASH_SR:
        regs[FLASH_SR] &= ~(value & SR_W1C)
    elif offset == FLASH_ECCR:
        regs[FLASH_ECCR] &= ~(value & (ECCR_ECCC | ECCR_ECCD))
        regs[FLASH_ECCR] = (regs[FLASH_ECCR] & ~(1 << 24)) | (value & (1 << 24))   # ECCIE
    elif offset == FLASH_CR:
        old = regs[FLASH_CR]
        if old & CR_LOCK:
            return
        # LOCK and OPTLOCK can be set by a write, cleared only by their key sequences
        cr = (value & ~CR_LOCKS) | (old & CR_LOCKS) | (value & CR_LOCKS)
        regs[FLASH_CR] = cr & ~CR_ONE_SHOT
        if cr & CR_LOCK:
            state["key_stage"] = 0
        if not cr & CR_PG:
            state["half"] = None
        if cr & CR_STRT:
            _start(state, cr)
    elif offset >= FLASH_OPTR:
        if not regs[FLASH_CR] & CR_OPTLOCK:
            regs[offset] = value
    else:
        regs[offset] = value


def _eccd(state, i):
    """A double ECC error at double-word i of the array: flag it and raise NMI."""
    regs = state["regs"]
    if not regs[FLASH_ECCR] & ECCR_ECCD:
        geometry = _geometry(state)
        off = state["array"]["base"] + 8 * i - geometry["base"]
        bank = off // geometry["bank_size"]
        bk_pos = 19
        addr_mask = (1 << 19) - 1
        if _flash_kb(state) >= 2048:      # RM0432: ADDR_ECC[20:0], BK_ECC bit 21
            bk_pos = 21
            addr_mask = (1 << 21) - 1
        regs[FLASH_ECCR] = (regs[FLASH_ECCR] & (1 << 24)) | ECCR_ECCD | (bank << bk_pos) | (
            (off % geometry["bank_size"]) & addr_mask)
    state["nmi"] += 1
    if state["nmi_hook"] is not None:
        state["nmi_hook"]()


def array_read(state, offset, length=4):
    """`length` bytes (1, 2, 4) the bus reads at byte `offset` into the attached array."""
    _finish(state)
    arr = state["array"]
    i = offset // 8
    lo = arr["lo"][i]
    hi = arr["hi"][i]
    if state["regs"][FLASH_ACR] & ACR_DCEN and i in state["stale"]:
        lo, hi = state["stale"][i]
    if arr["st"][i] == TORN:
        _eccd(state, i)
    word = lo
    if offset & 4:
        word = hi
    shift = (offset & 3) * 8
    return (word >> shift) & ((1 << (8 * length)) - 1)


def array_write(state, offset, value, length=4):
    """A bus store of `length` bytes at byte `offset` into the attached array."""
    _finish(state)
    regs = state["regs"]
    arr = state["array"]
    cr = regs[FLASH_CR]
    if length != 4:
        regs[FLASH_SR] |= SR_SIZERR
        state["half"] = None
        return
    if (cr & CR_LOCK) or not (cr & CR_PG) or (cr & (CR_PER | CR_MER1 | CR_MER2)) \
            or (regs[FLASH_SR] & SR_PROGRAM_ERRORS):
        regs[FLASH_SR] |= SR_PGSERR
        state["half"] = None
        return
    geometry = _geometry(state)
    if _write_protected(state, geometry, arr["base"] + offset):
        regs[FLASH_SR] |= SR_WRPERR
        state["half"] = None
        return
    i = offset // 8
    if offset & 7 == 0:
        if state["half"] is not None:
            regs[FLASH_SR] |= SR_PGAERR
            state["half"] = None
            return
        state["half"] = (i, value & 0xFFFFFFFF)
        return
    half = state["half"]
    state["half"] = None
    if offset & 7 != 4 or half is None or half[0] != i:
        regs[FLASH_SR] |= SR_PGAERR
        return
    lo = half[1]
    hi = value & 0xFFFFFFFF
    if arr["st"][i] != ERASED and (lo | hi) != 0:
        regs[FLASH_SR] |= SR_PROGERR
        return
    _start_op(state, {"kind": "program", "i": i, "lo": lo, "hi": hi}, PROGRAM_POLLS)


# ---- Renode request dispatch ------------------------------------------------
# Renode 1.15 names the request fields isInit/isRead/isWrite/offset/value/length;
# later releases capitalise them (IsInit, Offset, ...). Accept both.

def _req(name):
    if hasattr(request, name):
        return getattr(request, name)
    return getattr(request, name[0].upper() + name[1:])


def _set_value(value):
    if hasattr(request, "value"):
        request.value = value
    else:
        request.Value = value


def _access(state, read, write, zero_merge):
    """Route one request to `read`/`write`, splitting byte and half-word accesses."""
    offset = int(_req("offset"))
    aligned = offset & ~3
    shift = (offset & 3) * 8
    try:
        length = int(_req("length"))
    except AttributeError:
        length = 4
    if length <= 0 or length > 4:
        length = 4
    mask = (1 << (8 * length)) - 1
    if _req("isRead"):
        _set_value((read(state, aligned) >> shift) & mask)
    elif _req("isWrite"):
        value = int(_req("value")) & mask
        if length < 4:
            base = 0
            if aligned not in zero_merge:
                base = read(state, aligned) & ~(mask << shift)
            value = base | (value << shift)
        write(state, aligned, value & 0xFFFFFFFF)


def _system_bus():
    """The machine's system bus. Renode gives the script only `request`, `self` (this
    peripheral) and `size`; the bus is reached through the peripheral's machine."""
    try:
        return self.GetMachine().SystemBus
    except (NameError, AttributeError):
        return None


def _flash_write_on_bus(state, offset, value):
    if state["bus"] is None:
        state["bus"] = _system_bus()
    flash_write(state, offset, value)


# Two instances share one state in Renode. The array instance is registered over the store
# region with CTRL_SIZE extra bytes (size = store bytes + CTRL_SIZE): the store is its array,
# the extra window right after the end of flash holds the interface registers, with MAGIC at
# MAGIC_OFFSET. The register instance at 0x40022000 (size CTRL_SIZE) forwards every access to
# that window when it finds MAGIC there; otherwise it models the registers alone (pages are
# then erased through the bus and the array is plain memory that every store lands in).
CTRL_SIZE = 0x400
MAGIC_OFFSET = 0x3FC
MAGIC = 0x464C4F54                       # "TOLF"
NMI_COUNT_OFFSET = 0x3F8                 # reads: NMIs raised so far (for tests; not on silicon)
TEAR_OFFSET = 0x3F4                      # writes: tear the double-word at this array offset (tests)
PROGRAM_END_OFFSET = 0x3F0               # reads: CPU instructions when the last program ended (tests)
NMIPENDSET_ADDR = 0xE000ED04             # SCB ICSR; bit 31 pends NMI
NMIPENDSET = 1 << 31


def _pend_nmi(bus):
    def pend():
        bus.WriteDoubleWord(NMIPENDSET_ADDR, NMIPENDSET)
    return pend


def _array_instance_access(state, array_bytes):
    offset = int(_req("offset"))
    try:
        length = int(_req("length"))
    except AttributeError:
        length = 4
    if length <= 0 or length > 4:
        length = 4
    if offset < array_bytes:
        if _req("isRead"):
            _set_value(array_read(state, offset, length))
        elif _req("isWrite"):
            array_write(state, offset, int(_req("value")), length)
        return
    reg = offset - array_bytes
    if reg == MAGIC_OFFSET and _req("isRead"):
        _set_value(MAGIC)
        return
    if reg == NMI_COUNT_OFFSET and _req("isRead"):
        _set_value(state["nmi"])
        return
    if reg == PROGRAM_END_OFFSET and _req("isRead"):
        _set_value(state["program_end"])
        return
    if reg == TEAR_OFFSET and _req("isWrite"):
        i = (int(_req("value")) % array_bytes) // 8
        state["array"]["lo"][i] &= 0xFFFF0000
        state["array"]["st"][i] = TORN
        _image_sync(state, i, i + 1)
        return
    if _req("isRead"):
        _set_value(flash_read(state, reg & ~3))
    elif _req("isWrite"):
        flash_write(state, reg & ~3, int(_req("value")))


def _forward_access(ctrl):
    bus = _system_bus()
    offset = int(_req("offset")) & ~3
    if _req("isRead"):
        _set_value(int(bus.ReadDoubleWord(ctrl + offset)))
    elif _req("isWrite"):
        bus.WriteDoubleWord(ctrl + offset, int(_req("value")) & 0xFFFFFFFF)


try:
    tol_flash
except NameError:
    tol_flash = None

try:
    tol_flash_image
except NameError:
    tol_flash_image = None

try:
    tol_size = int(size)
except NameError:
    tol_size = CTRL_SIZE

if tol_size > CTRL_SIZE:                                 # the array instance
    if tol_flash is None:
        tol_flash = flash_reset()
        tol_flash["bus"] = _system_bus()
        tol_flash["nmi_hook"] = _pend_nmi(tol_flash["bus"])
        top = FLASH_BASE + _flash_kb(tol_flash) * 1024
        flash_attach_array(tol_flash, top - (tol_size - CTRL_SIZE), tol_size - CTRL_SIZE)
        if tol_flash_image is not None:
            flash_image_open(tol_flash, tol_flash_image)
    elif _req("isInit"):
        tol_flash = flash_power_cut(tol_flash)           # a reset during BSY tears the operation
    if not _req("isInit"):
        _array_instance_access(tol_flash, tol_size - CTRL_SIZE)
else:                                                     # the register instance
    if tol_flash is None:
        tol_flash = flash_reset()
        tol_flash["ctrl"] = None
        bus = _system_bus()
        try:
            ctrl = FLASH_BASE + (int(bus.ReadWord(FLASHSIZE_ADDR)) & 0xFFFF) * 1024
            if int(bus.ReadDoubleWord(ctrl + MAGIC_OFFSET)) == MAGIC:
                tol_flash["ctrl"] = ctrl
        except AttributeError:            # no bus, or one without the array instance's window
            pass
    elif _req("isInit") and tol_flash["ctrl"] is None:
        tol_flash = flash_power_cut(tol_flash)
        tol_flash["ctrl"] = None
    if not _req("isInit"):
        if tol_flash["ctrl"] is not None:
            _forward_access(tol_flash["ctrl"])
        else:
            _access(tol_flash, flash_read, _flash_write_on_bus,
                    (FLASH_SR, FLASH_KEYR, FLASH_OPTKEYR, FLASH_PDKEYR, FLASH_ECCR))

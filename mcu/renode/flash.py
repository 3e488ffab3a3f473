# tinyol: STM32L4 embedded-flash interface stand-in for Renode
# (Python.PythonPeripheral at 0x40022000, 0x400 bytes). RM0351 section 3.7, RM0432 section 3.7.
#
# What is modelled:
#   ACR      reads back (LATENCY, PRFTEN, ICEN, DCEN, ...): the firmware polls LATENCY.
#   KEYR     unlock sequence 0x45670123 then 0xCDEF89AB clears CR.LOCK. A wrong key, or
#            a wrong order, keeps CR locked until the next reset, as on silicon (later
#            KEYR writes are ignored). KEYR writes while unlocked are ignored.
#   OPTKEYR  0x08192A3B then 0x4C5D6E7F clears CR.OPTLOCK (only while CR is unlocked);
#            a wrong sequence blocks it until reset. Option registers read back.
#   CR       ignored while locked. Setting LOCK (or OPTLOCK) relocks. STRT starts:
#              PER: erase page PNB of bank BKER -> the page reads 0xFF,
#              MER1 / MER2: erase bank 1 / bank 2 (the whole array on single-bank parts).
#            STRT self-clears; BSY is never seen set. SR.EOP is set when CR.EOPIE is set.
#            PGSERR instead of the erase when PG is also set, when an error flag
#            (PROGERR..FASTERR) is still pending, or when PNB is past the bank's last page.
#   SR       error and EOP bits are write-1-to-clear. OPERR instead of an erase when the
#            script cannot reach the system bus (it cannot reach the array).
# Geometry comes from the part itself, like the firmware would get it: the flash size
# register FLASHSIZE (16-bit, KB, at 0x1FFF75E0, provided by the per-chip .repl) and,
# on 2 MB L4R/S parts, OPTR.DBANK: 2 KB pages on L43x/L45x (one bank) and L47x/L49x
# (two 512 KB banks); 4 KB pages in two 1 MB banks on L4R5 with DBANK=1 (factory
# default), 8 KB pages in one bank with DBANK=0.
#
# Not modelled: programming errors raised by the CPU's own stores. Programming is done by
# plain CPU stores into the Memory.MappedMemory flash; Renode executes them directly and
# calls no script, so PROGERR/PGAERR/SIZERR/PGSERR/WRPERR on a store (e.g. without CR.PG)
# never appear and such stores always land. Also not modelled: read-out/write protection,
# fast programming (FSTPG), PCROP, ECC, option-byte loading, bank swapping (BFB2), timing.
#
# Runs in Renode's IronPython 2 and must import nothing (no standard library on its path).
# The file is executed again on every access in a scope that keeps its globals; state lives
# in the global `tol_flash`. Renode's scope holds only `request`, `self` (this peripheral)
# and `size`: erasing writes 0xFFFFFFFF words through `self.GetMachine().SystemBus`.
# Keep this file ASCII-only.

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
SR_W1C = (SR_EOP | SR_OPERR | SR_PROGERR | SR_WRPERR | SR_PGAERR | SR_SIZERR | SR_PGSERR
          | SR_MISERR | SR_FASTERR | SR_RDERR | SR_OPTVERR)
SR_PROGRAM_ERRORS = SR_PROGERR | SR_WRPERR | SR_PGAERR | SR_SIZERR | SR_PGSERR | SR_MISERR | SR_FASTERR

ACR_MASK = 0x7F0F                    # LATENCY[3:0], PRFTEN, ICEN, DCEN, ICRST, DCRST, RUN_PD, SLEEP_PD
OPTR_DBANK = 1 << 22

FLASH_BASE = 0x08000000
FLASHSIZE_ADDR = 0x1FFF75E0          # flash size in KB, 16 bits (device electronic signature)
DEFAULT_FLASH_KB = 1024              # used when FLASHSIZE cannot be read

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


def flash_reset():
    """Interface state after a system reset."""
    regs = {}
    for offset in FLASH_RESET_VALUES:
        regs[offset] = FLASH_RESET_VALUES[offset]
    return {"regs": regs, "key_stage": 0, "key_blocked": False,
            "optkey_stage": 0, "optkey_blocked": False}


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


def _fill_erased(bus, address, count):
    end = address + count
    while address < end:
        bus.WriteDoubleWord(address, 0xFFFFFFFF)
        address += 4


def _geometry_from_bus(state, bus):
    flash_kb = int(bus.ReadWord(FLASHSIZE_ADDR)) & 0xFFFF
    return flash_geometry(flash_kb, state["regs"].get(FLASH_OPTR, 0))


def flash_locked(state):
    return (state["regs"][FLASH_CR] & CR_LOCK) != 0


def flash_read(state, offset):
    """Value the CPU reads at `offset` (word aligned)."""
    if offset in (FLASH_PDKEYR, FLASH_KEYR, FLASH_OPTKEYR):
        return 0
    return state["regs"].get(offset, 0)


def _start(state, cr, bus):
    """CR.STRT was written: run the requested erase (or flag the sequence error)."""
    regs = state["regs"]
    if not cr & (CR_PER | CR_MER1 | CR_MER2):
        return
    if (cr & CR_PG) or (regs[FLASH_SR] & SR_PROGRAM_ERRORS):
        regs[FLASH_SR] |= SR_PGSERR
        return
    if bus is None:                       # no system bus in scope: cannot touch the array
        regs[FLASH_SR] |= SR_OPERR
        return
    geometry = _geometry_from_bus(state, bus)
    if cr & CR_PER:
        pnb = (cr & CR_PNB_MASK) >> CR_PNB_SHIFT
        bank = 1 if cr & CR_BKER else 0
        address = flash_page_address(geometry, pnb, bank)
        if address is None:
            regs[FLASH_SR] |= SR_PGSERR
            return
        _fill_erased(bus, address, geometry["page"])
    else:
        if cr & CR_MER1:
            _fill_erased(bus, geometry["base"], geometry["bank_size"])
        if (cr & CR_MER2) and geometry["banks"] == 2:
            _fill_erased(bus, geometry["base"] + geometry["bank_size"], geometry["bank_size"])
    if cr & CR_EOPIE:
        regs[FLASH_SR] |= SR_EOP


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


def flash_write(state, offset, value, bus):
    """Apply a 32-bit CPU write of `value` at `offset`; `bus` erases the flash array."""
    regs = state["regs"]
    value = value & 0xFFFFFFFF
    if offset == FLASH_ACR:
        regs[FLASH_ACR] = value & ACR_MASK
    elif offset == FLASH_KEYR:
        _key_write(state, value)
    elif offset == FLASH_OPTKEYR:
        _optkey_write(state, value)
    elif offset == FLASH_PDKEYR:
        pass
    elif offset == FLASH_SR:
        regs[FLASH_SR] &= ~(value & SR_W1C)
    elif offset == FLASH_CR:
        old = regs[FLASH_CR]
        if old & CR_LOCK:
            return
        # LOCK and OPTLOCK can be set by a write, cleared only by their key sequences
        cr = (value & ~CR_LOCKS) | (old & CR_LOCKS) | (value & CR_LOCKS)
        regs[FLASH_CR] = cr & ~CR_ONE_SHOT
        if cr & CR_LOCK:
            state["key_stage"] = 0
        if cr & CR_STRT:
            _start(state, cr, bus)
    elif offset >= FLASH_OPTR:
        if not regs[FLASH_CR] & CR_OPTLOCK:
            regs[offset] = value
    else:
        regs[offset] = value


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
    flash_write(state, offset, value, _system_bus())


try:
    tol_flash
except NameError:
    tol_flash = None

if tol_flash is None or _req("isInit"):
    tol_flash = flash_reset()
if not _req("isInit"):
    _access(tol_flash, flash_read, _flash_write_on_bus,
            (FLASH_SR, FLASH_KEYR, FLASH_OPTKEYR, FLASH_PDKEYR))

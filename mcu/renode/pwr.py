# tinyol: STM32L4 PWR stand-in for Renode (Python.PythonPeripheral at 0x40007000, 0x400 bytes).
# RM0351 section 5.4, RM0432 section 6.4.
#
# What is modelled: every register reads back what was written (reset values per the
# reference manuals), except
#   SR2: VOSF (bit 10) always reads 0, i.e. a voltage-scaling change (CR1.VOS, CR5.R1MODE)
#        is ready at once; REGLPF (bit 9) follows CR1.LPR; REGLPS (bit 8) reads 1.
#   SR1: wake-up flags read 0; SCR (write-only) reads 0.
# Nothing about low-power modes, wake-up or the supply monitors is modelled.
#
# Runs in Renode's IronPython 2 and must import nothing (no standard library on its path).
# The file is executed again on every access in a scope that keeps its globals; state lives
# in the global `tol_pwr`. Keep this file ASCII-only.

PWR_CR1 = 0x00
PWR_CR2 = 0x04
PWR_CR3 = 0x08
PWR_CR4 = 0x0C
PWR_SR1 = 0x10
PWR_SR2 = 0x14
PWR_SCR = 0x18
PWR_CR5 = 0x80

CR1_LPR = 1 << 14
SR2_REGLPS = 1 << 8
SR2_REGLPF = 1 << 9
SR2_VOSF = 1 << 10

PWR_RESET_VALUES = {
    PWR_CR1: 0x00000200,       # VOS = 01: range 1
    PWR_CR3: 0x00008000,       # EIWUL
    PWR_CR5: 0x00000100,       # R1MODE = 1: range 1 normal mode (L4R/L4S)
}


def pwr_reset():
    regs = {}
    for offset in PWR_RESET_VALUES:
        regs[offset] = PWR_RESET_VALUES[offset]
    return regs


def pwr_read(regs, offset):
    """Value the CPU reads at `offset` (word aligned)."""
    if offset == PWR_SR1 or offset == PWR_SCR:
        return 0
    if offset == PWR_SR2:
        value = SR2_REGLPS
        if regs.get(PWR_CR1, 0) & CR1_LPR:
            value |= SR2_REGLPF
        return value
    return regs.get(offset, 0)


def pwr_write(regs, offset, value):
    """Apply a 32-bit CPU write of `value` at `offset` (word aligned)."""
    if offset in (PWR_SR1, PWR_SR2, PWR_SCR):
        return
    regs[offset] = value & 0xFFFFFFFF


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


try:
    tol_pwr
except NameError:
    tol_pwr = None

if tol_pwr is None or _req("isInit"):
    tol_pwr = pwr_reset()
if not _req("isInit"):
    _access(tol_pwr, pwr_read, pwr_write, (PWR_SCR,))

# tinyol: STM32L4 RCC stand-in for Renode (Python.PythonPeripheral at 0x40021000, 0x400 bytes).
#
# Renode ships no STM32L4 RCC model. This script gives the firmware the handshakes it
# polls during clock set-up (RM0351 section 6.4):
#   CR:   every xxxON bit is mirrored into its xxxRDY bit (MSI, HSI, HSE, PLL, PLLSAI1,
#         PLLSAI2); the RDY bits themselves are read-only.
#   CFGR: SWS (bits 3:2) follows SW (bits 1:0) at once.
#   BDCR: LSERDY follows LSEON.  CSR: LSIRDY follows LSION, RMVF clears the reset flags.
#   CRRCR: HSI48RDY follows HSI48ON.  CIFR reads 0, CICR is write-only.
#   Every other register reads back what was last written (reset values per RM0351).
#
# Runs in Renode's IronPython 2 and must import nothing: Renode puts no standard library
# on the script's path. The whole file is executed again on every bus access, in a scope
# that keeps its globals, so the state lives in the global `tol_rcc`. The register logic
# is plain functions over a dict so tests/test_renode_static.py can run it under CPython
# with a mock `request`. Keep this file ASCII-only (IronPython rejects other bytes).

RCC_CR = 0x00
RCC_ICSCR = 0x04
RCC_CFGR = 0x08
RCC_PLLCFGR = 0x0C
RCC_PLLSAI1CFGR = 0x10
RCC_PLLSAI2CFGR = 0x14
RCC_CIER = 0x18
RCC_CIFR = 0x1C
RCC_CICR = 0x20
RCC_AHB1ENR = 0x48
RCC_AHB1SMENR = 0x68
RCC_AHB2SMENR = 0x6C
RCC_AHB3SMENR = 0x70
RCC_APB1SMENR1 = 0x78
RCC_APB1SMENR2 = 0x7C
RCC_APB2SMENR = 0x80
RCC_BDCR = 0x90
RCC_CSR = 0x94
RCC_CRRCR = 0x98

# CR: (ON bit, RDY bit) pairs
CR_MSION = 1 << 0
CR_MSIRDY = 1 << 1
CR_HSION = 1 << 8
CR_HSIRDY = 1 << 10
CR_HSEON = 1 << 16
CR_HSERDY = 1 << 17
CR_PLLON = 1 << 24
CR_PLLRDY = 1 << 25
CR_PLLSAI1ON = 1 << 26
CR_PLLSAI1RDY = 1 << 27
CR_PLLSAI2ON = 1 << 28
CR_PLLSAI2RDY = 1 << 29
CR_READY_PAIRS = (
    (CR_MSION, CR_MSIRDY),
    (CR_HSION, CR_HSIRDY),
    (CR_HSEON, CR_HSERDY),
    (CR_PLLON, CR_PLLRDY),
    (CR_PLLSAI1ON, CR_PLLSAI1RDY),
    (CR_PLLSAI2ON, CR_PLLSAI2RDY),
)

CFGR_SW_MASK = 0x3
CFGR_SWS_MASK = 0x3 << 2

BDCR_LSEON = 1 << 0
BDCR_LSERDY = 1 << 1
CSR_LSION = 1 << 0
CSR_LSIRDY = 1 << 1
CSR_RMVF = 1 << 23
CSR_RESET_FLAGS = 0xFF << 24          # FWRSTF .. LPWRRSTF, BORRSTF, PINRSTF, ...
CRRCR_HSI48ON = 1 << 0
CRRCR_HSI48RDY = 1 << 1

# Reset values (RM0351 section 6.4; STM32L476 values where parts differ).
RCC_RESET_VALUES = {
    RCC_CR: 0x00000063,            # MSION | MSIRDY | MSIRANGE = 6 (4 MHz)
    RCC_ICSCR: 0x10000000,         # HSITRIM = 16; factory calibration fields read 0
    RCC_CFGR: 0x00000000,          # SW = SWS = MSI
    RCC_PLLCFGR: 0x00001000,       # PLLN = 16
    RCC_PLLSAI1CFGR: 0x00001000,
    RCC_PLLSAI2CFGR: 0x00001000,
    RCC_AHB1ENR: 0x00000100,       # FLASHEN
    RCC_AHB1SMENR: 0x00011303,
    RCC_AHB2SMENR: 0x000532FF,
    RCC_AHB3SMENR: 0x00000101,
    RCC_APB1SMENR1: 0xF2FECA3F,
    RCC_APB1SMENR2: 0x00000025,
    RCC_APB2SMENR: 0x01677C01,
    RCC_CSR: 0x0C000600,           # PINRSTF | BORRSTF, MSISRANGE = 6
}


def rcc_reset():
    """Register file after a power-on reset: {offset: value}."""
    regs = {}
    for offset in RCC_RESET_VALUES:
        regs[offset] = RCC_RESET_VALUES[offset]
    return regs


def rcc_read(regs, offset):
    """Value the CPU reads at `offset` (word aligned)."""
    if offset == RCC_CIFR or offset == RCC_CICR:
        return 0
    return regs.get(offset, 0)


def _mirror(value, on_bit, rdy_bit):
    if value & on_bit:
        return value | rdy_bit
    return value & ~rdy_bit


def rcc_write(regs, offset, value):
    """Apply a 32-bit CPU write of `value` at `offset` (word aligned)."""
    value = value & 0xFFFFFFFF
    if offset == RCC_CR:
        for pair in CR_READY_PAIRS:
            value = _mirror(value, pair[0], pair[1])
        regs[RCC_CR] = value
    elif offset == RCC_CFGR:
        sw = value & CFGR_SW_MASK
        regs[RCC_CFGR] = (value & ~CFGR_SWS_MASK) | (sw << 2)
    elif offset == RCC_BDCR:
        regs[RCC_BDCR] = _mirror(value, BDCR_LSEON, BDCR_LSERDY)
    elif offset == RCC_CSR:
        old = regs.get(RCC_CSR, 0)
        flags = old & CSR_RESET_FLAGS
        if value & CSR_RMVF:
            flags = 0
        value = (value & ~(CSR_RESET_FLAGS | CSR_RMVF)) | flags
        regs[RCC_CSR] = _mirror(value, CSR_LSION, CSR_LSIRDY)
    elif offset == RCC_CRRCR:
        regs[RCC_CRRCR] = _mirror(value, CRRCR_HSI48ON, CRRCR_HSI48RDY)
    elif offset == RCC_CIFR or offset == RCC_CICR:
        pass
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


try:
    tol_rcc
except NameError:
    tol_rcc = None

if tol_rcc is None or _req("isInit"):
    tol_rcc = rcc_reset()
if not _req("isInit"):
    _access(tol_rcc, rcc_read, rcc_write, (RCC_CIFR, RCC_CICR))

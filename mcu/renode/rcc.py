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
# Strict where a first boot on silicon goes wrong (checked only when the script can reach
# the system bus, i.e. in Renode; the CPython unit tests of the bare register file run
# without one):
#   PLLON with a PLL outside its documented ranges (source off or none, PLLM, PLLN, PLLR,
#         VCO input and output, PLLCLK above the part's maximum) is refused: PLLRDY stays 0.
#   A SYSCLK switch (CFGR.SW) to a clock whose HCLK needs more flash wait states than
#         FLASH_ACR.LATENCY holds, for the voltage range in PWR_CR1.VOS (and CR5.R1MODE on
#         the L4R5), is refused: SWS keeps the old clock, as if the switch never completed.
#   Limits: RM0351 (L47x) / RM0394 (L43x) section 3.3.3 and 6.2.5, RM0432 (L4R5) 3.3.3
#         and 6.2.5; the part is told by FLASHSIZE (2048 KB: L4R5). A refusal is visible to
#         tests at RCC+0x3F4 (reason code, RCC_DIAG_*) and RCC+0x3F8 (the frequency asked for);
#         RCC+0x3F0 reads the SYSCLK in effect (Hz). Those three words are reserved on silicon.
#
# Runs in Renode's IronPython 2 and must import nothing: Renode puts no standard library
# on the script's path. The whole file is executed again on every bus access, in a scope
# that keeps its globals, so the state lives in the global `tol_rcc`. The register logic
# is plain functions over a dict so tests/host/test_renode_static.py can run it under CPython
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


# ---- clock-tree limits ------------------------------------------------------
RCC_DIAG_SYSCLK = 0x3F0        # SYSCLK in effect, Hz (read-only)
RCC_DIAG_REASON = 0x3F4        # why the last PLLON / SW change was refused (0: none)
RCC_DIAG_HZ = 0x3F8            # the frequency that change asked for, Hz
RCC_DIAG_OK = 0
RCC_DIAG_LATENCY = 1           # too few FLASH_ACR.LATENCY wait states for the new HCLK
RCC_DIAG_PLL_RANGE = 2         # PLLM/PLLN/PLLR/VCO/PLLCLK outside the documented ranges
RCC_DIAG_SOURCE_OFF = 3        # the clock switched to (or the PLL's input) is not ready

MHZ = 1000000
MSI_RANGES_HZ = (100000, 200000, 400000, 800000, 1000000, 2000000, 4000000, 8000000,
                 16000000, 24000000, 32000000, 48000000)
HSE_HZ = 8000000               # the ST-LINK's 8 MHz MCO on the Nucleo boards (bypass)
AHB_DIVIDERS = {8: 2, 9: 4, 10: 8, 11: 16, 12: 64, 13: 128, 14: 256, 15: 512}

# Highest HCLK for 0, 1, 2 ... wait states: (part, voltage range) -> table.
# RM0351/RM0394 table "Number of wait states according to CPU clock (HCLK) frequency";
# RM0432 the same table with range 1 boost (R1MODE = 0) and normal mode.
WAIT_STATE_LIMITS = {
    ("L4", 1): (16 * MHZ, 32 * MHZ, 48 * MHZ, 64 * MHZ, 80 * MHZ),
    ("L4", 2): (6 * MHZ, 12 * MHZ, 18 * MHZ, 26 * MHZ),
    ("L4R", 0): (20 * MHZ, 40 * MHZ, 60 * MHZ, 80 * MHZ, 100 * MHZ, 120 * MHZ),   # range 1 boost
    ("L4R", 1): (20 * MHZ, 40 * MHZ, 60 * MHZ, 80 * MHZ),                         # range 1 normal
    ("L4R", 2): (8 * MHZ, 16 * MHZ, 26 * MHZ),
}
# PLL limits: (PLLM max, PLLN min, PLLN max, VCO input min/max, VCO output min/max)
PLL_LIMITS = {
    "L4": (8, 8, 86, 4 * MHZ, 16 * MHZ, 64 * MHZ, 344 * MHZ),
    "L4R": (16, 8, 127, 2660000, 16 * MHZ, 64 * MHZ, 344 * MHZ),
}


def rcc_reset():
    """Register file after a power-on reset: {offset: value}."""
    regs = {}
    for offset in RCC_RESET_VALUES:
        regs[offset] = RCC_RESET_VALUES[offset]
    regs[RCC_DIAG_SYSCLK] = MSI_RANGES_HZ[6]
    regs[RCC_DIAG_REASON] = RCC_DIAG_OK
    regs[RCC_DIAG_HZ] = 0
    return regs


def rcc_read(regs, offset):
    """Value the CPU reads at `offset` (word aligned)."""
    if offset == RCC_CIFR or offset == RCC_CICR:
        return 0
    return regs.get(offset, 0)


def msi_hz(regs):
    cr = regs.get(RCC_CR, 0)
    if cr & (1 << 3):                      # MSIRGSEL: range from CR.MSIRANGE
        index = (cr >> 4) & 0xF
    else:                                  # else CSR.MSISRANGE (after reset / standby)
        index = (regs.get(RCC_CSR, 0) >> 8) & 0xF
    if index < len(MSI_RANGES_HZ):
        return MSI_RANGES_HZ[index]
    return 0


def pll_input_hz(regs):
    """(frequency, ready) of the PLL's source (PLLCFGR.PLLSRC)."""
    src = regs.get(RCC_PLLCFGR, 0) & 3
    cr = regs.get(RCC_CR, 0)
    if src == 1:
        return msi_hz(regs), (cr & CR_MSIRDY) != 0
    if src == 2:
        return 16 * MHZ, (cr & CR_HSIRDY) != 0
    if src == 3:
        return HSE_HZ, (cr & CR_HSERDY) != 0
    return 0, False


def pll_check(regs, part):
    """(reason, PLLCLK Hz) for the PLL as PLLCFGR configures it."""
    cfg = regs.get(RCC_PLLCFGR, 0)
    m_max, n_min, n_max, in_min, in_max, vco_min, vco_max = PLL_LIMITS[part]
    f_in, ready = pll_input_hz(regs)
    m = ((cfg >> 4) & 0xF) + 1
    n = (cfg >> 8) & 0x7F
    r = 2 * (((cfg >> 25) & 3) + 1)
    if not ready or f_in == 0:
        return RCC_DIAG_SOURCE_OFF, 0
    vco_in = f_in // m
    vco = vco_in * n
    pllclk = vco // r
    if m > m_max or n < n_min or n > n_max:
        return RCC_DIAG_PLL_RANGE, pllclk
    if vco_in < in_min or vco_in > in_max or vco < vco_min or vco > vco_max:
        return RCC_DIAG_PLL_RANGE, pllclk
    if pllclk > WAIT_STATE_LIMITS[(part, 0 if part == "L4R" else 1)][-1]:
        return RCC_DIAG_PLL_RANGE, pllclk
    return RCC_DIAG_OK, pllclk


def sysclk_for(regs, sw, part):
    """(reason, Hz) of the clock that SW selects."""
    cr = regs.get(RCC_CR, 0)
    if sw == 0:
        return (RCC_DIAG_OK if cr & CR_MSIRDY else RCC_DIAG_SOURCE_OFF), msi_hz(regs)
    if sw == 1:
        return (RCC_DIAG_OK if cr & CR_HSIRDY else RCC_DIAG_SOURCE_OFF), 16 * MHZ
    if sw == 2:
        return (RCC_DIAG_OK if cr & CR_HSERDY else RCC_DIAG_SOURCE_OFF), HSE_HZ
    if not cr & CR_PLLRDY:
        return RCC_DIAG_SOURCE_OFF, 0
    reason, hz = pll_check(regs, part)
    return reason, hz


def wait_states_needed(hclk, part, vrange):
    """Fewest FLASH_ACR.LATENCY wait states for `hclk`, or None above the range's maximum."""
    limits = WAIT_STATE_LIMITS[(part, vrange)]
    for ws in range(len(limits)):
        if hclk <= limits[ws]:
            return ws
    return None


def rcc_board(bus):
    """(part, voltage-range key, FLASH_ACR.LATENCY) read over the bus; None without a bus."""
    if bus is None:
        return None
    part = "L4"
    if bus.ReadWord(0x1FFF75E0) >= 2048:
        part = "L4R"
    vos = (bus.ReadDoubleWord(0x40007000) >> 9) & 3     # PWR_CR1.VOS: 1 range 1, 2 range 2
    vrange = 2
    if vos == 1:
        vrange = 1
        if part == "L4R" and not bus.ReadDoubleWord(0x40007080) & (1 << 8):
            vrange = 0                                  # PWR_CR5.R1MODE = 0: boost
    latency = bus.ReadDoubleWord(0x40022000) & 0xF
    return part, vrange, latency


def _refuse(regs, reason, hz):
    regs[RCC_DIAG_REASON] = reason
    regs[RCC_DIAG_HZ] = hz & 0xFFFFFFFF


def rcc_switch(regs, value, board):
    """CFGR write: the new SWS (the switch completes, or is refused and SWS stays)."""
    sw = value & CFGR_SW_MASK
    old_sws = (regs.get(RCC_CFGR, 0) & CFGR_SWS_MASK) >> 2
    if board is None:
        return sw
    part, vrange, latency = board
    reason, hz = sysclk_for(regs, sw, part)
    if reason == RCC_DIAG_OK:
        hpre = (value >> 4) & 0xF
        hclk = hz
        if hpre in AHB_DIVIDERS:
            hclk = hz // AHB_DIVIDERS[hpre]
        needed = wait_states_needed(hclk, part, vrange)
        if needed is None:
            reason = RCC_DIAG_PLL_RANGE
        elif latency < needed:
            reason = RCC_DIAG_LATENCY
    if reason != RCC_DIAG_OK:
        _refuse(regs, reason, hz)
        return old_sws
    regs[RCC_DIAG_SYSCLK] = hz
    return sw


def _mirror(value, on_bit, rdy_bit):
    if value & on_bit:
        return value | rdy_bit
    return value & ~rdy_bit


def rcc_write(regs, offset, value, board=None):
    """Apply a 32-bit CPU write of `value` at `offset` (word aligned). `board`: what
    rcc_board() read over the bus (None: no clock-tree checks)."""
    value = value & 0xFFFFFFFF
    if offset == RCC_CR:
        for pair in CR_READY_PAIRS:
            value = _mirror(value, pair[0], pair[1])
        if value & CR_PLLON and board is not None:
            saved = regs.get(RCC_CR, 0)
            regs[RCC_CR] = value                    # the PLL source's ready bit as now written
            reason, hz = pll_check(regs, board[0])
            regs[RCC_CR] = saved
            if reason != RCC_DIAG_OK:
                _refuse(regs, reason, hz)
                value = value & ~CR_PLLRDY          # the PLL never locks
        regs[RCC_CR] = value
    elif offset == RCC_CFGR:
        sws = rcc_switch(regs, value, board)
        regs[RCC_CFGR] = (value & ~CFGR_SWS_MASK) | (sws << 2)
    elif offset in (RCC_DIAG_SYSCLK, RCC_DIAG_REASON, RCC_DIAG_HZ):
        pass
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


def _bus():
    try:
        return self.GetMachine().SystemBus
    except Exception:
        return None


RCC_DIAG_TEXT = {
    RCC_DIAG_LATENCY: "too few flash wait states (FLASH_ACR.LATENCY) for the new HCLK",
    RCC_DIAG_PLL_RANGE: "PLL or SYSCLK outside its documented range (PLLM/PLLN/PLLR, VCO in/out, max clock)",
    RCC_DIAG_SOURCE_OFF: "the clock (or the PLL's input) is not on and ready",
}


def rcc_refusal_text(regs, board):
    """One line for the Renode log naming a refusal (empty when there is none)."""
    reason = regs.get(RCC_DIAG_REASON, 0)
    if reason == RCC_DIAG_OK:
        return ""
    text = "tinyol rcc: refused: %s; asked for %d Hz" % (RCC_DIAG_TEXT.get(reason, "?"), regs.get(RCC_DIAG_HZ, 0))
    if board is not None:
        text = text + ", FLASH_ACR.LATENCY=%d, voltage range key %d, part %s" % (board[2], board[1], board[0])
    return text


def _rcc_write_on_board(regs, offset, value):
    board = None
    if offset == RCC_CR or offset == RCC_CFGR:
        board = rcc_board(_bus())
    before = (regs.get(RCC_DIAG_REASON, 0), regs.get(RCC_DIAG_HZ, 0))
    rcc_write(regs, offset, value, board)
    if (regs.get(RCC_DIAG_REASON, 0), regs.get(RCC_DIAG_HZ, 0)) != before:
        try:
            self.ErrorLog(rcc_refusal_text(regs, board))
        except Exception:
            pass


if not _req("isInit"):
    _access(tol_rcc, rcc_read, _rcc_write_on_board, (RCC_CIFR, RCC_CICR))

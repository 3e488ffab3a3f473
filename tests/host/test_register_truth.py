"""Register truth: the firmware's own STM32L4 definitions against ST's CMSIS device headers.

The firmware keeps small definitions of its own (mcu/boards/stm32l4/stm32l4.h, the
FL_* block of flash_stm32l4.c, the board descriptors, the linker scripts); ST's
headers in ../shared/stm32 (CMSIS device headers v1.7.4, HAL flash headers) are the
oracle. For each of the four parts (L432, L475, L476, L4R5) this test writes a C file
of `_Static_assert(OURS == ST)`, one per definition, and compiles it with
arm-none-eabi-gcc -DSTM32L4xxxx against ST's headers and the CMSIS 6 core headers
from ../shared/tflm. Memory sizes are read from a real link of each board's linker
script (nm of the symbols ld computes) and compared with ST's FLASH_END, SRAMx_SIZE
and the HAL's FLASH_PAGE_SIZE / FLASH_BANK_SIZE.

Every `#define` in the board sources must be either mapped to ST's name here or listed
as not a register fact: a definition nobody checks fails the test. A mask of ours may
be wider than ST's field on a smaller part (FLASH_ACR.LATENCY is 4 bits on the L4R5,
3 on the others) only if the extra bits are reserved there (no ST field of that
register uses them).

Skipped when ../shared/stm32 does not exist; fails when it exists but cannot be used.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from conftest import SHARED
from tinyol.boards import BOARDS

ROOT = Path(__file__).resolve().parents[2]
BOARD_DIR = ROOT / "mcu" / "boards" / "stm32l4"
LD_DIR = BOARD_DIR / "ld"
WORK = ROOT / "build" / "register-truth"

# board -> ST's device macro
PARTS = {
    "nucleo_l432kc": "STM32L432xx",
    "disco_l475vg_iot01a": "STM32L475xx",
    "nucleo_l476rg": "STM32L476xx",
    "nucleo_l4r5zi": "STM32L4R5xx",
}

# The files whose #defines are register facts (all of them are checked).
SOURCES = [BOARD_DIR / "stm32l4.h", BOARD_DIR / "flash_stm32l4.c", BOARD_DIR / "hal_stm32l4.c",
           BOARD_DIR / "startup.c", BOARD_DIR / "i2c_stm32l4.c"]

# #defines in those files that are not register facts (tuning, magic numbers, macros).
NOT_REGISTERS = {
    "TOL_STM32L4_H", "TOL_REG", "FL", "TOL_BAUD", "TOL_CPU_HZ", "TOL_RX_RING_BYTES",
    "TOL_BOOT_MAGIC", "FL_BUSY_SPINS", "TOL_FLASH_LATENCY", "TOL_PLL_N",
    "WAIT_POLLS",
}


def _off(struct, member, base=None, scs_base=None):
    """ST's offset of a register: offsetof, or (block base - SCS base) + offsetof for core blocks."""
    if base is None:
        return f"offsetof({struct}, {member})"
    return f"(({base}) - ({scs_base}) + offsetof({struct}, {member}))"


# our name -> ST's C expression (compiled with the part's device header + HAL flash header)
EXACT = {
    # peripheral bases
    **{f"TOL_{p}_BASE": f"{p}_BASE" for p in
       ["USART1", "USART2", "USART3", "LPUART1", "RCC", "PWR", "GPIOA", "GPIOB", "GPIOC", "GPIOD",
        "GPIOE", "GPIOF", "GPIOG"]},
    "TOL_FLASH_R_BASE": "FLASH_R_BASE",
    # interrupts
    "TOL_USART1_IRQN": "USART1_IRQn", "TOL_USART2_IRQN": "USART2_IRQn",
    "TOL_USART3_IRQN": "USART3_IRQn", "TOL_LPUART1_IRQN": "LPUART1_IRQn",
    # RCC
    **{f"RCC_{r}": _off("RCC_TypeDef", r) for r in
       ["CR", "CFGR", "PLLCFGR", "AHB2ENR", "APB1ENR1", "APB1ENR2", "APB2ENR"]},
    **{f"RCC_CR_{b}": f"RCC_CR_{b}" for b in ["MSION", "MSIRDY", "HSION", "HSIRDY", "PLLON", "PLLRDY",
                                               "MSIRGSEL"]},
    "RCC_CR_MSIRANGE_POS": "RCC_CR_MSIRANGE_Pos",
    "RCC_CSR": _off("RCC_TypeDef", "CSR"), "RCC_CSR_MSISRANGE_POS": "RCC_CSR_MSISRANGE_Pos",
    "RCC_CFGR_SW_MASK": "RCC_CFGR_SW", "RCC_CFGR_SW_PLL": "RCC_CFGR_SW_PLL",
    "RCC_CFGR_SWS_MASK": "RCC_CFGR_SWS", "RCC_CFGR_SWS_PLL": "RCC_CFGR_SWS_PLL",
    "RCC_PLLCFGR_SRC_MSI": "RCC_PLLCFGR_PLLSRC_MSI",
    "RCC_PLLCFGR_M_POS": "RCC_PLLCFGR_PLLM_Pos", "RCC_PLLCFGR_N_POS": "RCC_PLLCFGR_PLLN_Pos",
    "RCC_PLLCFGR_REN": "RCC_PLLCFGR_PLLREN", "RCC_PLLCFGR_R_POS": "RCC_PLLCFGR_PLLR_Pos",
    "RCC_APB1ENR1_USART2EN": "RCC_APB1ENR1_USART2EN", "RCC_APB1ENR1_USART3EN": "RCC_APB1ENR1_USART3EN",
    "RCC_APB1ENR1_PWREN": "RCC_APB1ENR1_PWREN", "RCC_APB1ENR2_LPUART1EN": "RCC_APB1ENR2_LPUART1EN",
    "RCC_APB2ENR_USART1EN": "RCC_APB2ENR_USART1EN",
    # FLASH (stm32l4.h and the FL_* block of flash_stm32l4.c)
    "FLASH_ACR": _off("FLASH_TypeDef", "ACR"),
    **{f"FLASH_ACR_{b}": f"FLASH_ACR_{b}" for b in ["PRFTEN", "ICEN", "DCEN"]},
    **{f"FL_ACR_{b}": f"FLASH_ACR_{b}" for b in ["ICEN", "DCEN", "ICRST", "DCRST"]},
    "FL_KEYR": _off("FLASH_TypeDef", "KEYR"), "FL_SR": _off("FLASH_TypeDef", "SR"),
    "FL_CR": _off("FLASH_TypeDef", "CR"), "FL_ECCR": _off("FLASH_TypeDef", "ECCR"),
    "FL_OPTR": _off("FLASH_TypeDef", "OPTR"), "FL_OPTKEYR": _off("FLASH_TypeDef", "OPTKEYR"),
    "FL_KEY1": "FLASH_KEY1", "FL_KEY2": "FLASH_KEY2",
    **{f"FL_SR_{b}": f"FLASH_SR_{b}" for b in
       ["EOP", "OPERR", "PROGERR", "WRPERR", "PGAERR", "SIZERR", "PGSERR", "MISERR", "FASTERR",
        "RDERR", "OPTVERR", "BSY"]},
    **{f"FL_CR_{b}": f"FLASH_CR_{b}" for b in
       ["PG", "PER", "MER1", "MER2", "BKER", "STRT", "LOCK", "EOPIE", "ERRIE", "OPTLOCK"]},
    "FL_CR_PNB_POS": "FLASH_CR_PNB_Pos",
    **{f"FL_ECCR_{b}": f"FLASH_ECCR_{b}" for b in ["ECCC", "ECCD", "ECCCIE", "BK_ECC", "SYSF_ECC"]},
    "FL_ECCR_ADDR_ECC_MASK": "FLASH_ECCR_ADDR_ECC",
    "FL_OPTR_DBANK": "FLASH_OPTR_DBANK", "FL_OPTR_DUALBANK": "FLASH_OPTR_DUALBANK",
    "FL_FLASHSIZE_BASE": "FLASHSIZE_BASE", "FL_FLASHSIZE_ADDR": "FLASHSIZE_BASE",
    # PWR
    "PWR_CR2": _off("PWR_TypeDef", "CR2"), "PWR_CR2_IOSV": "PWR_CR2_IOSV",
    # GPIO
    "GPIO_MODER": _off("GPIO_TypeDef", "MODER"), "GPIO_OSPEEDR": _off("GPIO_TypeDef", "OSPEEDR"),
    "GPIO_PUPDR": _off("GPIO_TypeDef", "PUPDR"), "GPIO_AFRL": _off("GPIO_TypeDef", "AFR[0]"),
    "GPIO_AFRH": _off("GPIO_TypeDef", "AFR[1]"),
    # USART / LPUART
    **{f"USART_{r}": _off("USART_TypeDef", r) for r in ["CR1", "CR3", "BRR", "ISR", "ICR", "RDR", "TDR"]},
    "USART_CR1_UE": "USART_CR1_UE", "USART_CR1_RE": "USART_CR1_RE", "USART_CR1_TE": "USART_CR1_TE",
    "USART_CR1_RXNEIE": "USART_CR1_RXNEIE_ST",
    **{f"USART_ISR_{b}": f"USART_ISR_{b}" for b in ["PE", "FE", "NE", "ORE", "TC"]},
    "USART_ISR_RXNE": "USART_ISR_RXNE_ST", "USART_ISR_TXE": "USART_ISR_TXE_ST",
    "USART_ICR_ERRORS": "(USART_ICR_PECF | USART_ICR_FECF | USART_ICR_NECF | USART_ICR_ORECF)",
    # Cortex-M4 core (CMSIS core_cm4.h)
    "TOL_SCS_BASE": "SCS_BASE",
    "SYST_CSR": _off("SysTick_Type", "CTRL", "SysTick_BASE", "SCS_BASE"),
    "SYST_RVR": _off("SysTick_Type", "LOAD", "SysTick_BASE", "SCS_BASE"),
    "SYST_CVR": _off("SysTick_Type", "VAL", "SysTick_BASE", "SCS_BASE"),
    "NVIC_ISER0": _off("NVIC_Type", "ISER[0]", "NVIC_BASE", "SCS_BASE"),
    "NVIC_IPR0": _off("NVIC_Type", "IPR[0]", "NVIC_BASE", "SCS_BASE"),
    **{f"SCB_{r}": _off("SCB_Type", r, "SCB_BASE", "SCS_BASE") for r in
       ["VTOR", "AIRCR", "CFSR", "HFSR", "MMFAR", "BFAR", "CPACR"]},
    "SCB_DEMCR": _off("DCB_Type", "DEMCR", "DCB_BASE", "SCS_BASE"),
    "SCB_DEMCR_TRCENA": "DCB_DEMCR_TRCENA_Msk",
    "TOL_DWT_BASE": "DWT_BASE",
    "DWT_CTRL": "offsetof(DWT_Type, CTRL)", "DWT_CYCCNT": "offsetof(DWT_Type, CYCCNT)",
    # I2C2 and the IMU's pins (i2c_stm32l4.c; the B-L475E-IOT01A's LSM6DSL bus)
    "TOL_I2C2_BASE": "I2C2_BASE",
    **{f"I2C_{r}": _off("I2C_TypeDef", r) for r in ["CR1", "CR2", "TIMINGR", "ISR", "ICR", "RXDR", "TXDR"]},
    "I2C_CR1_PE": "I2C_CR1_PE",
    **{f"I2C_CR2_{b}": f"I2C_CR2_{b}" for b in ["RD_WRN", "START", "STOP", "AUTOEND"]},
    "I2C_CR2_NBYTES_POS": "I2C_CR2_NBYTES_Pos",
    **{f"I2C_ISR_{b}": f"I2C_ISR_{b}" for b in ["TXIS", "RXNE", "NACKF", "STOPF", "TC"]},
    "I2C_ICR_ALL": "(I2C_ICR_ADDRCF | I2C_ICR_NACKCF | I2C_ICR_STOPCF | I2C_ICR_BERRCF | I2C_ICR_ARLOCF"
                   " | I2C_ICR_OVRCF | I2C_ICR_PECCF | I2C_ICR_TIMOUTCF | I2C_ICR_ALERTCF)",
    "RCC_APB1ENR1_I2C2EN": "RCC_APB1ENR1_I2C2EN",
    "RCC_AHB2ENR_GPIOBEN": "RCC_AHB2ENR_GPIOBEN", "RCC_AHB2ENR_GPIOCEN": "RCC_AHB2ENR_GPIOCEN",
    "GPIO_OTYPER": _off("GPIO_TypeDef", "OTYPER"), "GPIO_IDR": _off("GPIO_TypeDef", "IDR"),
}

# Masks of ours that may be wider than ST's field on smaller parts: name -> (ST field, register prefix).
# The check: ours covers ST's field, and every extra bit is reserved (no other ST field of the register).
MASKS = {
    "FLASH_ACR_LATENCY_MASK": ("FLASH_ACR_LATENCY", "FLASH_ACR"),
    "FL_CR_PNB_MASK": ("FLASH_CR_PNB", "FLASH_CR"),
}

# Definitions that are ST facts but need more than one ST name (checked by hand-written asserts).
SPECIAL = {
    "TOL_IRQ_COUNT",   # >= the part's largest IRQn + 1
    "FL_SR_ERRORS",    # an OR of the FL_SR_* error flags, each checked above
}

# (our name, part) pairs where ST's header has no such thing: the part lacks the peripheral or bit.
# A board of that part must not use it (checked from the board descriptors below).
ABSENT = {
    ("TOL_USART3_BASE", "STM32L432xx"), ("TOL_USART3_IRQN", "STM32L432xx"),
    ("RCC_APB1ENR1_USART3EN", "STM32L432xx"),
    ("TOL_GPIOD_BASE", "STM32L432xx"), ("TOL_GPIOE_BASE", "STM32L432xx"),
    ("TOL_GPIOF_BASE", "STM32L432xx"), ("TOL_GPIOG_BASE", "STM32L432xx"),
    ("PWR_CR2_IOSV", "STM32L432xx"),        # no VDDIO2 on the L43x
    ("FL_CR_BKER", "STM32L432xx"), ("FL_CR_MER2", "STM32L432xx"),   # single bank
    ("FL_OPTR_DBANK", "STM32L432xx"), ("FL_OPTR_DUALBANK", "STM32L432xx"),
    ("FL_ECCR_BK_ECC", "STM32L432xx"),
    ("FL_OPTR_DBANK", "STM32L475xx"), ("FL_OPTR_DBANK", "STM32L476xx"),  # DBANK: 2 MB parts only
    ("FL_OPTR_DUALBANK", "STM32L4R5xx"),
    ("TOL_I2C2_BASE", "STM32L432xx"), ("RCC_APB1ENR1_I2C2EN", "STM32L432xx"),  # the L432 has I2C1/I2C3
}

DEFINE_RE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)(\([^)]*\))?[ \t]*(.*?)\s*(?:/\*.*)?$", re.M)
IDENT_RE = re.compile(r"\b[A-Za-z_]\w*\b")

# stubs that let the HAL flash header compile without the rest of the HAL
HAL_DEF_STUB = """\
#ifndef TOL_TRUTH_HAL_DEF_STUB
#define TOL_TRUTH_HAL_DEF_STUB
#include "stm32l4xx.h"
#include <stddef.h>
typedef enum { HAL_OK = 0, HAL_ERROR, HAL_BUSY, HAL_TIMEOUT } HAL_StatusTypeDef;
typedef enum { HAL_UNLOCKED = 0, HAL_LOCKED } HAL_LockTypeDef;
#endif
"""


# ---------------------------------------------------------------------------
# the oracle on disk
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def vendor() -> dict[str, Path]:
    """Unpack ST's headers and the CMSIS core headers into build/ (once); paths of the include dirs."""
    stm32_dir, tflm_dir = SHARED / "stm32", SHARED / "tflm"
    if not stm32_dir.exists():
        pytest.skip("no ../shared/stm32 (ST's CMSIS device headers): nothing to check against")
    if not shutil.which("arm-none-eabi-gcc"):
        pytest.skip("arm-none-eabi-gcc not installed")
    st_tar = stm32_dir / "stm32l4-vendor-ref.tar.xz"
    core_tar = tflm_dir / "tflm-cmsisnn-src.tar.xz"
    for tar in (st_tar, core_tar):
        if not tar.is_file():
            pytest.fail(f"../shared/stm32 exists but {tar} is missing: the register cross-check cannot run")
    out = WORK / "vendor"
    stamp = out / ".stamp"
    key = f"{st_tar.stat().st_size}:{st_tar.stat().st_mtime_ns}:{core_tar.stat().st_size}"
    if not stamp.is_file() or stamp.read_text() != key:
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        try:
            with tarfile.open(st_tar) as tf:
                tf.extractall(out, filter="data")
            with tarfile.open(core_tar) as tf:
                members = [m for m in tf.getmembers() if m.name.startswith("cmsis6/CMSIS/Core/Include")]
                tf.extractall(out, members=members, filter="data")
        except (tarfile.TarError, OSError) as e:
            pytest.fail(f"cannot unpack ST's headers: {e}")
        stub = out / "stub"
        stub.mkdir()
        (stub / "stm32l4xx_hal_def.h").write_text(HAL_DEF_STUB)
        (stub / "stm32l4xx_hal_flash_ramfunc.h").write_text("/* not needed for constants */\n")
        stamp.write_text(key)
    dirs = {"device": out / "stm32" / "cmsis_device_l4" / "Include",
            "hal": out / "stm32" / "stm32l4xx_hal_driver" / "Inc",
            "core": out / "cmsis6" / "CMSIS" / "Core" / "Include", "stub": out / "stub"}
    for name, d in dirs.items():
        if not d.is_dir():
            pytest.fail(f"../shared tarballs unpacked without {name} headers ({d})")
    return dirs


# ---------------------------------------------------------------------------
# our definitions
# ---------------------------------------------------------------------------

def our_defines(sources: list[Path]) -> dict[str, str]:
    """{name: expression} of every object-like #define in the board sources."""
    defs: dict[str, str] = {}
    for src in sources:
        text = re.sub(r"\\\n", " ", src.read_text())
        for m in DEFINE_RE.finditer(text):
            name, params, value = m.group(1), m.group(2), m.group(3)
            if params is not None:
                defs[name] = ""          # function-like: never a register fact
                continue
            defs[name] = value.strip()
    return defs


def board_descriptors() -> dict[str, dict[str, str]]:
    """Fields of each board_<env>.c descriptor, as written (`TOL_USART2_BASE`, `{TOL_GPIOA_BASE, 2, 7}`)."""
    out = {}
    for board in PARTS:
        text = (BOARD_DIR / f"board_{board}.c").read_text()
        out[board] = dict(re.findall(r"\.(\w+)\s*=\s*(\{[^}]*\}|[^,\n]+),", text))
    return out


def _rename(expr: str, names: set[str]) -> str:
    return IDENT_RE.sub(lambda m: f"OURS_{m.group(0)}" if m.group(0) in names else m.group(0), expr)


def truth_source(defs: dict[str, str], part: str, device_dir: Path) -> str:
    """The C file of _Static_asserts for one part."""
    header = (device_dir / f"{part.lower()}.h").read_text()
    st_defined = set(re.findall(r"#define\s+(\w+)", header))
    irqs = [int(v) for v in re.findall(r"^\s*\w+_IRQn\s*=\s*(\d+)", header, re.M)]
    names = {n for n, v in defs.items() if v}
    lines = [
        f"/* generated by tests/host/test_register_truth.py for {part}: ours == ST's */",
        "#include <stddef.h>",
        "#include \"stm32l4xx.h\"",
        "#undef FLASH_SIZE  /* ST's reads FLASHSIZE at run time; the headers' part is its largest variant */",
        "#define FLASH_SIZE (FLASH_END - FLASH_BASE + 1u)",
        "#include \"stm32l4xx_hal_flash.h\"",
        # the L4R5's USART names carry the FIFO alias
        "#ifdef USART_ISR_RXNE_RXFNE",
        "#define USART_ISR_RXNE_ST USART_ISR_RXNE_RXFNE",
        "#define USART_ISR_TXE_ST USART_ISR_TXE_TXFNF",
        "#define USART_CR1_RXNEIE_ST USART_CR1_RXNEIE_RXFNEIE",
        "#else",
        "#define USART_ISR_RXNE_ST USART_ISR_RXNE",
        "#define USART_ISR_TXE_ST USART_ISR_TXE",
        "#define USART_CR1_RXNEIE_ST USART_CR1_RXNEIE",
        "#endif",
    ]
    for n in sorted(names):
        lines.append(f"#define OURS_{n} ({_rename(defs[n], names)})")
    unchecked = []
    for n in sorted(names):
        if n in NOT_REGISTERS or n in SPECIAL:
            continue
        if n in MASKS:
            field, reg = MASKS[n]
            others = sorted(s for s in st_defined
                            if s.startswith(reg + "_") and s.endswith("_Msk") and s != field + "_Msk")
            other_bits = " | ".join(others) or "0u"
            lines.append(f"_Static_assert((OURS_{n} & ({field})) == ({field}), \"MISMATCH {n}: misses bits of {field}\");")
            lines.append(f"_Static_assert((OURS_{n} & ~({field}) & ({other_bits})) == 0u, "
                         f"\"MISMATCH {n}: covers bits of another {reg} field\");")
            continue
        if n not in EXACT:
            unchecked.append(n)
            continue
        if (n, part) in ABSENT:
            continue
        lines.append(f"_Static_assert((OURS_{n}) == ({EXACT[n]}), \"MISMATCH {n}: ours != {EXACT[n]}\");")
    if unchecked:
        raise AssertionError(
            "definitions in the board sources that no ST fact checks: " + ", ".join(unchecked)
            + " (map them to ST's name in EXACT/MASKS of tests/host/test_register_truth.py, "
            "or list them in NOT_REGISTERS if they are no register fact)")
    if "TOL_IRQ_COUNT" in names:
        lines.append(f"_Static_assert(OURS_TOL_IRQ_COUNT >= {max(irqs) + 1}, "
                     "\"MISMATCH TOL_IRQ_COUNT: fewer vectors than the part's interrupts\");")
    if "FL_SR_ERRORS" in names:
        errs = " | ".join(f"FLASH_SR_{b}" for b in ["OPERR", "PROGERR", "WRPERR", "PGAERR", "SIZERR",
                                                    "PGSERR", "MISERR", "FASTERR", "RDERR", "OPTVERR"])
        lines.append(f"_Static_assert((OURS_FL_SR_ERRORS & ~({errs})) == 0u && (OURS_FL_SR_ERRORS & FLASH_SR_PROGERR), "
                     "\"MISMATCH FL_SR_ERRORS: not ST's error flags\");")
    return "\n".join(lines) + "\n"


def board_asserts(desc: dict[str, str], names: set[str]) -> list[str]:
    """The board descriptor's peripheral choices are consistent with ST's names for the part."""
    lines = []
    periph = re.fullmatch(r"TOL_(\w+)_BASE", desc["uart_base"].strip()).group(1)
    lines.append(f"_Static_assert(({_rename(desc['uart_base'], names)}) == {periph}_BASE, \"MISMATCH board uart_base\");")
    lines.append(f"_Static_assert(({_rename(desc['uart_irqn'], names)}) == {periph}_IRQn, \"MISMATCH board uart_irqn: not {periph}'s\");")
    enr_reg = re.fullmatch(r"RCC_(\w+)", desc["uart_enr_offset"].strip()).group(1)
    lines.append(f"_Static_assert(({_rename(desc['uart_enr_offset'], names)}) == offsetof(RCC_TypeDef, {enr_reg}), "
                 "\"MISMATCH board uart_enr_offset\");")
    lines.append(f"_Static_assert(({_rename(desc['uart_enr_bit'], names)}) == RCC_{enr_reg}_{periph}EN, "
                 f"\"MISMATCH board uart_enr_bit: not {periph}EN in {enr_reg}\");")
    ports = set()
    for pin in ("tx", "rx"):
        port = re.match(r"\{\s*TOL_GPIO(\w)_BASE", desc[pin]).group(1)
        ports.add(port)
        lines.append(f"_Static_assert(GPIO{port}_BASE != 0u, \"MISMATCH board {pin} port\");")
    want = " | ".join(f"RCC_AHB2ENR_GPIO{p}EN" for p in sorted(ports))
    lines.append(f"_Static_assert(({_rename(desc['gpio_enr_bits'], names)}) == ({want}), "
                 "\"MISMATCH board gpio_enr_bits: not the clocks of the pin ports\");")
    # port G pins (PG2..PG15) are supplied by VDDIO2 on the parts that have it (RM0351 / RM0432, PWR_CR2.IOSV)
    lines.append(f"_Static_assert({'1' if 'G' in ports else '0'} == {'1' if desc['needs_vddio2'].strip() == 'true' else '0'}, "
                 "\"MISMATCH board needs_vddio2: port G pins need PWR_CR2.IOSV\");")
    return lines


def compile_truth(source: str, part: str, vendor: dict[str, Path], name: str) -> subprocess.CompletedProcess:
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / f"{name}.c"
    path.write_text(source)
    cmd = ["arm-none-eabi-gcc", f"-D{part}", "-mcpu=cortex-m4", "-mthumb", "-std=c11", "-Wall", "-Wextra",
           "-Werror", "-fsyntax-only", f"-I{vendor['stub']}", f"-I{vendor['device']}", f"-I{vendor['hal']}",
           f"-I{vendor['core']}", str(path)]
    return subprocess.run(cmd, capture_output=True, text=True)


def mismatches(proc: subprocess.CompletedProcess) -> list[str]:
    return sorted(set(re.findall(r"MISMATCH ([^\"]+)", proc.stderr)))


def full_source(defs: dict[str, str], board: str, part: str, vendor) -> str:
    names = {n for n, v in defs.items() if v}
    src = truth_source(defs, part, vendor["device"])
    return src + "\n".join(board_asserts(board_descriptors()[board], names)) + "\n"


# ---------------------------------------------------------------------------
# the tests
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("board", list(PARTS))
def test_definitions_match_st(vendor, board):
    part = PARTS[board]
    defs = our_defines(SOURCES)
    proc = compile_truth(full_source(defs, board, part, vendor), part, vendor, f"truth_{board}")
    assert proc.returncode == 0, (f"{part}: the firmware's definitions disagree with ST's: "
                                  f"{mismatches(proc) or proc.stderr[-2000:]}")
    # the check is not vacuous: it holds one assert per mapped definition
    n_asserts = (WORK / f"truth_{board}.c").read_text().count("_Static_assert")
    assert n_asserts >= 90


def test_every_definition_is_checked():
    """A new register definition without an ST counterpart in this test fails here."""
    defs = our_defines(SOURCES)
    names = {n for n, v in defs.items() if v}
    unchecked = sorted(names - set(EXACT) - set(MASKS) - SPECIAL - NOT_REGISTERS)
    assert not unchecked, f"definitions no ST fact checks: {unchecked}"


@pytest.mark.parametrize("name,bad", [
    ("RCC_CR_PLLRDY", "(1u << 26)"),          # one bit off
    ("USART_ISR_TXE", "(1u << 6)"),           # TC's bit instead of TXE's
    ("FL_SR_PGSERR", "(1u << 8)"),
    ("GPIO_AFRH", "0x28u"),
    ("TOL_LPUART1_IRQN", "71"),
    ("RCC_PLLCFGR_N_POS", "9u"),
    ("TOL_USART2_BASE", "0x40004800u"),       # USART3's address
])
def test_a_wrong_definition_fails(vendor, name, bad):
    """Mutate one of our definitions: the compile must fail and name it (for some part at least)."""
    defs = our_defines(SOURCES)
    assert name in defs
    defs[name] = bad
    failed = {}
    for board, part in PARTS.items():
        proc = compile_truth(full_source(defs, board, part, vendor), part, vendor, f"mutant_{board}")
        if proc.returncode != 0:
            failed[part] = mismatches(proc)
    assert failed, f"a wrong {name} went unnoticed"
    for part, found in failed.items():
        assert any(f.startswith(name) for f in found), (part, found)


def test_a_mask_into_another_field_fails(vendor):
    """FLASH_ACR.LATENCY widened to bit 8 would clear/set PRFTEN: refused on every part."""
    defs = our_defines(SOURCES)
    defs["FLASH_ACR_LATENCY_MASK"] = "0x10Fu"
    for board, part in PARTS.items():
        proc = compile_truth(full_source(defs, board, part, vendor), part, vendor, f"mutant_{board}")
        assert proc.returncode != 0 and any(f.startswith("FLASH_ACR_LATENCY_MASK") for f in mismatches(proc))


def test_a_wrong_board_descriptor_fails(vendor):
    """USART2's IRQ number on a board whose console is USART1: refused."""
    defs = our_defines(SOURCES)
    names = {n for n, v in defs.items() if v}
    desc = dict(board_descriptors()["disco_l475vg_iot01a"], uart_irqn="TOL_USART2_IRQN")
    src = truth_source(defs, "STM32L475xx", vendor["device"]) + "\n".join(board_asserts(desc, names)) + "\n"
    proc = compile_truth(src, "STM32L475xx", vendor, "mutant_board")
    assert proc.returncode != 0 and "board uart_irqn: not USART1's" in " ".join(mismatches(proc))


# ---- memory sizes from a real link of each board's linker script ----------------

def link_symbols(board: str, tmp: Path, ld_dir: Path = LD_DIR) -> dict[str, int]:
    """Link an empty program with the board's linker script; {symbol: value} of what ld computed."""
    wrapper = tmp / f"{board}_truth.ld"
    wrapper.write_text(
        f"INCLUDE {board}.ld\n"
        "_truth_flash_origin = ORIGIN(FLASH); _truth_flash_length = LENGTH(FLASH);\n"
        "_truth_ram_origin = ORIGIN(RAM); _truth_ram_length = LENGTH(RAM);\n"
        "_truth_ram2_origin = ORIGIN(RAM2); _truth_ram2_length = LENGTH(RAM2);\n"
        "_truth_ram3_origin = ORIGIN(RAM3); _truth_ram3_length = LENGTH(RAM3);\n")
    c = tmp / "empty.c"
    c.write_text("void tol_reset_handler(void);\n"
                 "__attribute__((section(\".isr_vector\"), used)) void (*const v[2])(void) = {0, tol_reset_handler};\n"
                 "void tol_reset_handler(void) { for (;;) {} }\n")
    elf = tmp / f"{board}.elf"
    subprocess.run(["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb", "-nostdlib", "-nostartfiles",
                    f"-L{ld_dir}", f"-T{wrapper}", str(c), "-o", str(elf)], check=True, capture_output=True)
    nm = subprocess.run(["arm-none-eabi-nm", str(elf)], check=True, capture_output=True, text=True).stdout
    return {parts[2]: int(parts[0], 16) for parts in (ln.split() for ln in nm.splitlines()) if len(parts) == 3}


def st_memory(part: str, vendor) -> dict[str, int]:
    """ST's memory facts for the part, evaluated by the compiler (printed into .data and read back)."""
    names = ["FLASH_BASE", "FLASH_END", "SRAM1_BASE", "SRAM1_SIZE_MAX", "SRAM2_BASE", "SRAM2_SIZE",
             "SRAM3_BASE", "SRAM3_SIZE", "FLASH_PAGE_SIZE", "FLASH_BANK_SIZE"]
    body = ["#include \"stm32l4xx.h\"", "#undef FLASH_SIZE", "#define FLASH_SIZE (FLASH_END - FLASH_BASE + 1u)",
            "#include \"stm32l4xx_hal_flash.h\""]
    for n in names:
        body += [f"#ifdef {n}", f"const unsigned long truth_{n} = (unsigned long)({n});", "#endif"]
    WORK.mkdir(parents=True, exist_ok=True)
    src, obj = WORK / f"mem_{part}.c", WORK / f"mem_{part}.o"
    src.write_text("\n".join(body) + "\n")
    subprocess.run(["arm-none-eabi-gcc", f"-D{part}", "-mcpu=cortex-m4", "-mthumb", "-c", f"-I{vendor['stub']}",
                    f"-I{vendor['device']}", f"-I{vendor['hal']}", f"-I{vendor['core']}", str(src), "-o", str(obj)],
                   check=True, capture_output=True)
    # values of initialised constants: read them from the object's .rodata through objdump
    out = {}
    syms = subprocess.run(["arm-none-eabi-nm", str(obj)], check=True, capture_output=True, text=True).stdout
    dump = subprocess.run(["arm-none-eabi-objcopy", "-O", "binary", "-j", ".rodata", str(obj), "/dev/stdout"],
                          check=True, capture_output=True).stdout
    for ln in syms.splitlines():
        parts = ln.split()
        if len(parts) == 3 and parts[2].startswith("truth_"):
            off = int(parts[0], 16)
            out[parts[2][6:]] = int.from_bytes(dump[off:off + 4], "little")
    return out


@pytest.mark.parametrize("board", list(PARTS))
def test_linker_memory_matches_st(vendor, board, tmp_path):
    st = st_memory(PARTS[board], vendor)
    ld = link_symbols(board, tmp_path)
    flash_bytes = st["FLASH_END"] - st["FLASH_BASE"] + 1
    assert ld["_truth_flash_origin"] == st["FLASH_BASE"]
    assert ld["_truth_flash_length"] == flash_bytes
    assert ld["_truth_ram_origin"] == st["SRAM1_BASE"]
    assert ld["_truth_ram_length"] == st["SRAM1_SIZE_MAX"]
    assert ld["_truth_ram2_origin"] == st["SRAM2_BASE"]
    assert ld["_truth_ram2_length"] == st["SRAM2_SIZE"]
    if "SRAM3_SIZE" in st:
        assert (ld["_truth_ram3_origin"], ld["_truth_ram3_length"]) == (st["SRAM3_BASE"], st["SRAM3_SIZE"])
    else:
        assert ld["_truth_ram3_length"] == 0
    # the flash geometry the linker hands the driver (while it comes from the linker script)
    if "_flash_page_bytes" in ld:
        assert ld["_flash_page_bytes"] == st["FLASH_PAGE_SIZE"]
    if "_flash_bank_bytes" in ld:
        assert ld["_flash_bank_bytes"] == st["FLASH_BANK_SIZE"]
    # and the host's board table (host/tinyol/boards.py) tells the same story
    b = BOARDS[board]
    assert (b.flash_bytes, b.ram_bytes, b.ram2_bytes, b.page_bytes, b.ram3_bytes) == (
        flash_bytes, st["SRAM1_SIZE_MAX"], st["SRAM2_SIZE"], st["FLASH_PAGE_SIZE"], st.get("SRAM3_SIZE", 0))


def test_a_wrong_linker_length_fails(vendor, tmp_path):
    """A linker script that claims 128 KB of SRAM1 on the L476 is caught."""
    ld_dir = tmp_path / "ld"
    shutil.copytree(LD_DIR, ld_dir)
    p = ld_dir / "nucleo_l476rg.ld"
    p.write_text(p.read_text().replace("LENGTH = 96K", "LENGTH = 128K"))
    ld = link_symbols("nucleo_l476rg", tmp_path, ld_dir)
    st = st_memory("STM32L476xx", vendor)
    assert ld["_truth_ram_length"] == 128 * 1024 != st["SRAM1_SIZE_MAX"]

"""ST's own HAL flash driver runs cleanly on the strict flash model, and its errors surface.

stm32l4xx_hal_flash.c / _ex.c (ST's vendor reference in ../shared/stm32, not our code) are
compiled for Cortex-M4 with ST's CMSIS device header for each part (the CMSIS core headers
come from ../shared/tflm) and run under Unicorn with mcu/renode/flash.py serving the flash
interface and the store region: HAL_FLASH_Unlock, HAL_FLASHEx_Erase (cache disable, PER/PNB/
BKER from the part's DBANK, cache reset), HAL_FLASH_Program by double-words, HAL_FLASH_Lock.
The vendor's sequence must leave no error flag, and a double-word programmed twice must come
back as the HAL's own HAL_FLASH_ERROR_PROG. Skipped without unicorn, the ARM toolchain or
the shared tarballs.
"""
from __future__ import annotations

import shutil
import subprocess

import pytest
from _persist_util import load_flash_model
from conftest import ROOT, SHARED

unicorn = pytest.importorskip("unicorn")
from unicorn import arm_const as A  # noqa: E402

STM32_TAR = SHARED / "stm32" / "stm32l4-vendor-ref.tar.xz"
TFLM_TAR = SHARED / "tflm" / "tflm-cmsisnn-src.tar.xz"
pytestmark = pytest.mark.skipif(not (shutil.which("arm-none-eabi-gcc") and STM32_TAR.is_file() and TFLM_TAR.is_file()),
                                reason="needs arm-none-eabi-gcc and ../shared/stm32, ../shared/tflm")

M = load_flash_model()
RAM, RAM_BYTES, STOP, STACK, OUT, DATA = 0x20000000, 0x80000, 0x20070000, 0x2007FF00, 0x2006F000, 0x20060000
FLASH_IF, SIGNATURE = 0x40022000, 0x1FFF7000
HAL_OK, HAL_ERROR = 0, 1
HAL_FLASH_ERROR_PROG = 0x08            # stm32l4xx_hal_flash.h: FLASH_FLAG_PROGERR
# part -> (CMSIS define, flash KB, DBANK, page bytes by the RM, bank for the store's first page, its page number)
PARTS = {
    "l476": ("STM32L476xx", 1024, 1, 2048, 2, 192),      # store 0x080E0000: bank 2, page 192
    "l432": ("STM32L432xx", 256, 1, 2048, 1, 112),       # store 0x08038000: page 112
    "l4r5_dbank1": ("STM32L4R5xx", 2048, 1, 4096, 2, 192),   # store 0x081C0000: bank 2, page 192
    "l4r5_dbank0": ("STM32L4R5xx", 2048, 0, 8192, 1, 224),   # one bank of 8 KB pages: page 224
}


@pytest.fixture(scope="module")
def vendor(tmp_path_factory):
    d = tmp_path_factory.mktemp("vendor")
    subprocess.run(["tar", "-xJf", str(STM32_TAR), "-C", str(d)], check=True)
    subprocess.run(["tar", "-xJf", str(TFLM_TAR), "-C", str(d), "--wildcards", "*/CMSIS/Core/Include/*"], check=True)
    core = next(d.glob("**/CMSIS/Core/Include/core_cm4.h")).parent
    return d / "stm32", core


def build(vendor, define, d):
    stm, core = vendor
    elf = d / f"hal_{define}.elf"
    src = stm / "stm32l4xx_hal_driver" / "Src"
    subprocess.run(["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=soft", "-O2", "-std=c11",
                    f"-D{define}", f"-I{ROOT / 'tests/c/hal_shim'}", f"-I{stm / 'cmsis_device_l4/Include'}",
                    f"-I{stm / 'stm32l4xx_hal_driver/Inc'}", f"-I{core}", "--specs=nano.specs", "-nostartfiles",
                    "-Wl,-e,hal_erase", f"-Wl,-Ttext={RAM:#x}", str(ROOT / "tests/c/hal_flash_arm.c"),
                    str(src / "stm32l4xx_hal_flash.c"), str(src / "stm32l4xx_hal_flash_ex.c"), "-o", str(elf)],
                   check=True, capture_output=True)
    binary = d / f"hal_{define}.bin"
    subprocess.run(["arm-none-eabi-objcopy", "-O", "binary", str(elf), str(binary)], check=True)
    nm = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True).stdout
    syms = {p[2]: int(p[0], 16) for p in (line.split() for line in nm.splitlines()) if len(p) == 3}
    return binary.read_bytes(), syms


class Part:
    def __init__(self, image, kb, dbank):
        code, self.syms = image
        uc = self.uc = unicorn.Uc(unicorn.UC_ARCH_ARM, unicorn.UC_MODE_THUMB | unicorn.UC_MODE_MCLASS)
        uc.mem_map(RAM, RAM_BYTES)
        uc.mem_write(RAM, code)
        uc.mem_map(SIGNATURE, 0x1000)
        uc.mem_write(SIGNATURE + 0x5E0, kb.to_bytes(2, "little"))
        uc.mem_map(0xE0000000, 0x100000)                   # SCB / core peripherals (ISB, ...)
        size = kb * 1024
        self.store, self.end = 0x08000000 + size - size // 8, 0x08000000 + size
        s = self.state = M["flash_reset"]()
        s["flash_kb"] = kb
        if not dbank:
            s["regs"][M["FLASH_OPTR"]] &= ~M["OPTR_DBANK"]
        M["flash_attach_array"](s, self.store, size // 8, fill=0)    # programmed with zeros
        uc.mmio_map(FLASH_IF, 0x1000, lambda u, o, n, d: M["flash_read"](s, o & ~3) >> 8 * (o & 3) & ((1 << 8 * n) - 1),
                    None, lambda u, o, n, v, d: M["flash_write"](s, o, v), None)
        uc.mmio_map(self.store, size // 8, lambda u, o, n, d: M["array_read"](s, o, n), None,
                    lambda u, o, n, v, d: M["array_write"](s, o, v, n), None)

    def call(self, name, *args):
        uc = self.uc
        for i, a in enumerate(args):
            uc.reg_write(A.UC_ARM_REG_R0 + i, a)
        uc.reg_write(A.UC_ARM_REG_SP, STACK)
        uc.reg_write(A.UC_ARM_REG_LR, STOP | 1)
        uc.emu_start(self.syms[name] | 1, STOP, count=20_000_000)
        return uc.reg_read(A.UC_ARM_REG_R0), int.from_bytes(uc.mem_read(OUT + 4, 4), "little")


@pytest.mark.parametrize("part", sorted(PARTS))
def test_st_hal_erases_and_programs_cleanly_on_the_model(vendor, tmp_path, part):
    define, kb, dbank, page, bank, pnb = PARTS[part]
    p = Part(build(vendor, define, tmp_path), kb, dbank)
    st = p.state["array"]["st"]
    assert p.call("hal_erase", bank, pnb, 2, OUT) == (HAL_OK, 0)
    # the vendor's PNB/BKER land on the first two pages of the store on this part's geometry
    assert set(st[:2 * page // 8]) == {M["ERASED"]} and st[2 * page // 8] == M["PROGRAMMED"]
    assert p.state["regs"][M["FLASH_SR"]] == 0 and p.state["regs"][M["FLASH_CR"]] & M["CR_LOCK"]
    acr = p.state["regs"][M["FLASH_ACR"]]
    assert acr & M["ACR_DCEN"] and acr & M["ACR_ICEN"], "HAL re-enables the caches it disabled"
    words = [0x0123456789ABCDEF, 0xFFFFFFFFFFFFFFFF, 0, 0xDEADBEEF00C0FFEE]
    p.uc.mem_write(DATA, b"".join(w.to_bytes(8, "little") for w in words))
    assert p.call("hal_program", p.store, DATA, len(words), OUT) == (HAL_OK, 0)
    got = [int.from_bytes(p.uc.mem_read(p.store + 8 * i, 8), "little") for i in range(len(words))]
    assert got == words, "read back with the data cache on: the HAL's cache handling avoids stale lines"
    # the 0xFF double-word was programmed: programming it again is the HAL's PROG error
    p.uc.mem_write(DATA, (0x1111).to_bytes(8, "little"))
    assert p.call("hal_program", p.store + 8, DATA, 1, OUT) == (HAL_ERROR, HAL_FLASH_ERROR_PROG)

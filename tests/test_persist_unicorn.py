"""The real STM32L4 flash driver, compiled for Cortex-M4, against the Renode FLASH model.

flash_stm32l4.c + tol_store.c (+ tests/c/flash_sim_arm.c entry points) are built with
arm-none-eabi-gcc and run in the Unicorn CPU emulator; the flash interface registers at
0x40022000 are served by mcu/renode/flash.py (the same script Renode runs), the flash
array is plain memory that the CPU's stores program (as in Renode). So the driver's own
register sequence - lock probe, keys, SR write-1-to-clear, PER/PNB/BKER/STRT, PG with
32-bit stores, cache reset, blank check, read-back - is what erases and programs here.
Skipped without `unicorn` (pip install unicorn) or the ARM toolchain.
"""
from __future__ import annotations

import random
import shutil
import subprocess

import pytest
from conftest import ROOT
from test_renode_static import Peripheral

unicorn = pytest.importorskip("unicorn")
from unicorn import arm_const as A  # noqa: E402

pytestmark = pytest.mark.skipif(not shutil.which("arm-none-eabi-gcc"), reason="arm-none-eabi-gcc not installed")

FLASH, FLASH_BYTES = 0x08000000, 1024 * 1024          # nucleo_l476rg
STORE, STORE_END, PAGE, BANK = 0x080E0000, 0x08100000, 2048, 0x80000
RAM, RAM_BYTES = 0x20000000, 0x80000
PAYLOAD, DST, OUT, STOP, STACK = 0x20040000, 0x20050000, 0x2006F000, 0x20070000, 0x2007FF00
FLASH_IF = 0x40022000
OK, ERR_FLASH, ERR_NO_RECORD = 0, 13, 14
SOURCES = ["tests/c/flash_sim_arm.c", "mcu/boards/stm32l4/flash_stm32l4.c", "mcu/src/tol_store.c",
           "mcu/src/tol_crc32.c", "mcu/src/tol_status.c"]


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    d = tmp_path_factory.mktemp("arm")
    elf = d / "store.elf"
    syms = {"_store_start": STORE, "_store_end": STORE_END, "_flash_page_bytes": PAGE,
            "_flash_bank_bytes": BANK, "_flash_origin": FLASH}
    subprocess.run(["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=soft", "-O2", "-std=c11",
                    "-Wall", "-Wextra", "-Werror", "-Wconversion", "-Wshadow", f"-I{ROOT / 'mcu/include'}",
                    f"-I{ROOT / 'mcu/boards/stm32l4'}", "--specs=nano.specs", "-nostartfiles", "-Wl,-e,arm_save",
                    f"-Wl,-Ttext={RAM:#x}", *[f"-Wl,--defsym={k}={v:#x}" for k, v in syms.items()],
                    *[str(ROOT / s) for s in SOURCES], "-o", str(elf)], check=True)
    subprocess.run(["arm-none-eabi-objcopy", "-O", "binary", str(elf), str(d / "store.bin")], check=True)
    nm = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True).stdout
    funcs = {p[2]: int(p[0], 16) for p in (l.split() for l in nm.splitlines()) if len(p) == 3 and p[2].startswith("arm_")}
    return (d / "store.bin").read_bytes(), funcs


class Bus:
    """What flash.py needs from Renode's system bus, over the emulator's memory."""

    def __init__(self, uc):
        self.uc = uc

    def ReadWord(self, address):  # noqa: N802
        assert address == 0x1FFF75E0
        return FLASH_BYTES // 1024

    def WriteDoubleWord(self, address, value):  # noqa: N802
        self.uc.mem_write(address, value.to_bytes(4, "little"))


class Board:
    def __init__(self, image, qemu_like=False):
        self.code, self.funcs = image
        uc = self.uc = unicorn.Uc(unicorn.UC_ARCH_ARM, unicorn.UC_MODE_THUMB | unicorn.UC_MODE_MCLASS)
        uc.mem_map(FLASH, FLASH_BYTES)
        uc.mem_map(RAM, RAM_BYTES)
        self.fl = Peripheral("flash.py", Bus(uc))
        self.qemu_like = qemu_like
        self.steps, self.cut_at, self.cut = 0, None, False
        uc.mmio_map(FLASH_IF, 0x1000, self._read, None, self._write, None)
        uc.hook_add(unicorn.UC_HOOK_MEM_WRITE, self._store, begin=STORE, end=STORE_END - 1)
        self.reset()

    def reset(self):
        """Power-on: RAM cleared and reloaded, flash interface at its reset state; the array keeps its bits."""
        self.uc.mem_write(RAM, bytes(RAM_BYTES))
        self.uc.mem_write(RAM, self.code)
        self.fl.init()
        self.cut_at, self.cut = None, False

    def _read(self, uc, offset, size, user):
        return 0 if self.qemu_like else self.fl.read(offset, size)

    def _write(self, uc, offset, size, value, user):
        if self.qemu_like:
            return
        if offset == 0x14 and value & (1 << 16) and not self.fl.read(0x14) & (1 << 31):  # CR.STRT: an erase
            if not self._step():
                return
        self.fl.write(offset, value, size)

    def _store(self, uc, access, address, size, value, user):
        if address % 8 == 0:  # the first word of a double-word: one programming step
            self._step()

    def _step(self) -> bool:
        if self.cut_at is not None and self.steps >= self.cut_at:
            if not self.cut:
                self.cut = True
                self.uc.emu_stop()
            return False
        self.steps += 1
        return True

    def call(self, name, *args):
        uc = self.uc
        for i, a in enumerate(args):
            uc.reg_write(A.UC_ARM_REG_R0 + i, a)
        uc.reg_write(A.UC_ARM_REG_SP, STACK)
        uc.reg_write(A.UC_ARM_REG_LR, STOP | 1)
        uc.emu_start(self.funcs[name] | 1, STOP, count=50_000_000)
        if self.cut:
            return None
        r = uc.reg_read(A.UC_ARM_REG_R0)
        return r - (1 << 32) if r & 0x80000000 else r

    def mem(self, addr, n):
        return bytes(self.uc.mem_read(addr, n))

    def save(self, data, cut_at=None):
        self.steps, self.cut_at, self.cut = 0, cut_at, False
        self.uc.mem_write(PAYLOAD, data)
        rc = self.call("arm_save", PAYLOAD, len(data), 0x1234, 13)
        self.cut_at = None
        return rc

    def boot(self):
        self.reset()
        rc = self.call("arm_boot", 0x1234, DST, 0x10000, OUT)
        n, seq = int.from_bytes(self.mem(OUT, 4), "little"), int.from_bytes(self.mem(OUT + 4, 4), "little")
        return rc, (self.mem(DST, n) if rc == OK else None), seq


def test_region_and_qemu_detection(image):
    b = Board(image)
    assert b.call("arm_region", OUT) == OK
    assert [int.from_bytes(b.mem(OUT + 4 * i, 4), "little") for i in range(3)] == [STORE, STORE_END - STORE, PAGE]
    q = Board(image, qemu_like=True)  # registers read 0: LOCK never sets
    assert q.call("arm_region", OUT) == ERR_FLASH
    assert q.call("arm_erase", STORE) == ERR_FLASH and q.mem(STORE, 8) == bytes(8)


def test_driver_erases_and_programs_through_the_model(image):
    b = Board(image)
    for addr in (STORE, STORE + PAGE, STORE_END - PAGE):
        assert b.call("arm_erase", addr) == OK
        assert b.mem(addr, PAGE) == b"\xff" * PAGE
    assert b.mem(STORE - 8, 8) == bytes(8) and b.mem(STORE + 2 * PAGE, 8) == bytes(8)  # nothing else
    assert b.fl.read(0x14) & (1 << 31), "CR locked again"
    assert b.fl.read(0x10) == 0, "no error flags left"
    data = bytes(range(24))
    b.uc.mem_write(PAYLOAD, data)
    assert b.call("arm_program", STORE + 8, PAYLOAD, 24) == OK
    assert b.mem(STORE + 8, 24) == data
    assert b.call("arm_program", STORE + 8, PAYLOAD, 8) == ERR_FLASH, "not erased: refused"
    assert b.call("arm_program", STORE + 4, PAYLOAD, 8) == 1, "misaligned: TOL_ERR_ARG"
    assert b.call("arm_erase", STORE - PAGE) == 1, "outside the store: TOL_ERR_ARG"


def test_store_on_the_driver_survives_power_cuts(image):
    b = Board(image)
    assert b.boot()[0] == ERR_NO_RECORD  # flash reads 0x00 like Renode's: no record
    rnd = random.Random(1)
    old, prev, new = (rnd.randbytes(3000 + i) for i in range(3))
    assert b.save(old) == OK and b.save(prev) == OK
    image_flash = b.mem(FLASH, FLASH_BYTES)
    assert b.save(new) == OK
    total = b.steps
    assert b.boot()[1:] == (new, 3)
    # every erase step, the first and last program steps, and a sample in between
    cuts = sorted({0, 1, 2, 3, total - 2, total - 1, *range(5, total, 7)})
    for k in cuts:
        b.uc.mem_write(FLASH, image_flash)
        b.reset()
        assert b.save(new, cut_at=k) is None, f"step {k} did not cut"
        rc, got, seq = b.boot()
        assert (rc, got, seq) == (OK, prev, 2), f"cut at step {k}"
    b.uc.mem_write(FLASH, image_flash)
    b.reset()
    assert b.save(new) == OK and b.boot()[1:] == (new, 3)

"""The real STM32L4 flash driver, compiled for Cortex-M4, against the strict flash model.

flash_stm32l4.c + tol_store.c + startup.c (its vector table) + tests/c/flash_sim_arm.c are
built with arm-none-eabi-gcc for every board's geometry and run in the Unicorn CPU emulator.
mcu/renode/flash.py (the same script Renode runs) serves the flash interface registers at
0x40022000 *and* every load and store of the store region of the array: the driver's own
instructions meet the silicon's rules (LOCK/KEYR, PG, aligned double-words, PROGERR for a
double-word programmed since its erase, BSY, the data-cache hazard with DCEN on, FLASHSIZE
and OPTR.DBANK, ECC). A torn double-word read raises NMI: the test delivers it through the
firmware's own vector table, as the core would (handler called with the interrupted context
saved and restored). A power cut is `emu_start(count=k)`: the CPU stops after instruction k,
flash_power_cut() tears whatever operation the flash was busy with, RAM is lost.

Skipped without `unicorn` (pip install unicorn) or the ARM toolchain.
"""
from __future__ import annotations

import random
import shutil
import subprocess

import pytest
from _persist_util import load_flash_model
from conftest import ROOT

unicorn = pytest.importorskip("unicorn")
from unicorn import arm_const as A  # noqa: E402

pytestmark = pytest.mark.skipif(not shutil.which("arm-none-eabi-gcc"), reason="arm-none-eabi-gcc not installed")

FLASH = 0x08000000
RAM, RAM_BYTES = 0x20000000, 0x80000
PAYLOAD, DST, OUT, STOP, NMI_RET, STACK = 0x20040000, 0x20050000, 0x2006F000, 0x20070000, 0x20070100, 0x2007FF00
FLASH_IF, SIGNATURE, SCS = 0x40022000, 0x1FFF7000, 0xE000E000
OK, ERR_ARG, ERR_FLASH, ERR_NO_RECORD = 0, 1, 13, 14
HASH = 0x1234
SOURCES = ["tests/c/flash_sim_arm.c", "mcu/boards/stm32l4/flash_stm32l4.c", "mcu/boards/stm32l4/startup.c",
           "mcu/src/tol_store.c", "mcu/src/tol_crc32.c", "mcu/src/tol_status.c"]
KB = 1024

# Every board's part, from the reference manuals (not from our code): flash size, page size
# (RM0351/RM0394: 2 KB; RM0432: 4 KB with DBANK=1, 8 KB with DBANK=0), banks; the store is the
# last eighth of the flash (stm32l4_common.ld's default).
GEOMETRIES = {
    "nucleo_l476rg": {"kb": 1024, "dbank": 1, "page": 2 * KB, "bank": 512 * KB},
    "disco_l475vg_iot01a": {"kb": 1024, "dbank": 1, "page": 2 * KB, "bank": 512 * KB},
    "nucleo_l432kc": {"kb": 256, "dbank": 1, "page": 2 * KB, "bank": 256 * KB},
    "nucleo_l4r5zi": {"kb": 2048, "dbank": 1, "page": 4 * KB, "bank": 1024 * KB},
    "nucleo_l4r5zi_dbank0": {"kb": 2048, "dbank": 0, "page": 8 * KB, "bank": 2048 * KB},
}


M = load_flash_model()


def store_of(g) -> tuple[int, int]:
    size = g["kb"] * KB
    return FLASH + size - size // 8, FLASH + size


_images: dict = {}


def build(tmp_path_factory, board) -> tuple[bytes, dict]:
    """Compile once per flash size (the linker symbols are what the board's .ld gives)."""
    g = GEOMETRIES[board]
    key = g["kb"]
    if key in _images:
        return _images[key]
    d = tmp_path_factory.mktemp(f"arm{key}")
    elf = d / "store.elf"
    start, end = store_of(g)
    page_ld = 4 * KB if g["kb"] >= 2048 else 2 * KB   # what stm32l4_common.ld computes
    bank_ld = g["kb"] * KB // 2 if g["kb"] >= 1024 else g["kb"] * KB
    syms = {"_store_start": start, "_store_end": end, "_flash_page_bytes": page_ld,
            "_flash_bank_bytes": bank_ld, "_flash_origin": FLASH, "_flash_bytes": g["kb"] * KB,
            "_estack": STACK, "_sidata": RAM, "_sdata": RAM, "_edata": RAM, "_sbss": RAM, "_ebss": RAM,
            "_sram2": RAM, "_eram2": RAM, "_sram3": RAM, "_eram3": RAM}
    subprocess.run(["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=soft", "-O2", "-std=c11",
                    "-Wall", "-Wextra", "-Werror", "-Wconversion", "-Wshadow", f"-I{ROOT / 'mcu/include'}",
                    f"-I{ROOT / 'mcu/boards/stm32l4'}", "--specs=nano.specs", "-nostartfiles", "-Wl,-e,arm_save",
                    f"-Wl,-Ttext={RAM:#x}", *[f"-Wl,--defsym={k}={v:#x}" for k, v in syms.items()],
                    *[str(ROOT / s) for s in SOURCES], "-o", str(elf)], check=True)
    subprocess.run(["arm-none-eabi-objcopy", "-O", "binary", "-R", ".noinit", str(elf), str(d / "store.bin")],
                   check=True)
    nm = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True).stdout
    syms_out = {p[2]: int(p[0], 16) for p in (line.split() for line in nm.splitlines()) if len(p) == 3}
    _images[key] = ((d / "store.bin").read_bytes(), syms_out)
    return _images[key]


class Board:
    """One part: RAM with the image, the strict flash model behind the interface and the store."""

    def __init__(self, image, board, dcen=True, qemu_like=False):
        self.args = (image, board, dcen, qemu_like)
        self.counted = False     # every block translated since the last flush has unicorn's counter
        self.code, self.syms = image
        self.g = GEOMETRIES[board]
        self.store, self.store_end = store_of(self.g)
        uc = self.uc = unicorn.Uc(unicorn.UC_ARCH_ARM, unicorn.UC_MODE_THUMB | unicorn.UC_MODE_MCLASS)
        uc.mem_map(RAM, RAM_BYTES)
        uc.mem_map(SIGNATURE, 0x1000)
        uc.mem_write(SIGNATURE + 0x5E0, self.g["kb"].to_bytes(2, "little"))
        uc.mem_map(SCS, 0x1000)
        self.qemu_like = qemu_like
        self.state = M["flash_reset"]()
        self.state["flash_kb"] = self.g["kb"]
        self.state["nmi_hook"] = self._nmi
        if not self.g["dbank"]:
            self.state["regs"][M["FLASH_OPTR"]] &= ~M["OPTR_DBANK"]
        M["flash_attach_array"](self.state, self.store, self.store_end - self.store)
        self.dcen = dcen
        uc.mmio_map(FLASH_IF, 0x1000, self._reg_read, None, self._reg_write, None)
        uc.mmio_map(self.store, self.store_end - self.store, self._arr_read, None, self._arr_write, None)
        uc.hook_add(unicorn.UC_HOOK_BLOCK, self._block)
        uc.hook_add(unicorn.UC_HOOK_CODE, self._halt, begin=self.syms["arm_halt"], end=self.syms["arm_halt"] + 1)
        self.counting, self.icount, self.events, self.trace = False, 0, [], []
        self.reset()

    # -- the machine ---------------------------------------------------------------------
    def reset(self, cut=False):
        """Power-on (or a cut): RAM reloaded, flash interface at reset; the array keeps its bits."""
        self.uc.mem_write(RAM, bytes(RAM_BYTES))
        self.uc.mem_write(RAM, self.code)
        self.state = M["flash_power_cut"](self.state) if cut else M["flash_reset"](self.state)
        if not self.dcen:
            self.state["regs"][M["FLASH_ACR"]] &= ~M["ACR_DCEN"]
        self.halted, self.nmi_pending, self.nmi_at, self.nmis = False, False, None, 0

    def _reg_read(self, uc, offset, size, user):
        if self.qemu_like:
            return 0
        v = M["flash_read"](self.state, offset & ~3)
        if self.counting and offset == M["FLASH_SR"] and v & M["SR_BSY"]:
            self.events.append((self.icount, "busy", offset))
        return (v >> (8 * (offset & 3))) & ((1 << (8 * size)) - 1)

    def _reg_write(self, uc, offset, size, value, user):
        if self.counting:
            self.events.append((self.icount, "reg", offset))
        if not self.qemu_like:
            assert size == 4, "the driver makes 32-bit register accesses only"
            M["flash_write"](self.state, offset, value)

    def _arr_read(self, uc, offset, size, user):
        return M["array_read"](self.state, offset, size)

    def _arr_write(self, uc, offset, size, value, user):
        if self.counting:
            self.events.append((self.icount, "store", offset))
        M["array_write"](self.state, offset, value, size)

    def _nmi(self):
        """The model raised NMI during a load: the core takes it at the next instruction
        boundary (here: the start of the next translated block; the driver's ISB ends one)."""
        self.nmi_pending = True
        self.nmis += 1

    def _block(self, uc, address, size, user):
        if self.nmi_pending and self.nmi_at is None:
            self.nmi_at = address
            uc.emu_stop()

    def _halt(self, uc, address, size, user):
        self.halted = True
        uc.emu_stop()

    def _count(self, uc, address, size, user):
        self.icount += 1
        self.trace.append(address)

    def call(self, name, *args, count=0):
        """Run `name`(args) to its return; 'reset' if the firmware reset, None if cut by `count`."""
        uc = self.uc
        for i, a in enumerate(args):
            uc.reg_write(A.UC_ARM_REG_R0 + i, a)
        uc.reg_write(A.UC_ARM_REG_SP, STACK)
        uc.reg_write(A.UC_ARM_REG_LR, STOP | 1)
        pc = self.syms[name] | 1
        # blocks translated without unicorn's instruction counter would not stop: a run with no
        # count removes the counter, a counted one adds it; a machine that only ever makes
        # counted runs flushes once (the literal sweep checks every cut stops where it should)
        if count and not self.counted:
            uc.ctl_flush_tb()
        self.counted = bool(count)
        while True:
            self.nmi_pending, self.nmi_at = False, None
            uc.emu_start(pc, STOP, count=count)
            if self.halted:
                return "reset"
            if not self.nmi_pending:
                break
            assert count == 0, "an NMI during a cut run"
            at = self.nmi_at
            assert uc.reg_read(A.UC_ARM_REG_PC) == at, "stopped where the NMI is taken"
            self._take_nmi()
            if self.halted:
                return "reset"
            pc = at | 1
        if uc.reg_read(A.UC_ARM_REG_PC) != STOP:
            return None
        r = uc.reg_read(A.UC_ARM_REG_R0)
        return r - (1 << 32) if r & 0x80000000 else r

    def _take_nmi(self):
        """Exception entry and return around the handler in the firmware's vector table."""
        uc = self.uc
        ctx = uc.context_save()
        vectors = self.syms["tol_vectors"]
        handler = int.from_bytes(self.mem(vectors + 8, 4), "little")
        uc.reg_write(A.UC_ARM_REG_SP, uc.reg_read(A.UC_ARM_REG_SP) - 32)   # the stacked frame
        uc.reg_write(A.UC_ARM_REG_LR, NMI_RET | 1)
        self.nmi_pending, self.nmi_at = False, None
        uc.emu_start(handler | 1, NMI_RET)
        assert not self.nmi_pending, "NMI inside the NMI handler"
        if not self.halted:
            uc.context_restore(ctx)

    def record(self, run):
        """Run `run()` counting instructions; the flash accesses as (instruction, kind, offset).
        The address of every instruction run is left in `self.trace`."""
        self.counting, self.icount, self.events, self.trace = True, 0, [], []
        h = self.uc.hook_add(unicorn.UC_HOOK_CODE, self._count)
        self.uc.ctl_flush_tb()   # translated blocks made before the hook would not call it
        try:
            assert run() == OK
        finally:
            self.uc.hook_del(h)
            self.uc.ctl_flush_tb()
            self.counting = self.counted = False
        return self.events

    def mem(self, addr, n):
        return bytes(self.uc.mem_read(addr, n))

    def survivors(self):
        """What a boot can see of the machine after a power cut (hashable): the array with its
        torn marks, the option registers, the model's random state (torn reads), the system
        control space. RAM and the flash interface start over."""
        a, st = self.state["array"], self.state
        options = tuple(st["regs"][o] for o in M["OPTION_OFFSETS"])
        return (tuple(a["lo"]), tuple(a["hi"]), tuple(a["st"]), options, st["rng"], self.mem(SCS, 0x1000))

    def take(self, survivors):
        """Power this machine up on another one's survivors."""
        lo, hi, st, options, rng, scs = survivors
        a = self.state["array"]
        a["lo"], a["hi"], a["st"] = list(lo), list(hi), list(st)
        for o, v in zip(M["OPTION_OFFSETS"], options):
            self.state["regs"][o] = v
        self.state["rng"] = rng
        self.uc.mem_write(SCS, scs)

    def snapshot(self):
        a = self.state["array"]
        return (list(a["lo"]), list(a["hi"]), list(a["st"]))

    def restore(self, snap):
        a = self.state["array"]
        a["lo"], a["hi"], a["st"] = (list(x) for x in snap)

    def save(self, data, cut_at=0, chunk=13):
        self.uc.mem_write(PAYLOAD, data)
        rc = self.call("arm_save", PAYLOAD, len(data), HASH, chunk, count=cut_at)
        if rc is None:
            self.reset(cut=True)
        return rc

    def boot(self, tries=3):
        """Boot like the device: a firmware reset boots again. 'reboot loop' after `tries`."""
        for _ in range(tries):
            self.reset()
            rc = self.call("arm_boot", HASH, DST, 0x10000, OUT)
            if rc != "reset":
                n, seq = (int.from_bytes(self.mem(OUT + 4 * i, 4), "little") for i in range(2))
                return rc, (self.mem(DST, n) if rc == OK else None), seq
        return "reboot loop", None, 0


BOARD_NAMES = sorted(GEOMETRIES)


@pytest.fixture(params=BOARD_NAMES)
def board(request, tmp_path_factory):
    return request.param, build(tmp_path_factory, request.param)


def test_region_and_page_size_come_from_the_part(board):
    """Finding 4: the L4R5's page is 8 KB with OPTR.DBANK = 0; the driver must ask the part."""
    name, image = board
    b = Board(image, name)
    assert b.call("arm_region", OUT) == OK
    got = [int.from_bytes(b.mem(OUT + 4 * i, 4), "little") for i in range(3)]
    assert got == [b.store, b.store_end - b.store, b.g["page"]]
    q = Board(image, name, qemu_like=True)  # QEMU: registers read 0, LOCK never sets
    assert q.call("arm_region", OUT) == ERR_FLASH


def test_driver_erases_and_programs_through_the_model(board):
    name, image = board
    b = Board(image, name)
    page, arr = b.g["page"], b.state["array"]
    b.restore(([0] * len(arr["lo"]), [0] * len(arr["lo"]), [M["PROGRAMMED"]] * len(arr["lo"])))
    last = b.store_end - page
    for addr in (b.store, b.store + page, last):
        assert b.call("arm_erase", addr) == OK
        i0 = (addr - b.store) // 8
        assert set(b.state["array"]["st"][i0:i0 + page // 8]) == {M["ERASED"]}
    st = b.state["array"]["st"]
    assert st[page // 8 * 2] == M["PROGRAMMED"] and st[(last - b.store) // 8 - 1] == M["PROGRAMMED"], \
        "an erase reached past its page"
    assert b.state["regs"][M["FLASH_CR"]] & M["CR_LOCK"], "CR locked again"
    assert b.state["regs"][M["FLASH_SR"]] == 0, "no error flags left"
    data = bytes(range(24))
    b.uc.mem_write(PAYLOAD, data)
    assert b.call("arm_program", b.store + 8, PAYLOAD, 24) == OK
    assert b.mem(b.store + 8, 24) == data
    assert b.call("arm_program", b.store + 8, PAYLOAD, 8) == ERR_FLASH, "programmed since the erase: PROGERR"
    b.uc.mem_write(PAYLOAD, b"\xff" * 8)
    assert b.call("arm_program", b.store + 32, PAYLOAD, 8) == OK
    assert b.call("arm_program", b.store + 32, PAYLOAD, 8) == ERR_FLASH, "0xFF programmed is not erased"
    assert b.call("arm_program", b.store + 4, PAYLOAD, 8) == ERR_ARG, "misaligned"
    assert b.call("arm_erase", b.store - page) == ERR_ARG, "outside the store"


def test_programmed_data_reads_back_with_the_data_cache_on(board):
    """Finding 1: DCEN on during program/erase leaves stale lines; the driver must clear DCEN
    first and reset the data cache after (ST errata, HAL_FLASH_Program / FLASH_FlushCaches)."""
    name, image = board
    b = Board(image, name, dcen=True)
    data = random.Random(name).randbytes(300)
    assert b.save(data) == OK
    assert b.boot()[1:] == (data, 1)
    acr = b.state["regs"][M["FLASH_ACR"]]
    assert acr & M["ACR_DCEN"] and acr & M["ACR_ICEN"], "caches enabled again after the save"


def test_a_reused_slot_is_erased_even_where_it_reads_0xff(board):
    """Finding 2: a double-word programmed with 0xFF is not erased; the save must not skip it."""
    name, image = board
    b = Board(image, name, dcen=False)
    page = b.g["page"]
    records = [b"\x01" * 8 + b"\xff" * (2 * page) + bytes([i]) * 8 for i in range(4)]
    for seq, rec in enumerate(records, 1):   # 2 slots: the third save reuses the first slot
        assert b.save(rec, chunk=len(rec)) == OK, f"save {seq}"
        assert b.boot()[1:] == (rec, seq)


def test_a_torn_commit_boots_the_previous_record(board):
    """Finding 3: a power cut while the commit double-word programs leaves it torn; reading it
    raises NMI (ECCD). The firmware must take it as an invalid slot, not reset forever."""
    name, image = board
    b = Board(image, name, dcen=False)
    old, new = b"old record" * 20, b"new record" * 20
    assert b.save(old) == OK
    snap = b.snapshot()
    events = b.record(lambda: b.save(new))
    commit = [k for k, kind, off in events if kind == "store"][-1]   # the commit's second word
    b.restore(snap)
    b.reset()
    assert b.save(new, cut_at=commit) is None, "cut while the commit double-word programs (BSY)"
    assert M["TORN"] in b.state["array"]["st"], "the cut tore a double-word"
    rc, got, seq = b.boot()
    assert (rc, got, seq) == (OK, old, 1)
    assert b.nmis >= 1, "the torn double-word was read (ECCD + NMI) and survived"
    assert b.save(new) == OK and b.boot()[1:] == (new, 2), "the next save recovers the slot"


def _is_it(halfword: bytes) -> bool:
    """A Thumb IT instruction (0xBFxy with a mask; 0xBFx0 are the hints)."""
    hw = int.from_bytes(halfword, "little")
    return hw & 0xFF00 == 0xBF00 and hw & 0xF != 0


def _sweep(b, cuts, old, prev, new, snap, trace=None, recheck=16):
    """Cut the save of `new` after each instruction count in `cuts`; every boot must give prev or
    new, bit for bit, with its seq; returns how many boots met a torn double-word (NMI).

    `b` only saves and is cut (counted runs); a second machine boots on what survived each cut.
    A boot is a function of those survivors (Board.survivors): a state booted before is not
    booted again (most cuts between two flash accesses leave the same one), except every
    `recheck`-th repeat, which is booted and must give the same. `trace`: the address of every
    instruction of the uncut save; each cut must stop at the one after its count."""
    boots = Board(*b.args)
    torn_boots = 0
    booted: dict = {}
    repeats = 0
    for k in cuts:
        b.restore(snap)
        b.reset()
        assert b.save(new, cut_at=k) is None, f"instruction {k} did not cut the save"
        if trace is not None:
            pc, after_it = b.uc.reg_read(A.UC_ARM_REG_PC), _is_it(b.mem(trace[k - 1], 2))
            # a count never stops inside an IT block: after an IT it stops past the one it runs
            assert pc == trace[k] or (after_it and pc == trace[k + 1]), f"the cut after {k} stopped elsewhere"
        key = b.survivors()
        seen = booted.get(key)
        if seen is None or repeats % recheck == 0:
            boots.take(key)
            again = (*boots.boot(), boots.nmis)
            assert seen in (None, again), f"cut after instruction {k}: the same state booted differently"
            booted[key] = again
        repeats += seen is not None
        rc, got, seq, nmis = booted[key]
        assert rc == OK and (got, seq) in ((prev, 2), (new, 3)), f"cut after instruction {k}: {rc} seq {seq}"
        torn_boots += nmis > 0
    return torn_boots


def _prepare_sweep(b, name):
    rnd = random.Random(name)
    old, prev, new = (rnd.randbytes(41 + i) for i in range(3))
    assert b.save(old) == OK and b.save(prev) == OK
    snap = b.snapshot()
    events = b.record(lambda: b.save(new))
    total = b.icount
    assert b.boot()[1:] == (new, 3)
    return old, prev, new, snap, events, total


def test_power_cut_at_every_flash_access_of_a_save(board):
    """A cut anywhere between two flash accesses leaves the flash as a cut right before the
    second one does (RAM is lost either way): cutting before and after every register access
    and array store, and at every poll that sees BSY (inside each erase and program: torn
    double-words), covers every instruction of the save. Torn ones read back with ECCD + NMI."""
    name, image = board
    b = Board(image, name)
    old, prev, new, snap, events, total = _prepare_sweep(b, name)
    cuts = sorted({k for e, _, _ in events for k in (e - 1, e) if 0 < k < total})
    assert len([e for e in events if e[1] == "busy"]) >= 5, "erase and programs keep BSY set"
    torn = _sweep(b, cuts, old, prev, new, snap)
    assert torn > 0, "some cuts tore a double-word that the next boot read"
    # and then the board saves again as if nothing happened
    b.restore(snap)
    b.reset()
    assert b.save(new, cut_at=cuts[len(cuts) // 2]) is None
    assert b.save(new) == OK and b.boot()[1:] == (new, 3)


@pytest.mark.slow
def test_power_cut_at_every_instruction_of_a_save(tmp_path_factory):
    """The literal sweep, on one geometry: the power fails after instruction k, for every k."""
    name = "nucleo_l476rg"
    b = Board(build(tmp_path_factory, name), name)
    old, prev, new, snap, _, total = _prepare_sweep(b, name)
    b.restore(snap)
    b.reset()                                   # as every cut starts
    b.record(lambda: b.save(new))
    assert len(b.trace) == total
    assert _sweep(b, range(1, total), old, prev, new, snap, b.trace) > 0

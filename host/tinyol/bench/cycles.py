"""Cortex-M4 cycle estimate of a bench harness ELF: `tinyol bench --cycles`.

QEMU -icount counts instructions (tinyol.bench.icount): deterministic, but an instruction is not a
cycle. This module runs the *same* bare-metal harness ELF (mcu/bench/) in unicorn, traces the executed
instruction stream and every data read from flash, and prices each instruction with

* the Cortex-M4 Technical Reference Manual's timings (ARM 100166, table 3-1 "Processor instruction set
  summary", and the FPU instruction table): 1 cycle for data processing, MUL/MLA/MLS and the DSP
  multiply-accumulates; loads 2 cycles, 1 when pipelined behind a load or store; stores 2, 1 behind a
  load; LDRD/STRD 3; LDM/STM/PUSH/POP 1 + N; taken branches 1 + P; divides 2-12; VFP arithmetic 1,
  VMLA/VMLS/VFMA family 3, VDIV/VSQRT 14, VLDR/VSTR 2, VLDM/VSTM/VPUSH/VPOP 1 + N; a load/store whose
  address register was written by the instruction just before it stalls 1 cycle (no AGU forwarding);
* the STM32L4 memory system as ST's reference manuals (RM0351 L47x/L48x, RM0394 L43x, RM0432 L4+) lay
  it out: flash read in 64-bit words with `ws` wait states (4 at 80 MHz range 1, 5 at 120 MHz on the
  L4+), the ART accelerator's instruction prefetch (the next sequential 64-bit word is read while the
  current one executes), its 1 KB instruction cache and its 256 B data cache (LRU, inserted on every
  flash delivery), SRAM at zero wait.

The harness reads its SysTick counter through `tol_bench_ticks()`; here that function is replaced by
the model's own cycle counter, so every region the harness times (the whole inference, each operator)
is measured exactly where QEMU measures instructions, and the instruction count of each region comes
out beside its cycles (a cross-check with -icount).

What is uncertain, and how it shows: P (the pipeline refill of a taken branch, 1-3 cycles in the TRM)
is taken as 1 for immediate branches (the M4 speculates their target), 2 for branches through a
register or a load, +1 for a 32-bit target at a half-word address; `low`/`high` re-price every taken
branch at P = 1 and P = 3. The ART's line organisation and its replacement policy are not described
beyond "32 lines of 4 x 64 bits, LRU" (I) and "8 lines of 4 x 64 bits" (D); we keep 64-bit entries in
a fully associative LRU of the same capacity. Divides are priced at 7 (2-12). Bus contention between
the D-code and I-code buses, and the core's own 3-word prefetch buffer, are not modelled. See
docs/benchmarks.md ("Cycles") for the validation against published silicon figures.
"""
from __future__ import annotations

import struct
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TinyolError

FLASH_BASE, FLASH_SIZE = 0x0800_0000, 0x20_0000       # 2 MB covers every supported part
SRAM2_BASE, SRAM2_SIZE = 0x1000_0000, 0x1_0000
SRAM1_BASE, SRAM1_SIZE = 0x2000_0000, 0xA_0000        # 640 KB (L4R5); the L475 harness uses 96 KB
PERIPH_BASE, PERIPH_SIZE = 0x4000_0000, 0x1000_0000   # plain memory: registers hold what was written
SCS_BASE, SCS_SIZE = 0xE000_0000, 0x10_0000
# A harness linked for QEMU's mps2-an386 (tflm_bench.MPS2: a TFLM arena or our activations the
# L475's SRAM cannot hold) has its code at 0 and its data in 4 MB at 0x20000000. It is priced as
# the same code in an STM32L4's flash, which the part aliases at 0 when it boots from flash (the
# reference manuals' "Boot configuration"): every ART fetch and wait state as at 0x08000000, whose low address
# bits are the same; SRAM is zero-wait wherever it is (the data's size is the harness's to check).
MPS2_CODE_SIZE, MPS2_DATA_SIZE = 0x40_0000, 0x40_0000


def memory_map(segments) -> tuple[int, list[tuple[int, int]]]:
    """(flash base, regions to map) for a harness ELF's segments: the STM32L4 layout, or the
    mps2-an386 one when its code lies below the L4's flash."""
    if min(addr for addr, _, _ in segments) < FLASH_BASE:
        return 0, [(0, MPS2_CODE_SIZE), (SRAM1_BASE, MPS2_DATA_SIZE), (PERIPH_BASE, PERIPH_SIZE),
                   (SCS_BASE, SCS_SIZE)]
    return FLASH_BASE, [(FLASH_BASE, FLASH_SIZE), (SRAM2_BASE, SRAM2_SIZE), (SRAM1_BASE, SRAM1_SIZE),
                        (PERIPH_BASE, PERIPH_SIZE), (SCS_BASE, SCS_SIZE)]


@dataclass(frozen=True)
class MemConfig:
    """One board's clock and flash: wait states and the ART accelerator."""
    name: str
    mhz: int
    ws: int
    prefetch: bool = True
    icache_bytes: int = 1024
    dcache_bytes: int = 256
    word: int = 8               # flash read width (bytes)


# the boards of tinyol.boards, at their firmware's clock (voltage range 1; L4+ range 1 boost)
BOARDS = {
    "nucleo_l476rg": MemConfig("NUCLEO-L476RG, 80 MHz, 4 WS", 80, 4),
    "nucleo_l432kc": MemConfig("NUCLEO-L432KC, 80 MHz, 4 WS", 80, 4),
    "b_l475e_iot01a": MemConfig("B-L475E-IOT01A, 80 MHz, 4 WS", 80, 4),
    "nucleo_l4r5zi": MemConfig("NUCLEO-L4R5ZI, 120 MHz, 5 WS", 120, 5),
}
ZERO_WAIT = MemConfig("zero-wait memory (TRM timings only)", 0, 0, prefetch=False, icache_bytes=0,
                      dcache_bytes=0)

# ---------------------------------------------------------------------------- instruction timings

P_IMM = 1       # taken immediate branch: the M4 speculates the target in decode
P_REG = 2       # branch through a register / a load / a pop
DIV_CYCLES = 7  # SDIV/UDIV: 2-12 (early termination)

_LOADS = {"ldr", "ldrb", "ldrh", "ldrsb", "ldrsh", "ldrt", "ldrbt", "ldrht", "ldrsbt", "ldrsht", "ldrex",
          "ldrexb", "ldrexh", "vldr"}
_STORES = {"str", "strb", "strh", "strt", "strbt", "strht", "strex", "strexb", "strexh", "vstr"}
_MULTI = {"ldm", "ldmia", "ldmfd", "ldmdb", "ldmea", "stm", "stmia", "stmea", "stmdb", "stmfd", "push",
          "pop", "vldmia", "vldmdb", "vstmia", "vstmdb", "vpush", "vpop", "vldm", "vstm"}
_VFP3 = {"vmla", "vmls", "vnmla", "vnmls", "vfma", "vfms", "vfnma", "vfnms"}
_VFP14 = {"vdiv", "vsqrt"}
_COND_BRANCH_END = ("b", "cbz", "cbnz")


@dataclass
class Insn:
    addr: int
    size: int
    cycles: int            # TRM cycles, zero-wait memory, not taken / not pipelined
    kind: str              # "alu" | "load" | "store" | "ls2" | "multi" | "branch" | "vfp" | ...
    taken_extra: int = 0   # added when this (conditional) instruction changes the flow
    reads: tuple = ()
    writes: tuple = ()
    addr_regs: tuple = ()  # registers that form a load/store address
    conditional_flow: bool = False
    p_events: int = 0      # taken-branch refills counted in `cycles` (for the low/high bounds)
    p_reg: bool = False    # its refill is a register/load one (P_REG), else an immediate one (P_IMM)
    load: tuple | None = None  # (base, index, shift, disp, nbytes, post, writeback) of a data read
    delta: tuple | None = None  # (reg, imm): this instruction adds imm to reg (add/sub #imm, writeback)


def _mn(i) -> str:
    m = i.mnemonic.split(".")[0]
    return m


def _base_mnemonic(m: str) -> str:
    """Strip a condition code (inside an IT block capstone writes e.g. 'addeq', 'popne')."""
    for cc in ("eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le",
               "al"):
        if m.endswith(cc) and len(m) > len(cc) and m[:-len(cc)] in _KNOWN_ROOTS:
            return m[:-len(cc)]
    return m


_KNOWN_ROOTS = (_LOADS | _STORES | _MULTI | _VFP3 | _VFP14 |
                {"b", "bl", "bx", "blx", "mov", "movs", "add", "adds", "sub", "subs", "ldrd", "strd", "tbb",
                 "tbh", "sdiv", "udiv", "cmp", "it", "nop", "mul", "mla", "muls", "orr", "and", "eor", "lsl", "lsr",
                 "asr", "vmov", "vadd", "vsub", "vmul", "vcvt", "vcmp", "vmrs", "rsb", "bic", "mvn", "str"})


def _target_penalty(target: int, code: bytes, base: int) -> int:
    """+1 when the branch target is a 32-bit instruction at a half-word (not word) address."""
    off = target - base
    if target % 4 == 2 and 0 <= off < len(code) - 1:
        hw = code[off] | code[off + 1] << 8
        if (hw >> 11) in (0b11101, 0b11110, 0b11111):
            return 1
    return 0


def classify(i, code_at=None) -> Insn:
    """The TRM timing of one capstone instruction (detail on)."""
    from capstone import arm as A

    m = _base_mnemonic(_mn(i))
    ops = i.operands
    regs_read, regs_write = i.regs_access()
    reads, writes = tuple(regs_read), tuple(regs_write)
    pc = A.ARM_REG_PC
    writes_pc = pc in writes or any(o.type == A.ARM_OP_REG and o.reg == pc and o.access & 2 for o in ops)
    cond = i.cc not in (A.ARM_CC_AL, A.ARM_CC_INVALID)
    addr_regs = ()
    mem = [o for o in ops if o.type == A.ARM_OP_MEM]
    if mem:
        addr_regs = tuple(r for r in (mem[0].mem.base, mem[0].mem.index) if r)
    ins = Insn(i.address, i.size, 1, "alu", reads=reads, writes=writes, addr_regs=addr_regs)
    _describe_access(i, m, ins)

    def target_p(default):
        p = default
        imm = [o.imm for o in ops if o.type == A.ARM_OP_IMM]
        if imm and code_at is not None:
            p += code_at(imm[-1])
        return p

    if m in ("b", "cbz", "cbnz"):
        p = target_p(P_IMM)
        if cond or m in ("cbz", "cbnz"):
            ins.cycles, ins.taken_extra, ins.conditional_flow, ins.kind = 1, p, True, "branch"
        else:
            ins.cycles, ins.kind, ins.p_events = 1 + p, "branch", 1
        return ins
    if m == "bl":
        ins.cycles, ins.kind, ins.p_events = 1 + target_p(P_IMM), "branch", 1
        return ins
    ins.p_reg = m not in ("b", "bl", "cbz", "cbnz")
    if m in ("bx", "blx"):
        ins.cycles, ins.kind, ins.p_events = 1 + P_REG, "branch", 1
        return ins
    if m in ("tbb", "tbh"):
        ins.cycles, ins.kind, ins.p_events = 2 + P_REG, "branch", 1
        return ins
    if m in _MULTI:
        n = sum(1 for o in ops if o.type == A.ARM_OP_REG) - (0 if m in ("push", "pop", "vpush", "vpop") else 1)
        if m.startswith("v"):
            # D registers move two words each
            n = sum(2 if capstone_reg_is_d(o.reg) else 1 for o in ops if o.type == A.ARM_OP_REG) - (
                0 if m in ("vpush", "vpop") else 1)
        ins.cycles, ins.kind = 1 + max(n, 1), "multi"
        if writes_pc:
            ins.kind = "branch"
            if cond:
                ins.cycles, ins.taken_extra, ins.conditional_flow = 1, max(n, 1) + P_REG, True
            else:
                ins.cycles += P_REG
                ins.p_events = 1
        return ins
    if m in ("ldrd", "strd"):
        ins.cycles, ins.kind = 3, "ls2"
        return ins
    if m in _LOADS:
        ins.cycles, ins.kind = 2, "load"
        if writes_pc:
            ins.kind = "branch"
            if cond:
                ins.cycles, ins.taken_extra, ins.conditional_flow = 1, 1 + P_REG, True
            else:
                ins.cycles, ins.p_events = 2 + P_REG, 1
        return ins
    if m in _STORES:
        ins.cycles, ins.kind = 2, "store"
        return ins
    if m in ("sdiv", "udiv"):
        ins.cycles, ins.kind = DIV_CYCLES, "div"
        return ins
    if m in _VFP3:
        ins.cycles, ins.kind = 3, "vfp"
        return ins
    if m in _VFP14:
        ins.cycles, ins.kind = 14, "vfp"
        return ins
    if m == "vmov" and sum(1 for o in ops if o.type == A.ARM_OP_REG) >= 3:
        ins.cycles, ins.kind = 2, "vfp"           # two core registers <-> a D register / two S registers
        return ins
    if m in ("dsb", "dmb", "isb"):
        ins.cycles = 1 + (P_REG if m == "isb" else 0)
        return ins
    if writes_pc:                                  # mov pc / add pc
        ins.kind = "branch"
        if cond:
            ins.cycles, ins.taken_extra, ins.conditional_flow = 1, P_REG, True
        else:
            ins.cycles, ins.p_events = 1 + P_REG, 1
        return ins
    if m.startswith("v"):
        ins.kind = "vfp"
    return ins


_READS = _LOADS | {"ldrd", "ldm", "ldmia", "ldmfd", "ldmdb", "ldmea", "pop", "vldmia", "vldmdb", "vpop", "vldm",
                   "tbb", "tbh"}


def _describe_access(i, m: str, ins: Insn) -> None:
    """What the tracer needs to find a data read's address without a memory hook (unicorn's memory
    hooks corrupt Thumb IT-block state): base/index registers, displacement, size; and the register
    updates (writeback, add/sub #imm) that move a base register within a block."""
    from capstone import arm as A

    ops = i.operands
    regs = [o.reg for o in ops if o.type == A.ARM_OP_REG]
    wb = bool(getattr(i, "writeback", False))
    if m in _READS:
        mem = [o for o in ops if o.type == A.ARM_OP_MEM]
        if mem:
            mm = mem[0].mem
            post = bool(getattr(i, "post_index", False)) or (wb and any(o.type == A.ARM_OP_IMM for o in ops[2:]))
            imm_after = [o.imm for o in ops if o.type == A.ARM_OP_IMM]
            disp = mm.disp if not post else 0
            if m in ("ldrb", "ldrsb", "ldrbt", "ldrsbt", "ldrexb", "tbb"):
                n = 1
            elif m in ("ldrh", "ldrsh", "ldrht", "ldrsht", "ldrexh", "tbh"):
                n = 2
            elif m == "ldrd":
                n = 8
            elif m == "vldr":
                n = 8 if capstone_reg_is_d(regs[0]) else 4
            else:
                n = 4
            ins.load = (mm.base, mm.index or 0, mm.lshift if hasattr(mm, "lshift") else 0, disp, n)
            if wb and mm.base:
                step = (imm_after[-1] if post and imm_after else mm.disp)
                ins.delta = (mm.base, step)
        elif regs:
            # LDM/POP/VLDM: base register (sp for pop), N words
            base = A.ARM_REG_SP if m in ("pop", "vpop") else regs[0]
            lst = regs if m in ("pop", "vpop") else regs[1:]
            n = 4 * sum(2 if capstone_reg_is_d(r) else 1 for r in lst)
            down = m.endswith("db")
            ins.load = (base, 0, 0, -n if down else 0, n)
            if wb or m in ("pop", "vpop"):
                ins.delta = (base, -n if down else n)
        return
    if m in _STORES or m in _MULTI or m == "strd":
        mem = [o for o in ops if o.type == A.ARM_OP_MEM]
        if mem and wb and mem[0].mem.base:
            imm_after = [o.imm for o in ops if o.type == A.ARM_OP_IMM]
            post = bool(getattr(i, "post_index", False))
            ins.delta = (mem[0].mem.base, imm_after[-1] if post and imm_after else mem[0].mem.disp)
        elif not mem and regs and (wb or m == "push"):
            base = A.ARM_REG_SP if m in ("push", "vpush") else regs[0]
            lst = regs if m in ("push", "vpush") else regs[1:]
            n = 4 * sum(2 if capstone_reg_is_d(r) else 1 for r in lst)
            ins.delta = (base, -n if m in ("push", "vpush") or m.endswith("db") else n)
        return
    if m in ("add", "adds", "sub", "subs", "addw", "subw") and len(ops) >= 2:
        imm = [o.imm for o in ops if o.type == A.ARM_OP_IMM]
        if imm and len(regs) >= 1 and (len(regs) == 1 or regs[0] == regs[1]):
            ins.delta = (regs[0], imm[0] if m.startswith("add") else -imm[0])


def capstone_reg_is_d(reg: int) -> bool:
    from capstone import arm as A

    return A.ARM_REG_D0 <= reg <= A.ARM_REG_D31


# ---------------------------------------------------------------------------- a decoded block

@dataclass
class Block:
    addr: int
    end: int
    insns: list[Insn]
    base: int                      # cycles of every instruction but a conditional flow change at the end
    instr: int
    p_events: int
    p_reg: int
    cond_end: Insn | None          # a conditional branch ending the block: priced when the next block is known
    words: tuple                   # (64-bit flash word index, cycle offset where it is first needed)
    in_flash: bool
    reads: tuple = ()              # (base, delta, index, shift, disp, nbytes, static address or None)
    regs: tuple = ()               # registers to read at block start


def price_block(insns: list[Insn], word: int = 8, flash_base: int = FLASH_BASE) -> Block:
    """Static cycles of a straight-line run of instructions: TRM costs, load/store pipelining, the
    address-generation stall. A conditional branch at the end is left to the tracer."""
    total = 0
    prev = None
    offsets = []
    for k, ins in enumerate(insns):
        c = ins.cycles
        if ins.kind == "load" and prev is not None and prev.kind in ("load", "store") and \
                not (set(prev.writes) & set(ins.addr_regs)) and prev.kind == "load":
            c -= 1                                         # LDR after LDR: pipelined
        elif ins.kind == "store" and prev is not None and prev.kind == "load" and \
                not (set(prev.writes) & set(ins.addr_regs)):
            c -= 1                                         # STR after LDR: pipelined
        if ins.kind in ("load", "store", "ls2", "multi") and prev is not None and prev.kind in ("alu",) and \
                set(prev.writes) & set(ins.addr_regs):
            c += 1                                         # address from the instruction just before
        offsets.append(total)
        if k == len(insns) - 1 and ins.conditional_flow:
            break
        total += c
        prev = ins
    last = insns[-1]
    cond_end = last if last.conditional_flow else None
    words = []
    seen = set()
    for ins, off in zip(insns, offsets):
        for a in (ins.addr, ins.addr + ins.size - 1):
            w = a // word
            if w not in seen:
                seen.add(w)
                words.append((w, off))
    p_events = sum(i.p_events for i in insns)
    p_reg = sum(i.p_events for i in insns if i.p_reg)
    from capstone import arm as A

    reads = []
    delta: dict[int, int] = {}
    for ins in insns:
        if ins.load is not None:
            base, index, shift, disp, n = ins.load
            if base == A.ARM_REG_PC:
                reads.append((0, 0, 0, 0, 0, n, ((ins.addr + 4) & ~3) + disp))
            elif base:
                reads.append((base, delta.get(base, 0), index, shift, disp, n, None))
        if ins.delta is not None:
            r, d = ins.delta
            delta[r] = delta.get(r, 0) + d
    regs = tuple(sorted({r for rd in reads for r in (rd[0], rd[2]) if r}))
    return Block(insns[0].addr, last.addr + last.size, insns, total, len(insns), p_events, p_reg, cond_end,
                 tuple(words), flash_base <= insns[0].addr < flash_base + FLASH_SIZE, tuple(reads), regs)


# ---------------------------------------------------------------------------- the memory system

class Art:
    """Flash + ART accelerator of one MemConfig: returns the stall cycles of each access."""

    def __init__(self, cfg: MemConfig):
        self.cfg = cfg
        self.ws = cfg.ws
        self.icap = cfg.icache_bytes // cfg.word
        self.dcap = cfg.dcache_bytes // cfg.word
        self.icache: OrderedDict = OrderedDict()
        self.dcache: OrderedDict = OrderedDict()
        self.pf_word = -1
        self.pf_ready = 0
        self.cur = -1
        self.fetch_stall = 0
        self.data_stall = 0
        self.imiss = self.ihit = self.pfhit = self.dmiss = self.dhit = 0

    def _insert(self, cache, cap, w):
        if cap <= 0:
            return
        cache[w] = True
        if len(cache) > cap:
            cache.popitem(last=False)

    def fetch(self, w: int, now: int) -> int:
        """Stall to fetch 64-bit word `w` needed at cycle `now`."""
        if w == self.cur:
            return 0
        self.cur = w
        ws = self.ws
        if ws == 0:
            return 0
        ic = self.icache
        if w in ic:
            ic.move_to_end(w)
            self.ihit += 1
            stall = 0
        elif self.cfg.prefetch and w == self.pf_word:
            stall = max(0, self.pf_ready - now)
            self.pfhit += 1
            self._insert(ic, self.icap, w)
        else:
            stall = ws
            self.imiss += 1
            self._insert(ic, self.icap, w)
        if self.cfg.prefetch and self.pf_word != w + 1 and (stall or self.pf_ready <= now):
            # the flash interface, when idle, reads the next sequential word while this one executes
            # (a request while a prefetch is in flight is not queued)
            self.pf_word, self.pf_ready = w + 1, now + stall + ws + 1
        self.fetch_stall += stall
        return stall

    def data(self, addr: int, size: int) -> int:
        if self.ws == 0:
            return 0
        word = self.cfg.word
        stall = 0
        for w in {addr // word, (addr + size - 1) // word}:
            dc = self.dcache
            if w in dc:
                dc.move_to_end(w)
                self.dhit += 1
            else:
                self.dmiss += 1
                stall += self.ws
                self._insert(dc, self.dcap, w)
        self.data_stall += stall
        return stall


# ---------------------------------------------------------------------------- the ELF

@dataclass
class Elf:
    segments: list[tuple[int, bytes, int]]   # (paddr, data, memsz)
    entry_sp: int
    entry_pc: int
    symbols: dict[str, int]


def read_elf(path: Path) -> Elf:
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 1 or data[5] != 1:
        raise TinyolError(f"{path}: not a 32-bit little-endian ELF")
    (e_phoff, e_shoff) = struct.unpack_from("<II", data, 28)
    e_phentsize, e_phnum, e_shentsize, e_shnum = struct.unpack_from("<HHHH", data, 42)
    segs = []
    for k in range(e_phnum):
        p_type, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, _, _ = struct.unpack_from(
            "<IIIIIIII", data, e_phoff + k * e_phentsize)
        if p_type == 1 and p_filesz:
            segs.append((p_paddr, data[p_offset:p_offset + p_filesz], p_memsz))
    syms = {}
    sh = [struct.unpack_from("<IIIIIIIIII", data, e_shoff + k * e_shentsize) for k in range(e_shnum)]
    for s in sh:
        if s[1] == 2:                                   # SHT_SYMTAB
            strtab = sh[s[6]]
            for j in range(s[5] // 16):
                st_name, st_value, _, st_info, _, _ = struct.unpack_from("<IIIBBH", data, s[4] + 16 * j)
                if st_info & 0xF == 2:                  # STT_FUNC
                    end = data.index(b"\0", strtab[4] + st_name)
                    syms[data[strtab[4] + st_name:end].decode()] = st_value & ~1
    flash = min(segs, key=lambda s: s[0])
    sp, pc = struct.unpack_from("<II", flash[1], 0)
    return Elf(segs, sp, pc & ~1, syms)


# ---------------------------------------------------------------------------- the tracer

@dataclass
class Stamp:
    instr: int
    cycles: dict[str, int]        # per MemConfig name
    p_events: int
    p_reg: int = 0


@dataclass
class Trace:
    stamps: list[Stamp]
    output: str
    exit_code: int | None
    configs: list[MemConfig]
    stats: dict[str, dict] = field(default_factory=dict)


def run_elf(elf_path: Path, configs: list[MemConfig], *, max_instr: int = 2_000_000_000,
            ticks_symbol: str = "tol_bench_ticks") -> Trace:
    """Run a bench harness ELF to its semihosting exit, pricing every executed instruction for each
    MemConfig; every call of `ticks_symbol` returns config 0's cycle count and records a Stamp."""
    try:
        import capstone
        from unicorn import (UC_ARCH_ARM, UC_HOOK_BLOCK, UC_HOOK_CODE, UC_HOOK_INTR, UC_HOOK_MEM_READ,
                             UC_MODE_MCLASS, UC_MODE_THUMB, Uc, UcError)
        from unicorn import arm_const as U
    except ImportError as e:
        raise TinyolError(f"the cycle model needs unicorn and capstone ({e.name} is missing)",
                          hint="pip install 'tinyol[cycles]'") from e
    elf = read_elf(elf_path)
    if ticks_symbol not in elf.symbols:
        raise TinyolError(f"{elf_path}: no {ticks_symbol}() (not a tinyol bench harness)")
    ticks_addr = elf.symbols[ticks_symbol]
    uc = Uc(UC_ARCH_ARM, UC_MODE_THUMB | UC_MODE_MCLASS)
    uc.ctl_set_cpu_model(U.UC_CPU_ARM_CORTEX_M4)
    flash_base, regions = memory_map(elf.segments)
    for base, size in regions:
        uc.mem_map(base, size)
    code = bytearray(FLASH_SIZE)
    for addr, blob, memsz in elf.segments:
        uc.mem_write(addr, blob)
        if flash_base <= addr < flash_base + FLASH_SIZE:
            code[addr - flash_base:addr - flash_base + len(blob)] = blob
    # the clock set-up polls RCC and SysTick: make them read "ready" (RCC_CR MSIRDY|PLLRDY follow
    # MSION|PLLON, CFGR.SWS follows SW, SysTick counts)
    rcc = 0x4002_1000

    md = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB | capstone.CS_MODE_MCLASS)
    md.detail = True

    def code_at(target):
        return _target_penalty(target, code, flash_base)

    arts = [Art(c) for c in configs]
    from capstone import arm as A

    ucreg = {getattr(A, f"ARM_REG_{n}"): getattr(U, f"UC_ARM_REG_{n}")
             for n in [f"R{k}" for k in range(13)] + ["SP", "LR", "PC"] if hasattr(A, f"ARM_REG_{n}")}
    for alias, n in (("SB", "R9"), ("SL", "R10"), ("FP", "R11"), ("IP", "R12")):
        if hasattr(A, f"ARM_REG_{alias}"):
            ucreg[getattr(A, f"ARM_REG_{alias}")] = getattr(U, f"UC_ARM_REG_{n}")
    blocks: dict[tuple[int, int], Block] = {}
    st = {"cyc": 0, "instr": 0, "p": 0, "preg": 0, "prev": None, "out": [], "exit": None}
    cyc = [0] * len(configs)
    stamps: list[Stamp] = []

    def decode(addr, size) -> Block:
        raw = bytes(uc.mem_read(addr, size))
        insns = [classify(i, code_at) for i in md.disasm(raw, addr)]
        if not insns:
            raise TinyolError(f"cannot decode the code at {addr:#x}")
        return price_block(insns, flash_base=flash_base)

    def settle(next_addr):
        """Price the previous block's conditional flow change, now that the next address is known."""
        prev = st["prev"]
        if prev is None or prev.cond_end is None:
            return
        ins = prev.cond_end
        extra = ins.cycles + (ins.taken_extra if next_addr != prev.end else 0)
        if next_addr != prev.end:
            st["p"] += 1
            st["preg"] += ins.p_reg
        for k in range(len(cyc)):
            cyc[k] += extra

    def on_block(uc_, addr, size, ud):
        if addr == ticks_addr:
            return
        b = blocks.get((addr, size))
        if b is None:
            b = blocks[(addr, size)] = decode(addr, size)
        settle(addr)
        st["instr"] += b.instr
        st["p"] += b.p_events
        st["preg"] += b.p_reg
        if b.in_flash:
            for k, art in enumerate(arts):
                start = cyc[k]
                stall = 0
                for w, off in b.words:
                    stall += art.fetch(w, start + off + stall)
                cyc[k] = start + b.base + stall
        else:
            for k in range(len(cyc)):
                cyc[k] += b.base
        st["prev"] = b
        if b.reads:
            rv = {r: uc_.reg_read(ucreg[r]) for r in b.regs}
            for base, d, index, shift, disp, n, static in b.reads:
                a = static if static is not None else (
                    rv[base] + d + disp + ((rv[index] << shift) if index else 0)) & 0xFFFFFFFF
                if flash_base <= a < flash_base + FLASH_SIZE:
                    for k, art in enumerate(arts):
                        cyc[k] += art.data(a, n)

    def on_ticks(uc_, addr, size, ud):
        settle(addr)
        st["prev"] = None
        stamps.append(Stamp(st["instr"], dict(zip((c.name for c in configs), cyc)), st["p"], st["preg"]))
        v = cyc[0]
        uc_.reg_write(U.UC_ARM_REG_R0, v & 0xFFFFFFFF)
        uc_.reg_write(U.UC_ARM_REG_R1, v >> 32)
        uc_.reg_write(U.UC_ARM_REG_PC, uc_.reg_read(U.UC_ARM_REG_LR) | 1)

    def on_intr(uc_, intno, ud):
        pc = uc_.reg_read(U.UC_ARM_REG_PC)
        if intno != 7:
            st["exit"] = -intno
            uc_.emu_stop()
            return
        op = uc_.reg_read(U.UC_ARM_REG_R0)
        arg = uc_.reg_read(U.UC_ARM_REG_R1)
        if op == 0x04:                                 # SYS_WRITE0
            s = bytearray()
            while True:
                chunk = bytes(uc_.mem_read(arg + len(s), 64))
                z = chunk.find(b"\0")
                if z >= 0:
                    s += chunk[:z]
                    break
                s += chunk
            st["out"].append(s.decode(errors="replace"))
        elif op in (0x18, 0x20):                       # SYS_EXIT / SYS_EXIT_EXTENDED
            st["exit"] = struct.unpack("<II", bytes(uc_.mem_read(arg, 8)))[1] if op == 0x20 else 0
            uc_.emu_stop()
            return
        uc_.reg_write(U.UC_ARM_REG_R0, 0)
        uc_.reg_write(U.UC_ARM_REG_PC, (pc + 2) | 1)

    def on_periph_read(uc_, access, addr, size, value, ud):
        # RCC ready flags follow their enables; SysTick's current value never reads 0
        if addr == rcc:
            v = struct.unpack("<I", bytes(uc_.mem_read(rcc, 4)))[0]
            v = (v & ~((1 << 1) | (1 << 25))) | ((v & 1) << 1) | (((v >> 24) & 1) << 25)
            uc_.mem_write(rcc, struct.pack("<I", v))
        elif addr == rcc + 0x08:
            v = struct.unpack("<I", bytes(uc_.mem_read(rcc + 8, 4)))[0]
            uc_.mem_write(rcc + 8, struct.pack("<I", (v & ~0xC) | ((v & 3) << 2)))
        elif addr == 0xE000_E018:
            uc_.mem_write(addr, struct.pack("<I", 0x00FF_FFFF - (cyc[0] & 0xFFFFFF) or 1))

    uc.hook_add(UC_HOOK_BLOCK, on_block)
    uc.hook_add(UC_HOOK_CODE, on_ticks, begin=ticks_addr, end=ticks_addr)
    uc.hook_add(UC_HOOK_MEM_READ, on_periph_read, begin=rcc, end=rcc + 0x0F)
    uc.hook_add(UC_HOOK_MEM_READ, on_periph_read, begin=0xE000_E018, end=0xE000_E01B)
    uc.hook_add(UC_HOOK_INTR, on_intr)
    uc.reg_write(U.UC_ARM_REG_SP, elf.entry_sp)
    try:
        uc.emu_start(elf.entry_pc | 1, 0xFFFF_FFFF)    # no count=: unicorn then breaks IT blocks
    except UcError as e:
        pc = uc.reg_read(U.UC_ARM_REG_PC)
        raise TinyolError(f"{Path(elf_path).name}: the cycle model's emulator stopped at {pc:#x}: {e}",
                          hint="the harness may use a peripheral the model does not emulate") from e
    stats = {c.name: {"fetch_stall": a.fetch_stall, "data_stall": a.data_stall, "icache_hits": a.ihit,
                      "prefetch_hits": a.pfhit, "fetch_misses": a.imiss, "dcache_hits": a.dhit,
                      "dcache_misses": a.dmiss} for c, a in zip(configs, arts)}
    return Trace(stamps, "".join(st["out"]), st["exit"], list(configs), stats)


# ---------------------------------------------------------------------------- harness regions

@dataclass
class Region:
    """One timed region of the harness: instructions, estimated cycles per board, P-event count."""
    instr: int
    cycles: dict[str, int]
    p_events: int

    p_reg: int = 0

    def low_high(self, name: str) -> tuple[int, int]:
        """Cycles with every taken-branch refill at P = 1 and at P = 3 (the TRM's range)."""
        c = self.cycles[name]
        p_imm = self.p_events - self.p_reg
        return c - self.p_reg * (P_REG - 1), c + p_imm * (3 - P_IMM) + self.p_reg * (3 - P_REG)


def _diff(a: Stamp, b: Stamp, oh: Region | None = None) -> Region:
    r = Region(b.instr - a.instr, {k: b.cycles[k] - a.cycles[k] for k in a.cycles}, b.p_events - a.p_events,
               b.p_reg - a.p_reg)
    if oh is not None:
        r = Region(r.instr - oh.instr, {k: r.cycles[k] - oh.cycles[k] for k in r.cycles},
                   r.p_events - oh.p_events, r.p_reg - oh.p_reg)
    return r


def harness_regions(trace: Trace) -> tuple[Region, list[Region]]:
    """(the timed invoke, the per-operator regions) of a harness run: stamps come as
    [ref0, ref1, t0, (op0, op1)*, t1] per run (ours_main.c, tflm_main.cc); the overhead of one
    counter read (ref1 - ref0) is subtracted from each, as the QEMU harness does."""
    s = trace.stamps
    if len(s) < 4:
        raise TinyolError(f"the harness read its counter {len(s)} times (expected at least 4)")
    oh = _diff(s[0], s[1])
    total = _diff(s[2], s[3], oh)
    ops = []
    rest = s[4:]
    if len(s) > 4 and len(rest) >= 4:
        # a second run (TFLM's per-operator pass) or the timed build's pairs
        body = rest[3:-1] if len(rest) >= 5 else []
        oh2 = _diff(rest[0], rest[1])
        for k in range(0, len(body) - 1, 2):
            ops.append(_diff(body[k], body[k + 1], oh2))
    return total, ops


def timed_op_regions(trace: Trace) -> tuple[Region, list[Region]]:
    """A timed ours build (TOL_BENCH_OP around each operator): [ref0, ref1, t0, (op0, op1)*, t1]."""
    s = trace.stamps
    oh = _diff(s[0], s[1])
    total = _diff(s[2], s[-1], oh)
    body = s[3:-1]
    return total, [_diff(body[k], body[k + 1], oh) for k in range(0, len(body) - 1, 2)]


# ---------------------------------------------------------------------------- the side-by-side

CYCLE_BOARDS = ("nucleo_l4r5zi", "nucleo_l476rg")

# MLPerf Tiny closed division, NUCLEO-L4R5ZI at 120 MHz (../shared/mlperf-tiny/README.md): the best
# published latency per reference model, as cycles (120e6 / inferences per second), keyed by
# sha256(model file)[:16]
PUBLISHED = {
    "aeea436800704fce": ("MLPerf Tiny KWS (kws_ref_model)", "STMicroelectronics, X-CUBE-AI 9.0", 5_185_000),
    "597a384c8c2c8a12": ("MLPerf Tiny VWW (vww_96_int8)", "STMicroelectronics, X-CUBE-AI 9.0", 10_671_000),
    "3c002613d1b2475e": ("MLPerf Tiny IC (resnet_quant)", "STMicroelectronics, X-CUBE-AI 9.0", 19_815_000),
    "87cf24194ef93d1d": ("MLPerf Tiny AD (ad01_int8)", "Bosch", 567_000),
}


# Older published CMSIS-NN stacks on the same board (mlcommons tiny_results, closed division, median
# throughput -> 120e6 / throughput cycles): v0.5 reference (TFLM v2.3.1 + its CMSIS-NN, gcc 6, Mbed OS)
# and v1.1 Krai (microTVM + CMSIS-NN). Different software than the TFLM + CMSIS-NN we build: they bound
# the estimate (docs/benchmarks-cycles.md, "Validation"), they do not calibrate it.
PUBLISHED_CMSIS = {
    "87cf24194ef93d1d": (120e6 / 99.487, 120e6 / 116.212),
    "aeea436800704fce": (120e6 / 5.497, 120e6 / 10.019),
    "3c002613d1b2475e": (120e6 / 1.420, 120e6 / 2.567),
    "597a384c8c2c8a12": (120e6 / 1.665, 120e6 / 3.324),
}


@dataclass
class CycleResult:
    """Cycle estimates of one model's harness runs (tinyol SIMD, TFLM + CMSIS-NN)."""
    configs: list[str]
    ours: Region | None = None
    ours_ops: list[tuple[str, Region]] = field(default_factory=list)
    tflm: Region | None = None
    tflm_ops: list[tuple[str, Region]] = field(default_factory=list)
    stats: dict = field(default_factory=dict)


def _op_names(output: str) -> list[str]:
    return [ln.split()[1] for ln in output.splitlines() if ln.startswith("op ") and len(ln.split()) == 3]


def _cached_run(elf: Path, configs: list[MemConfig], cache: Path) -> Trace:
    """run_elf, cached by the ELF's bytes and the configs (a large model takes minutes)."""
    import hashlib
    import pickle

    key = hashlib.sha256(Path(elf).read_bytes() + repr(configs).encode() + _MODEL_VERSION.encode()).hexdigest()[:24]
    f = cache / f"{key}.pkl"
    if f.is_file():
        return pickle.loads(f.read_bytes())
    tr = run_elf(elf, configs)
    cache.mkdir(parents=True, exist_ok=True)
    f.write_bytes(pickle.dumps(tr))
    return tr


_MODEL_VERSION = "1"      # bump when the model's pricing changes: cached traces are re-run


def measure(work: Path, *, boards=CYCLE_BOARDS, cache: Path | None = None, echo=print) -> CycleResult:
    """Cycle estimates of the harness ELFs tflm_bench.compare_model left in `work` (ours_simd/ and
    tflm_cmsis_nn/), for each board's memory configuration (and zero-wait memory)."""
    configs = [BOARDS[b] for b in boards] + [ZERO_WAIT]
    cache = cache or work.parent / "cycles-cache"
    res = CycleResult([c.name for c in configs])
    plain = work / "ours_simd" / "ours_simd_plain.elf"
    timed = work / "ours_simd" / "ours_simd_timed.elf"
    tflm = work / "tflm_cmsis_nn" / "tflm_cmsis_nn.elf"
    if plain.is_file():
        tr = _cached_run(plain, configs, cache)
        res.ours, _ = harness_regions(tr)
        res.stats["ours"] = tr.stats
    if timed.is_file():
        tr = _cached_run(timed, configs, cache)
        _, ops = timed_op_regions(tr)
        res.ours_ops = list(zip(_op_names(tr.output), ops))
    if tflm.is_file():
        tr = _cached_run(tflm, configs, cache)
        res.tflm, ops = harness_regions(tr)
        res.tflm_ops = list(zip(_op_names(tr.output), ops))
        res.stats["tflm"] = tr.stats
    c0 = configs[0].name
    echo(f"  cycles ({configs[0].name}): tinyol {res.ours.cycles[c0] if res.ours else '-':,} "
         f"TFLM+CMSIS-NN {res.tflm.cycles[c0] if res.tflm else '-':,}" if res.ours and res.tflm else
         "  cycles: " + ("tinyol only" if res.ours else "no harness ELF found"))
    return res


def printed_cycles(elf: Path, board: str, *, cache: Path | None = None) -> dict[str, int]:
    """A harness that prints its own timed regions (mcu/bench/learner_main.c: "key ticks" lines,
    overhead already subtracted): run it once with `board`'s memory as the only configuration, so
    every printed tick count is that board's estimated cycles."""
    cfg = [BOARDS[board]]
    tr = _cached_run(elf, cfg, cache) if cache else run_elf(elf, cfg)
    out = {}
    for ln in tr.output.splitlines():
        parts = ln.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out

"""A bare-metal Cortex-M4 program that runs every instruction of tinyol.armdsp on its
vectors and prints what the core computed, and the three emulators that run it.

The program (written from the oracle's table: one function per instruction, each
`msr APSR_nzcvqg; <instruction>; mrs APSR`) boots from 0x08000000 on the STM32L475 memory map,
prints one line per vector on USART1 (`<index> <lo> <hi> <apsr>` in hex, then `END`) and
ends with a semihosting exit. Runs on:

* QEMU `b-l475e-iot01a` (USART1 is its first -serial; the semihosting exit ends QEMU);
* unicorn (its ARM core is a QEMU of 2022; USART1 is a memory hook);
* the real Renode (`CPU.CortexM` on tinyol's stm32l4.repl + stm32l475.repl, USART1 to a file
  backend; the semihosting bkpt pauses it).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tinyol import armdsp

ROOT = Path(__file__).resolve().parents[1]
FLASH, RAM = 0x08000000, 0x20000000
USART1 = 0x40013800
CFLAGS = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-O1", "-std=c11",
          "-Wall", "-Wextra", "-Werror", "-ffreestanding", "-nostdlib", "-nostartfiles"]

_START = r"""
#include <stdint.h>
#define REG(a) (*(volatile uint32_t *)(a))
extern uint32_t _estack;
typedef void (*probe_fn)(const uint32_t *v, uint32_t *o);
static void put(char c)
{
    while (!(REG(0x4001381Cu) & 0x80u)) { }   /* USART1 ISR.TXE */
    REG(0x40013828u) = (uint32_t)(uint8_t)c;  /* TDR: 32-bit stores only (QEMU) */
}
static void hex(uint32_t v, int digits)
{
    for (int k = digits - 1; k >= 0; --k) put("0123456789abcdef"[(v >> (4 * k)) & 15u]);
}
static void semihost_exit(uint32_t code)
{
    static uint32_t block[2];
    block[0] = 0x20026u;   /* ADP_Stopped_ApplicationExit */
    block[1] = code;
    register uint32_t r0 __asm__("r0") = 0x20u;   /* SYS_EXIT_EXTENDED */
    register uint32_t *r1 __asm__("r1") = block;
    __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
}
"""

_MAIN = r"""
void Reset_Handler(void)
{
    REG(0xE000ED88u) |= 0xFu << 20;            /* CPACR: CP10, CP11 full access (the FPU) */
    __asm__ volatile("dsb\n\tisb");
    REG(0x40021060u) |= 1u << 14;              /* RCC_APB2ENR.USART1EN */
    REG(0x4001380Cu) = 35u;                    /* BRR: 4 MHz MSI / 115200 */
    REG(0x40013800u) = (1u << 3) | 1u;         /* CR1: TE, UE */
    uint32_t out[3];
    for (uint32_t i = 0; i < N_VEC; ++i) {
        FNS[OPI[i]](V[i], out);
        hex(i, 4); put(' '); hex(out[0], 8); put(' '); hex(out[1], 8); put(' '); hex(out[2], 8); put('\n');
    }
    put('E'); put('N'); put('D'); put('\n');
    semihost_exit(0);
    for (;;) { }
}
static void fault(void) { put('F'); put('\n'); semihost_exit(1); for (;;) { } }
__attribute__((section(".isr_vector"), used)) void (*const vectors[16])(void) = {
    (void (*)(void))(uintptr_t)&_estack, Reset_Handler, fault, fault, fault, fault, fault,
    0, 0, 0, 0, fault, fault, 0, fault, fault};
"""

_LD = """
MEMORY { FLASH (rx) : ORIGIN = 0x08000000, LENGTH = 1M  RAM (rwx) : ORIGIN = 0x20000000, LENGTH = 96K }
_estack = ORIGIN(RAM) + LENGTH(RAM);
SECTIONS { .text : { KEEP(*(.isr_vector)) *(.text*) *(.rodata*) } > FLASH
           .bss (NOLOAD) : { *(.bss*) *(COMMON) } > RAM }
"""


def probe_cases(ops=None) -> list[tuple[armdsp.Op, tuple]]:
    ops = armdsp.OPS if ops is None else ops
    return [(op, v) for op in ops for v in armdsp.vectors(op)]


def probe_source(cases) -> str:
    ops = list(dict.fromkeys(op for op, _ in cases))
    index = {op.name: i for i, op in enumerate(ops)}
    fns = []
    for op in ops:
        asm = op.asm.replace("\n", "\\n").replace("\t", "\\t")
        fns.append(
            f"static void op_{op.name}(const uint32_t *v, uint32_t *o)\n{{\n"
            "    uint32_t lo = v[2], hi = v[3], f = v[4];\n"
            f'    __asm__ volatile("msr APSR_nzcvqg, %[f]\\n\\t{asm}\\n\\tmrs %[f], APSR"\n'
            '                     : [lo] "+&r"(lo), [hi] "+&r"(hi), [f] "+&r"(f) : [a] "r"(v[0]), [b] "r"(v[1])\n'
            '                     : "cc", "s13", "s14", "s15");\n'
            "    o[0] = lo; o[1] = hi; o[2] = f;\n}\n")
    table = "static const probe_fn FNS[] = {" + ", ".join(f"op_{op.name}" for op in ops) + "};\n"
    vecs = ",\n".join("{" + ", ".join(f"0x{x:08x}u" for x in v) + "}" for _, v in cases)
    opi = ", ".join(str(index[op.name]) for op, _ in cases)
    return (_START + "".join(fns) + table +
            f"#define N_VEC {len(cases)}u\nstatic const uint32_t V[][5] = {{\n{vecs}\n}};\n"
            f"static const uint8_t OPI[] = {{{opi}}};\n" + _MAIN)


def build(workdir: Path, cases) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "probe.c").write_text(probe_source(cases))
    (workdir / "probe.ld").write_text(_LD)
    elf = workdir / "probe.elf"
    subprocess.run(["arm-none-eabi-gcc", *CFLAGS, "-T", str(workdir / "probe.ld"), str(workdir / "probe.c"),
                    "-o", str(elf)], check=True, capture_output=True, text=True)
    return elf


def parse(text: str, n: int) -> list[tuple[int, int, int]]:
    """The probe's lines -> [(lo, hi, apsr)] in vector order; raises if the run was cut short."""
    rows: dict[int, tuple[int, int, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and len(parts[0]) == 4:
            rows[int(parts[0], 16)] = tuple(int(p, 16) for p in parts[1:])
    if "END" not in text or len(rows) != n:
        raise AssertionError(f"the probe printed {len(rows)} of {n} results (END seen: {'END' in text}); "
                             f"tail: {text[-300:]!r}")
    return [rows[i] for i in range(n)]


# ---- the three emulators ------------------------------------------------------------------
def run_qemu(elf: Path) -> str:
    res = subprocess.run(["timeout", "120", "qemu-system-arm", "-M", "b-l475e-iot01a", "-nographic",
                          "-monitor", "none", "-serial", "stdio", "-semihosting-config",
                          "enable=on,target=native", "-kernel", str(elf)],
                         capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, f"QEMU exited {res.returncode}: {res.stderr[-500:]}"
    return res.stdout


def run_unicorn(elf: Path) -> str:
    from unicorn import UC_ARCH_ARM, UC_HOOK_INTR, UC_HOOK_MEM_WRITE, UC_MODE_MCLASS, UC_MODE_THUMB, Uc
    from unicorn import arm_const as A

    out = bytearray()
    image = _flat_image(elf)
    uc = Uc(UC_ARCH_ARM, UC_MODE_THUMB | UC_MODE_MCLASS)
    uc.ctl_set_cpu_model(A.UC_CPU_ARM_CORTEX_M4)
    uc.mem_map(FLASH, 0x100000)
    uc.mem_map(RAM, 0x20000)
    uc.mem_map(0x40013000, 0x1000)
    uc.mem_map(0x40021000, 0x1000)
    uc.mem_write(FLASH, image)
    uc.mem_write(USART1 + 0x1C, (0xC0).to_bytes(4, "little"))   # ISR: TXE, TC
    uc.hook_add(UC_HOOK_MEM_WRITE, lambda u, acc, addr, size, val, d: out.append(val & 0xFF),
                begin=USART1 + 0x28, end=USART1 + 0x2B)
    uc.hook_add(UC_HOOK_INTR, lambda u, intno, d: u.emu_stop())   # the semihosting bkpt
    sp = int.from_bytes(image[0:4], "little")
    pc = int.from_bytes(image[4:8], "little")
    uc.reg_write(A.UC_ARM_REG_SP, sp)
    # unicorn has no SCS: the FPU is switched on here instead of through CPACR (no effect there)
    uc.mem_map(0xE000E000, 0x1000)
    uc.reg_write(A.UC_ARM_REG_C1_C0_2, uc.reg_read(A.UC_ARM_REG_C1_C0_2) | (0xF << 20))
    uc.reg_write(A.UC_ARM_REG_FPEXC, 0x40000000)
    uc.emu_start(pc | 1, FLASH + 0x100000, timeout=120_000_000)
    return out.decode("ascii", "replace")


def _flat_image(elf: Path) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        b = Path(d) / "probe.bin"
        subprocess.run(["arm-none-eabi-objcopy", "-O", "binary", "-j", ".text", str(elf), str(b)], check=True)
        return b.read_bytes()


def run_renode(elf: Path, launcher: str, timeout: float = 300.0) -> str:
    """Boot the probe on Renode's CortexM with tinyol's STM32L475 description; USART1 to a file."""
    from tinyol.targets import renode as rn

    repl = ROOT / "mcu" / "renode"
    with tempfile.TemporaryDirectory(prefix="tinyol-cpuprobe-") as tmp:
        out = Path(tmp) / "usart1.txt"
        cmd = ["timeout", "-s", "TERM", str(int(timeout)), launcher, "--disable-xwt", "--console", "--hide-log",
               "-e", f"logFile @{tmp}/renode.log",
               "-e", 'mach create "probe"',
               "-e", f"machine LoadPlatformDescription @{repl / 'stm32l4.repl'}",
               "-e", f"machine LoadPlatformDescription @{repl / 'stm32l475.repl'}",
               "-e", f"sysbus LoadELF @{elf}",
               "-e", f"sysbus.usart1 CreateFileBackend @{out} true",
               "-e", "start"]
        env = dict(os.environ, TMPDIR=tmp, RENODE_TMPDIR=tmp)
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        mon = rn.Monitor(proc)
        try:
            mon.wait_ready(timeout=120)
            deadline = time.monotonic() + timeout
            text = ""
            while time.monotonic() < deadline:
                text = out.read_text(errors="replace") if out.exists() else ""
                if "END\n" in text or "F\n" in text:
                    break
                time.sleep(0.3)
            return text
        finally:
            mon.close()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def have_arm_gcc() -> bool:
    return shutil.which("arm-none-eabi-gcc") is not None

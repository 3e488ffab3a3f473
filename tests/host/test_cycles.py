"""The Cortex-M4 cycle model (tinyol.bench.cycles) on short instruction sequences whose cycles are
counted by hand from the Cortex-M4 TRM (ARM 100166, table 3-1 and the FPU table) and from the
STM32L4 reference manuals' flash/ART description -- not from the model.

Each sequence is assembled into a tiny harness of the shape the bench harness has: it calls
tol_bench_ticks() twice (the counter-read overhead), then around the sequence, and exits by
semihosting; the model's region is (t1 - t0) - (ref1 - ref0)."""
import shutil
import subprocess

import pytest

pytest.importorskip("unicorn")
pytest.importorskip("capstone")

from tinyol.bench import cycles as cy  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("arm-none-eabi-as") is None, reason="no arm-none-eabi-as")

HARNESS = """
.syntax unified
.thumb
.section .vectors, "a"
.global _vectors
_vectors: .word 0x20004000, reset + 1
.balign 8
table: .word 1, 2, 3, 4, 5, 6, 7, 8
.section .text
.thumb_func
reset:
  ldr r2, =0x20000100
  ldr r5, =table
  bl tol_bench_ticks
  bl tol_bench_ticks
  bl tol_bench_ticks
{body}
  bl tol_bench_ticks
  movs r0, #0x18
  ldr r1, =0x20026
  bkpt 0xAB
.thumb_func
.global tol_bench_ticks
.type tol_bench_ticks, %function
tol_bench_ticks:
  bx lr
.ltorg
"""


def _region(tmp_path, body: str, configs):
    s = tmp_path / "seq.s"
    s.write_text(HARNESS.replace("{body}", body))
    o, elf = tmp_path / "seq.o", tmp_path / "seq.elf"
    subprocess.run(["arm-none-eabi-as", "-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard", str(s),
                    "-o", str(o)], check=True)
    # the vectors and the data table in flash, the code in SRAM (zero-wait fetch)
    subprocess.run(["arm-none-eabi-ld", "--section-start=.vectors=0x08000000", "-Ttext=0x20000000", "-e",
                    "_vectors", str(o), "-o", str(elf)], check=True)
    tr = cy.run_elf(elf, configs)
    assert tr.exit_code == 0
    assert len(tr.stamps) == 4
    total, ops = cy.harness_regions(tr)
    assert ops == []
    return total


# (instruction, cycles by the TRM, with the reason)
SEQUENCE = [
    ("movs r0, #0", 1, "data processing"),
    ("ldr r1, [r2]", 2, "load word"),
    ("ldr r3, [r2, #4]", 1, "a load pipelined behind a load whose result it does not address with"),
    ("str r3, [r2, #8]", 1, "a store pipelined behind a load (it may store what the load loaded)"),
    ("adds r2, r2, #4", 1, "data processing"),
    ("ldr r1, [r2]", 3, "load word, +1: its address register was written by the instruction before"),
    ("mul r0, r1, r3", 1, "MUL"),
    ("smlad r0, r1, r3, r0", 1, "the DSP dual multiply-accumulate"),
    ("push {r4, r5}", 3, "STM: 1 + N"),
    ("pop {r4, r5}", 3, "LDM: 1 + N"),
    ("vmla.f32 s0, s1, s2", 3, "VMLA"),
    ("vdiv.f32 s0, s1, s2", 14, "VDIV"),
    ("movs r4, #3", 1, "data processing"),
    ("1: subs r4, #1", 3, "three times"),
    ("bne 1b", 5, "taken twice (1 + P, P = 1: the M4 speculates an immediate target), not taken once (1)"),
]


def test_trm_timings_of_a_short_sequence(tmp_path):
    body = "\n".join(f"  {i}" for i, _, _ in SEQUENCE)
    r = _region(tmp_path, body, [cy.ZERO_WAIT])
    assert r.instr == 12 + 1 + 3 + 3           # the loop runs subs and bne three times
    assert r.cycles[cy.ZERO_WAIT.name] == sum(c for _, c, _ in SEQUENCE) == 43
    low, high = r.low_high(cy.ZERO_WAIT.name)
    assert (low, high) == (43, 43 + 2 * 2)     # two taken branches, P from 1 to 3


def test_flash_data_reads_through_the_art_data_cache(tmp_path):
    """Two loads from one 64-bit flash word, then one from the next word, code in SRAM: RM0351 -- a
    data-cache miss costs the flash wait states, a hit none. Zero-wait: 2 + 1 + 1 (pipelined loads);
    at 4 WS: 2 + 4 (miss), 1 (hit), 1 + 4 (miss); a second pass over the same words hits: 2 + 1 + 1."""
    body = "  ldr r0, [r5]\n  ldr r1, [r5, #4]\n  ldr r3, [r5, #8]\n  nop\n" * 2
    ws4 = cy.MemConfig("test 4 WS", 80, 4)
    r = _region(tmp_path, body, [cy.ZERO_WAIT, ws4])
    assert r.cycles[cy.ZERO_WAIT.name] == 2 * (4 + 1)
    assert r.cycles[ws4.name] == 2 * (4 + 1) + 4 + 4

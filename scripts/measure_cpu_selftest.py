"""Instruction counts of the core self-test and its pooling fallback (docs/kernels.md).

Builds a bare-metal harness with the SIMD kernels for the Cortex-M4F, runs it in QEMU
(mps2-an386, one instruction per translation block, `-d exec`) and counts the executed
instructions between marks, as tests/_kernel_util.run_on_m4 does:

* tol_cpu_selftest() at boot;
* the dispatch per MAX_POOL_2D call: a call with an empty output, now and before the self-test
  (the kernel of git revision BEFORE, default 3b9345f);
* MAX_POOL_2D on the all-operator model's two shapes, fast path and portable path;
* the whole all-operator backbone (tests/_allops_model.py, exported), fast and portable.

    .venv/bin/python scripts/measure_cpu_selftest.py [BEFORE]
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "host"))

from _allops_model import exported  # noqa: E402
from _kernel_util import _M4_LD, _M4_START, ARM_FLAGS, MCU_INC, kernel_sources  # noqa: E402

MAIN = r"""
#include <stdint.h>
#include <string.h>
#include "backbone.h"
#include "tol_cpu.h"
#include "tol_kernels.h"
void old_maxpool2d_s8(const tol_pool_params_t *p, const int8_t *input, int8_t *output);
__attribute__((noinline)) void tol_bench_mark(int i) { __asm__ volatile("" : : "r"(i)); }
static int8_t in[2048], out[2048], x[TOL_BACKBONE_INPUT_SIZE], lat[TOL_BACKBONE_LATENT_SIZE];
static const tol_pool_params_t empty = {.in_h = 1, .in_w = 2, .c = 16, .out_h = 0, .out_w = 0, .k_h = 1,
    .k_w = 2, .stride_h = 1, .stride_w = 2, .act_min = -128, .act_max = 127};
static const tol_pool_params_t p1d = {.in_h = 1, .in_w = 128, .c = 16, .out_h = 1, .out_w = 64, .k_h = 1,
    .k_w = 2, .stride_h = 1, .stride_w = 2, .act_min = -128, .act_max = 127};
static const tol_pool_params_t p2d = {.in_h = 8, .in_w = 4, .c = 12, .out_h = 4, .out_w = 2, .k_h = 2,
    .k_w = 2, .stride_h = 2, .stride_w = 2, .act_min = -128, .act_max = 127};
int main(void)
{
    for (int i = 0; i < 2048; ++i) in[i] = (int8_t)(i * 37);
    for (int i = 0; i < TOL_BACKBONE_INPUT_SIZE; ++i) x[i] = (int8_t)(i * 11);
    tol_bench_mark(1); tol_cpu_selftest(); tol_bench_mark(2);
    tol_cpu_use(0);
    tol_bench_mark(3); tol_maxpool2d_s8(&empty, in, out); tol_bench_mark(4);
    tol_bench_mark(5); old_maxpool2d_s8(&empty, in, out); tol_bench_mark(6);
    tol_bench_mark(7); tol_maxpool2d_s8(&p1d, in, out); tol_bench_mark(8);
    tol_bench_mark(9); tol_maxpool2d_s8(&p2d, in, out); tol_bench_mark(10);
    tol_bench_mark(11); (void)tol_backbone_invoke(x, lat); tol_bench_mark(12);
    tol_cpu_use(1u);
    tol_bench_mark(13); tol_maxpool2d_s8(&p1d, in, out); tol_bench_mark(14);
    tol_bench_mark(15); tol_maxpool2d_s8(&p2d, in, out); tol_bench_mark(16);
    tol_bench_mark(17); (void)tol_backbone_invoke(x, lat); tol_bench_mark(18);
    return 0;
}
"""

LABELS = {1: "tol_cpu_selftest() at boot", 3: "MAX_POOL_2D call, empty output (dispatch + call)",
          5: "the same before the self-test (no dispatch)", 7: "MAX_POOL_2D 1x128x16 -> 1x64x16, fast (SSUB8+SEL)",
          9: "MAX_POOL_2D 8x4x12 -> 4x2x12, fast", 11: "all-operator backbone, fast",
          13: "MAX_POOL_2D 1x128x16 -> 1x64x16, portable", 15: "MAX_POOL_2D 8x4x12 -> 4x2x12, portable",
          17: "all-operator backbone, portable pooling"}


def main(argv: list[str]) -> int:
    before = argv[0] if argv else "3b9345f"
    model = exported()
    with tempfile.TemporaryDirectory() as d:
        w = Path(d)
        (w / "start.c").write_text(_M4_START)
        (w / "link.ld").write_text(_M4_LD)
        (w / "main.c").write_text(MAIN)
        old = subprocess.run(["git", "show", f"{before}:mcu/src/kernels/simd/tol_pool.c"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        old = old.replace("tol_maxpool2d_s8", "old_maxpool2d_s8").replace("tol_avgpool2d_s8", "old_avgpool2d_s8")
        (w / "old_pool.c").write_text(old)
        elf = w / "h.elf"
        subprocess.run(["arm-none-eabi-gcc", *ARM_FLAGS, "-std=c11", "-nostartfiles", "--specs=nano.specs",
                        f"-I{MCU_INC}", f"-I{ROOT / 'mcu/src/kernels/simd'}", f"-I{model}", "-T", str(w / "link.ld"),
                        str(w / "start.c"), str(w / "main.c"), str(w / "old_pool.c"), str(model / "backbone.c"),
                        str(ROOT / "mcu/src/tol_cpu.c"), *map(str, kernel_sources("simd")), "-o", str(elf),
                        "-lc", "-lgcc"], check=True)
        nm = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True).stdout
        mark = next(int(ln.split()[0], 16) for ln in nm.splitlines() if ln.endswith(" tol_bench_mark"))
        log = w / "exec.log"
        subprocess.run(["timeout", "600", "qemu-system-arm", "-M", "mps2-an386", "-nographic", "-monitor", "none",
                        "-serial", "none", "-semihosting-config", "enable=on,target=native", "-kernel", str(elf),
                        "-accel", "tcg,one-insn-per-tb=on", "-d", "exec,nochain", "-D", str(log)],
                       capture_output=True, check=True)
        hits = []
        with open(log) as f:
            n = 0
            for ln in f:
                if ln.startswith("Trace"):
                    n += 1
                    if f"/{mark:016x}/" in ln:
                        hits.append(n)
    counts = {k: hits[k] - hits[k - 1] - 3 for k in range(1, len(hits), 2)}   # minus the mark's own 3
    print(f"model {model.name}, kernels before: {before}")
    for k, label in LABELS.items():
        print(f"{counts[k]:>10,}  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

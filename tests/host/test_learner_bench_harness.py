"""mcu/bench/learner_main.c (the learner's by-part profile of `tinyol bench`) built for the
host against a stub of bench_rt.h and run natively, under AddressSanitizer and UBSan: a
harness that hands the learner a NULL or out-of-range buffer faults here, where on the M4
(QEMU) it silently read the vector table at address 0 (issue 22: gW "garbage" from index 112)."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from _learner_util import MCU, SOURCES

STUB = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "bench_rt.h"
static uint64_t t;
uint64_t tol_bench_ticks(void) { return ++t; }
void tol_bench_puts(const char *s) { fputs(s, stdout); }
void tol_bench_kv(const char *key, uint64_t value) { printf("%s %llu\n", key, (unsigned long long)value); }
void tol_bench_hex(const char *key, const int8_t *data, uint32_t n)
{
    printf("%s ", key);
    for (uint32_t i = 0; i < n; i++) printf("%02x", (unsigned)(uint8_t)data[i]);
    printf("\n");
}
void tol_bench_exit(int code) { exit(code); }
int main(void) { return tol_bench_main(); }
"""


def test_learner_profile_harness_runs_clean_natively(tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("gcc not on PATH")
    stub = tmp_path / "stub_rt.c"
    stub.write_text(STUB)
    exe = tmp_path / "learner_main"
    srcs = [str(MCU / "bench" / "learner_main.c"), *(str(MCU / "src" / s) for s in SOURCES), str(stub)]
    san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
    subprocess.run(["gcc", "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", *san,
                    f"-I{MCU / 'include'}", f"-I{MCU / 'src'}", f"-I{MCU / 'bench'}", *srcs, "-lm",
                    "-o", str(exe)], check=True, capture_output=True, text=True)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120,
                       env={"ASAN_OPTIONS": "detect_leaks=0"})
    assert r.returncode == 0, (r.stdout + r.stderr)[-1500:]
    keys = {line.split()[0] for line in r.stdout.splitlines() if line.split()}
    assert {"train_step", "part_forward", "part_step", "ae_step", "done"} <= keys

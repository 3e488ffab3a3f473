"""`tinyol bench --tflm`'s harness on its two QEMU machines (issue 34): TFLM arenas of 100-120 KB do
not fit QEMU's b-l475e-iot01a (96 + 32 KB of SRAM), so the TFLM side moves to mps2-an386 (a
Cortex-M4 with 4 MB of SRAM) when they do not (tinyol.bench.tflm_bench.run_tflm_sized). Both
count instructions from SysTick at their own clock (80 MHz set by the harness; QEMU's fixed 25 MHz);
the oracle is the same code measured on both: our digits backbone must give the same output bytes
and the same instruction count on either machine.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT
from tinyol.bench import tflm_bench

pytestmark = [pytest.mark.qemu, pytest.mark.slow]   # two harness builds: ~35 s on a loaded machine


def test_one_backbone_counts_the_same_on_both_machines(tmp_path):
    model = ROOT / "models" / "digits"
    tfl = (model / "backbone.tflite").read_bytes()
    x = np.random.default_rng(0).integers(-128, 128, 64, dtype=np.int8).tobytes()
    runs = {}
    for m in (tflm_bench.L475, tflm_bench.MPS2):
        w = tmp_path / m.qemu
        tflm_bench._case_files(w, tfl, x, 4096, 0)
        runs[m.qemu] = tflm_bench.run_ours(model, "simd", w, machine=m, timeout=120, echo=lambda *a, **k: None)
    a, b = runs["b-l475e-iot01a"], runs["mps2-an386"]
    assert (a.machine, b.machine) == ("b-l475e-iot01a", "mps2-an386")
    assert a.output == b.output and len(a.output) > 0
    assert a.instructions > 10_000
    assert abs(a.instructions - b.instructions) <= 2, (a.instructions, b.instructions)
    assert [n for n, _ in a.ops] == [n for n, _ in b.ops]
    for (n, ia), (_, ib) in zip(a.ops, b.ops):
        assert abs(ia - ib) <= 2, (n, ia, ib)

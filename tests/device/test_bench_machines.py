"""`tinyol bench --tflm`'s harness on its two QEMU machines (issue 34): TFLM arenas of 100-120 KB do
not fit QEMU's b-l475e-iot01a (96 + 32 KB of SRAM), so the TFLM side moves to mps2-an386 (a
Cortex-M4 with 4 MB of SRAM) when they do not (tinyol.bench.tflm_bench.run_tflm_sized). Both
count instructions from SysTick at their own clock (80 MHz set by the harness; QEMU's fixed 25 MHz);
the oracle is the same code measured on both: our digits backbone must give the same output bytes
and the same instruction count on either machine. Our side moves too when a model's activations do
not fit (a fingerprint model's 180 x 180 input, 62 KB out of its first layer), and the cycle model
prices a harness linked for mps2-an386 as the same code in an STM32L4's flash (aliased at 0).
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT
from tinyol.bench import tflm_bench

QUIET = {"echo": lambda *a, **k: None}

pytestmark = [pytest.mark.qemu, pytest.mark.slow]   # two harness builds: ~35 s on a loaded machine


def test_one_backbone_counts_the_same_on_both_machines(tmp_path):
    model = ROOT / "models" / "digits"
    tfl = (model / "backbone.tflite").read_bytes()
    x = np.random.default_rng(0).integers(-128, 128, 64, dtype=np.int8).tobytes()
    runs = {}
    for m in (tflm_bench.L475, tflm_bench.MPS2):
        w = tmp_path / m.qemu
        tflm_bench._case_files(w, tfl, x, 4096, 0)
        runs[m.qemu] = tflm_bench.run_ours(model, "simd", w, machine=m, timeout=120, **QUIET)
    a, b = runs["b-l475e-iot01a"], runs["mps2-an386"]
    assert (a.machine, b.machine) == ("b-l475e-iot01a", "mps2-an386")
    assert a.output == b.output and len(a.output) > 0
    assert a.instructions > 10_000
    assert abs(a.instructions - b.instructions) <= 2, (a.instructions, b.instructions)
    assert [n for n, _ in a.ops] == [n for n, _ in b.ops]
    for (n, ia), (_, ib) in zip(a.ops, b.ops):
        assert abs(ia - ib) <= 2, (n, ia, ib)
    # the cycle model on both ELFs (tinyol.bench.cycles.memory_map): the same instructions, the same
    # TRM timings; flash wait states within 1 % (the two clock files move the kernels' addresses, so
    # the ART sees other line boundaries)
    pytest.importorskip("unicorn")
    pytest.importorskip("capstone")
    from tinyol.bench import cycles

    configs = [cycles.BOARDS["nucleo_l4r5zi"], cycles.ZERO_WAIT]
    regs = {}
    for m in (tflm_bench.L475, tflm_bench.MPS2):
        regs[m.qemu], _ = cycles.harness_regions(cycles.run_elf(tmp_path / m.qemu / "ours_simd_plain.elf", configs))
    ra, rb = regs["b-l475e-iot01a"], regs["mps2-an386"]
    assert ra.instr == rb.instr == a.instructions
    zw, l4r5 = cycles.ZERO_WAIT.name, configs[0].name
    assert ra.cycles[zw] == rb.cycles[zw]
    assert ra.cycles[zw] < ra.cycles[l4r5] and abs(ra.cycles[l4r5] - rb.cycles[l4r5]) < 0.01 * ra.cycles[l4r5]


def test_our_side_moves_when_its_activations_do_not_fit(tmp_path):
    """A Keras model as a fingerprint model starts (a 180 x 180 x 1 input, a 5 x 5 depthwise layer
    of depth multiplier 8, stride 2: 32 KB in, 62 KB out) does not link in the L475 harness's
    96 KB; run_ours_fitting runs it on mps2-an386, bit-exact with TFLM's Python runtime."""
    from _kernel_util import ModelCache
    from tensorflow import keras
    from tinyol.model import codegen

    def build():
        inp = keras.Input((180, 180, 1))
        x = keras.layers.DepthwiseConv2D(5, strides=2, depth_multiplier=8, activation="relu")(inp)
        return keras.Model(inp, keras.layers.Conv2D(4, 1)(x))

    tfl_path = ModelCache(tmp_path / "models").get("fingerprint_like", build, (180, 180, 1))
    model = tmp_path / "model"
    codegen.generate_backbone(tfl_path, model, "backbone.tflite")
    x = np.random.default_rng(0).integers(-128, 128, 180 * 180, dtype=np.int8)
    w = tmp_path / "ours"
    tflm_bench._case_files(w, tfl_path.read_bytes(), x.tobytes(), 4096, 0)
    with pytest.raises(Exception, match="does not link"):
        tflm_bench.run_ours(model, "simd", w, timeout=300, **QUIET)
    r = tflm_bench.run_ours_fitting(model, "simd", w, timeout=300, **QUIET)
    assert r.machine == "mps2-an386"
    want = codegen.run_tflm(tfl_path, x.reshape(1, 180, 180, 1)).reshape(-1)
    assert np.frombuffer(r.output, dtype=np.int8).tolist() == want.astype(np.int8).tolist()

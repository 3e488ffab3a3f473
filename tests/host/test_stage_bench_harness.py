"""The adaptive stage's per-layer-type benchmark (`tinyol bench`, mcu/bench/stage_main.c): its MAC
accounting against the twin's own connection lists, and the harness built for the host and run
natively under AddressSanitizer and UBSan on every case (a wrong size in the generated header or a
stage that does not initialise fails here, not as a garbled number from QEMU)."""
from __future__ import annotations

import dataclasses
import shutil
import subprocess

import pytest

from _learner_util import MCU
from test_learner_bench_harness import STUB
from tinyol.learn.stage import (AVGPOOL, CONV, DENSE, DWCONV, TRAIN_BIAS, TRAIN_FROZEN, Layer, _connections,
                          chain_ok)
from tinyol.bench.tflm_bench import (STAGE_SOURCES, layer_macs, stage_bench_cases, stage_bench_header,
                               stage_step_macs)


def test_cases_are_valid_stages_of_every_layer_type():
    cases = stage_bench_cases()
    assert [c[0] for c in cases] == ["Dense", "Conv1D", "Conv2D", "DepthwiseConv2D", "MaxPooling2D",
                                     "AveragePooling2D", "GlobalAveragePooling2D"]
    for _, _, layers in cases:
        assert chain_ok(layers)


@pytest.mark.parametrize("layer", [
    Layer(DENSE, 1, 1, 7, 1, 1, 5),
    Layer(CONV, 5, 6, 3, 3, 3, 4, 0, 3, 3, 2, 2, 1, 1),      # strided, padded: corner taps cut
    Layer(CONV, 1, 9, 2, 1, 7, 3, 0, 1, 3, 1, 1, 0, 0),       # Conv1D, valid
    Layer(DWCONV, 4, 4, 2, 4, 4, 4, 0, 3, 3, 1, 1, 1, 1),     # depth multiplier 2, same
], ids=["dense", "conv_s2_pad", "conv1d", "dw_mult2"])
def test_layer_macs_equal_the_twins_connection_count(layer):
    assert layer.ok()
    assert layer_macs(layer) == len(_connections(layer)[0])


def test_layer_macs_of_every_bench_layer_equal_the_connection_count():
    for _, _, layers in stage_bench_cases():
        for l in layers:
            want = len(_connections(l)[0]) if l.kind in (DENSE, CONV, DWCONV) else 0
            assert layer_macs(l) == want


def test_step_macs_by_hand():
    a, c = Layer(DENSE, 1, 1, 4, 1, 1, 3), Layer(DENSE, 1, 1, 3, 1, 1, 2)
    # all: forward 12 + 6, weight gradients 12 + 6, input deltas of the classifier only (6)
    assert stage_step_macs([a, c]) == 17 * 42
    # bias below the classifier: no weight gradient for a; the classifier's input delta still feeds a's bias
    assert stage_step_macs([dataclasses.replace(a, train=TRAIN_BIAS), c]) == 17 * 30
    # a frozen first layer: backward stops at the classifier (no input delta at all)
    assert stage_step_macs([dataclasses.replace(a, train=TRAIN_FROZEN), c], batch=1) == 18 + 6
    # a pool between two trained layers passes deltas but has no MACs
    conv = Layer(CONV, 4, 4, 1, 4, 4, 2, 1, 3, 3, 1, 1, 1, 1)
    pool = Layer(AVGPOOL, 4, 4, 2, 2, 2, 2, 0, 2, 2, 2, 2, 0, 0)
    clf = Layer(DENSE, 1, 1, 8, 1, 1, 3)
    m = layer_macs(conv)
    assert stage_step_macs([conv, pool, clf], batch=1) == (m + 24) + (m + 24) + 24


def test_stage_harness_runs_clean_natively(tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("gcc not on PATH")
    cases = stage_bench_cases()
    (tmp_path / "stage_bench_case.h").write_text(stage_bench_header(cases))
    stub = tmp_path / "stub_rt.c"
    stub.write_text(STUB)
    exe = tmp_path / "stage_main"
    srcs = [str(MCU / "bench" / "stage_main.c"), *(str(MCU / "src" / s) for s in STAGE_SOURCES), str(stub)]
    san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
    # the harness puts its parameter array in .ram2 (an ELF section name the host linker accepts)
    subprocess.run(["gcc", "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", *san,
                    f"-I{MCU / 'include'}", f"-I{MCU / 'src'}", f"-I{MCU / 'bench'}", f"-I{tmp_path}", *srcs,
                    "-lm", "-o", str(exe)], check=True, capture_output=True, text=True)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300,
                       env={"ASAN_OPTIONS": "detect_leaks=0"})
    assert r.returncode == 0, (r.stdout + r.stderr)[-1500:]
    keys = {line.split()[0] for line in r.stdout.splitlines() if line.split()}
    want = {f"s{chr(ord('a') + k)}_{m}_{p}" for k in range(len(cases)) for m in ("all", "bias")
            for p in ("predict", "step")}
    assert want | {"done"} <= keys

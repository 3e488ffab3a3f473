"""`tinyol bench --tflm`: TFLM + CMSIS-NN built from ../shared/tflm and run side
by side with tinyol in our bare-metal harness (host/tinyol/tflm_bench.py,
mcu/bench/). Outside oracles: the TFLM figure measured independently for this
very model file (design.md, "Performance anchors"), and TFLM's output bytes
(tinyol's kernels must give the same). Without a TFLM tree the report falls
back to the anchors, by backbone.tflite hash only."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tinyol import bench, tflm_bench

ROOT = Path(__file__).resolve().parents[1]
SHARED_TFLM = next((p for p in (Path(os.environ.get("TINYOL_TFLM", "/nonexistent")), ROOT.parent / "shared" / "tflm",
                    ROOT.parent.parent / "shared" / "tflm") if p.is_dir()), ROOT.parent / "shared" / "tflm")


def test_instrument_backbone_wraps_every_operator_call():
    src = (ROOT / "models" / "ds_cnn" / "backbone.c").read_text()
    out = tflm_bench.instrument_backbone(src)
    n_ops = sum(1 for ln in src.splitlines() if ln.strip().startswith("/* ") and ": " in ln
                and ln.strip()[3:].split(":")[0].isdigit() and "RESHAPE" not in ln)
    assert n_ops > 5
    assert out.count("TOL_BENCH_OP(") == n_ops
    assert '#include "bench_op.h"' in out.splitlines()[0]


def test_anchor_fallback_only_for_the_exact_model_file():
    sha = bench.backbone_sha16(ROOT / "models" / "digits")
    assert sha == "e45a0e45b14ffd7c", "models/digits changed: re-measure its anchor (tinyol bench --tflm)"
    ok = bench.ModelBench("digits", "simd", 31_232, backbone_instr=92_229, sha16=sha)
    changed = bench.ModelBench("ds_cnn", "simd", 2_656_000, backbone_instr=5_000_000, sha16="0123456789abcdef")
    md = bench.render([ok, changed])
    row = next(ln for ln in md.splitlines() if ln.startswith("| digits |"))
    assert "136,585" in row and "0.675x" in row and "anchor" in row
    row = next(ln for ln in md.splitlines() if ln.startswith("| ds_cnn |"))
    assert "no anchor" in row and "7,692,372" not in row


def test_open_tree_without_sources_txt_is_one_clear_error(tmp_path):
    from tinyol.errors import TinyolError

    with pytest.raises(TinyolError) as e:
        tflm_bench.open_tree(tmp_path)
    assert "SOURCES.txt" in str(e.value) and e.value.hint


@pytest.mark.slow
@pytest.mark.qemu
def test_digits_side_by_side_with_tflm_cmsis_nn(tmp_path):
    if not SHARED_TFLM.is_dir() or shutil.which("arm-none-eabi-g++") is None:
        pytest.skip("needs ../shared/tflm and arm-none-eabi-g++")
    tree = tflm_bench.open_tree(SHARED_TFLM)
    lib = tflm_bench.build_library(tree, "cmsis_nn")     # cached under build/tflm after the first run
    c = tflm_bench.compare_model(ROOT / "models" / "digits", tree, {"cmsis_nn": lib}, tmp_path)
    t = c.tflm["cmsis_nn"]
    assert c.outputs_equal is True and len(t.output) == 32
    # the independent measurement of this model file (design.md), to the instruction
    assert c.sha16 == "e45a0e45b14ffd7c"
    assert t.instructions == bench.TFLM_ANCHORS[c.sha16]["cmsis"]
    assert 0 < c.ours.instructions < t.instructions
    assert [n for n, _ in t.ops] == ["CONV_2D", "CONV_2D", "RESHAPE", "FULLY_CONNECTED"]
    assert [n for n, _ in c.ours.ops] == ["CONV_2D", "CONV_2D", "FULLY_CONNECTED"]
    # per-operator times add up to the whole (timer overhead only)
    assert abs(sum(v for _, v in c.ours.ops) - c.ours.instructions) < 100
    assert t.arena == bench.TFLM_ANCHORS[c.sha16]["arena"]
    assert 0 < c.ours.stack < 8192 and 0 < t.stack < 8192

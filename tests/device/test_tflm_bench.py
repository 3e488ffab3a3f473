"""`tinyol bench --tflm`: TFLM + CMSIS-NN built from ../shared/tflm and run side
by side with tinyol in our bare-metal harness (host/tinyol/bench/tflm_bench.py,
mcu/bench/). Outside oracles: the TFLM figure measured independently for this
very model file (design.md, "Performance anchors"), and TFLM's output bytes
(tinyol's kernels must give the same). Without a TFLM tree the report falls
back to the anchors, by backbone.tflite hash only."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from tinyol.bench import bench, tflm_bench

ROOT = Path(__file__).resolve().parents[2]
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
    ops = tflm_bench.model_ops((ROOT / "models" / "digits" / "backbone.tflite").read_bytes())
    lib = tflm_bench.build_library(tree, "cmsis_nn", ops=ops)  # its kernels only; cached under build/tflm
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
    # the cycle model (bench --cycles) traces the same ELFs: its own instruction count of each
    # region is QEMU -icount's, per operator too; the flash wait states only ever add cycles
    pytest.importorskip("unicorn")
    pytest.importorskip("capstone")
    from tinyol.bench import cycles

    r = cycles.measure(tmp_path)
    assert r.ours.instr == c.ours.instructions and r.tflm.instr == t.instructions
    assert [n for n, _ in r.ours_ops] == [n for n, _ in c.ours.ops]
    assert [reg.instr for _, reg in r.ours_ops] == [v for _, v in c.ours.ops]
    assert [reg.instr for _, reg in r.tflm_ops] == [v for _, v in t.ops]
    zw, l4r5, l476 = (cycles.ZERO_WAIT.name, cycles.BOARDS["nucleo_l4r5zi"].name,
                      cycles.BOARDS["nucleo_l476rg"].name)
    for reg in (r.ours, r.tflm):
        assert reg.instr < reg.cycles[zw] < reg.cycles[l476] < reg.cycles[l4r5]


def test_harness_table_covers_every_operator_the_exporter_accepts():
    # the exporter's own table and shape-only set (codegen), not the harness's: a new op there
    # without a registration here would make `bench --tflm` fail on the user's model again
    from tinyol.model import codegen

    accepted = set(codegen._OPS) | (codegen._SHAPE_OPS - {"REDUCE_PROD"})
    assert accepted <= set(tflm_bench.HARNESS_OPS), accepted - set(tflm_bench.HARNESS_OPS)
    # each resolver method is one TFLM really has (its header in the shared tree, when present)
    hdr = next(iter(sorted((ROOT / "build" / "tflm").glob("src-*/tflm/tensorflow/lite/micro/"
                                                        "micro_mutable_op_resolver.h"))), None)
    if hdr is not None:
        text = hdr.read_text()
        for name, (method, _) in tflm_bench.HARNESS_OPS.items():
            assert f"TfLiteStatus {method}(" in text, name
            assert f"Register_{name}()" in text, name


def test_model_ops_and_unknown_operator_is_one_clear_error(monkeypatch):
    import tinyol.model.tflite as tm
    from tinyol.errors import TinyolError

    tfl = (ROOT / "models" / "ds_cnn" / "backbone.tflite").read_bytes()
    assert set(tflm_bench.model_ops(tfl)) == {"CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "RESHAPE"}
    m = tm.parse_model(tfl)
    m.operators[0].opname = "TRANSPOSE"
    monkeypatch.setattr(tm, "parse_model", lambda raw, origin="<bytes>": m)
    with pytest.raises(TinyolError) as e:
        tflm_bench.model_ops(tfl)
    assert "TRANSPOSE" in str(e.value) and e.value.hint


def test_arena_layout_splits_only_above_one_sram_block():
    assert tflm_bench.arena_layout(4096) == (4096, 0)
    assert tflm_bench.arena_layout(tflm_bench.ARENA_ONE_BLOCK) == (tflm_bench.ARENA_ONE_BLOCK, 0)
    big, persist = tflm_bench.arena_layout(tflm_bench.ARENA_ONE_BLOCK + 16)
    assert persist > 0 and big + persist > tflm_bench.ARENA_ONE_BLOCK


@pytest.mark.slow
@pytest.mark.qemu
def test_bench_tflm_on_a_users_converted_model_with_flatten(tmp_path, capsys):
    """`tinyol bench --model DIR --tflm ...` on a model this repo did not write: a Keras CNN
    ending in Flatten, converted by TensorFlow as a user would (dynamic batch: SHAPE,
    STRIDED_SLICE, PACK, RESHAPE in the file), exported by tinyol to a temp folder."""
    if not SHARED_TFLM.is_dir() or shutil.which("arm-none-eabi-g++") is None:
        pytest.skip("needs ../shared/tflm and arm-none-eabi-g++")
    import json

    from _kernel_util import convert
    from tinyol.model.export import import_tf

    import_tf()
    import keras
    from tinyol.cli import main as cli_main
    from tinyol.model.codegen import run_tflm
    from tinyol.model.tflite import load_model

    keras.utils.set_random_seed(3)
    L = keras.layers
    inp = keras.Input((12, 12, 2))
    x = L.Conv2D(8, 3, padding="same", activation="relu")(inp)
    x = L.MaxPooling2D(2)(x)
    x = L.DepthwiseConv2D(3, padding="same")(x)
    x = L.Activation("tanh")(x)
    x = L.Flatten()(x)
    out = L.Dense(16, activation="sigmoid")(x)
    (tmp_path / "user.tflite").write_bytes(convert(keras.Model(inp, out), (12, 12, 2)))
    mdir = tmp_path / "user_model"
    assert cli_main(["export", str(tmp_path / "user.tflite"), "--out", str(mdir), "--name", "user_cnn",
                     "--split", "none", "--classes", "4"]) == 0
    tfl_ops = [op.opname for op in load_model(mdir / "backbone.tflite").operators]
    assert {"SHAPE", "STRIDED_SLICE", "PACK", "RESHAPE", "TANH", "LOGISTIC", "MAX_POOL_2D"} <= set(tfl_ops), tfl_ops
    capsys.readouterr()

    rc = cli_main(["bench", "--model", str(mdir), "--tflm", str(SHARED_TFLM), "--tflm-variants", "cmsis_nn",
                   "--no-firmware", "--json"])
    text = capsys.readouterr().out
    assert rc == 0, text
    report = (mdir / "benchmarks.md").read_text()
    row = next(ln for ln in report.splitlines() if ln.startswith("| user_cnn |"))
    assert "byte-equal" in row
    c = json.loads(text)["tflm"]["user_cnn"]  # stdout is the JSON alone (progress on stderr)
    t = c["tflm"]["cmsis_nn"]
    # TFLM ran every operator of the file, the shape-only chain included, in the file's order
    assert [n for n, _ in t["ops"]] == tfl_ops
    # ours ran every operator codegen kept (the shape chain and RESHAPE are gone)
    assert [n for n, _ in c["ours"]["ops"]] == [n for n in tfl_ops if n not in
                                                {"SHAPE", "STRIDED_SLICE", "PACK", "RESHAPE"}]
    # the harness's TFLM output is TFLM's Python runtime's output for the same input
    x = np.random.default_rng(0).integers(-128, 128, c["input_bytes"], dtype=np.int8)
    want = run_tflm(mdir / "backbone.tflite", x[None]).astype(np.int8).tobytes()
    assert bytes.fromhex(t["output"]) == want == bytes.fromhex(c["ours"]["output"])
    assert 0 < t["arena"] < 80 * 1024
    # the other FULLY_CONNECTED weight storage (`export --fc-weights int16`), measured next to the folder's:
    # the same output bytes, a cheaper FULLY_CONNECTED, and 2 bytes per weight of the 288 x 16 Dense
    # (no leftover rows: 16 % 4 == 0) in place of 1
    assert (c["fc_weights"], c["fc_alt"]) == ("int8", "int16")
    alt = c["fc_alt_run"]
    assert bytes.fromhex(alt["output"]) == want
    fc_instr = [sum(v for n, v in r["ops"] if n == "FULLY_CONNECTED") for r in (c["ours"], alt)]
    assert 0 < fc_instr[1] < fc_instr[0]
    assert c["fc_alt_weights_bytes"] - c["weights_bytes"] == 288 * 16
    assert "| user_cnn | int16 |" in report
    assert abs(sum(v for _, v in t["ops"]) - t["instructions"]) < 0.02 * t["instructions"]

"""Bit-exactness of the int8 kernels (ref and simd) against TFLM's runtime.

Each case is a tiny Keras model converted to int8 by TensorFlow's converter;
codegen turns it into C calling our kernels, the C is compiled on the host with
strict warnings and its outputs on random int8 inputs must equal TFLM's, bit
for bit. Big sweeps are marked slow.
"""
from __future__ import annotations

import numpy as np
import pytest
from _kernel_util import IMPLS, ModelCache, assert_bit_exact

pytest.importorskip("tflite_micro")
keras = pytest.importorskip("keras")
layers = keras.layers

RB = "random_normal"  # non-zero biases exercise the bias path


def _seq(input_shape, *ls):
    def build():
        inp = keras.Input(input_shape)
        x = inp
        for layer in ls:
            x = layer(x)
        return keras.Model(inp, x)
    return build, input_shape


def conv(f, k, **kw):
    return layers.Conv2D(f, k, bias_initializer=RB, **kw)


def dw(k, **kw):
    return layers.DepthwiseConv2D(k, bias_initializer=RB, **kw)


def _residual(shape, act=None):
    def build():
        inp = keras.Input(shape)
        a = conv(shape[-1], 3, padding="same", activation="relu")(inp)
        b = conv(shape[-1], 1)(a)
        x = layers.Add()([a, b])
        if act:
            x = layers.Activation(act)(x)
        return keras.Model(inp, x)
    return build, shape


def _two_branch_gap(shape):
    def build():
        inp = keras.Input(shape)
        x = conv(8, 3, padding="same", activation="relu6")(inp)
        g = layers.GlobalAveragePooling2D()(x)
        f = layers.Dense(8, bias_initializer=RB)(layers.Flatten()(layers.MaxPooling2D(2)(x)))
        return keras.Model(inp, layers.Add()([g, f]))
    return build, shape


CASES = {
    # CONV_2D
    "conv_3x3_valid": _seq((8, 8, 3), conv(4, 3)),
    "conv_3x3_same_relu": _seq((9, 7, 5), conv(7, 3, padding="same", activation="relu")),
    "conv_stride2_same_relu6": _seq((10, 10, 8), conv(8, 3, strides=2, padding="same", activation="relu6")),
    "conv_1x1_c16": _seq((5, 5, 16), conv(12, 1)),
    # pointwise, weight-stationary SIMD path: one filter per block (2 x 160 > 256 B), odd filters
    # and an odd pixel count; ReLU6 clamp
    "conv_1x1_c160_odd": _seq((3, 3, 160), conv(7, 1, activation="relu6")),
    "conv_5x3_stride21_odd": _seq((11, 9, 7), conv(5, (5, 3), strides=(2, 1), padding="same")),
    "conv_in1": _seq((8, 8, 1), conv(8, 3, padding="same", activation="relu")),
    # SIMD: small window on the stack column path, 2 channels (byte gather), odd filters, ReLU6 clamp
    "conv_in2_stride2_odd": _seq((9, 9, 2), conv(5, 3, strides=2, padding="same", activation="relu6")),
    # DEPTHWISE_CONV_2D
    "dw_3x3_same": _seq((8, 8, 8), dw(3, padding="same")),
    "dw_3x3_valid_relu_odd": _seq((7, 9, 5), dw(3, activation="relu")),
    "dw_dm2_stride2": _seq((9, 9, 3), dw(3, strides=2, padding="same", depth_multiplier=2, activation="relu6")),
    "dw_dm2_c8": _seq((6, 6, 8), dw(3, padding="same", depth_multiplier=2)),
    # depth multiplier > 1: one input channel (micro_speech's first layer: lowered to CONV_2D) and
    # multiples of 4 (the SIMD 4-channel path), odd borders, stride 2
    "dw_in1_dm8_10x8_s2": _seq((13, 11, 1), dw((5, 4), strides=2, padding="same", depth_multiplier=8,
                                                 activation="relu")),
    "dw_in1_dm3_valid": _seq((7, 6, 1), dw(3, depth_multiplier=3)),
    # person_detect's first layer (3x3, stride 2, 8 channels of one): pixel blocks in the arena
    # (with a layer after it, so its output and the blocks' scratch are in the arena)
    "dw_in1_dm8_3x3_s2": _seq((20, 18, 1), dw(3, strides=2, padding="same", depth_multiplier=8,
                                               activation="relu"), conv(32, 1), conv(4, 1)),
    "dw_dm4_c3_s2": _seq((9, 8, 3), dw(3, strides=2, padding="same", depth_multiplier=4, activation="relu6")),
    # SIMD depthwise blocks: stride 2 with a partial clamp, 5x5 border/interior, tail channels
    "dw_3x3_stride2_relu6": _seq((9, 10, 8), dw(3, strides=2, padding="same", activation="relu6")),
    "dw_5x5_same_c6": _seq((7, 8, 6), dw(5, padding="same")),
    # maps that are mostly border run pixel by pixel (SIMD): mobilenet's last 3x3x1024 shape, and
    # stride 2 onto a 3x3 map with a clamp
    "dw_3x3_same_tiny": _seq((3, 3, 12), dw(3, padding="same")),
    "dw_3x3_s2_small_relu6": _seq((6, 5, 8), dw(3, strides=2, padding="same", activation="relu6")),
    # CONV_2D with more than 64 output channels (the 3 KB per-layer requantization table)
    "conv_1x1_96ch_relu": _seq((3, 5, 8), conv(96, 1, activation="relu")),
    "conv_3x3_160ch": _seq((4, 4, 4), conv(160, 3, padding="same")),
    # FULLY_CONNECTED (+ Flatten's shape ops and RESHAPE)
    "fc_flatten": _seq((4, 4, 3), layers.Flatten(), layers.Dense(10, bias_initializer=RB)),
    "fc_relu_odd": _seq((37,), layers.Dense(13, activation="relu", bias_initializer=RB)),
    "fc_stack": _seq((64,), layers.Dense(32, activation="relu", bias_initializer=RB),
                     layers.Dense(8, bias_initializer=RB)),
    # pools, GAP, pad
    "avgpool_2": _seq((8, 8, 6), conv(6, 1), layers.AveragePooling2D(2)),
    "avgpool_3_s2_same": _seq((9, 9, 5), conv(5, 1), layers.AveragePooling2D(3, strides=2, padding="same")),
    "maxpool_2": _seq((8, 8, 6), conv(6, 1), layers.MaxPooling2D(2)),
    "maxpool_3_s2_same": _seq((7, 9, 3), conv(3, 1), layers.MaxPooling2D(3, strides=2, padding="same")),
    "gap": _seq((6, 6, 8), conv(8, 3, padding="same", activation="relu"), layers.GlobalAveragePooling2D()),
    "zeropad": _seq((6, 6, 3), layers.ZeroPadding2D(((1, 2), (2, 1))), conv(4, 3)),
    # ADD
    "add_residual": _residual((6, 6, 8)),
    "add_relu": _residual((5, 5, 5), act="relu"),
    "add_gap_dense": _two_branch_gap((8, 8, 2)),
    # standalone activations (nothing to fuse into: they act on the model input)
    "relu_standalone": _seq((6, 6, 4), layers.ReLU(), conv(4, 1)),
    "relu6_standalone": _seq((40,), layers.ReLU(max_value=6.0), layers.Dense(6, bias_initializer=RB)),
    # FULLY_CONNECTED shapes for the int16-weight layout: depth tails 2 and 3, 1-3 leftover rows
    "fc_tail2_rows3": _seq((42,), layers.Dense(7, bias_initializer=RB)),
    "fc_tail3_relu6": _seq((43,), layers.Dense(6, activation="relu6", bias_initializer=RB),
                           layers.Dense(9, bias_initializer=RB)),
}

FAST = ["conv_1x1_c16", "conv_1x1_c160_odd", "dw_in1_dm8_10x8_s2", "dw_in1_dm3_valid", "dw_in1_dm8_3x3_s2", "dw_dm4_c3_s2", "conv_3x3_same_relu", "conv_1x1_96ch_relu", "conv_3x3_160ch", "conv_5x3_stride21_odd", "dw_dm2_stride2", "dw_3x3_stride2_relu6",
        "dw_3x3_same", "dw_3x3_same_tiny", "dw_3x3_s2_small_relu6", "fc_flatten", "avgpool_3_s2_same", "maxpool_3_s2_same", "gap", "zeropad",
        "add_relu", "add_gap_dense", "relu_standalone", "relu6_standalone"]


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    return ModelCache(tmp_path_factory.mktemp("tflite_models"))


@pytest.fixture(scope="session")
def cwork(tmp_path_factory):
    return tmp_path_factory.mktemp("cbuild")


def _model(models, name):
    build, shape = CASES[name]
    return models.get(name, build, shape)


def test_one_channel_depthwise_takes_pixel_blocks(models, tmp_path):
    """A depthwise layer on one input channel with a window of up to 64 values is a CONV_2D with a
    pixel-block scratch in the arena (person_detect's first layer: 1.05x -> 0.93x of CMSIS-NN's
    cycles), and the scratch does not make the arena larger than the layer's output."""
    from tinyol.model import codegen

    info = codegen.generate_backbone(_model(models, "dw_in1_dm8_3x3_s2"), tmp_path, "backbone.tflite")
    src = (tmp_path / "backbone.c").read_text()
    assert "tol_conv2d_s8(&op0, input, &tol_arena[" in src, src[:3000]
    assert ".scratch_px = 16" in src.split("static const tol_conv_params_t op1")[0], src[:3000]
    two = codegen.generate_backbone(_model(models, "dw_in1_dm8_3x3_s2"), tmp_path / "two", "backbone.tflite",
                                    conv_pixels=2)   # two pixels at a time: no blocks
    assert ".scratch_px" not in (tmp_path / "two" / "backbone.c").read_text()
    assert info.arena_bytes == two.arena_bytes


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", FAST)
def test_bit_exact(models, cwork, name, impl):
    assert_bit_exact(_model(models, name), impl, cwork, n=12)


@pytest.mark.slow
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", sorted(set(CASES) - set(FAST)))
def test_bit_exact_sweep(models, cwork, name, impl):
    assert_bit_exact(_model(models, name), impl, cwork, n=24)


# ----------------------------------------------------------------------------- ADD, narrow clamp

def _narrow_add(models):
    """add_residual (6 x 6 x 8 = 288 elements: the SIMD kernel's tabulated path) with its ADD's
    fused activation set to RELU_N1_TO_1 in the flatbuffer: a clamp to [-1, 1] in real units,
    narrow at both ends of the int8 range. The converter never writes a narrow clamp for an
    ADD (it sizes a ReLU'd ADD's output to the activation's range, so the clamp is
    [-128, 127]); TFLM's runtime computes the edited model as it stands, and stays the oracle."""
    import flatbuffers
    from tinyol.model.tflite import schema

    path = models.root / "add_n1_to_1.tflite"
    if path.exists():
        return path
    s = schema()
    mt = s.ModelT.InitFromPackedBuf(bytearray(_model(models, "add_residual").read_bytes()), 0)
    g = mt.subgraphs[0]
    add_code = [i for i, c in enumerate(mt.operatorCodes)
                if max(c.builtinCode, c.deprecatedBuiltinCode) == s.BuiltinOperator.ADD]
    adds = [op for op in g.operators if op.opcodeIndex in add_code]
    assert len(adds) == 1 and adds[0].builtinOptions.fusedActivationFunction == s.ActivationFunctionType.NONE
    adds[0].builtinOptions.fusedActivationFunction = s.ActivationFunctionType.RELU_N1_TO_1
    b = flatbuffers.Builder(1024)
    b.Finish(mt.Pack(b), file_identifier=b"TFL3")
    path.write_bytes(bytes(b.Output()))
    return path


@pytest.mark.parametrize("impl", IMPLS)
def test_add_narrow_clamp_bit_exact(models, cwork, impl):
    """The ADD kernels' clamp to a narrow activation range (lo > -128, hi < 127: the SIMD
    table path's clamped loop) equals TFLM bit for bit, on inputs that reach both ends."""
    import re

    cb = assert_bit_exact(_narrow_add(models), impl, cwork, n=12)
    src = (cb.gen_dir / "backbone.c").read_text()
    m = re.search(r"tol_add_params_t \w+ = \{\s*\.size = (\d+),.*?\.act_min = (-?\d+), \.act_max = (-?\d+),",
                  src, re.S)
    assert m, "no ADD parameters in the generated C"
    size, lo, hi = (int(v) for v in m.groups())
    assert size >= 256 and lo > -128 and hi < 127, (size, lo, hi)
    from _kernel_util import random_inputs
    from tinyol.model import codegen

    want = codegen.run_tflm(cb.tflite_path, random_inputs(cb.info.input_shape, 12, 1))
    assert (want == lo).mean() > 0.05 and (want == hi).mean() > 0.05  # reached, not merely configured


# ----------------------------------------------------------------------------- on Cortex-M4 (QEMU)

@pytest.mark.slow
@pytest.mark.qemu
def test_cortex_m4_bit_exact_and_faster(models, tmp_path):
    """Both kernel sets built for Cortex-M4 (real DSP instructions and the ARM asm
    paths) run in QEMU, match TFLM bit for bit, and SIMD needs fewer instructions."""
    from _kernel_util import have_qemu_m4, random_inputs, run_on_m4
    from tinyol.model import codegen

    if not have_qemu_m4():
        pytest.skip("arm-none-eabi-gcc or qemu-system-arm missing")
    # dw_3x3_stride2_relu6: a 5 x 5 map with border on all sides, on the depthwise small-map path
    for name in ("conv_3x3_same_relu", "dw_3x3_same_tiny", "dw_3x3_stride2_relu6", "conv_1x1_96ch_relu",
                 "dw_in1_dm8_10x8_s2", "dw_in1_dm8_3x3_s2", "dw_dm4_c3_s2"):
        path = _model(models, name)
        x = random_inputs(CASES[name][1], 3, seed=7)
        want = codegen.run_tflm(path, x).reshape(3, -1)
        counts = {}
        for impl in IMPLS:
            got, instr = run_on_m4(path, impl, x, tmp_path / name)
            assert np.array_equal(got, want), (name, impl)
            counts[impl] = instr
        assert counts["simd"] < counts["ref"], (name, counts)


# ----------------------------------------------------------------------------- requantization

def _mbqm_py(x: int, m: int, s: int) -> int:
    """gemmlowp/TFLM MultiplyByQuantizedMultiplier with Python integers (oracle)."""
    left, right = max(s, 0), max(-s, 0)
    a = ((x << left) + 2**31) % 2**32 - 2**31            # int32 wrap of x * 2^left
    ab = a * m
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    v = ab + nudge
    q = (abs(v) >> 31) * (1 if v >= 0 else -1)          # C++ division truncates toward zero
    mask = (1 << right) - 1
    rem, thr = q & mask, (mask >> 1) + (1 if q < 0 else 0)
    return (q >> right) + (1 if rem > thr else 0)


def test_requantization_edge_cases(tmp_path):
    """The reference (gemmlowp formulation) and the SIMD fast path against a
    Python oracle, including accumulators near +-2^31 and every shift."""
    import ctypes
    import subprocess

    from _kernel_util import KERNELS, MCU_INC, STRICT

    shim = tmp_path / "shim.c"
    shim.write_text('#include "simd/tol_simd_dot.h"\n'
                    "int32_t shim_fast(int32_t x, int32_t m, int32_t s);\n"
                    "int32_t shim_fast(int32_t x, int32_t m, int32_t s) { return tol_mbqm_fast_(x, m, s); }\n")
    lib = tmp_path / "librq.so"
    subprocess.run(["gcc", *STRICT, "-O2", "-shared", "-fPIC", f"-I{MCU_INC}", f"-I{KERNELS}", str(shim),
                    str(KERNELS / "ref" / "tol_eltwise.c"), "-o", str(lib)], check=True)
    so = ctypes.CDLL(str(lib))
    rng = np.random.default_rng(3)
    xs = [0, 1, -1, 2**31 - 1, -2**31 + 1, -2**31, 2**30, -2**30, 12345, -12345]
    xs += [int(v) for v in rng.integers(-2**31, 2**31, size=150)]
    xs += [int(v) for v in rng.integers(-2**20, 2**20, size=150)]
    cases = 0
    for s in range(-31, 8):
        for m in (0, 1 << 30, (1 << 30) + 1, (1 << 31) - 1, 1518500250, int(rng.integers(1 << 30, 1 << 31))):
            for x in xs:
                if s > 0 and not (-2**31 <= x * (1 << s) < 2**31):
                    continue  # TFLM's left shift would overflow int32 (UB)
                want = _mbqm_py(x, m, s)
                assert so.tol_mbqm(x, m, s) == want, ("ref", x, m, s)
                assert so.shim_fast(x, m, s) == want, ("simd", x, m, s)
                cases += 1
    assert cases > 10000


def test_requantization_prepared_constants(tmp_path):
    """The SIMD kernels' per-channel form (tol_rq_prep_ once, tol_rq_apply_ per
    output) and the SSAT clamp against the Python gemmlowp oracle."""
    import ctypes
    import subprocess

    from _kernel_util import KERNELS, MCU_INC, STRICT

    shim = tmp_path / "shim.c"
    shim.write_text('#include "simd/tol_simd_dot.h"\n'
                    "int32_t shim_rq(int32_t x, int32_t m, int32_t s);\n"
                    "int32_t shim_rq(int32_t x, int32_t m, int32_t s)\n"
                    "{ tol_rq_t q; if (!tol_rq_prep_(&q, m, s)) return -999; return tol_rq_apply_(x, &q); }\n"
                    "int32_t shim_ssat8(int32_t v);\n"
                    "int32_t shim_ssat8(int32_t v) { return tol_ssat8(v); }\n"
                    "int32_t shim_sign(int32_t x, int32_t m, int32_t s);\n"
                    "int32_t shim_sign(int32_t x, int32_t m, int32_t s)\n"
                    "{ return tol_rq_sign_(x, m, (int32_t)(1u << (-2 - s)), -1 - s); }\n"
                    "int32_t shim_rqs(int32_t x, int32_t m, int32_t s);\n"
                    "int32_t shim_rqs(int32_t x, int32_t m, int32_t s)\n"
                    "{ tol_rqs_t q; if (!tol_rqs_prep_(&q, m, s)) return -999; return tol_rqs_apply_(x, &q); }\n")
    lib = tmp_path / "librq2.so"
    subprocess.run(["gcc", *STRICT, "-O2", "-shared", "-fPIC", f"-I{MCU_INC}", f"-I{KERNELS}", str(shim),
                    "-o", str(lib)], check=True)
    so = ctypes.CDLL(str(lib))
    rng = np.random.default_rng(5)
    xs = [0, 1, -1, 2**31 - 1, -2**31 + 1, -2**31, 2**30, -2**30, 777, -777]
    # exact ties of both roundings (x * m = k * 2^31 +- 2^30 with m = 2^30: x odd; then +-2^(r-1))
    xs += [3, -3, 5, -5, 2**20 + 1, -(2**20 + 1), 6, -6, 10, -10, 2**12 * 3, -(2**12 * 3)]
    xs += [int(v) for v in rng.integers(-2**31, 2**31, size=100)]
    xs += [int(v) for v in rng.integers(-2**16, 2**16, size=100)]
    for s in range(-31, 0):
        for m in (0, 1 << 30, (1 << 31) - 1, int(rng.integers(1 << 30, 1 << 31))):
            for x in xs:
                assert so.shim_rq(x, m, s) == _mbqm_py(x, m, s), (x, m, s)
                if s <= -2:  # the sign-built rounding constant (FULLY_CONNECTED blocks)
                    assert so.shim_sign(x, m, s) == _mbqm_py(x, m, s), ("sign", x, m, s)
                    assert so.shim_rqs(x, m, s) == _mbqm_py(x, m, s), ("rqs", x, m, s)
    assert so.shim_rq(5, 1 << 30, 0) == -999  # left shifts are not prepared: callers fall back
    assert so.shim_rqs(5, 1 << 30, -1) == -999  # nor a right shift by 1 in the compact form
    for v in (-1000, -129, -128, -5, 0, 127, 128, 1000):
        assert so.shim_ssat8(v) == max(-128, min(127, v))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["conv_stride2_same_relu6", "dw_dm2_c8", "fc_stack", "zeropad", "add_residual",
                                  "add_gap_dense"])
def test_arena_not_larger_than_tflm(models, tmp_path, name):
    from tinyol.model import codegen

    path = _model(models, name)
    info = codegen.generate_backbone(path, tmp_path, "m.tflite")
    assert info.arena_bytes <= codegen.tflm_arena_bytes(path)


# ----------------------------------------------------------------------------- int16 FC weights

FC16 = ["fc_flatten", "fc_relu_odd", "fc_stack", "relu6_standalone", "fc_tail2_rows3", "fc_tail3_relu6"]


def _fc_shapes(path):
    from tinyol.model.tflite import load_model

    m = load_model(path)
    return [tuple(int(d) for d in m.tensors[op.inputs[1]].shape) for op in m.operators
            if op.opname == "FULLY_CONNECTED"]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", FC16)
def test_fc_int16_weights_bit_exact(models, cwork, name, impl):
    """`--fc-weights int16`: the pre-widened kernel (every depth tail 0-3, every count of
    leftover rows 0-3, ReLU/ReLU6 clamps) equals TFLM bit for bit, and the flash cost is
    what the layout promises: 2 bytes per weight, plus one zero half per tail value of a
    leftover row."""
    path = _model(models, name)
    cb = assert_bit_exact(path, impl, cwork, n=16, fc_weights="int16")
    src = (cb.gen_dir / "backbone.c").read_text()
    shapes = _fc_shapes(path)
    assert src.count("tol_fully_connected_s8w16(") == len(shapes) and "tol_fully_connected_s8(" not in src
    narrow = assert_bit_exact(path, impl, cwork, n=4, fc_weights="int8")
    extra = sum(o * i + 2 * (o % 4) * (i % 4) for (o, i) in shapes)
    assert cb.info.weights_bytes - narrow.info.weights_bytes == extra
    # the memory model (flash estimate, fit check, export's summary) counts the same bytes
    from tinyol import memory

    assert memory.fc_weights_extra(cb.info.fc_shapes, "int16") == extra


def test_fc_weights_option_refused():
    from tinyol.model import codegen
    from tinyol.errors import TinyolError

    with pytest.raises(TinyolError, match="int4"):
        codegen.generate_sources(None, "x.tflite", fc_weights="int4")


@pytest.mark.slow
@pytest.mark.qemu
def test_fc_int16_weights_on_cortex_m4(models, tmp_path):
    """The SIMD int16-weight kernel (LDRD, SMLAD without SXTB16) on a Cortex-M4 in QEMU:
    equal to TFLM and fewer instructions than the int8-weight kernel."""
    from _kernel_util import have_qemu_m4, random_inputs, run_on_m4
    from tinyol.model import codegen

    if not have_qemu_m4():
        pytest.skip("arm-none-eabi-gcc or qemu-system-arm missing")
    for name in ("fc_stack", "fc_tail3_relu6"):
        path = _model(models, name)
        x = random_inputs(CASES[name][1], 3, seed=11)
        want = codegen.run_tflm(path, x).reshape(3, -1)
        counts = {}
        for fw in ("int8", "int16"):
            got, counts[fw] = run_on_m4(path, "simd", x, tmp_path / name, fc_weights=fw)
            assert np.array_equal(got, want), (name, fw)
        assert counts["int16"] < counts["int8"], (name, counts)


# ----------------------------------------------------------------------------- CONV_2D pixel blocks

# conv cases with the im2col scratch: 1x1 with an odd pixel count (25), a window longer than one
# filter chunk (160 values) with an odd filter count, 1x1 on 8 channels, 3x3 on 4, padded stride 2
BLOCK_CASES = ["conv_1x1_c16", "conv_1x1_c160_odd", "conv_3x3_160ch", "conv_stride2_same_relu6"]


@pytest.mark.parametrize("pixels", [6, 16])
@pytest.mark.parametrize("name", BLOCK_CASES)
def test_conv_pixel_blocks_bit_exact(models, cwork, name, pixels):
    """scratch_px = 6 or 16 (`conv_pixels`, forced; at most the layer's pixel count, made even):
    the SIMD kernel's filters-outer path over blocks of pixel pairs equals TFLM bit for bit; the
    reference kernels ignore the field."""
    import re

    for impl in (IMPLS if pixels == 16 else ("simd",)):
        cb = assert_bit_exact(_model(models, name), impl, cwork, n=6, conv_pixels=pixels)
        got = re.search(r"\.scratch_px = (\d+),", (cb.gen_dir / "backbone.c").read_text())
        assert got and 4 <= int(got.group(1)) <= pixels, name


@pytest.mark.slow
@pytest.mark.qemu
def test_conv_pixel_blocks_on_cortex_m4(models, tmp_path):
    """The pixel-block path with the real SMLAD/SXTB16 on a Cortex-M4 in QEMU equals TFLM."""
    from _kernel_util import have_qemu_m4, random_inputs, run_on_m4
    from tinyol.model import codegen

    if not have_qemu_m4():
        pytest.skip("arm-none-eabi-gcc or qemu-system-arm missing")
    for name, pixels in (("conv_1x1_c160_odd", 6), ("conv_3x3_160ch", 16), ("conv_1x1_c16", 8)):
        path = _model(models, name)
        x = random_inputs(CASES[name][1], 3, seed=5)
        want = codegen.run_tflm(path, x).reshape(3, -1)
        got, _ = run_on_m4(path, "simd", x, tmp_path / name, conv_pixels=pixels)
        assert np.array_equal(got, want), (name, pixels)

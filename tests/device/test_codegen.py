"""tinyol.model.codegen / tinyol.model.tflite: errors, determinism, memory plan,
cross-compilation for Cortex-M4, and whole small networks against TFLM."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from _kernel_util import (
    ARM_FLAGS,
    IMPLS,
    KERNELS,
    MCU_INC,
    ROOT,
    SANITIZE,
    STRICT,
    ModelCache,
    assert_bit_exact,
    have_arm_gcc,
    kernel_objects,
    kernel_sources,
)
from tinyol.errors import TinyolError
from tinyol.model import codegen

pytest.importorskip("tflite_micro")
keras = pytest.importorskip("keras")
layers = keras.layers
RB = "random_normal"


# ----------------------------------------------------------------------------- models

def digits_cnn():
    inp = keras.Input((8, 8, 1))
    x = layers.Conv2D(16, 3, padding="same", activation="relu", bias_initializer=RB)(inp)
    x = layers.MaxPooling2D(2)(x)
    x = layers.Conv2D(32, 3, padding="same", activation="relu", bias_initializer=RB)(x)
    x = layers.MaxPooling2D(2)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(32, activation="relu", bias_initializer=RB)(x)
    return keras.Model(inp, x)


def ds_cnn_small():
    inp = keras.Input((25, 10, 1))
    x = layers.Conv2D(32, (5, 3), strides=2, padding="same", activation="relu", bias_initializer=RB)(inp)
    for _ in range(2):
        x = layers.DepthwiseConv2D(3, padding="same", activation="relu", bias_initializer=RB)(x)
        x = layers.Conv2D(32, 1, activation="relu", bias_initializer=RB)(x)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, x)


def resnet_tiny():
    inp = keras.Input((16, 16, 3))
    x = layers.Conv2D(8, 3, padding="same", activation="relu", bias_initializer=RB)(inp)
    y = layers.Conv2D(8, 3, padding="same", activation="relu", bias_initializer=RB)(x)
    y = layers.Conv2D(8, 3, padding="same", bias_initializer=RB)(y)
    x = layers.Activation("relu")(layers.Add()([x, y]))
    y = layers.Conv2D(16, 3, strides=2, padding="same", activation="relu", bias_initializer=RB)(x)
    y = layers.Conv2D(16, 3, padding="same", bias_initializer=RB)(y)
    s = layers.Conv2D(16, 1, strides=2, bias_initializer=RB)(x)
    x = layers.Activation("relu")(layers.Add()([s, y]))
    x = layers.AveragePooling2D(2)(x)
    x = layers.Flatten()(x)
    return keras.Model(inp, x)


def with_tanh():
    inp = keras.Input((6, 6, 2))
    x = layers.Conv2D(4, 3, bias_initializer=RB)(inp)
    x = layers.Activation("tanh", name="squash")(x)
    x = layers.Conv2D(2, 1)(x)
    return keras.Model(inp, x)


def with_permute():
    inp = keras.Input((6, 6, 2))
    x = layers.Conv2D(4, 3, bias_initializer=RB)(inp)
    x = layers.Permute((2, 1, 3), name="swap")(x)
    x = layers.Conv2D(2, 1)(x)
    return keras.Model(inp, x)


def with_dilation():
    inp = keras.Input((10, 10, 4))
    return keras.Model(inp, layers.Conv2D(6, 3, dilation_rate=2, padding="same", name="dil")(inp))


NETS = {
    "digits_cnn": (digits_cnn, (8, 8, 1)),
    "ds_cnn_small": (ds_cnn_small, (25, 10, 1)),
    "resnet_tiny": (resnet_tiny, (16, 16, 3)),
}


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    return ModelCache(tmp_path_factory.mktemp("tflite_nets"))


@pytest.fixture(scope="session")
def cwork(tmp_path_factory):
    return tmp_path_factory.mktemp("cnets")


def _net(models, name):
    build, shape = NETS[name]
    return models.get(name, build, shape)


# ----------------------------------------------------------------------------- host helpers

def test_quantize_multiplier_matches_tflm_definition():
    assert codegen.quantize_multiplier(0.5) == (1 << 30, 0)
    assert codegen.quantize_multiplier(1.0) == (1 << 30, 1)
    assert codegen.quantize_multiplier(0.0) == (0, 0)
    assert codegen.quantize_multiplier(2.0 ** -40) == (0, 0)  # shift < -31 flushes to zero
    # independent check: m * 2^(shift-31) reproduces the real multiplier to 2^-31
    rng = np.random.default_rng(0)
    for real in rng.uniform(1e-6, 4.0, size=200):
        m, s = codegen.quantize_multiplier(float(real))
        assert (1 << 30) <= m < (1 << 31)
        assert abs(m * 2.0 ** (s - 31) - real) <= real * 2.0 ** -30


def test_layer_name_from_tensor_name():
    assert codegen.layer_of("functional_1/conv2d_1/Relu;functional_1/conv2d_1/convolution") == "conv2d_1"
    assert codegen.layer_of("model/dense/MatMul") == "dense"
    assert codegen.layer_of("StatefulPartitionedCall_1:0") == "StatefulPartitionedCall_1:0"


def test_reader_does_not_import_tensorflow(models):
    path = _net(models, "digits_cnn")
    code = ("import sys; from tinyol.model.tflite import load_model; "
            f"m = load_model({str(path)!r}); "
            "print(len(m.operators), m.operators[0].opname, 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT / "host"), "PATH": "/usr/bin:/bin"})
    n, first, tf_loaded = out.stdout.split()
    assert first == "CONV_2D" and int(n) >= 5 and tf_loaded == "False"


# ----------------------------------------------------------------------------- errors

def test_unsupported_op_names_op_index_layer_and_hint(models, tmp_path):
    path = models.get("with_permute", with_permute, (6, 6, 2))
    with pytest.raises(TinyolError) as ei:
        codegen.generate_backbone(path, tmp_path / "out", "with_permute.tflite")
    msg = str(ei.value)
    assert msg.startswith("unsupported op TRANSPOSE at operator index 1 "), msg
    assert "from layer 'swap" in msg and "output tensor" in msg
    assert "channels-last" in ei.value.hint
    assert not (tmp_path / "out" / "backbone.c").exists()


@pytest.mark.parametrize("impl", IMPLS)
def test_tanh_between_convs_bit_exact(models, cwork, impl):
    """A standalone tanh (its own Activation layer) between two convolutions."""
    path = models.get("with_tanh", with_tanh, (6, 6, 2))
    assert_bit_exact(path, impl, cwork, n=16)


def test_every_refusal_has_a_hint(models, tmp_path):
    """Refusals inside a supported op (here: a fused activation the kernels lack) carry a hint too."""
    m = codegen.load_model(_net(models, "digits_cnn"))
    conv = next(op for op in m.operators if op.opname == "CONV_2D")
    conv.options["fusedActivationFunction"] = 4  # TANH fused: no int8 kernel fuses it
    with pytest.raises(TinyolError) as ei:
        codegen.generate_sources(m, "x.tflite")
    assert "unsupported fused activation TANH" in str(ei.value) and ei.value.hint


def test_dilated_conv_as_space_to_batch_is_rejected(models, tmp_path):
    path = models.get("with_dilation", with_dilation, (10, 10, 4))
    with pytest.raises(TinyolError, match=r"unsupported op SPACE_TO_BATCH_ND at operator index 0 .*layer 'dil") as ei:
        codegen.generate_backbone(path, tmp_path / "out", "d.tflite")
    assert "dilation_rate=1" in ei.value.hint


def test_float_io_is_rejected(tmp_path):
    import tensorflow as tf

    inp = keras.Input((4,))
    m = keras.Model(inp, layers.Dense(3)(inp))
    conv = tf.lite.TFLiteConverter.from_keras_model(m)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([np.ones((1, 4), np.float32)] for _ in range(4))
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    p = tmp_path / "f.tflite"
    p.write_bytes(conv.convert())
    with pytest.raises(TinyolError, match="input tensor .* is float32"):
        codegen.generate_backbone(p, tmp_path / "out", "f.tflite")


def test_garbage_file_is_rejected(tmp_path):
    p = tmp_path / "junk.tflite"
    p.write_bytes(b"\x00" * 64)
    with pytest.raises(TinyolError):
        codegen.generate_backbone(p, tmp_path / "out", "junk.tflite")


# ----------------------------------------------------------------------------- output files

def test_regeneration_is_byte_identical(models, tmp_path):
    path = _net(models, "digits_cnn")
    a = codegen.generate_backbone(path, tmp_path / "a", "models/x/backbone.tflite")
    b = codegen.generate_backbone(path, tmp_path / "b", "models/x/backbone.tflite")
    assert a == b
    for f in ("backbone.c", "backbone.h", "model_data.c", "model_data.h"):
        da, db = (tmp_path / "a" / f).read_bytes(), (tmp_path / "b" / f).read_bytes()
        assert da == db, f
        assert da.startswith(b"/* generated by tinyol ") and b"from models/x/backbone.tflite" in da
    c = (tmp_path / "a" / "backbone.c").read_text()
    includes = sorted(line.split()[1] for line in c.splitlines() if line.startswith("#include"))
    assert includes == ['"backbone.h"', '"tol_kernels.h"', "<stddef.h>", "<stdint.h>", "<string.h>"]
    data = (tmp_path / "a" / "model_data.c").read_text()
    assert data.count("0x") == path.stat().st_size


def test_info_matches_model(models, tmp_path):
    path = _net(models, "digits_cnn")
    info = codegen.generate_backbone(path, tmp_path, "d.tflite")
    assert info.input_shape == (8, 8, 1) and info.latent_size == 32
    # MACs computed independently from the layer shapes
    assert info.macs == 8 * 8 * 16 * 9 * 1 + 4 * 4 * 32 * 9 * 16 + 128 * 32
    assert [o[1] for o in info.ops if o[1] != "RESHAPE"] == [
        "CONV_2D", "MAX_POOL_2D", "CONV_2D", "MAX_POOL_2D", "FULLY_CONNECTED"]
    h = (tmp_path / "backbone.h").read_text()
    assert f"#define TOL_BACKBONE_ARENA_BYTES {info.arena_bytes} " in h
    assert f"#define TOL_BACKBONE_LATENT_SIZE {info.latent_size} " in h


# ----------------------------------------------------------------------------- whole networks

@pytest.mark.parametrize("impl", IMPLS)
def test_digits_cnn_bit_exact(models, cwork, impl):
    assert_bit_exact(_net(models, "digits_cnn"), impl, cwork, n=16)


@pytest.mark.slow
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", ["ds_cnn_small", "resnet_tiny"])
def test_nets_bit_exact(models, cwork, name, impl):
    assert_bit_exact(_net(models, name), impl, cwork, n=16)


@pytest.mark.parametrize("name", ["digits_cnn", pytest.param("resnet_tiny", marks=pytest.mark.slow)])
def test_arena_not_larger_than_tflm(models, tmp_path, name):
    path = _net(models, name)
    info = codegen.generate_backbone(path, tmp_path, "m.tflite")
    tflm = codegen.tflm_arena_bytes(path)
    assert 0 < info.arena_bytes <= tflm
    # the plan must be at least as large as the biggest single op's in+out
    m = __import__("tinyol.model.tflite", fromlist=["load_model"]).load_model(path)
    assert info.arena_bytes >= max(m.tensors[op.outputs[0]].size for op in m.operators
                                   if op.outputs[0] != m.outputs[0] and m.tensors[op.outputs[0]].dtype == "int8")


# ----------------------------------------------------------------------------- Cortex-M4 build

@pytest.mark.skipif(not have_arm_gcc(), reason="arm-none-eabi-gcc not on PATH")
@pytest.mark.parametrize("impl", IMPLS)
def test_cross_compiles_for_cortex_m4(models, tmp_path, impl):
    path = _net(models, "digits_cnn")
    codegen.generate_backbone(path, tmp_path / "gen", "digits.tflite")
    srcs = [tmp_path / "gen" / "backbone.c", tmp_path / "gen" / "model_data.c", *kernel_sources(impl)]
    objs = []
    for s in srcs:
        o = tmp_path / (s.stem + ".o")
        subprocess.run(["arm-none-eabi-gcc", *STRICT, *ARM_FLAGS, f"-I{MCU_INC}", f"-I{tmp_path / 'gen'}",
                        "-c", str(s), "-o", str(o)], check=True)
        objs.append(str(o))
    # link to prove every kernel the backbone calls exists exactly once
    elf = tmp_path / "bb.elf"
    subprocess.run(["arm-none-eabi-gcc", *ARM_FLAGS, "-nostartfiles", "--specs=nosys.specs",
                    "-Wl,--entry=tol_backbone_invoke", "-Wl,--gc-sections", *objs, "-o", str(elf)], check=True)
    if impl == "simd":
        dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)], capture_output=True, text=True).stdout
        assert "smlad" in dis and "sxtab16" in dis
    assert (KERNELS / impl).is_dir()


@pytest.mark.slow
@pytest.mark.parametrize("impl", IMPLS)
def test_sanitizers_clean(models, tmp_path, impl):
    """Generated code + kernels under AddressSanitizer/UBSan: no out-of-bounds
    access (the SIMD kernels read whole words) and no undefined behaviour."""
    main = tmp_path / "main.c"
    main.write_text(
        "#include <stdlib.h>\n#include \"backbone.h\"\n"
        "int main(void)\n{\n"
        "    static int8_t in[TOL_BACKBONE_INPUT_SIZE], out[TOL_BACKBONE_LATENT_SIZE];\n"
        "    srand(1);\n"
        "    for (int n = 0; n < 3; ++n) {\n"
        "        for (int i = 0; i < TOL_BACKBONE_INPUT_SIZE; ++i) in[i] = (int8_t)(rand() & 0xff);\n"
        "        if (tol_backbone_invoke(in, out) != TOL_OK) return 2;\n"
        "    }\n    return 0;\n}\n")
    for name in ("ds_cnn_small", "resnet_tiny"):
        gen = tmp_path / name
        codegen.generate_backbone(_net(models, name), gen, name)
        exe = tmp_path / f"{name}_{impl}"
        subprocess.run(["gcc", *SANITIZE, f"-I{MCU_INC}", f"-I{gen}", str(main), str(gen / "backbone.c"),
                        *map(str, kernel_objects(impl, "gcc", SANITIZE)), "-o", str(exe)], check=True)
        r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]

"""The layers people use, bit-exact with TFLM's runtime in both kernel sets.

Element-wise activations (LOGISTIC, TANH, LEAKY_RELU, HARD_SWISH) are checked on all
256 int8 input values at several input scales: first the host tables
(host/tinyol/model/tflm_int8.py) alone, then the generated C (ref and simd). The other ops
(SOFTMAX, MEAN over one axis, REDUCE_MAX, CONCATENATION, MUL/ADD by a constant) are
checked on the Keras models a user would write (Conv1D IMU classifier with
GlobalAveragePooling1D, BatchNormalization first, two concatenated branches, ...).
The oracle is always TFLM's Python runtime.
"""
from __future__ import annotations

import numpy as np
import pytest
from _kernel_util import IMPLS, CBackbone, ModelCache, assert_bit_exact
from tinyol.model import codegen
from tinyol.model.tflite import load_model

pytest.importorskip("tflite_micro")
keras = pytest.importorskip("keras")
layers = keras.layers
RB = "random_normal"

ALL_BYTES = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
# representative-data ranges -> different input scales and zero points (incl. asymmetric)
RANGES = [(-1.0, 1.0), (-8.0, 8.0), (-3.0, 10.0), (-30.0, 30.0)]
UNARY = {
    "LOGISTIC": lambda: layers.Activation("sigmoid"),
    "TANH": lambda: layers.Activation("tanh"),
    "LEAKY_RELU": lambda: layers.LeakyReLU(negative_slope=0.2),
    "HARD_SWISH": lambda: layers.Activation("hard_swish"),
}


def _convert_range(model, shape, lo, hi, seed=0) -> bytes:
    import tensorflow as tf

    rng = np.random.default_rng(seed)

    def rep():
        for _ in range(16):
            yield [rng.uniform(lo, hi, (1,) + tuple(shape)).astype(np.float32)]

    c = tf.lite.TFLiteConverter.from_keras_model(model)
    c.optimizations = [tf.lite.Optimize.DEFAULT]
    c.representative_dataset = rep
    c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    c.inference_input_type = tf.int8
    c.inference_output_type = tf.int8
    return c.convert()


@pytest.fixture(scope="session")
def unary_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("unary")
    cache = {}

    def get(opname: str, rng: tuple[float, float]):
        key = (opname, rng)
        if key not in cache:
            inp = keras.Input((256,))
            model = keras.Model(inp, UNARY[opname]()(inp))
            p = root / f"{opname}_{rng[0]}_{rng[1]}.tflite"
            p.write_bytes(_convert_range(model, (256,), *rng))
            assert [op.opname for op in load_model(p).operators] == [opname]
            cache[key] = p
        return cache[key]
    return get


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    return ModelCache(tmp_path_factory.mktemp("ops_models"))


@pytest.fixture(scope="session")
def cwork(tmp_path_factory):
    return tmp_path_factory.mktemp("ops_cbuild")


# ----------------------------------------------------------------------------- element-wise, exhaustive

@pytest.mark.parametrize("opname", sorted(UNARY))
def test_tables_equal_tflm_on_all_256_inputs(unary_models, opname):
    """The host's emulation of TFLM's integer code, for every input byte and 4 input scales."""
    from tinyol.model import tflm_int8 as T

    for rng in RANGES:
        path = unary_models(opname, rng)
        m = load_model(path)
        op = m.operators[0]
        x, y = m.tensors[op.inputs[0]], m.tensors[op.outputs[0]]
        sx, zx = float(x.scale[0]), int(x.zero_point[0])
        sy, zy = float(y.scale[0]), int(y.zero_point[0])
        table = {"LOGISTIC": lambda: T.logistic_table(sx, zx), "TANH": lambda: T.tanh_table(sx, zx),
                 "LEAKY_RELU": lambda: T.leaky_relu_table(sx, zx, sy, zy, float(op.options["alpha"])),
                 "HARD_SWISH": lambda: T.hard_swish_table(sx, zx, sy, zy)}[opname]()
        want = codegen.run_tflm(path, ALL_BYTES)[0]
        assert len(set(want.tolist())) > 20, "the range gives a non-trivial function"
        np.testing.assert_array_equal(table, want, err_msg=f"{opname} range {rng} scale {sx} zp {zx}")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("opname", sorted(UNARY))
def test_unary_c_all_256_inputs(unary_models, cwork, opname, impl):
    for rng in RANGES[1:3]:
        path = unary_models(opname, rng)
        cb = CBackbone(path, impl, cwork)
        np.testing.assert_array_equal(cb.run(ALL_BYTES)[0], codegen.run_tflm(path, ALL_BYTES)[0])


# ----------------------------------------------------------------------------- models a user writes

def _seq(input_shape, *ls):
    def build():
        inp = keras.Input(input_shape)
        x = inp
        for layer in ls:
            x = layer(x)
        return keras.Model(inp, x)
    return build, input_shape


def imu_gap1d():
    inp = keras.Input((128, 6))
    x = layers.Conv1D(16, 5, activation="relu", bias_initializer=RB)(inp)
    x = layers.Conv1D(16, 3, strides=2, activation="relu", bias_initializer=RB)(x)
    x = layers.GlobalAveragePooling1D()(x)
    return keras.Model(inp, layers.Dense(8, bias_initializer=RB)(x))


def _randomize_bn(bn, c, seed):
    rng = np.random.default_rng(seed)
    bn.set_weights([rng.uniform(0.5, 2.0, c).astype(np.float32), rng.normal(0, 0.5, c).astype(np.float32),
                    rng.normal(0, 0.5, c).astype(np.float32), rng.uniform(0.3, 3.0, c).astype(np.float32)])


def bn_first():
    inp = keras.Input((32, 6))
    bn = layers.BatchNormalization(name="bn_in")
    x = bn(inp)
    _randomize_bn(bn, 6, 3)
    x = layers.Conv1D(8, 3, activation="relu", bias_initializer=RB)(x)
    return keras.Model(inp, layers.GlobalAveragePooling1D()(x))


def normalization_first():
    inp = keras.Input((8, 8, 3))
    rng = np.random.default_rng(5)
    x = layers.Normalization(mean=rng.normal(0, 1, 3), variance=rng.uniform(0.2, 4.0, 3))(inp)
    x = layers.Conv2D(6, 3, activation="relu", bias_initializer=RB)(x)
    return keras.Model(inp, layers.GlobalAveragePooling2D()(x))


def activations_mix():
    inp = keras.Input((8, 8, 3))
    x = layers.Conv2D(8, 3, padding="same", activation="tanh", bias_initializer=RB)(inp)
    x = layers.Conv2D(8, 3, padding="same", activation="sigmoid", bias_initializer=RB)(x)
    x = layers.Conv2D(8, 3, padding="same", bias_initializer=RB)(x)
    x = layers.LeakyReLU(negative_slope=0.1)(x)
    x = layers.Conv2D(8, 1, activation="hard_swish", bias_initializer=RB)(x)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, x)


def dense_acts():
    inp = keras.Input((24,))
    x = layers.Dense(16, activation="tanh", bias_initializer=RB)(inp)
    x = layers.Dense(16, activation="sigmoid", bias_initializer=RB)(x)
    x = layers.Dense(16, activation="leaky_relu", bias_initializer=RB)(x)
    return keras.Model(inp, layers.Dense(8, activation="hard_swish", bias_initializer=RB)(x))


def concat_branches():
    inp = keras.Input((32, 4))
    a = layers.Conv1D(6, 3, padding="same", activation="relu", bias_initializer=RB)(inp)
    b = layers.Conv1D(5, 5, padding="same", activation="relu", bias_initializer=RB)(inp)
    x = layers.Concatenate()([a, b])
    x = layers.Conv1D(8, 3, activation="relu", bias_initializer=RB)(x)
    g1 = layers.GlobalAveragePooling1D()(x)
    g2 = layers.GlobalMaxPooling1D()(x)
    return keras.Model(inp, layers.Concatenate(name="pools")([g1, g2]))


def gmp2d():
    inp = keras.Input((9, 7, 3))
    x = layers.Conv2D(10, 3, padding="same", activation="relu", bias_initializer=RB)(inp)
    return keras.Model(inp, layers.GlobalMaxPooling2D()(x))


def softmax_out():
    inp = keras.Input((30,))
    x = layers.Dense(12, activation="relu", bias_initializer=RB)(inp)
    return keras.Model(inp, layers.Dense(10, activation="softmax", bias_initializer=RB)(x))


def softmax_rows():
    inp = keras.Input((6, 5, 3))
    x = layers.Conv2D(7, 3, padding="same", bias_initializer=RB)(inp)
    return keras.Model(inp, layers.Softmax(axis=-1)(x))


def mean_one_axis():
    inp = keras.Input((6, 5, 4))
    x = layers.Conv2D(8, 3, padding="same", activation="relu", bias_initializer=RB)(inp)
    x = layers.Lambda(lambda t: keras.ops.mean(t, axis=2))(x)   # [1, 6, 8]: outer 6
    return keras.Model(inp, layers.Flatten()(x))


def rescaling_first():
    inp = keras.Input((16, 3))
    x = layers.Rescaling(1.0 / 4.0, offset=-0.5)(inp)
    x = layers.Conv1D(6, 3, activation="relu", bias_initializer=RB)(x)
    return keras.Model(inp, layers.GlobalAveragePooling1D()(x))


USER_MODELS = {
    # name: (builder, input shape, ops that must appear)
    "imu_gap1d": (imu_gap1d, (128, 6), {"MEAN"}),
    "bn_first": (bn_first, (32, 6), {"MUL", "ADD"}),
    "normalization_first": (normalization_first, (8, 8, 3), {"SUB", "MUL"}),
    "activations_mix": (activations_mix, (8, 8, 3), {"TANH", "LOGISTIC", "LEAKY_RELU", "HARD_SWISH"}),
    "dense_acts": (dense_acts, (24,), {"TANH", "LOGISTIC", "LEAKY_RELU", "HARD_SWISH"}),
    "concat_branches": (concat_branches, (32, 4), {"CONCATENATION", "REDUCE_MAX", "MEAN"}),
    "gmp2d": (gmp2d, (9, 7, 3), {"REDUCE_MAX"}),
    "softmax_out": (softmax_out, (30,), {"SOFTMAX"}),
    "softmax_rows": (softmax_rows, (6, 5, 3), {"SOFTMAX"}),
    "mean_one_axis": (mean_one_axis, (6, 5, 4), {"MEAN"}),
    "rescaling_first": (rescaling_first, (16, 3), {"MUL", "ADD"}),
}
FAST = ["imu_gap1d", "bn_first", "activations_mix", "concat_branches", "softmax_out", "mean_one_axis"]


def _user_model(models, name):
    build, shape, want_ops = USER_MODELS[name]
    path = models.get(name, build, shape)
    ops = {op.opname for op in load_model(path).operators}
    assert want_ops <= ops, f"{name}: the converter emitted {sorted(ops)}"
    return path


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", FAST)
def test_user_models_bit_exact(models, cwork, name, impl):
    assert_bit_exact(_user_model(models, name), impl, cwork, n=16)


@pytest.mark.slow
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", sorted(set(USER_MODELS) - set(FAST)))
def test_user_models_bit_exact_more(models, cwork, name, impl):
    assert_bit_exact(_user_model(models, name), impl, cwork, n=24, seed=3)


def test_softmax_extreme_rows(models, cwork):
    """Rows of equal values, one dominant value, and the full int8 range."""
    path = _user_model(models, "softmax_rows")
    cb = CBackbone(path, "ref", cwork)
    n_in = int(np.prod(cb.info.input_shape))
    x = np.stack([np.zeros(n_in, np.int8), np.full(n_in, 127, np.int8), np.full(n_in, -128, np.int8),
                  np.resize(np.array([-128, 127], np.int8), n_in)])
    np.testing.assert_array_equal(cb.run(x), codegen.run_tflm(path, x).reshape(len(x), -1))


def test_imu_model_exports_from_keras(tmp_path):
    """The issue's first report: a Conv1D + GlobalAveragePooling1D model exports (it used to fail
    with 'expected [1, H, W, C]') and its backbone is bit-exact."""
    from tinyol.model.export import export_model

    keras.utils.set_random_seed(0)
    src = tmp_path / "imu.keras"
    inp = keras.Input((128, 6))
    x = layers.Conv1D(16, 5, activation="relu", bias_initializer=RB)(inp)
    x = layers.GlobalAveragePooling1D()(x)
    x = layers.Dense(16, activation="relu")(x)
    keras.Model(inp, layers.Dense(4, activation="softmax", name="head")(x)).save(src)
    man = export_model(str(src), str(tmp_path / "out"))
    assert "MEAN" in man["ops"] and man["latent"]["dim"] == 16
    assert_bit_exact(tmp_path / "out" / "backbone.tflite", "simd", tmp_path / "c", n=8)


@pytest.mark.slow
@pytest.mark.qemu
@pytest.mark.parametrize("name", ["bn_first", "activations_mix", "concat_branches", "softmax_out"])
def test_user_models_on_cortex_m4(models, tmp_path, name):
    """Both kernel sets cross-built for Cortex-M4 and run in QEMU (real DSP instructions,
    e.g. the SMLAL requantization of MUL/ADD by a constant) == TFLM bit for bit."""
    from _kernel_util import have_qemu_m4, random_inputs, run_on_m4

    if not have_qemu_m4():
        pytest.skip("arm-none-eabi-gcc or qemu-system-arm missing")
    path = _user_model(models, name)
    shape = USER_MODELS[name][1]
    x = random_inputs(shape, 3, seed=9)
    want = codegen.run_tflm(path, x).reshape(3, -1)
    for impl in IMPLS:
        got, _ = run_on_m4(path, impl, x, tmp_path, count=False)
        np.testing.assert_array_equal(got, want, err_msg=impl)


@pytest.mark.slow
@pytest.mark.parametrize("impl", IMPLS)
def test_new_kernels_sanitizers_clean(models, tmp_path, impl):
    """The new kernels under AddressSanitizer/UBSan on full-range random inputs: no
    out-of-bounds access, no undefined shift or overflow."""
    import subprocess

    from _kernel_util import MCU_INC, SANITIZE, kernel_objects

    main = tmp_path / "main.c"
    main.write_text(
        "#include <stdlib.h>\n#include \"backbone.h\"\n"
        "int main(void)\n{\n"
        "    static int8_t in[TOL_BACKBONE_INPUT_SIZE], out[TOL_BACKBONE_LATENT_SIZE];\n"
        "    srand(3);\n"
        "    for (int n = 0; n < 20; ++n) {\n"
        "        for (int i = 0; i < TOL_BACKBONE_INPUT_SIZE; ++i) in[i] = (int8_t)(n < 2 ? (n ? 127 : -128) : (rand() & 0xff));\n"
        "        if (tol_backbone_invoke(in, out) != TOL_OK) return 2;\n"
        "    }\n    return 0;\n}\n")
    for name in ("activations_mix", "concat_branches", "softmax_rows", "normalization_first"):
        gen = tmp_path / name
        codegen.generate_backbone(_user_model(models, name), gen, name)
        exe = tmp_path / f"{name}_{impl}"
        subprocess.run(["gcc", *SANITIZE, f"-I{MCU_INC}", f"-I{gen}", str(main), str(gen / "backbone.c"),
                        *map(str, kernel_objects(impl, "gcc", SANITIZE)), "-o", str(exe)], check=True)
        r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (name, r.stderr[-2000:])

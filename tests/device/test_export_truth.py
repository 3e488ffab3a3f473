"""Export tells the truth about a .tflite model (issue 34): an int8-only tool says so first,
with how to quantize; an autoencoder is told from a classifier by the model (its output
has its input's shape and no softmax), not by the output width; a classifier whose logits
come from a 1x1 convolution on a pooled 1x1 map (person_detect, MobileNet) is split before
that convolution, its Keras Reshape's shape arithmetic and softmax dropped with it.

Oracles: MLPerf Tiny's own AD autoencoder (../shared/mlperf-tiny), TensorFlow's converter
output for Keras Sequential models written as users write them, TFLM's runtime on the
original model and on the cut backbone.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED
from tinyol.errors import TinyolError

AD = SHARED / "mlperf-tiny" / "ad01_int8.tflite"
if not AD.is_file():
    AD = Path("/work/shared/mlperf-tiny/ad01_int8.tflite")


def _export(src, out, **kw):
    from tinyol.model.export import export_model
    return export_model(str(src), str(out), **kw)


@pytest.mark.slow
@pytest.mark.skipif(not AD.is_file(), reason="../shared/mlperf-tiny/ad01_int8.tflite is not here")
def test_mlperf_ad_autoencoder_is_exported_as_an_autoencoder(tmp_path):
    """ad01 (640 -> 128x4 -> 8 -> 128x4 -> 640, no softmax) was exported as a 640-class
    classifier; its head now reconstructs its 640 inputs from the dequantized last layer."""
    from tinyol.model.tflite import load_model
    full = load_model(AD)
    man = _export(AD, tmp_path / "o")
    assert man["head"]["mode"] == "autoencoder" and man["head"]["classes"] == []
    assert man["head"]["out_dim"] == man["input"]["size"] == 640 and man["latent"]["dim"] == 128
    last = full.operators[-1]
    w = full.tensors[last.inputs[1]]
    z = np.load(tmp_path / "o" / "head_init.npz")
    scale = np.broadcast_to(np.asarray(w.scale, np.float64).reshape(-1), (640,))
    np.testing.assert_allclose(z["W"], w.data.astype(np.float64) * scale[:, None], rtol=1e-6)
    # asked for a classifier, it is one (the user's word goes); --mode autoencoder on a classifier is refused
    man = _export(AD, tmp_path / "c", mode="classifier")
    assert man["head"]["mode"] == "classifier" and man["head"]["init_classes"] == 640


tf = None


def _convert(model, shape, *, int8=True):
    import tensorflow as tf
    rng = np.random.default_rng(0)

    def rep():
        for _ in range(16):
            yield [rng.random((1,) + shape, dtype=np.float32)]
    c = tf.lite.TFLiteConverter.from_keras_model(model)
    if int8:
        c.optimizations = [tf.lite.Optimize.DEFAULT]
        c.representative_dataset = rep
        c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        c.inference_input_type = c.inference_output_type = tf.int8
    return c.convert()


@pytest.fixture(scope="module")
def person_detect_like(tmp_path_factory):
    """person_detect's tail, as a user writes it in Keras: conv, average pool to 1x1, a 1x1
    conv to the classes, Reshape, Softmax."""
    keras = pytest.importorskip("keras")
    pytest.importorskip("tflite_micro")
    L = keras.layers
    keras.utils.set_random_seed(3)
    m = keras.Sequential([keras.Input((8, 8, 1)), L.Conv2D(4, 3, activation="relu"), L.AveragePooling2D(6),
                          L.Conv2D(2, 1, name="logits"), L.Reshape((2,)), L.Softmax()])
    root = tmp_path_factory.mktemp("pd")
    (root / "pd.tflite").write_bytes(_convert(m, (8, 8, 1)))
    (root / "pd_float.tflite").write_bytes(_convert(m, (8, 8, 1), int8=False))
    return root, m


@pytest.mark.slow
@pytest.mark.tf
def test_a_1x1_conv_classifier_is_split_before_its_conv(person_detect_like, tmp_path):
    from tinyol.model import codegen
    from tinyol.model.tflite import load_model
    root, keras_model = person_detect_like
    src = root / "pd.tflite"
    full = load_model(src)
    assert [op.opname for op in full.operators][-1] == "SOFTMAX" and "SHAPE" in [op.opname for op in full.operators]
    man = _export(src, tmp_path / "o")
    assert man["head"]["mode"] == "classifier" and man["head"]["init_classes"] == 2
    assert man["latent"]["dim"] == 4        # the pooled features, not the 2 probabilities
    assert man["ops"] == ["CONV_2D", "AVERAGE_POOL_2D"]
    z = np.load(tmp_path / "o" / "head_init.npz")
    kernel, bias = keras_model.get_layer("logits").get_weights()    # [1, 1, 4, 2], [2]
    w_int8 = full.tensors[full.operators[-6].inputs[1]]
    step = np.asarray(w_int8.scale, np.float64).reshape(-1)[:, None]
    assert np.all(np.abs(z["W"] - kernel[0, 0].T) <= step * 0.51 + 1e-7)   # the conv's weights, dequantized
    # the head on TFLM's backbone output picks what TFLM's full model picks
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (16, 8, 8, 1), dtype=np.int8)
    lat = codegen.run_tflm(tmp_path / "o" / "backbone.tflite", x).reshape(len(x), -1)
    lat = (lat.astype(np.float32) - man["latent"]["zero_point"]) * np.float32(man["latent"]["scale"])
    logits = lat @ z["W"].T + z["b"]
    probs = codegen.run_tflm(src, x).reshape(len(x), -1).astype(np.int32)
    picked = probs[np.arange(len(x)), logits.argmax(1)]
    assert np.all(picked >= probs.max(1) - 1)


@pytest.mark.slow
@pytest.mark.tf
def test_a_float_model_is_told_it_must_be_int8_first(person_detect_like, tmp_path, capsys):
    from tinyol.cli import main
    root, _ = person_detect_like
    assert main(["export", str(root / "pd_float.tflite"), "-o", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "float32 input and float32 output" in err and "--classes" not in err
    assert "TFLITE_BUILTINS_INT8" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
    with pytest.raises(TinyolError, match="no autoencoder"):
        _export(root / "pd.tflite", tmp_path / "a", mode="autoencoder")


@pytest.mark.slow
@pytest.mark.tf
def test_simulate_sizes_tflms_arena_from_the_model(tmp_path):
    """A model of few weights and large activations (a fingerprint-sized 96x96 input through
    one small conv): TFLM's Python runtime opened with its default arena (10 x the model's
    bytes) cannot allocate it, and `tinyol simulate` died in it. The arena now comes from
    what export measured (manifest memory.tflm_arena_bytes). Oracle: the learner streams the
    data and reports accuracy (exit 0), in a child process (a too-small arena may crash)."""
    import subprocess
    import sys
    keras = pytest.importorskip("keras")
    pytest.importorskip("tflite_micro")
    L = keras.layers
    keras.utils.set_random_seed(1)
    m = keras.Sequential([keras.Input((96, 96, 1)), L.Conv2D(8, 3, strides=2, activation="relu"),
                          L.MaxPooling2D(4), L.Flatten(), L.Dense(2, name="head")])
    src = tmp_path / "big.keras"
    m.save(src)
    rng = np.random.default_rng(0)
    X = rng.random((12, 96 * 96), dtype=np.float32)
    np.savez(tmp_path / "d.npz", X=X, y=np.arange(12) % 2)
    man = _export(src, tmp_path / "o", calib=str(tmp_path / "d.npz"))
    tfl = (tmp_path / "o" / "backbone.tflite").stat().st_size
    assert man["memory"]["tflm_arena_bytes"] > 10 * tfl      # the runtime's default would not do
    p = subprocess.run([sys.executable, "-m", "tinyol.cli", "simulate", "--model", str(tmp_path / "o"),
                        "--data", str(tmp_path / "d.npz")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-500:] + p.stderr[-1500:]
    assert "samples            12" in p.stdout and "final acc" in p.stdout


@pytest.mark.slow
@pytest.mark.tf
@pytest.mark.skipif(not AD.is_file(), reason="../shared/mlperf-tiny/ad01_int8.tflite is not here")
def test_an_operator_with_intermediates_survives_the_cut(tmp_path):
    """An int8 LSTM (UNIDIRECTIONAL_SEQUENCE_LSTM, as TFLM's examples hold them) carries
    `intermediates` tensors; the cut at the last FULLY_CONNECTED renumbered tensors without
    them and died in a KeyError traceback. Here the MLPerf AD model's first operator is given
    one such tensor (what the LSTM op carries; TensorFlow 2.21's converter crashes on an int8
    LSTM here): the cut keeps it and the export completes."""
    import copy

    import flatbuffers
    from tinyol.model.tflite import load_model, schema
    s = schema()
    mt = s.ModelT.InitFromPackedBuf(bytearray(AD.read_bytes()), 0)
    g = mt.subgraphs[0]
    t = copy.deepcopy(g.tensors[g.operators[0].outputs[0]])
    t.name, t.buffer = b"lstm_intermediate", 0
    g.tensors.append(t)
    g.operators[0].intermediates = [len(g.tensors) - 1]
    b = flatbuffers.Builder(1024)
    b.Finish(mt.Pack(b), file_identifier=b"TFL3")
    src = tmp_path / "inter.tflite"
    src.write_bytes(bytes(b.Output()))
    man = _export(src, tmp_path / "o", mode="classifier")
    assert man["latent"]["dim"] == 128
    assert len(load_model(tmp_path / "o" / "backbone.tflite").operators) == len(g.operators) - 1

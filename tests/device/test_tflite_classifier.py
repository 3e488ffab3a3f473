"""Bring an int8 classifier .tflite: `tinyol export model.tflite` splits it at its last
FULLY_CONNECTED (the head starts from the dequantized FC weights and bias).

Models: the MLPerf Tiny KWS DS-CNN and IC ResNet-8 architectures (tinyol_studies.zoo) with a
softmax, random weights and non-trivial BatchNorm statistics, converted in the test by
TensorFlow's converter to full int8 (int8 input/output, representative data).
Oracles: TFLM's runtime on the original full model and on the cut backbone; the numpy
reference learner (tinyol simulate) for learning a new class.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from _kernel_util import IMPLS, CBackbone, convert, random_inputs
from tinyol.errors import TinyolError
from tinyol.model import codegen
from tinyol.model.tflite import load_model, parse_model

pytest.importorskip("tflite_micro")
keras = pytest.importorskip("keras")
layers = keras.layers


def _classifier(name: str):
    from tinyol_studies import zoo as Z

    keras.utils.set_random_seed(7)
    base = {"ds_cnn": Z.ds_cnn_model, "resnet8": Z.resnet8_model}[name]()
    Z._randomize_bn(base, 7)
    return keras.Model(base.inputs, layers.Softmax(name="probs")(base.outputs[0]), name=name)


SHAPES = {"ds_cnn": (49, 10, 1), "resnet8": (32, 32, 3)}
CLASSES = {"ds_cnn": 12, "resnet8": 10}


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo_tflite")
    cache = {}

    def get(name):
        if name not in cache:
            p = root / f"{name}_int8.tflite"
            p.write_bytes(convert(_classifier(name), SHAPES[name], seed=3, n_rep=24))
            cache[name] = p
        return cache[name]
    return get


def _export(src, out, *args):
    from tinyol.model.export import export_model

    return export_model(str(src), str(out), **dict(args))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ds_cnn", "resnet8"])
def test_zoo_classifier_split_bit_exact_and_head(zoo, tmp_path, name):
    src = zoo(name)
    full = load_model(src)
    assert [op.opname for op in full.operators][-2:] == ["FULLY_CONNECTED", "SOFTMAX"]
    out = tmp_path / "out"
    man = _export(src, out, ("max_classes", CLASSES[name] + 2))
    n_cls = CLASSES[name]
    assert man["head"]["init_classes"] == n_cls and man["head"]["max_classes"] == n_cls + 2
    bb = load_model(out / "backbone.tflite")
    assert "FULLY_CONNECTED" not in [op.opname for op in bb.operators] and "SOFTMAX" not in man["ops"]
    dim = man["latent"]["dim"]
    assert dim == int(full.tensors[full.operators[-2].inputs[1]].shape[1])

    # the generated C (both kernel sets) == TFLM on the cut backbone, bit for bit
    x = random_inputs(SHAPES[name], 12, seed=5)
    want = codegen.run_tflm(out / "backbone.tflite", x).reshape(len(x), -1)
    for impl in IMPLS:
        np.testing.assert_array_equal(CBackbone(out / "backbone.tflite", impl, tmp_path / "c").run(x), want)

    # head = the dequantized FC: its argmax on the latent == the full int8 model's argmax (TFLM)
    z = np.load(out / "head_init.npz")
    assert z["W"].shape == (n_cls + 2, dim) and not z["W"][n_cls:].any()
    lat = (want.astype(np.float32) - man["latent"]["zero_point"]) * np.float32(man["latent"]["scale"])
    logits = lat @ z["W"][:n_cls].T + z["b"][:n_cls]
    probs_full = codegen.run_tflm(src, x).reshape(len(x), -1).astype(np.int32)
    # (ties in the int8 softmax count as agreement: the class we pick has the top int8 probability)
    picked = probs_full[np.arange(len(x)), logits.argmax(1)]
    agree = np.mean(picked >= probs_full.max(1) - 1)
    assert agree >= 0.9, (agree, logits.argmax(1), probs_full.argmax(1))


def _cli(args, capsys) -> tuple[int, str]:
    from tinyol.cli import main

    rc = main(args)
    return rc, capsys.readouterr().err


def _trained_kws_with_new_class(tmp_path, capsys):
    """A briefly trained DS-CNN (3 synthetic classes; random weights give a constant latent),
    converted to full int8 and exported with room for one more class; returns the export dir,
    the simulate results on a stream of two known classes and a new one (label 12), and that
    stream (X, y)."""
    import tensorflow as tf

    shape = SHAPES["ds_cnn"]
    rng = np.random.default_rng(11)
    protos = rng.normal(0, 1.0, (4,) + shape).astype(np.float32)

    def sample(classes, n):
        y = rng.choice(classes, n)
        return protos[y] + rng.normal(0, 0.5, (n,) + shape).astype(np.float32), y

    model = _classifier("ds_cnn")
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            layer.momentum = 0.8  # a few batches give usable moving statistics
    Xt, yt = sample([0, 1, 2], 384)
    model.compile(keras.optimizers.Adam(3e-3), "sparse_categorical_crossentropy")
    model.fit(Xt, yt, epochs=3, batch_size=32, verbose=0)
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([Xt[i:i + 1]] for i in range(48))
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = tf.int8
    conv.inference_output_type = tf.int8
    src = tmp_path / "kws_int8.tflite"
    src.write_bytes(conv.convert())

    out = tmp_path / "kws"
    rc, err = _cli(["export", str(src), "--out", str(out), "--max-classes", "13", "-q"], capsys)
    assert rc == 0, err
    X, y = sample([0, 1, 3], 300)
    data = tmp_path / "kws_new.npz"
    np.savez(data, X=X, y=np.array([0, 1, 2, 12])[y])
    from tinyol.cli import main

    assert main(["simulate", "--model", str(out), "--data", str(data), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    return out, res, X, np.array([0, 1, 2, 12])[y]


@pytest.mark.slow
def test_zoo_classifier_learns_a_new_class(tmp_path, capsys):
    """tinyol simulate (the reference learner) on the exported classifier learns label 12."""
    _, res, _, _ = _trained_kws_with_new_class(tmp_path, capsys)
    per = {int(k): v for k, v in res["final_per_class"].items()}
    assert per[12] >= 0.9 and per[0] >= 0.9 and per[1] >= 0.9, res["final_per_class"]
    pre = {int(k): v for k, v in res["prequential_per_class"].items()}
    assert pre[12] >= 0.6, res["prequential_per_class"]   # learned while streaming, from zero rows


@pytest.mark.slow
def test_zoo_classifier_on_the_native_target(tmp_path, capsys, firmware):
    """The exported classifier in the real firmware (native target): `tinyol verify` finds its
    backbone bit-exact with TFLM, and `tinyol stream --train` of the new-class stream gives the
    reference learner's predictions, sample for sample."""
    from _stream_util import reference_run
    from tinyol.cli import main
    from tinyol.targets import emulator

    out, _, X, y = _trained_kws_with_new_class(tmp_path, capsys)
    fw = firmware("native", model=str(out))
    with emulator.start_native(fw.program, timeout=120) as t:
        assert main(["verify", "--port", t.url, "--model", str(out), "--n", "24", "--random", "--json"]) == 0
        v = json.loads(capsys.readouterr().out)
        assert v["samples"] == 24 and v["mismatched_samples"] == 0, v
        data = tmp_path / "kws_stream.npz"
        np.savez(data, X=X[:120], y=y[:120])
        log = tmp_path / "run.jsonl"
        assert main(["stream", "--port", t.url, "--model", str(out), "--data", str(data), "--train",
                     "--log", str(log), "--no-progress"]) == 0
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    ref = reference_run(str(out), X[:120], y[:120])
    assert [r["prediction"] for r in recs] == ref["predictions"].tolist()
    assert np.mean(ref["predictions"][-40:] == y[80:120]) >= 0.8


def _tiny_classifier(tmp_path, last_activation=None, tail_softmax=True):
    keras.utils.set_random_seed(1)
    inp = keras.Input((16, 3))
    x = layers.Conv1D(8, 3, activation="relu", bias_initializer="random_normal", name="feat")(inp)
    x = layers.GlobalAveragePooling1D(name="gap")(x)
    x = layers.Dense(4, activation=last_activation, bias_initializer="random_normal", name="logits")(x)
    if tail_softmax:
        x = layers.Softmax(name="probs")(x)
    p = tmp_path / f"tiny_{last_activation}_{tail_softmax}.tflite"
    p.write_bytes(convert(keras.Model(inp, x), (16, 3), seed=2))
    return p


def test_small_classifier_split_cli(tmp_path, capsys):
    src = _tiny_classifier(tmp_path)
    rc, err = _cli(["export", str(src), "--out", str(tmp_path / "o"), "--max-classes", "6"], capsys)
    assert rc == 0, err
    assert "split at its last FULLY_CONNECTED" in err and "layer 'logits" in err  # TF may suffix _1
    man = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert man["ops"][-1] == "MEAN" and man["head"]["max_classes"] == 6 and man["split_layer"].startswith("logits")
    # the cut model runs in TFLM and its output is the FC's input (8 features)
    assert man["latent"]["dim"] == 8
    x = random_inputs((16, 3), 6, seed=2)
    lat = codegen.run_tflm(tmp_path / "o" / "backbone.tflite", x)
    np.testing.assert_array_equal(CBackbone(tmp_path / "o" / "backbone.tflite", "ref", tmp_path / "c").run(x),
                                  lat.reshape(6, -1))
    # head from the int8 FC: requantizing W reproduces the int8 weights exactly
    m = parse_model(src.read_bytes())
    fc = next(op for op in m.operators if op.opname == "FULLY_CONNECTED")
    w = m.tensors[fc.inputs[1]]
    W = np.load(tmp_path / "o" / "head_init.npz")["W"][:4]
    np.testing.assert_array_equal(np.round(W / w.scale.reshape(-1, 1)[: len(W)] if w.scale.size > 1
                                           else W / w.scale[0]).astype(np.int8), w.data)
    # --split none: the whole file is the backbone, the head needs --classes
    rc, err = _cli(["export", str(src), "--out", str(tmp_path / "w"), "--split", "none"], capsys)
    assert rc == 1 and "needs --classes" in err and "hint:" in err
    rc, err = _cli(["export", str(src), "--out", str(tmp_path / "w"), "--split", "none", "--classes", "3"],
                   capsys)
    assert rc == 0, err
    assert json.loads((tmp_path / "w" / "manifest.json").read_text())["ops"][-1] == "SOFTMAX"


def test_sigmoid_head_is_refused_with_hint(tmp_path):
    from tinyol.model.export import export_model

    src = _tiny_classifier(tmp_path, last_activation="sigmoid", tail_softmax=False)
    with pytest.raises(TinyolError) as ei:
        export_model(str(src), str(tmp_path / "o"))
    assert "LOGISTIC" in str(ei.value) and "Dense(2)+softmax" in ei.value.hint


def test_keras_sigmoid_head_is_refused_with_hint(tmp_path):
    from tinyol.model.export import export_model

    inp = keras.Input((10,))
    x = layers.Dense(8, activation="relu")(inp)
    keras.Model(inp, layers.Dense(1, activation="sigmoid", name="out")(x)).save(tmp_path / "bin.keras")
    with pytest.raises(TinyolError) as ei:
        export_model(str(tmp_path / "bin.keras"), str(tmp_path / "o"))
    assert "'out'" in str(ei.value) and "sigmoid" in str(ei.value)
    assert ei.value.hint == "a sigmoid head becomes Dense(2)+softmax"

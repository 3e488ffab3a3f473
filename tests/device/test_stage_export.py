"""`tinyol export --split` before the head: the Keras layers after the cut become the adaptive
stage. Oracle: Keras itself (the stage's float32 forward pass computes the model's output
from the latent), for every supported layer incl. BatchNormalization folding; unsupported
layers and stages that do not fit the board are refused with one clear error."""
from __future__ import annotations

import numpy as np
import pytest
from tinyol.errors import TinyolError
from tinyol.learn.stage import Stage, StageConfig

pytestmark = [pytest.mark.tf, pytest.mark.slow]
CMAX = 6


def _bn(keras, rng, n):
    bn = keras.layers.BatchNormalization()
    return bn, lambda: bn.set_weights([rng.uniform(0.5, 1.5, n), rng.normal(0, 0.2, n),
                                       rng.normal(0, 0.2, n), rng.uniform(0.5, 1.5, n)])


def _models(keras):
    rng = np.random.default_rng(0)
    L = keras.layers
    out = {}
    # Conv2D 1x1 (relu6) -> DepthwiseConv2D stride 2 same, multiplier 2 -> BN -> ReLU -> Flatten
    # -> Dropout -> Dense
    inp = keras.Input((4, 4, 3))
    h = L.Conv2D(4, 1, activation="relu6", name="cut")(inp)
    h = L.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2)(h)
    bn, init = _bn(keras, rng, 8)
    h = L.ReLU()(bn(h))
    h = L.Dropout(0.2)(L.Flatten()(h))
    m = keras.Model(inp, L.Dense(CMAX, activation="softmax")(h))
    init()
    out["conv1x1_dw_bn_relu_flatten"] = (m, "cut")
    # Conv2D 3x3 valid stride 1 -> BN -> ReLU6 (Activation) -> GAP2D -> Dense relu -> Dense
    inp = keras.Input((6, 5, 2))
    h = L.Conv2D(5, 3, padding="valid", name="cut")(inp)
    bn, init = _bn(keras, rng, 5)
    h = L.Activation("relu6")(bn(h))
    h = L.GlobalAveragePooling2D()(h)
    h = L.Dense(7, activation="relu")(h)
    m = keras.Model(inp, L.Dense(CMAX)(h))
    init()
    out["conv3x3_valid_bn_gap_dense"] = (m, "cut")
    # Conv1D same stride 2 -> Conv1D -> GAP1D -> Dense ; Reshape in between
    inp = keras.Input((12, 3))
    h = L.Conv1D(4, 3, strides=2, padding="same", activation="relu", name="cut")(inp)
    h = L.Reshape((6, 4))(h)
    h = L.Conv1D(6, 3, padding="valid", activation="relu")(h)
    h = L.GlobalAveragePooling1D()(h)
    m = keras.Model(inp, L.Dense(CMAX)(h))
    out["conv1d_reshape_gap1d"] = (m, "cut")
    # the models users bring (issue 19): a plain Sequential Conv1D classifier, pooling after
    # every convolution, BN + ReLU, Flatten, Dropout; cut at the first convolution
    bn, init = _bn(keras, rng, 4)
    m = keras.Sequential([keras.Input((20, 3)), L.Conv1D(4, 3, name="cut"), bn, L.ReLU(),
                          L.MaxPooling1D(2), L.Conv1D(6, 3, padding="same", activation="relu"),
                          L.AveragePooling1D(3, strides=2, padding="same"), L.Flatten(),
                          L.Dense(8, activation="relu"), L.Dropout(0.3), L.Dense(CMAX)])
    init()
    out["sequential_conv1d_bn_maxpool_avgpool_dropout"] = (m, "cut")
    # 2-D pools: MaxPooling2D 'same' with overlapping windows, GlobalMaxPooling2D
    inp = keras.Input((7, 6, 2))
    h = L.MaxPooling2D(3, strides=2, padding="same", name="cut")(inp)
    h = L.Conv2D(5, 2, activation="relu")(h)
    h = L.AveragePooling2D(2, strides=1)(h)
    h = L.GlobalMaxPooling2D()(h)
    m = keras.Model(inp, L.Dense(CMAX)(h))
    out["maxpool2d_same_at_cut_avgpool2d_gmp"] = (m, "cut")
    return out


def test_stage_forward_matches_keras():
    keras = pytest.importorskip("keras")
    from tinyol.model.stage_export import stage_from_keras

    rng = np.random.default_rng(1)
    for name, (model, cut) in _models(keras).items():
        first = model.get_layer(cut)
        head = [l for l in model.layers if l.__class__.__name__ == "Dense"][-1]
        layers, params = stage_from_keras(model, first, head)
        st = Stage(StageConfig(layers=layers, init_params=params, init_classes=CMAX))
        x = rng.uniform(0, 2, size=(6,) + tuple(model.inputs[0].shape[1:])).astype(np.float32)
        # the latent is the cut layer's input = the model input here
        ref = model(x, training=False).numpy()
        if head.activation.__name__ == "softmax":
            ref = np.log(ref)  # compare logits up to a per-row constant
            got = np.stack([st.forward(xi.ravel())[-1] for xi in x])
            got = got - got.max(axis=1, keepdims=True)
            ref = ref - ref.max(axis=1, keepdims=True)
        else:
            got = np.stack([st.forward(xi.ravel())[-1] for xi in x])
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=2e-4, err_msg=name)


def test_unsupported_layer_and_board_fit_are_refused(tmp_path):
    keras = pytest.importorskip("keras")
    from tinyol.model.export import export_model

    L = keras.layers
    inp = keras.Input((8, 8, 1))
    h = L.Conv2D(4, 3, padding="same", activation="relu", name="c1")(inp)
    h = L.MaxPooling2D(name="pool")(h)
    h = L.Conv2D(16, 3, padding="same", activation="relu", name="c2")(h)
    h = L.Flatten()(h)
    h = L.Dense(32, activation="relu", name="fc")(h)
    m = keras.Model(inp, L.Dense(3, name="head")(h))
    path = tmp_path / "m.keras"
    m.save(path)
    # a layer tinyol cannot train (LeakyReLU) and a real branch are refused, naming the layer
    from tinyol.model.stage_export import stage_from_keras
    bad = keras.Sequential([keras.Input((8, 3)), L.Conv1D(4, 3, name="c"),
                            L.LeakyReLU(name="leaky"), L.Flatten(), L.Dense(3, name="head")])
    with pytest.raises(TinyolError, match=r"'leaky' \(LeakyReLU\) cannot be in the adaptive stage"):
        stage_from_keras(bad, bad.get_layer("c"), bad.get_layer("head"))
    inp = keras.Input((8, 3))
    h = L.Conv1D(4, 3, padding="same", name="c")(inp)
    h2 = L.Conv1D(4, 1, name="side")(h)
    h = L.Add(name="merge")([h, h2])
    h = L.Flatten()(h)
    bad = keras.Model(inp, L.Dense(3, name="head")(h))
    with pytest.raises(TinyolError, match=r"'merge' \(Add\) merges 2 inputs \(c, side\)"):
        stage_from_keras(bad, bad.get_layer("side"), bad.get_layer("head"))
    # c2 + fc + head on the small board: 8.9 k parameters (weights + gradients 71 KB)
    with pytest.raises(TinyolError, match="does not fit nucleo_l432kc") as e:
        export_model(str(path), str(tmp_path / "b"), split="c2", board="nucleo_l432kc")
    assert "adaptive stage" in e.value.hint and "cut later" in e.value.hint
    assert not (tmp_path / "b" / "config.h").exists()
    # cutting at fc fits the big board and writes the stage
    man = export_model(str(path), str(tmp_path / "c"), split="fc", board="nucleo_l4r5zi",
                       replay_capacity=20)
    assert man["stage"]["params"] == 256 * 32 + 32 + 3 * 32 + 3
    assert man["stage"]["layers"] == ["dense+relu [1x1x256] -> [1x1x32]", "dense [1x1x32] -> [1x1x3]"]
    assert (tmp_path / "c" / "stage_init.c").exists() and not (tmp_path / "c" / "head_init.c").exists()


def test_sequential_cut_anywhere_matches_keras(tmp_path):
    """Issue 19: a Sequential model saved and loaded (Keras then gives its layers one inbound
    node per rebuild) cuts at every layer before the head; the backbone Keras builds up to the
    cut feeds the stage, and the two together compute the model."""
    keras = pytest.importorskip("keras")
    from tinyol.model.export import load_keras
    from tinyol.model.stage_export import stage_from_keras

    L = keras.layers
    m = keras.Sequential([keras.Input((20, 3)), L.Conv1D(4, 3, name="c1"),
                          L.BatchNormalization(name="bn"), L.ReLU(name="relu"),
                          L.MaxPooling1D(2, name="p1"), L.Conv1D(6, 3, activation="relu", name="c2"),
                          L.MaxPooling1D(2, name="p2"), L.Flatten(name="flat"),
                          L.Dense(8, activation="relu", name="embed"), L.Dropout(0.3, name="drop"),
                          L.Dense(CMAX, name="head")])
    m.save(tmp_path / "seq.keras")
    m = load_keras(str(tmp_path / "seq.keras"))
    x = np.random.default_rng(3).normal(size=(5, 20, 3)).astype(np.float32)
    ref = m(x, training=False).numpy()
    for cut in ("c1", "p1", "c2", "p2", "flat", "embed"):
        first = m.get_layer(cut)
        layers, params = stage_from_keras(m, first, m.get_layer("head"))
        lat = keras.Model(m.inputs, first.input)(x, training=False).numpy().reshape(5, -1)
        st = Stage(StageConfig(layers=layers, init_params=params, init_classes=CMAX))
        got = np.stack([st.forward(v)[-1] for v in lat])
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=2e-4, err_msg=cut)

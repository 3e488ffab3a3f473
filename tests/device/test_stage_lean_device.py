"""The lean stage on the device (issue 19): the model a user brings — a plain Keras Sequential
Conv1D classifier with BatchNormalization, ReLU and MaxPooling1D after every convolution,
Flatten, Dense `embed`, Dropout, Dense head — pre-trained on 4 exercises of the watch set,
exported with `--split conv3 --stage-train bias` for the NUCLEO-L476RG (the convolution's and
embed's biases train, their weights stay in flash, the classifier trains whole). Oracle: the
numpy twin (`tinyol simulate`'s reference run) on the same stream of the 3 new exercises:
predictions and confidences bit for bit on the native target and in QEMU; SAVE/LOAD and
GET_STAGE/SET_STAGE move exactly the trained parameters."""
from __future__ import annotations

import json

import numpy as np
import pytest
from _stream_util import reference_run
from tinyol.link.device import Device
from tinyol.link.stream import stream
from tinyol.targets import emulator

pytestmark = [pytest.mark.slow, pytest.mark.tf]

OLD, NEW = [0, 1, 2, 3], [4, 5, 6]


@pytest.fixture(scope="module")
def watch():
    from tinyol.data.datasets import watch_windows
    X, y, subj, _ = watch_windows()
    return X, y, subj


@pytest.fixture(scope="module")
def lean_model(tmp_path_factory, watch):
    keras = pytest.importorskip("keras")
    from tinyol.data.datasets import save_npz
    from tinyol.model.export import export_model

    X, y, subj = watch
    m = np.isin(y, OLD) & (subj <= 7)
    L = keras.layers
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((100, 6)),
        L.Conv1D(16, 5, name="conv1"), L.BatchNormalization(), L.ReLU(), L.MaxPooling1D(2),
        L.Conv1D(32, 5, activation="relu", name="conv2"), L.MaxPooling1D(2),
        L.Conv1D(32, 3, activation="relu", name="conv3"), L.MaxPooling1D(2),
        L.Flatten(), L.Dense(32, activation="relu", name="embed"), L.Dropout(0.3),
        L.Dense(len(OLD), name="head")])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(X[m], y[m], epochs=3, batch_size=32, verbose=0)
    d = tmp_path_factory.mktemp("lean")
    model.save(d / "imu.keras")
    save_npz(str(d / "calib.npz"), X[m][::4].reshape(-1, 600), y[m][::4])
    man = export_model(str(d / "imu.keras"), str(d / "out"), split="conv3", stage_train="bias",
                       calib=str(d / "calib.npz"), max_classes=7, board="nucleo_l476rg",
                       replay_capacity=40)
    return d / "out", man


@pytest.fixture(scope="module")
def new_stream(watch):
    X, y, subj = watch
    idx = np.flatnonzero(np.isin(y, NEW) & (subj <= 7))
    idx = np.random.default_rng(3).permutation(idx)[:150]
    return X[idx], y[idx]


@pytest.fixture(scope="module")
def reference(lean_model, new_stream):
    return reference_run(str(lean_model[0]), *new_stream)


def _check(recs, ref, n):
    preds = np.array([r.prediction for r in recs])
    assert (preds == ref["predictions"][:n]).all()
    conf = np.array([r.confidence for r in recs], np.float32)
    np.testing.assert_array_equal(conf, np.asarray(ref["confidence"][:n], np.float32))


def test_lean_export_fits_and_trains_biases(lean_model, reference, new_stream):
    out, man = lean_model
    st = man["stage"]
    # conv3 (bias) -> maxpool -> embed (bias) -> head (all): 32 + 32 + 7 * 33 train
    assert [d[14] for d in st["descriptors"]] == [1, 0, 1, 0]
    assert st["trained"] == 32 + 32 + 7 * 33 < st["params"]
    assert st["memory"]["weights"] == 4 * st["trained"] == st["memory"]["grads"]
    # the twin learns the new exercises (late accuracy on them far above the 1/3 of chance)
    y = new_stream[1]
    assert np.mean(reference["predictions"][-50:] == y[-50:]) > 0.6


def test_native_lean_stream_save_load_push(firmware, lean_model, new_stream, reference, tmp_path):
    out, man = lean_model
    X, y = new_stream
    fw = firmware("native", model=str(out))
    lrn = reference["learner"]
    with emulator.start_native(fw.program, state_dir=tmp_path, timeout=120) as t:
        with Device.open(t.url) as dev:
            info = dev.info
            assert (info.stage_layers, info.stage_params) == (4, man["stage"]["trained"])
            _, recs = stream(dev, X, y, man, mode="train", window=4)
            image = dev.get_stage()
            saved = dev.save()
            dev.reset()
            assert dev.get_stage() != image
            assert dev.load().seq == saved.seq
            assert dev.get_stage() == image
            dev.reset()
            dev.set_stage(image)
            assert dev.get_stage() == image
    _check(recs, reference, len(y))
    n = lrn.n_params
    assert len(image) == 4 * n + 7
    assert image[:4 * n] == lrn.params.astype("<f4").tobytes()


@pytest.mark.qemu
def test_qemu_lean_stream_equals_twin(firmware, lean_model, new_stream, reference):
    out, man = lean_model
    X, y = new_stream
    n = 60
    fw = firmware("nucleo_l476rg", model=str(out), test_build=True)
    with emulator.start_qemu("nucleo_l476rg", fw.elf, timeout=400) as t:
        with Device.open(t.url, timeout=10) as dev:
            # window 1: a frame QEMU drops and the host resends would be learned out of order
            _, recs = stream(dev, X[:n], y[:n], man, mode="train", window=1, timeout=10.0)
    _check(recs, reference, n)
    assert json.loads((out / "manifest.json").read_text())["stage"]["trained"] == 295

"""One Keras model, written the way users write them (functional API, Conv1D + MaxPooling1D as in
the spoken-digit user's model, Dropout, a Dense head), that makes the exporter emit every
operator and every SIMD kernel path it has: CONV_2D 1D/2D, 3x3 and 1x1, stride 1 and 2,
padding same/valid, output channels a multiple of 4 and not; DEPTHWISE_CONV_2D with depth
multiplier 1 and 2; MAX_POOL_2D and AVERAGE_POOL_2D 1D and 2D, valid and same (edge windows),
channels a multiple of 4 and with a remainder; ADD; CONCATENATION; MEAN; REDUCE_MAX;
FULLY_CONNECTED; RELU/RELU6 fused, LEAKY_RELU, LOGISTIC, TANH as layers.

Exported once per change of this file or of the exporter (`tinyol export`, TensorFlow) into
build/test-models/allops-<key>/, reused by every test session after that: the native, QEMU and
Renode suites run `tinyol verify` on it (tests/device/test_verify_allops.py).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "build" / "test-models"
SEQ, CH = 128, 6   # input: 128 time steps of 6 channels (an IMU-like window)


def build_model():
    import keras
    from keras import layers

    keras.utils.set_random_seed(31)
    inp = keras.Input((SEQ, CH))
    x = layers.Conv1D(16, 5, padding="same", activation="relu")(inp)          # 128 x 16
    x = layers.MaxPooling1D(2)(x)                                               # 64 x 16: the layer
    x = layers.Conv1D(12, 3, padding="same", activation="relu")(x)             # 64 x 12
    x = layers.AveragePooling1D(2, padding="same")(x)                          # 32 x 12
    x = layers.Conv1D(6, 3, strides=1, padding="same")(x)                      # 32 x 6
    x = layers.Reshape((8, 4, 6))(x)                                           # 2-D from here
    x = layers.Conv2D(8, 3, padding="same", activation="relu")(x)              # 3x3 same: 8x4x8
    a = layers.DepthwiseConv2D(3, padding="same", activation="relu6")(x)       # depthwise x1
    a = layers.Conv2D(12, 1, activation="relu")(a)                              # 1x1: 8x4x12
    b = layers.Conv2D(12, 3, padding="same")(x)
    b = layers.LeakyReLU(negative_slope=0.1)(b)
    s = layers.Add()([a, b])                                                    # 8x4x12
    m = layers.MaxPooling2D(2)(s)                                               # valid: 4x2x12
    v = layers.AveragePooling2D(3, strides=2, padding="same")(s)               # same: 4x2x12
    c = layers.Concatenate()([m, v])                                            # 4x2x24
    d = layers.DepthwiseConv2D(3, depth_multiplier=2, padding="same")(c)       # depthwise x2: 4x2x48
    d = layers.Activation("sigmoid")(d)
    e = layers.Conv2D(6, 3, strides=2, padding="same", activation="relu")(d)   # stride 2, 6 ch: 2x1x6
    g = layers.MaxPooling2D(2, padding="same")(e)                               # 1x1x6: 4 lanes + 2
    f = layers.Concatenate()([layers.Flatten()(g), layers.GlobalAveragePooling2D()(d),
                              layers.GlobalMaxPooling2D()(s)])                  # 6 + 48 + 12
    z = layers.Dense(24, activation="relu")(f)
    z = layers.Dropout(0.2)(z)
    z = layers.Dense(16, activation="tanh")(z)
    out = layers.Dense(4)(z)
    return keras.Model(inp, out, name="allops")


def _key() -> str:
    h = hashlib.sha256(Path(__file__).read_bytes())
    for p in sorted((ROOT / "host" / "tinyol" / "model").glob("*.py")) + [ROOT / "host" / "tinyol" / "memory.py"]:
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


def exported() -> Path:
    """The exported model folder (exports it first when this file or the exporter changed)."""
    out = CACHE / f"allops-{_key()}"
    if (out / "manifest.json").is_file():
        return out
    import pytest

    pytest.importorskip("tensorflow")
    tmp = CACHE / f".allops-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model = build_model()
    model.save(tmp / "allops.keras")
    tinyol = Path(sys.executable).with_name("tinyol")
    r = subprocess.run([str(tinyol), "export", str(tmp / "allops.keras"), "--out", str(tmp / "export"),
                        "--classes", "4", "--board", "nucleo_l476rg"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    for old in CACHE.glob("allops-*"):
        shutil.rmtree(old, ignore_errors=True)
    (tmp / "export").rename(out)
    shutil.rmtree(tmp, ignore_errors=True)
    return out

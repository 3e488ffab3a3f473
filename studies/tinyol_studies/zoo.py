"""Example models: Keras definitions, reproducible training recipes, export settings.

``python -m tinyol_studies.zoo build [names...]`` trains (or, for the MLPerf Tiny reference
architectures, seeds randomly) each model, saves ``models/<name>/<name>.keras`` and exports it to
``models/<name>/`` with the settings below. Same code, same library versions -> same bytes.

Models:

``digits``            small CNN on scikit-learn's 8x8 digits, trained on classes 0-4 only; the
                      head (last Dense) has 5 rows and grows on the device up to 10 classes.
``anomaly``           dense autoencoder over 640-value sensor windows (the MLPerf Tiny FC-AE
                      encoder 640-128x4-8, decoder 128x3), its last hidden layer narrowed to 8
                      so that the trainable head (8 -> 640 reconstruction) fits in an STM32L4's RAM.
``kdd135``            dense autoencoder over 64-point windows of a real heart-rate series with a
                      labelled anomaly (KDD-TSAD 135, from the aeon wheel), written as a user
                      would: keras.Sequential 64-32-8-32 backbone, Dense(64) reconstruction head;
                      trained on the series' normal training part (docs/anomaly.md).
``imu``               Conv1D network on the seglearn watch set as the board's sensor reports it
                      (6-axis wrist IMU, 2 s windows of 100 rows; each recording turned into the
                      LSM6DSL/LSM6DSO's int16 readings and back, tinyol.data.datasets
                      .watch_sensor_windows), trained on 4 exercises (PEN ABD FEL IR) of subjects
                      1-7; the device learns the others (ER TRAP ROW) from its own sensor
                      (docs/sensor.md). Its embedding (``features``) is linear: a ReLU there let
                      the new classes' updates push every old row down.
``basicmotions``      Conv1D network on BasicMotions (6-axis smart-watch IMU, 100 steps; from the
                      aeon wheel), trained on Standing/Running/Walking; the device learns Badminton
                      over the serial link (docs/tutorial.md). Global average pooling over time is
                      written as Reshape (T, 1, C) + GlobalAveragePooling2D (MEAN over axes 1, 2).
``ds_cnn``            MLPerf Tiny keyword spotting DS-CNN (49x10x1 MFCC in, 12 classes), random weights.
``mobilenet_v1_vww``  MLPerf Tiny visual wake words MobileNetV1 alpha 0.25 (96x96x3, 2 classes), random.
``resnet8``           MLPerf Tiny image classification ResNet-8 (32x32x3, 10 classes), random weights.

The three MLPerf models are for benchmarks: their weights are random (deterministic seeds) and
they are calibrated with random inputs, so their outputs mean nothing; the instruction and memory
counts they give are what matters.
"""
from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from tinyol.data.datasets import load_source
from tinyol.errors import TinyolError
from tinyol.model.export import export_model, import_tf
from tinyol.paths import models_dir as shipped

# Lazy on purpose: TensorFlow/Keras and scikit-learn are imported where a model is trained or
# scored; they take seconds to load.

SEED = 1234


def _keras():
    import_tf()
    import keras

    return keras


def seed_everything(seed: int = SEED) -> None:
    """Fix every RNG Keras/TF/numpy training touches; make TF ops deterministic."""
    keras = _keras()
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    try:
        tf.config.experimental.enable_op_determinism()
    except Exception:  # already enabled / not available
        pass


# ---------------------------------------------------------------------------------------------
# architectures

def digits_model(n_classes: int = 5):
    """Conv(8,3,same)-Conv(16,3,stride 2,same)-Flatten-Dense(32) backbone, Dense(n_classes) head."""
    keras = _keras()
    L = keras.layers
    inp = keras.Input((8, 8, 1), name="image")
    x = L.Conv2D(8, 3, padding="same", activation="relu", name="conv1")(inp)
    x = L.Conv2D(16, 3, strides=2, padding="same", activation="relu", name="conv2")(x)
    x = L.Flatten(name="flatten")(x)
    x = L.Dense(32, activation="relu", name="embed")(x)
    out = L.Dense(n_classes, name="head")(x)  # logits
    return keras.Model(inp, out, name="digits")


def anomaly_model(width: int = 128, bottleneck: int = 8, latent: int = 8, n_in: int = 640):
    """FC autoencoder 640-128x4-8-128x3-8 backbone, Dense(640) reconstruction head."""
    keras = _keras()
    L = keras.layers
    inp = keras.Input((n_in,), name="window")
    x = inp
    for i in range(4):
        x = L.Dense(width, activation="relu", name=f"enc{i + 1}")(x)
    x = L.Dense(bottleneck, activation="relu", name="bottleneck")(x)
    for i in range(3):
        x = L.Dense(width, activation="relu", name=f"dec{i + 1}")(x)
    x = L.Dense(latent, activation="relu", name="dec4")(x)
    out = L.Dense(n_in, name="head")(x)  # reconstruction
    return keras.Model(inp, out, name="anomaly")


def kdd135_model(n_in: int = 64):
    """keras.Sequential autoencoder 64-32-8-32 (relu), Dense(64) reconstruction head."""
    keras = _keras()
    L = keras.layers
    return keras.Sequential([keras.Input((n_in,), name="window"),
                             L.Dense(32, activation="relu", name="enc"),
                             L.Dense(8, activation="relu", name="code"),
                             L.Dense(32, activation="relu", name="dec"),
                             L.Dense(n_in, name="head")], name="kdd135")


def ds_cnn_model(n_classes: int = 12, filters: int = 64):
    """MLPerf Tiny KWS DS-CNN (small): Conv(10x4, s2) + 4 depthwise-separable blocks + avg pool."""
    keras = _keras()
    L = keras.layers
    inp = keras.Input((49, 10, 1), name="mfcc")
    x = L.Conv2D(filters, (10, 4), strides=(2, 2), padding="same", use_bias=False, name="conv1")(inp)
    x = L.BatchNormalization(name="bn1")(x)
    x = L.ReLU(name="relu1")(x)
    for i in range(4):
        x = L.DepthwiseConv2D(3, padding="same", use_bias=False, name=f"dw{i + 1}")(x)
        x = L.BatchNormalization(name=f"dw{i + 1}_bn")(x)
        x = L.ReLU(name=f"dw{i + 1}_relu")(x)
        x = L.Conv2D(filters, 1, use_bias=False, name=f"pw{i + 1}")(x)
        x = L.BatchNormalization(name=f"pw{i + 1}_bn")(x)
        x = L.ReLU(name=f"pw{i + 1}_relu")(x)
    x = L.AveragePooling2D(pool_size=(25, 5), name="pool")(x)
    x = L.Flatten(name="flatten")(x)
    out = L.Dense(n_classes, name="head")(x)
    return keras.Model(inp, out, name="ds_cnn")


def mobilenet_v1_vww_model(alpha: float = 0.25, n_classes: int = 2):
    """MLPerf Tiny VWW MobileNetV1 (alpha 0.25, 96x96x3): 13 depthwise-separable blocks."""
    keras = _keras()
    L = keras.layers
    inp = keras.Input((96, 96, 3), name="image")

    def f(n):
        return int(n * alpha)

    x = L.Conv2D(f(32), 3, strides=2, padding="same", use_bias=False, name="conv1")(inp)
    x = L.BatchNormalization(name="conv1_bn")(x)
    x = L.ReLU(name="conv1_relu")(x)
    blocks = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
              (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)]
    for i, (ch, s) in enumerate(blocks, 1):
        x = L.DepthwiseConv2D(3, strides=s, padding="same", use_bias=False, name=f"dw{i}")(x)
        x = L.BatchNormalization(name=f"dw{i}_bn")(x)
        x = L.ReLU(name=f"dw{i}_relu")(x)
        x = L.Conv2D(f(ch), 1, use_bias=False, name=f"pw{i}")(x)
        x = L.BatchNormalization(name=f"pw{i}_bn")(x)
        x = L.ReLU(name=f"pw{i}_relu")(x)
    x = L.AveragePooling2D(pool_size=x.shape[1:3], name="pool")(x)
    x = L.Flatten(name="flatten")(x)
    out = L.Dense(n_classes, name="head")(x)
    return keras.Model(inp, out, name="mobilenet_v1_vww")


def resnet8_model(n_classes: int = 10):
    """MLPerf Tiny image classification ResNet-8 (CIFAR-10 32x32x3): 3 residual stacks."""
    keras = _keras()
    L = keras.layers
    inp = keras.Input((32, 32, 3), name="image")
    x = L.Conv2D(16, 3, padding="same", name="conv1")(inp)
    x = L.BatchNormalization(name="conv1_bn")(x)
    x = L.ReLU(name="conv1_relu")(x)
    for i, (ch, s) in enumerate([(16, 1), (32, 2), (64, 2)], 1):
        y = L.Conv2D(ch, 3, strides=s, padding="same", name=f"s{i}_conv1")(x)
        y = L.BatchNormalization(name=f"s{i}_bn1")(y)
        y = L.ReLU(name=f"s{i}_relu1")(y)
        y = L.Conv2D(ch, 3, padding="same", name=f"s{i}_conv2")(y)
        y = L.BatchNormalization(name=f"s{i}_bn2")(y)
        if s != 1:
            x = L.Conv2D(ch, 1, strides=s, padding="same", name=f"s{i}_short")(x)
        x = L.Add(name=f"s{i}_add")([x, y])
        x = L.ReLU(name=f"s{i}_relu")(x)
    x = L.AveragePooling2D(pool_size=8, name="pool")(x)
    x = L.Flatten(name="flatten")(x)
    out = L.Dense(n_classes, name="head")(x)
    return keras.Model(inp, out, name="resnet8")


def _randomize_bn(model, seed: int) -> None:
    """Give BatchNorm layers plausible non-trivial statistics (untrained models otherwise fold to
    identity), so the folded int8 weights look like a trained network's."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if layer.__class__.__name__ == "BatchNormalization":
            gamma, beta, mean, var = layer.get_weights()
            n = gamma.shape[0]
            layer.set_weights([
                rng.uniform(0.5, 1.5, n).astype(np.float32),
                rng.uniform(-0.1, 0.1, n).astype(np.float32),
                rng.uniform(-0.1, 0.1, n).astype(np.float32),
                rng.uniform(0.5, 1.5, n).astype(np.float32),
            ])


# ---------------------------------------------------------------------------------------------
# recipes

@dataclass
class Recipe:
    name: str
    build: Callable[[], object]          # -> untrained keras.Model
    train: Callable[[object], dict]      # trains in place, returns metrics
    calib: str | None                    # source spec for calibration (None: random inputs)
    export_kwargs: dict = field(default_factory=dict)
    save_keras: bool = True              # commit the .keras file (large ones are left out)
    stem: str = ""                       # the .keras file's name (default: the model's name)

    @property
    def keras_name(self) -> str:
        return f"{self.stem or self.name}.keras"


def _train_digits(model) -> dict:
    keras = _keras()

    Xtr, ytr, _ = load_source("digits:0-4@train")
    Xte, yte, _ = load_source("digits:0-4@test")
    model.compile(optimizer=keras.optimizers.Adam(0.005),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(Xtr, ytr, epochs=60, batch_size=32, shuffle=True, verbose=0)
    acc = float(np.mean(np.argmax(model.predict(Xte, verbose=0), axis=1) == yte))
    return {"test_accuracy_0_4": round(acc, 4), "train_samples": int(len(ytr))}


def basicmotions_model(n_classes: int = 3, features: str = "relu", name: str = "imu"):
    """Conv1D(16,5,s2)-Conv1D(32,5,s2)-GAP over time-Dense(32) backbone, Dense(n_classes) head,
    over [100, 6] windows (time, channels: 3-axis accelerometer, 3-axis gyroscope)."""
    keras = _keras()
    L = keras.layers
    inp = keras.Input((100, 6), name="imu")
    x = L.Conv1D(16, 5, strides=2, activation="relu", name="conv1")(inp)
    x = L.Conv1D(32, 5, strides=2, activation="relu", name="conv2")(x)
    x = L.Reshape((x.shape[1], 1, x.shape[2]), name="to_2d")(x)
    x = L.GlobalAveragePooling2D(name="gap")(x)  # = GlobalAveragePooling1D over time
    x = L.Dense(32, activation=features, name="features")(x)
    out = L.Dense(n_classes, name="head")(x)
    return keras.Model(inp, out, name=name)


# models/imu: the watch set's exercises it is trained on (PEN ABD FEL IR); ER TRAP ROW are new
IMU_CLASSES = (0, 1, 2, 3)


def imu_model(n_classes: int = len(IMU_CLASSES)):
    """basicmotions_model's layers with a linear embedding (``features``), for models/imu."""
    return basicmotions_model(n_classes, features=None)


def _train_imu(model) -> dict:
    """60 epochs on every window of IMU_CLASSES of subjects 1-7 as the sensor reports them
    (watch_sensor_windows); accuracy on subjects 8-10 (new users), the same classes."""
    keras = _keras()
    from tinyol.data.datasets import watch_sensor_windows

    Xtr, ytr, _ = watch_sensor_windows(IMU_CLASSES, "train")
    Xte, yte, _ = watch_sensor_windows(IMU_CLASSES, "test")
    model.compile(optimizer=keras.optimizers.Adam(0.003),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(Xtr, ytr, epochs=60, batch_size=32, shuffle=True, verbose=0)
    acc = float(np.mean(np.argmax(model.predict(Xte, verbose=0), axis=1) == yte))
    return {"test_accuracy_0_3_subjects_8_10": round(acc, 4), "train_windows": int(len(ytr)),
            "test_windows": int(len(yte))}


def _train_basicmotions(model) -> dict:
    keras = _keras()

    Xtr, ytr, _ = load_source("basicmotions:0-2@train")
    Xte, yte, _ = load_source("basicmotions:0-2@test")
    model.compile(optimizer=keras.optimizers.Adam(0.003),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(Xtr, ytr, epochs=150, batch_size=8, shuffle=True, verbose=0)
    acc = float(np.mean(np.argmax(model.predict(Xte, verbose=0), axis=1) == yte))
    return {"test_accuracy_0_2": round(acc, 4), "train_samples": int(len(ytr)),
            "test_samples": int(len(yte))}


def _train_anomaly(model) -> dict:
    keras = _keras()

    Xtr, _, _ = load_source("sensor@train")
    Xte, yte, _ = load_source("sensor:anomalies@test")
    model.compile(optimizer=keras.optimizers.Adam(0.001), loss="mse")
    model.fit(Xtr, Xtr, epochs=60, batch_size=32, shuffle=True, verbose=0)
    err = np.mean((model.predict(Xte, verbose=0) - Xte) ** 2, axis=1)
    from sklearn.metrics import roc_auc_score

    return {"test_auc": round(float(roc_auc_score(yte, err)), 4),
            "train_mse": round(float(np.mean((model.predict(Xtr, verbose=0) - Xtr) ** 2)), 6)}


def _train_kdd135(model) -> dict:
    """Train on every window of the normal training part (stride 1: 1,137 windows; the source
    `kdd135@train` has every 4th), score the validation and test parts."""
    keras = _keras()
    from sklearn.metrics import roc_auc_score

    from tinyol.data.datasets import kdd135_windows

    Xtr, _, _ = kdd135_windows("train", stride=1)
    model.compile(optimizer=keras.optimizers.Adam(0.002), loss="mse")
    model.fit(Xtr, Xtr, epochs=200, batch_size=32, shuffle=True, verbose=0)
    mse = lambda X: np.mean((model.predict(X, verbose=0) - X) ** 2, axis=1)  # noqa: E731
    Xte, yte, _ = load_source("kdd135@test")
    return {"train_windows": int(len(Xtr)), "train_mse": round(float(np.mean(mse(Xtr))), 6),
            "val_mse": round(float(np.mean(mse(load_source("kdd135@val")[0]))), 6),
            "test_auc_float": round(float(roc_auc_score(yte, mse(Xte))), 4)}


def _random(seed: int):
    def train(model) -> dict:
        _randomize_bn(model, seed)
        return {"weights": "random", "seed": seed}
    return train


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in [
        Recipe("digits", digits_model, _train_digits, "digits:0-4@train",
               dict(max_classes=10, board="nucleo_l476rg", replay_capacity=200)),
        Recipe("anomaly", anomaly_model, _train_anomaly, "sensor@train",
               dict(board="nucleo_l476rg", replay_capacity=0),  # replaying latents needs their targets: off
               save_keras=False),  # 0.8 MB of float weights; training is deterministic
        Recipe("kdd135", kdd135_model, _train_kdd135, "kdd135@train",
               dict(board="nucleo_l476rg", replay_capacity=0)),  # an autoencoder: no replay
        Recipe("imu", imu_model, _train_imu, "watch:0-3@train",
               dict(max_classes=8, board="nucleo_l476rg")),  # replay: the largest that fits
        # models/basicmotions was models/imu until the sensor example got a watch-set model: its
        # files (imu.keras, the name "imu" inside) are kept as they were
        Recipe("basicmotions", basicmotions_model, _train_basicmotions, "basicmotions:0-2@train",
               dict(max_classes=8, board="nucleo_l476rg", replay_capacity=2201, name="imu"),
               stem="imu"),
        Recipe("ds_cnn", ds_cnn_model, _random(SEED + 1), None,
               dict(board="nucleo_l476rg", replay_capacity=200)),
        Recipe("mobilenet_v1_vww", mobilenet_v1_vww_model, _random(SEED + 2), None,
               dict(board="nucleo_l4r5zi", replay_capacity=200), save_keras=False),  # ~100 KB arena: needs the L4R5
        Recipe("resnet8", resnet8_model, _random(SEED + 3), None,
               dict(board="nucleo_l476rg", replay_capacity=200)),
    ]
}


def models_dir() -> Path:
    """The example models' directory of this installation (see paths.py)."""
    return shipped()


def build(name: str, out_root: Path | None = None, echo=print) -> dict:
    """Train/seed, save and export one example model. Returns the export manifest."""
    if name not in RECIPES:
        raise TinyolError(f"unknown example model {name!r}", hint="choose from: " + ", ".join(RECIPES))
    r = RECIPES[name]
    out = Path(out_root or models_dir()) / name
    out.mkdir(parents=True, exist_ok=True)
    seed_everything(SEED)
    model = r.build()
    metrics = r.train(model)
    echo(f"{name}: trained {metrics}")
    keras_path = out / r.keras_name
    clean = r.build()  # same architecture without optimizer state: a smaller .keras file
    clean.set_weights(model.get_weights())
    clean.save(keras_path)
    manifest = export_model(str(keras_path), str(out), calib=r.calib, echo=echo,
                            **r.export_kwargs)
    if not r.save_keras:
        keras_path.unlink()
    (out / "training.txt").write_text(
        "".join(f"{k}: {v}\n" for k, v in sorted(metrics.items())))
    return manifest


def reexport(name: str, out_root: Path | None = None, echo=print) -> dict:
    """Export the committed ``models/<name>/<name>.keras`` again (no training). Models committed
    without their .keras (random-weight benchmarks) are rebuilt from their seed instead."""
    r = RECIPES[name]
    out = Path(out_root or models_dir()) / name
    keras_path = out / r.keras_name
    if not keras_path.exists():
        return build(name, out_root, echo)
    return export_model(str(keras_path), str(out), calib=r.calib, echo=echo, **r.export_kwargs)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("build", "export"):
        print("usage: python -m tinyol_studies.zoo build|export [names...]\n"
              "  build   train (or seed) + save .keras + export\n"
              "  export  export the committed .keras again\n"
              "  names:  " + ", ".join(RECIPES), file=sys.stderr)
        return 2
    names = argv[1:] or list(RECIPES)

    warnings.filterwarnings("ignore")
    try:
        for n in names:
            if n not in RECIPES:
                raise TinyolError(f"unknown example model {n!r}",
                                  hint="choose from: " + ", ".join(RECIPES))
            (build if argv[0] == "build" else reexport)(n)
    except TinyolError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

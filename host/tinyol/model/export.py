"""Split a Keras model into an int8 backbone and a float head; write everything the firmware needs.

``export_model(model, out_dir, ...)`` writes into ``out_dir``:

``backbone.tflite``           int8-in/int8-out TFLite flatbuffer of the backbone (post-training quantized)
``backbone.c/.h``             ahead-of-time C for the backbone (``tinyol.model.codegen.generate_backbone``)
``model_data.c/.h``           the flatbuffer as a C array (also from codegen)
``head_init.c``               initial head weights ``tol_head_init_weight`` [C_max][D], ``tol_head_init_bias``
``head_init.npz``             the same as W [C_max,D] float32, b [C_max] float32, n_classes int
``config.h``                  sizes, quantization, learner defaults, memory budget + ``_Static_assert``s
``manifest.json``             all of the above for the host tools, with sha256 of every artifact

Every generated file starts with the tinyol banner and is byte-for-byte reproducible.

The export runs as named steps (:func:`_export`): load + split (:func:`_load_split`), quantize
(:func:`_quantize`), lower to C (:func:`_lower`), fit to the data (:func:`_fit_codec`,
:func:`_choose_stage`), plan (:func:`_plan`: tinyol.model.plan on the board resolved once), the
manifest (:func:`_manifest`), the learner's artifacts (:func:`_write_learner`) and manifest.json
(:func:`_write_manifest`). The .tflite files are read by tinyol.model.tflite, without TensorFlow.
"""
from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import io
import json
import math
import os
import struct
import sys
import tempfile
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from .. import __version__, memory
from ..boards import Board, get_board
from ..data.datasets import load_source
from ..errors import TinyolError
from ..learn.stage import Layer, int16_stage, stage_memory
from ..memory import Model
from . import stage_select
from .codegen import FC_WEIGHTS, generate_backbone, generate_sources, op_layer, tflm_arena_bytes
from .cwriter import banner, c_float, float_array
from .folder import read_manifest
from .plan import (board_plan, budget, check_fit, choose_replay_capacity, max_replay_slots, memory_model,
                   warn_store)
from .stage_export import (
    apply_train,
    config_lines,
    grow_rows,
    stage_from_keras,
    stage_layers,
    stage_summary,
    write_stage_init,
)
from .tflite import TensorIO, classifier_head, io_tensors, load_model, parse_model, split_classifier

# Lazy on purpose: TensorFlow, Keras and TFLM's runtime are imported inside the functions
# that use them; they take seconds to load, and rewriting a config or reading a .tflite does not.

# Learner defaults (tuned later by the learner study; the firmware reads them from config.h).
DEFAULT_LEARNER = dict(lr=0.03, momentum=0.0, weight_decay=0.0, replay_capacity=memory.DEFAULT_CAPACITY,
                       replay_bits=8,
                       replay_n_new=1, replay_n_old=16, seed=1,  # docs/study.md
                       rehearse=0,  # classifier: idle rehearsal steps (docs/adaptive.md, "Recipe")
                       replay_policy="reservoir")  # which latents stay (tol_replay_policy_t)
REPLAY_BITS = (32, 8, 7, 4)
# the replay policy's names, in tol_replay_policy_t order (TOL_REPLAY_POLICY in config.h)
REPLAY_POLICIES = ("reservoir", "balanced", "ar1")

CALIB_MAX_SAMPLES = 500
CALIB_SEED = 0

ARTIFACTS = ("backbone.tflite", "backbone.c", "backbone.h", "model_data.c", "model_data.h",
             "head_init.c", "head_init.npz", "config.h", "stage_init.c", "stage_init.npz",
             "replay_codec.c")

HEAD_CLASSIFIER = 0
HEAD_AUTOENCODER = 1

Echo = Callable[[str], None]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def model_hash(tflite: bytes) -> int:
    """TOL_MODEL_HASH: first 4 bytes of sha256(backbone.tflite), little-endian."""
    return struct.unpack("<I", hashlib.sha256(tflite).digest()[:4])[0]


@contextlib.contextmanager
def quiet_fds():
    """Silence C/C++ chatter on fds 1 and 2 (TFLite converter, TFLM allocation errors).

    Set TINYOL_VERBOSE=1 to see it."""
    if os.environ.get("TINYOL_VERBOSE"):
        yield
        return

    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + [null]:
            os.close(fd)


# ---------------------------------------------------------------------------------------------
# Keras side

def import_tf():
    """Import TensorFlow with its start-up chatter on fds 1/2 silenced."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        with quiet_fds():
            import tensorflow as tf
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise TinyolError("TensorFlow is needed for export", hint="pip install 'tinyol[ml]'") from e
    return tf


def _keras():
    import_tf()
    try:
        import keras
    except ImportError as e:  # pragma: no cover
        raise TinyolError("TensorFlow/Keras is needed for export",
                          hint="pip install 'tinyol[ml]'") from e
    return keras


def load_keras(path: str):
    keras = _keras()
    if not os.path.exists(path):
        raise TinyolError(f"model file {path!r} not found")
    try:
        return keras.models.load_model(path, compile=False)
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
        if "not found" in msg.lower() or "zip" in msg.lower() or "signature" in msg.lower():
            # Keras says "File not found" for a file that exists but is no .keras zip / HDF5
            msg = "not a readable Keras model file (corrupt, truncated, or not .keras/.h5)"
        raise TinyolError(f"cannot load Keras model {path!r}: {msg}",
                          hint="save it with model.save('name.keras'); or export an int8 .tflite") from None


_PASS_AFTER_HEAD = {"Softmax", "Dropout"}
_RECURRENT = {"LSTM", "GRU", "SimpleRNN", "RNN", "Bidirectional", "ConvLSTM1D", "ConvLSTM2D",
              "ConvLSTM3D", "TimeDistributed"}


def find_split(model, split: str | int | None):
    """The head layer: ``split`` (name or index) or, by default, the last Dense layer."""
    layers = [l for l in model.layers if l.__class__.__name__ != "InputLayer"]
    if split is None:
        dense = [l for l in layers if l.__class__.__name__ == "Dense"]
        if not dense:
            raise TinyolError(f"model {model.name!r} has no Dense layer to use as the head",
                              hint="name the head layer with --split")
        head = dense[-1]
    else:
        try:
            head = (model.layers[int(split)] if str(split).lstrip("-").isdigit()
                    else model.get_layer(str(split)))
        except (ValueError, IndexError):
            raise TinyolError(f"no layer {split!r} in model {model.name!r}",
                              hint="layers: " + ", ".join(l.name for l in layers)) from None
    kind = head.__class__.__name__
    if kind != "Dense":
        raise TinyolError(f"split layer {head.name!r} is a {kind}; the trainable head must be a Dense "
                          f"layer")
    act = getattr(head.activation, "__name__", str(head.activation))
    if act not in ("linear", "softmax"):
        raise TinyolError(f"head layer {head.name!r} has activation {act!r}; the device head is linear "
                          f"(+softmax for classes)",
                          hint="a sigmoid head becomes Dense(2)+softmax" if act == "sigmoid"
                          else "make the last Dense linear or softmax; keep other activations in the backbone")
    if len(head.input.shape) != 2:
        raise TinyolError(f"head layer {head.name!r} takes a {len(head.input.shape) - 1}-D input; it "
                          f"must take a flat vector (add Flatten before it)")
    idx = layers.index(head)
    for l in layers[idx + 1:]:
        k = l.__class__.__name__
        la = getattr(getattr(l, "activation", None), "__name__", "")
        if not (k in _PASS_AFTER_HEAD or (k == "Activation" and la in ("softmax", "linear"))):
            raise TinyolError(f"layer {l.name!r} ({k}) comes after the head {head.name!r}; only "
                              f"softmax may follow the head", hint="choose another --split layer")
    if len(model.inputs) != 1:
        raise TinyolError(f"model has {len(model.inputs)} inputs; tinyol needs exactly one")
    for l in layers[:idx]:
        k = l.__class__.__name__
        if k in _RECURRENT or "RNN" in k or "LSTM" in k or "GRU" in k:
            # TF 2.21's int8 calibrator crashes (segfault) on recurrent layers: refuse them first
            raise TinyolError(f"layer {l.name!r} ({k}) is not supported: recurrent layers have no "
                              f"int8 kernel in tinyol", hint="use Conv1D/Dense over a window instead")
    return head


def stage_first(model, split):
    """The first layer of an adaptive stage when ``split`` names a layer before the head (the
    last Dense layer), else None (the one-layer TinyOL head)."""
    if split is None:
        return None
    layers = [l for l in model.layers if l.__class__.__name__ != "InputLayer"]
    try:
        first = (model.layers[int(split)] if str(split).lstrip("-").isdigit()
                 else model.get_layer(str(split)))
    except (ValueError, IndexError):
        raise TinyolError(f"no layer {split!r} in model {model.name!r}",
                          hint="layers: " + ", ".join(l.name for l in layers)) from None
    dense = [l for l in layers if l.__class__.__name__ == "Dense"]
    if first not in layers or not dense or first is dense[-1]:
        return None
    if layers.index(first) > layers.index(dense[-1]):
        return None  # find_split explains what is wrong with it
    return first


def calibration_data(calib: str | None, input_shape: tuple[int, ...], *,
                     label_column=None, echo: Echo = lambda s: None) -> tuple[np.ndarray, str]:
    """Up to CALIB_MAX_SAMPLES samples shaped like the model input, and a description."""
    rng = np.random.default_rng(CALIB_SEED)
    n_feat = int(np.prod(input_shape))
    if calib is None:
        X = rng.uniform(0.0, 1.0, (200,) + tuple(input_shape)).astype(np.float32)
        return X, "random uniform [0,1) inputs (no --calib given: ranges are guesses)"

    X, _, _ = load_source(calib, label_column=label_column)
    if int(np.prod(X.shape[1:])) != n_feat:
        raise TinyolError(f"calibration data {calib!r} has {int(np.prod(X.shape[1:]))} values per "
                          f"sample, the model input {list(input_shape)} needs {n_feat}")
    X = X.reshape((-1,) + tuple(input_shape))
    if len(X) > CALIB_MAX_SAMPLES:
        X = X[np.sort(rng.choice(len(X), CALIB_MAX_SAMPLES, replace=False))]
    return X, f"{calib} ({len(X)} samples)"


def quantize_backbone(backbone, X: np.ndarray) -> bytes:
    """Full-integer post-training quantization: int8 in/out, per-channel weights."""
    import tensorflow as tf

    def rep():
        for i in range(len(X)):
            yield [X[i:i + 1]]

    # A fixed batch of 1 lets the converter fold Flatten's shape arithmetic (SHAPE, STRIDED_SLICE,
    # PACK) into one RESHAPE with a constant shape.
    keras = _keras()
    inp = keras.Input(batch_shape=(1,) + tuple(X.shape[1:]), name="input")
    try:  # a clone keeps the layer names in the TFLite tensor names (codegen's error messages)
        fixed = keras.models.clone_model(backbone, input_tensors=[inp])
        fixed.set_weights(backbone.get_weights())
    except Exception:
        fixed = keras.Model(inp, backbone(inp), name=backbone.name)
    conv = tf.lite.TFLiteConverter.from_keras_model(fixed)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = rep
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = tf.int8
    conv.inference_output_type = tf.int8
    try:
        with quiet_fds():
            return bytes(conv.convert())
    except Exception as e:
        lines = [ln for ln in str(e).splitlines() if "error" in ln.lower()] or str(e).splitlines()
        msg = lines[0].strip() if lines else e.__class__.__name__
        raise TinyolError(f"TFLite int8 conversion failed: {msg[:300]}",
                          hint="run with -v for the converter's full message") from e


# ---------------------------------------------------------------------------------------------
# writers

def _deterministic_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Like np.savez, but with fixed zip timestamps so the bytes are reproducible."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as z:
        for name in sorted(arrays):
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            arr = io.BytesIO()
            np.lib.format.write_array(arr, np.asarray(arrays[name]), allow_pickle=False)
            z.writestr(info, arr.getvalue())
    path.write_bytes(buf.getvalue())


def write_head_init(out: Path, source: str, W: np.ndarray, b: np.ndarray,
                    with_backbone_h: bool = False) -> None:
    rows, dim = W.shape
    tie = ""
    if with_backbone_h:  # the generated pieces must agree with each other at compile time
        tie = ('#include "backbone.h"\n\n'
               '_Static_assert(TOL_BACKBONE_INPUT_SIZE == TOL_INPUT_SIZE, "backbone.h vs config.h");\n'
               '_Static_assert(TOL_BACKBONE_LATENT_SIZE == TOL_LATENT_DIM, "backbone.h vs config.h");\n'
               '_Static_assert(TOL_BACKBONE_ARENA_BYTES == TOL_BUDGET_ARENA_BYTES, '
               '"backbone.h vs config.h");\n')
    text = (
        banner(source)
        + "/* Initial weights of the trainable head: W [TOL_HEAD_MAX_CLASSES][TOL_LATENT_DIM]\n"
          " * row-major [class][latent] (autoencoder: [output][latent]), b [TOL_HEAD_MAX_CLASSES].\n"
          " * Rows beyond TOL_HEAD_INIT_CLASSES are zero: classes the device has not seen yet. */\n"
        + '#include "config.h"\n' + tie + "\n"
        + f"_Static_assert(TOL_HEAD_MAX_CLASSES == {rows}, \"head_init.c does not match config.h\");\n"
        + f"_Static_assert(TOL_LATENT_DIM == {dim}, \"head_init.c does not match config.h\");\n\n"
        + "const float tol_head_init_weight[TOL_HEAD_MAX_CLASSES * TOL_LATENT_DIM] = {\n"
        + float_array(W) + "};\n\n"
        + "const float tol_head_init_bias[TOL_HEAD_MAX_CLASSES] = {\n"
        + float_array(b) + "};\n"
    )
    (out / "head_init.c").write_text(text, encoding="utf-8")


def fit_replay_codec(tfl: bytes, X: np.ndarray, inp, lat) -> tuple[np.ndarray, np.ndarray]:
    """The 4-bit replay codec (tol_replay_codec_t) of this backbone: one grid per channel of its
    output (the last axis), fitted to the int8 latents of the calibration inputs X in TFLM's
    runtime (tinyol.learn.learner.fit_codec4)."""
    from ..learn.learner import fit_codec4

    in_shape = tuple(int(d) for d in inp.shape[1:])
    Q = stage_select.latents(tfl, np.asarray(X).reshape((-1,) + in_shape), inp, lat)
    return fit_codec4(Q, int(lat.shape[-1]))


def fit_replay_pq(tfl: bytes, X: np.ndarray, inp, lat, m: int, seed: int) -> np.ndarray:
    """The PQ replay codebook of this backbone: k-means per sub-vector (tinyol.learn.learner.fit_pq)
    on the int8 latents of the calibration inputs X in TFLM's runtime; int8 [m, 256, dim/m]."""
    from ..learn.learner import fit_pq

    in_shape = tuple(int(d) for d in inp.shape[1:])
    Q = stage_select.latents(tfl, np.asarray(X).reshape((-1,) + in_shape), inp, lat)
    return fit_pq(Q, m, seed=seed)


def write_replay_codec(out: Path, source: str, lo: np.ndarray, step: np.ndarray | None = None) -> None:
    """replay_codec.c: the replay codec (tol_replay.h), const, in flash: the 4-bit grids
    (lo, step) or, given one int8 [M, 256, sub] array, the PQ codebook."""
    if step is None:
        book = np.asarray(lo, np.int8)
        vals = [str(int(x)) for x in book.ravel()]
        body = "".join("    " + ", ".join(vals[i:i + 16]) + ",\n" for i in range(0, len(vals), 16))
        M, K, sub = book.shape
        text = (banner(source)
                + "/* Product-quantized latent replay (tol_replay.h): for each of the latent's\n"
                  f" * {M} sub-vectors of {sub} values, {K} int8 codewords learned by k-means on the\n"
                  " * calibration latents at export. */\n"
                + '#include "config.h"\n#include "tol_replay.h"\n\n'
                + f"_Static_assert(TOL_REPLAY_BITS == TOL_REPLAY_PQ({sub}), \"replay_codec.c vs config.h\");\n"
                + f"_Static_assert(TOL_LATENT_DIM == {M * sub}, \"replay_codec.c vs config.h\");\n\n"
                + f"static const int8_t tol_replay_codebook[{book.size}] = {{\n" + body + "};\n\n"
                + "const tol_replay_codec_t tol_replay_codec = {tol_replay_codebook, NULL, 0u};\n")
        (out / "replay_codec.c").write_text(text, encoding="utf-8")
        return
    n = int(lo.size)

    def ints(v):
        vals = [str(int(x)) for x in v]
        return "".join("    " + ", ".join(vals[i:i + 16]) + ",\n" for i in range(0, n, 16))

    text = (banner(source)
            + "/* 4-bit latent replay (tol_replay.h): per channel of the latent (its last axis) the\n"
              " * lowest int8 value and the step of a 16-level grid, fitted to the calibration\n"
              " * latents at export. */\n"
            + '#include "config.h"\n#include "tol_replay.h"\n\n'
            + f"_Static_assert(TOL_REPLAY_BITS == 4, \"replay_codec.c is for 4-bit replay\");\n"
            + f"_Static_assert(TOL_LATENT_DIM % {n} == 0, \"replay_codec.c vs config.h\");\n\n"
            + f"static const int8_t tol_replay_codec_lo[{n}] = {{\n" + ints(lo) + "};\n\n"
            + f"static const uint8_t tol_replay_codec_step[{n}] = {{\n" + ints(step) + "};\n\n"
            + "const tol_replay_codec_t tol_replay_codec = {tol_replay_codec_lo, "
              f"tol_replay_codec_step, {n}u}};\n")
    (out / "replay_codec.c").write_text(text, encoding="utf-8")


def write_config_h(out: Path, source: str, m: dict, board) -> None:
    L, mem = m["learner"], m["memory"]
    d = []

    def define(name, value, doc=""):
        d.append(f"#define {name:<28} {value}" + (f"  /* {doc} */" if doc else ""))

    define("TOL_MODEL_NAME", json.dumps(m["name"]))
    define("TOL_MODEL_HASH", f"0x{m['model_hash']:08X}u", "first 4 bytes of sha256(backbone.tflite), LE")
    define("TOL_INPUT_SIZE", m["input"]["size"], "int8 values per sample")
    define("TOL_LATENT_DIM", m["latent"]["dim"], "backbone output = head input")
    define("TOL_INPUT_SCALE", c_float(m["input"]["scale"]), "real = scale * (q - zero_point)")
    define("TOL_INPUT_ZERO_POINT", f"({m['input']['zero_point']})")
    define("TOL_LATENT_SCALE", c_float(m["latent"]["scale"]))
    define("TOL_LATENT_ZERO_POINT", f"({m['latent']['zero_point']})")
    define("TOL_HEAD_MODE", 1 if m["head"]["mode"] == "autoencoder" else 0, "0 classifier, 1 autoencoder")
    define("TOL_HEAD_OUT_DIM", m["head"]["out_dim"], "autoencoder target size; 0 for a classifier")
    define("TOL_HEAD_INIT_CLASSES", m["head"]["init_classes"], "rows trained on the host")
    define("TOL_HEAD_MAX_CLASSES", m["head"]["max_classes"], "rows allocated on the device")
    define("TOL_REPLAY_CAPACITY", L["replay_capacity"], "latents kept for replay")
    define("TOL_REPLAY_BITS", L["replay_bits"], "32 float, 8 int8, 7 packed, 4 codes, "
           "128 + sub: PQ, TOL_REPLAY_PQ(sub)")
    if "replay_codec" in L:  # 4-bit or PQ replay: replay_codec.c
        define("TOL_REPLAY_CODEC", "(&tol_replay_codec)",
               "replay_codec.c: the PQ codebook" if L["replay_bits"] > 128
               else "replay_codec.c: per-channel 4-bit grids")
    define("TOL_LR", c_float(L["lr"]))
    define("TOL_MOMENTUM", c_float(L["momentum"]))
    define("TOL_WEIGHT_DECAY", c_float(L["weight_decay"]))
    define("TOL_REPLAY_N_NEW", L["replay_n_new"], "new samples per update")
    define("TOL_REPLAY_N_OLD", L["replay_n_old"], "replayed samples per update")
    define("TOL_SEED", f"{L['seed']}u")
    if "rehearse" in L:  # exports since idle rehearsal
        define("TOL_REHEARSE", f"{int(L['rehearse'])}u", "idle rehearsal steps per idle period, 0 = off")
    if "replay_policy" in L:  # exports since the policy is a setting (before: reservoir)
        define("TOL_REPLAY_POLICY", REPLAY_POLICIES.index(L["replay_policy"]),
               "0 reservoir, 1 class-balanced, 2 AR1 (a run-time setting)")
    if "stage_lr_scale" in L:
        define("TOL_STAGE_LR_SCALE", c_float(L["stage_lr_scale"]), "the stage below the classifier: lr * this")
    define("TOL_HAS_MOMENTUM", 1 if float(L["momentum"]) != 0.0 else 0,
           "momentum buffers reserved (momentum > 0 at export)")
    body = "\n".join(d)
    parts = mem.get("learner_parts", {})
    bud = [
        f"#define TOL_BUDGET_ARENA_BYTES        {mem['arena_bytes']}",
        f"#define TOL_BUDGET_LEARNER_BYTES      {mem['learner_bytes']}  /* "
        + ", ".join(f"{k} {v}" for k, v in parts.items() if v) + " */",
        f"#define TOL_FLASH_NEEDED_BYTES        {mem['flash_bytes']}  /* weights + head init + "
        f"{mem['firmware_flash_base_bytes']} firmware estimate */",
    ]
    if board is not None:
        regions = ", ".join(f"{k} {v['used']}/{v['size']}" for k, v in mem.get("regions", {}).items())
        bud += [
            "",
            f"/* fit checked for board {board.name} at export time (host/tinyol/memory.py): {regions};",
            f" * learner in {mem.get('learner_region')}"
            + (f", its replay buffer in {mem['replay_region']}" if mem.get("replay_region") else "")
            + ". The build re-checks for the board it targets. */",
            "#ifndef TOL_BOARD_FLASH_BYTES",
            f"#define TOL_BOARD_FLASH_BYTES         {board.flash_bytes}",
            "#endif",
        ]
    bud += [
        "",
        "#ifdef TOL_BOARD_FLASH_BYTES",
        '_Static_assert(TOL_FLASH_NEEDED_BYTES <= TOL_BOARD_FLASH_BYTES, '
        '"model does not fit in the board\'s flash");',
        "#endif",
    ]
    stage = ""
    if m.get("stage"):  # an adaptive stage (docs/adaptive.md): its layers, parameters, memory

        stage = config_lines(m["stage"])
    text = (banner(source) + "#ifndef TOL_CONFIG_H\n#define TOL_CONFIG_H\n\n"
            + body + "\n\n/* memory budget (bytes) */\n" + "\n".join(bud) + "\n" + stage
            + "\n#endif /* TOL_CONFIG_H */\n")
    (out / "config.h").write_text(text, encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# codegen (written by the kernels work; one call)

def run_codegen(tflite_path: Path, out: Path, source: str, echo: Echo, fc_weights: str = "int8",
                conv_pixels: int = 0):
    """Write backbone.c/.h and model_data.c/.h. Returns the BackboneInfo."""
    info = generate_backbone(str(tflite_path), str(out), source, fc_weights, conv_pixels)
    if conv_pixels:
        _, auto = generate_sources(load_model(Path(tflite_path)), source, fc_weights, 0)
        echo(f"CONV_2D pixel blocks of {conv_pixels}: arena {info.arena_bytes} bytes, "
             f"{info.arena_bytes - auto.arena_bytes:+d} against the automatic blocks ({auto.arena_bytes})")
    if fc_weights != "int8":
        extra = memory.fc_weights_extra(info.fc_shapes, fc_weights)
        echo(f"FULLY_CONNECTED weights as {fc_weights}: {info.weights_bytes} bytes of constants in flash, "
             f"+{extra} over int8 ({info.weights_bytes - extra}) for fewer instructions per MAC")
    return info


# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExportSettings:
    """What an export may be told (the keywords of :func:`export_model`, the flags of
    `tinyol export`), declared once and checked once (:meth:`check`)."""
    split: str | int | None = None      # the head layer (or an earlier cut: an adaptive stage)
    calib: str | None = None            # representative data source (None: random inputs)
    classes: int | None = None          # initial head rows (a .tflite backbone needs it)
    max_classes: int | None = None      # head rows allocated on the device (new classes)
    board: str | None = None            # check the fit, size the replay buffer for it
    class_names: list[str] | None = None
    mode: str = "auto"                  # auto, classifier or autoencoder
    name: str | None = None             # default: the --out folder's name (model_name)
    label_column: object = None         # of a CSV calibration source
    replay_capacity: int | None = None  # None: the largest that fits --board
    replay_bits: int = DEFAULT_LEARNER["replay_bits"]
    replay_codec: str | None = None     # "pq:M": product-quantized replay (M sub-vectors); sets replay_bits
    lr: float = DEFAULT_LEARNER["lr"]
    momentum: float = DEFAULT_LEARNER["momentum"]
    weight_decay: float = DEFAULT_LEARNER["weight_decay"]
    replay_n_new: int = DEFAULT_LEARNER["replay_n_new"]
    replay_n_old: int = DEFAULT_LEARNER["replay_n_old"]
    seed: int = DEFAULT_LEARNER["seed"]
    stage_train: str | None = None      # lean stage: all, bias, auto or LAYER[:all|bias|frozen],...
    stage_budget: int | None = None     # --stage-train auto: most learner bytes without replay
    stage_data: str | None = None       # --stage-train auto: labelled data to choose on (default: calib)
    stage_weights: str = "float32"      # the stage's trained weights in RAM: float32 or int16
    stage_lr_scale: float = 0.0         # the layers below the classifier learn at lr * this (0: lr)
    fc_weights: str = "int8"            # FULLY_CONNECTED weights in flash: int8 or int16 (pre-widened)
    conv_pixels: int = 0                # CONV_2D pixel blocks: 0 = as large as the arena allows free
    rehearse: int = DEFAULT_LEARNER["rehearse"]  # classifier: idle rehearsal steps, 0..255
    replay_policy: str = DEFAULT_LEARNER["replay_policy"]  # reservoir, balanced or ar1

    @property
    def auto_train(self) -> bool:
        """`--stage-train auto`: what trains is chosen from data (tinyol.model.stage_select)."""
        return self.stage_train is not None and self.stage_train.strip() == "auto"

    def check(self) -> None:
        """Raise TinyolError for a setting no export can take (before anything is loaded)."""
        if self.replay_bits not in REPLAY_BITS and not (self.replay_codec and self.replay_bits > 128):
            raise TinyolError(f"--replay-bits must be one of 32, 8, 7, 4, not {self.replay_bits}")
        if self.replay_codec is not None:
            pq_m(self.replay_codec)
            if self.auto_train:
                raise TinyolError("--replay-codec pq:M does not combine with --stage-train auto yet",
                                  hint="name what trains (--stage-train LAYER,...), or use --replay-bits 4")
        for k, v in (("replay-capacity", self.replay_capacity), ("replay-n-new", self.replay_n_new),
                     ("replay-n-old", self.replay_n_old)):
            if v is not None and v < 0:
                raise TinyolError(f"--{k} must be >= 0, not {v}")
        if self.replay_capacity is not None and self.replay_capacity > 0xFFFF:
            raise TinyolError(f"--replay-capacity must be <= 65535, not {self.replay_capacity}",
                              hint="the device counts replay slots in 16 bits; leave it out to get "
                                   "the largest that fits --board")
        if not 1 <= self.replay_n_new <= 32:
            raise TinyolError(f"--replay-n-new must be 1..32, not {self.replay_n_new}",
                              hint="fresh samples per update: the device batches at most 32")
        if self.replay_n_old > 1024:
            raise TinyolError(f"--replay-n-old must be <= 1024, not {self.replay_n_old}",
                              hint="replayed samples per update; 16 is the studied default")
        if not 0.0 <= self.momentum < 1.0:
            raise TinyolError(f"--momentum must be in [0, 1), not {self.momentum}",
                              hint="0 (the default) reserves no momentum buffers on the device")
        if not 0 <= self.rehearse <= 255:
            raise TinyolError(f"--rehearse must be 0..255, not {self.rehearse}")
        if self.replay_policy not in REPLAY_POLICIES:
            raise TinyolError(f"--replay-policy must be one of {', '.join(REPLAY_POLICIES)}, "
                              f"not {self.replay_policy!r}")
        if self.mode not in ("auto", "classifier", "autoencoder"):
            raise TinyolError(f"unknown head mode {self.mode!r}")
        if self.stage_train is not None and not any(t.strip() for t in self.stage_train.split(",")):
            raise TinyolError(f"--stage-train {self.stage_train!r} names nothing",
                              hint="all, bias, auto, or LAYER[:all|bias|frozen],... (leave it out: all)")
        if self.auto_train:
            if self.board is None:
                raise TinyolError("--stage-train auto needs --board (what trains is chosen to fit it)",
                                  hint="e.g. --board nucleo_l476rg")
            if self.calib is None and self.stage_data is None:
                raise TinyolError("--stage-train auto needs labelled --calib data (it measures what "
                                  "each layer's training gains on it)",
                                  hint="e.g. --calib digits:0-4@train, or name what trains: "
                                       "--stage-train bias")
        if self.stage_data is not None and not self.auto_train:
            raise TinyolError("--stage-data applies to --stage-train auto")
        if self.stage_budget is not None:
            if not self.auto_train:
                raise TinyolError("--stage-budget applies to --stage-train auto")
            if self.stage_budget <= 0:
                raise TinyolError(f"--stage-budget must be > 0 bytes, not {self.stage_budget}")
        if self.fc_weights not in FC_WEIGHTS:
            raise TinyolError(f"--fc-weights must be one of {', '.join(FC_WEIGHTS)}, not {self.fc_weights!r}")
        if self.conv_pixels and (self.conv_pixels % 2 or not 2 <= self.conv_pixels <= 16):
            raise TinyolError(f"--conv-pixels must be an even number from 2 to 16 (0: automatic), "
                              f"not {self.conv_pixels}")
        if self.stage_weights not in STAGE_WEIGHTS:
            raise TinyolError(f"--stage-weights must be one of {', '.join(STAGE_WEIGHTS)}, "
                              f"not {self.stage_weights!r}")
        if self.stage_weights == "int16":
            if self.momentum != 0.0:
                raise TinyolError("--stage-weights int16 takes no momentum (each sample updates the "
                                  "int16 weights at once; there is no buffer to keep it in)",
                                  hint="leave --momentum at 0")
        if not (math.isfinite(self.stage_lr_scale) and self.stage_lr_scale >= 0.0):
            raise TinyolError(f"--stage-lr-scale must be >= 0, not {self.stage_lr_scale}")


STAGE_WEIGHTS = ("float32", "int16")  # --stage-weights


def pq_m(codec: str) -> int:
    """M of `--replay-codec pq:M` (the sub-vectors of a latent); TinyolError otherwise."""
    kind, _, m = codec.strip().partition(":")
    if kind != "pq" or not m.isdigit() or int(m) < 1:
        raise TinyolError(f"--replay-codec must be pq:M (M sub-vectors, a byte each), not {codec!r}",
                          hint="e.g. --replay-codec pq:32; or leave it out and choose --replay-bits")
    return int(m)


MODEL_NAME_MAX = 32  # characters; the device reports it in INFO and its boot line


def model_name(given: str | None, out_dir, src_path: Path) -> str:
    """The name the device reports (INFO, boot line, `tinyol info`): `given` (--name) if set,
    else the --out folder's name, so two exports of one .keras into two folders are told
    apart by name, not only by hash (the .keras stem when the folder has no usable name)."""
    if given is not None:
        if not given or len(given) > MODEL_NAME_MAX or not all(c.isascii() and c.isprintable()
                                                               and c not in '"\\' for c in given):
            raise TinyolError(f"--name {given!r}: a model name is 1-{MODEL_NAME_MAX} printable ASCII "
                              "characters (no quotes or backslashes)")
        return given
    folder = Path(out_dir).resolve().name
    clean = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in folder)
    return clean[:MODEL_NAME_MAX].strip("._") or src_path.stem[:MODEL_NAME_MAX]


def export_model(model_path: str, out_dir: str, settings: ExportSettings | None = None, *,
                 echo: Echo = lambda s: None, **kw) -> dict:
    """Export a Keras model (.keras/.h5) or an int8 .tflite backbone to ``out_dir``.

    Settings: an :class:`ExportSettings`, or its fields as keywords
    (``export_model("m.keras", "out", split="fc", board="nucleo_l432kc")``).

    Keras: the head is the ``split`` layer (default: the last Dense layer); the backbone is the
    model from its input to the head's input, quantized to int8 with ``calib`` as representative
    data (random inputs if None). The head's rows become the initial classes; ``max_classes`` rows
    are allocated (zeros beyond). ``mode`` is ``auto`` (autoencoder when the head's output size
    equals the model's input size), ``classifier`` or ``autoencoder``.
    TFLite: the whole int8 model is the backbone; the head starts at zero with ``classes`` rows.
    Returns the manifest dict (also written as manifest.json). Raises TinyolError on user errors.
    """
    if settings is not None and kw:
        raise TypeError("give an ExportSettings or keywords, not both")
    s = settings if settings is not None else ExportSettings(**kw)
    s.check()
    board = get_board(s.board) if s.board is not None else None  # resolved once, here
    src_path = Path(model_path)
    if not src_path.exists():
        raise TinyolError(f"model file {model_path!r} not found")
    source = src_path.name
    s = replace(s, name=model_name(s.name, out_dir, src_path))
    final = Path(out_dir)
    created = [d for d in [final, *final.parents] if not d.exists()]
    final.mkdir(parents=True, exist_ok=True)
    try:
        # Everything is written to a staging directory next to out_dir and moved in at the end:
        # a failed export (unsupported op, budget) leaves out_dir as it was.
        with tempfile.TemporaryDirectory(prefix=".tinyol-export-", dir=final.parent) as stage:
            manifest = _export(src_path, Path(stage), s, source=source, board=board, echo=echo)
            for a in ARTIFACTS + ("manifest.json",):
                if (Path(stage) / a).exists():
                    os.replace(Path(stage) / a, final / a)
                elif (final / a).exists():
                    (final / a).unlink()  # stale output of an earlier export
        echo(f"wrote {final}/ (model hash 0x{manifest['model_hash']:08x})")
        return manifest
    except BaseException:
        for d in created:  # a failed export leaves no folder it made (they are still empty)
            try:
                d.rmdir()
            except OSError:
                break
        raise


INT8_HINT = ("quantize it fully to int8: TFLiteConverter with optimizations=[tf.lite.Optimize.DEFAULT], "
             "a representative_dataset, target_spec.supported_ops=[tf.lite.OpsSet.TFLITE_BUILTINS_INT8], "
             "inference_input_type=inference_output_type=tf.int8; or export the .keras model "
             "(tinyol quantizes it)")


def check_int8_io(raw: bytes, origin: str) -> None:
    """A .tflite model tinyol can take has int8 input and output: said first, with how to get there."""
    inp, out = io_tensors(parse_model(raw, origin))
    if inp.dtype != "int8" or out.dtype != "int8":
        raise TinyolError(f"{origin} has {inp.dtype} input and {out.dtype} output; tinyol needs a fully "
                          "int8 model (int8 input and output)", hint=INT8_HINT)


def tflite_is_autoencoder(m) -> bool:
    """A .tflite model reconstructs its input (an autoencoder) when it ends in a linear
    FULLY_CONNECTED whose output has the input's shape, with no SOFTMAX after it (a classifier
    ends in class scores: a softmax, or logits of another width)."""
    found = classifier_head(m)
    if found is None or "SOFTMAX" in found[1]:
        return False
    ti, to = m.tensors[m.inputs[0]], m.tensors[m.outputs[0]]
    return int(np.prod(ti.shape[1:])) == int(np.prod(to.shape[1:]))


def _tflite_source(src_path: Path, split, classes, echo: Echo, autoencoder: bool = False):
    """(backbone .tflite bytes, head W or None, head b or None, split name) for a .tflite input.

    A full int8 classifier ending in a linear FULLY_CONNECTED (+ SOFTMAX) is split at that FC:
    the head starts from its dequantized weights (``--classes`` keeps the first N rows or adds
    zero rows). ``--split none`` (or any other model) uses the whole file as the backbone; its
    head starts from zeros and needs ``--classes``."""
    raw = src_path.read_bytes()
    check_int8_io(raw, src_path.name)  # before anything else is asked of it
    if split is not None and str(split).lower() not in ("none", "whole"):
        raise TinyolError(f"--split {split!r} does not apply to a .tflite model",
                          hint="a .tflite classifier is split at its last FULLY_CONNECTED; "
                               "--split none uses the whole file as the backbone")
    cut = None if split is not None else split_classifier(raw, src_path.name)
    if cut is None:
        m = parse_model(raw, src_path.name)
        if split is None and m.operators and m.operators[-1].opname == "LOGISTIC":
            raise TinyolError(f"{src_path.name} ends in a sigmoid (LOGISTIC); the device head is a "
                              "linear layer + softmax",
                              hint="a sigmoid head becomes Dense(2)+softmax: retrain it that way, or "
                                   "export with --split none --classes N to keep the whole model as the backbone")
        if classes is None or classes < 1:
            raise TinyolError("a .tflite backbone needs --classes N >= 1 (its head starts from zeros)",
                              hint="a full classifier ending in FULLY_CONNECTED (+ SOFTMAX) is split "
                                   "at that layer and needs no --classes")
        echo(f"reading {src_path} (used whole as the int8 backbone)")
        return raw, None, None, None
    W, b = cut.weight, cut.bias
    if classes is not None:
        if classes < 1:
            raise TinyolError(f"--classes must be >= 1, not {classes}")
        if classes < W.shape[0]:
            W, b = W[:classes], b[:classes]
        elif classes > W.shape[0]:
            W = np.vstack([W, np.zeros((classes - W.shape[0], W.shape[1]), np.float32)])
            b = np.concatenate([b, np.zeros(classes - b.shape[0], np.float32)])

    full = parse_model(raw, src_path.name)
    name = op_layer(full, full.operators[cut.fc_index])
    if autoencoder:
        echo(f"reading {src_path}: int8 autoencoder (its output has its input's shape, no softmax), split "
             f"at its last FULLY_CONNECTED (operator {cut.fc_index}, layer {name!r}); head reconstructs "
             f"{W.shape[1]} -> {W.shape[0]} from the dequantized weights")
        return cut.backbone, W, b, name
    echo(f"reading {src_path}: int8 classifier, split at its last FULLY_CONNECTED (operator "
         f"{cut.fc_index}, layer {name!r}; dropped after it: {' '.join(cut.tail) or 'nothing'}); "
         f"head {W.shape[1]} -> {W.shape[0]} from the dequantized weights")
    return cut.backbone, W, b, name


# ---------------------------------------------------------------------------------------------
# the export, step by step: load + split -> quantize -> lower -> fit to the data -> plan ->
# manifest -> write the learner's artifacts (each step a function; _export runs them in order)

@dataclass
class _Split:
    """What loading and splitting the source gives: the head's initial rows and mode, where the
    cut is, and the backbone still to quantize (Keras) or already int8 (a .tflite)."""
    W: np.ndarray                  # [rows, D] float32: the head's initial rows (--classes applied)
    b: np.ndarray                  # [rows] float32
    head_mode: str                 # "classifier" or "autoencoder"
    split_name: str | None         # the layer the backbone ends before (None: a .tflite used whole)
    tfl: bytes | None = None       # a .tflite source: its int8 backbone, as it is
    keras_model: object = None     # a Keras source: the model, its head layer and, for an adaptive
    head: object = None            # stage, the stage's first layer
    first: object = None
    in_shape: tuple = ()
    stage: tuple | None = None     # (layers, params) when --split cuts before the head (with auto:
    auto: tuple | None = None      # the least that trains; auto = (every layer, names, params))


@dataclass
class _Backbone:
    """The int8 backbone: its flatbuffer, input and output, operators, calibration."""
    tfl: bytes
    inp: TensorIO
    lat: TensorIO
    ops: list[str]
    calib_desc: str
    X: np.ndarray | None = None    # the calibration inputs (a Keras source only)

    @property
    def dim(self) -> int:
        return int(np.prod(self.lat.shape[1:]))


@dataclass
class _Head:
    """The head as the device allocates it: max_rows rows, the first init_rows trained."""
    W: np.ndarray                  # [max_rows, D] float32, zeros beyond init_rows
    b: np.ndarray                  # [max_rows]
    init_rows: int
    max_rows: int
    out_dim: int                   # autoencoder: the reconstruction's size; 0 for a classifier
    names: list[str]               # the initial classes' names ([] for an autoencoder)


@dataclass
class _Plan:
    """Where the learner goes and what it costs: the manifest's "learner" and "memory"."""
    model: Model                   # tinyol.memory's model, with the replay capacity chosen
    learner: dict
    memory: dict
    stage: tuple | None            # (layers, params) grown to max_rows, or None (the head)
    head_init_bytes: int


def _export(src_path: Path, out: Path, s: ExportSettings, *, source: str, board: Board | None,
            echo: Echo) -> dict:
    """The export itself, into `out` (a staging folder), with settings export_model has checked
    and the board it resolved. Returns the manifest."""
    sp = _load_split(src_path, s, board, echo)
    s = _with_pq_bits(s, sp)
    bb = _quantize(sp, s, echo)
    head = _head_rows(sp, bb, s)
    info = _lower(bb, out, source, s.fc_weights, echo, s.conv_pixels)
    codec = _fit_codec(sp, bb, s, echo)
    stage, selection = _choose_stage(sp, bb, head, info, codec, s, board, source, echo)
    plan = _plan(sp, bb, head, info, stage, codec, s, board, echo)
    manifest = _manifest(sp, bb, head, plan, selection, s, source)
    _write_learner(out, source, manifest, head, plan.stage, codec, board)
    return _write_manifest(out, manifest, source)


def _load_split(src_path: Path, s: ExportSettings, board: Board | None, echo: Echo) -> _Split:
    """Step 1, load + split: read the source and cut it where the learner starts. A .tflite is
    split at its last FULLY_CONNECTED (or used whole); a Keras model at the head (the last
    Dense, or --split: before it, an adaptive stage). With a board, a learner that cannot fit
    even beside an empty arena is refused here, before seconds of quantizing."""
    if src_path.suffix.lower() == ".tflite":
        return _split_tflite(src_path, s, echo)
    echo(f"loading {src_path}")
    return _split_keras(load_keras(str(src_path)), s, board, echo)


def _split_tflite(src_path: Path, s: ExportSettings, echo: Echo) -> _Split:
    """A .tflite source: an int8 classifier or autoencoder cut at its last FULLY_CONNECTED, or
    the whole file as the backbone with a head of --classes zero rows."""
    full = parse_model(src_path.read_bytes(), src_path.name) if s.split is None else None
    is_ae = full is not None and tflite_is_autoencoder(full)
    if s.mode == "autoencoder" and not is_ae:
        raise TinyolError(f"{src_path.name} is no autoencoder: it does not end in a linear "
                          "FULLY_CONNECTED with its input's shape",
                          hint="leave out --mode (a classifier is found by its softmax or logits)")
    head_mode = "autoencoder" if is_ae and s.mode != "classifier" and s.classes is None else "classifier"
    tfl, W, b, split_name = _tflite_source(src_path, s.split, s.classes if head_mode == "classifier" else None,
                                           echo, autoencoder=head_mode == "autoencoder")
    if W is None:  # used whole: the head starts from zeros
        _, lat = io_tensors(parse_model(tfl, src_path.name))
        dim = int(np.prod(lat.shape[1:]))
        W = np.zeros((s.classes, dim), np.float32)
        b = np.zeros((s.classes,), np.float32)
    return _Split(W, b, head_mode, split_name, tfl=tfl)


def _split_keras(model, s: ExportSettings, board: Board | None, echo: Echo) -> _Split:
    """A Keras source: the head layer's weights (--classes keeps or adds rows), the head's mode,
    the adaptive stage's layers when --split cuts before the head."""
    first = stage_first(model, s.split)  # an earlier cut: the adaptive stage (tinyol.learn.stage)
    head = find_split(model, None if first is not None else s.split)
    split_name = (first if first is not None else head).name
    kernel, *rest = head.get_weights()
    W = np.ascontiguousarray(kernel.T.astype(np.float32))
    b = (rest[0] if rest else np.zeros(kernel.shape[1])).astype(np.float32)
    in_shape = tuple(int(d) for d in model.inputs[0].shape[1:])
    n_in = int(np.prod(in_shape))
    if s.mode == "auto":
        head_mode = "autoencoder" if (W.shape[0] == n_in and s.classes is None) else "classifier"
    else:
        head_mode = s.mode
    if head_mode == "autoencoder" and W.shape[0] != n_in:
        raise TinyolError(f"autoencoder head {head.name!r} outputs {W.shape[0]} values but the "
                          f"model input has {n_in}")
    if head_mode == "classifier" and s.classes is not None:
        if s.classes <= 0:
            raise TinyolError(f"--classes must be >= 1, not {s.classes}")
        if s.classes < W.shape[0]:
            W, b = W[:s.classes], b[:s.classes]
        elif s.classes > W.shape[0]:
            W = np.vstack([W, np.zeros((s.classes - W.shape[0], W.shape[1]), np.float32)])
            b = np.concatenate([b, np.zeros(s.classes - b.shape[0], np.float32)])
    if first is None and s.stage_train not in (None, "all"):
        raise TinyolError("--stage-train applies to an adaptive stage (a --split layer before "
                          "the head)", hint="give --split LAYER before the head, or drop --stage-train")
    sp = _Split(W, b, head_mode, split_name, keras_model=model, head=head, first=first,
                in_shape=in_shape)
    if first is None:
        echo(f"split at {head.name!r}: backbone {list(in_shape)} -> {W.shape[1]}, "
             f"head {head_mode} {W.shape[1]} -> {W.shape[0]}")
    else:
        if head_mode != "classifier":
            raise TinyolError("an adaptive stage (--split before the head) needs a classifier head")
        if s.auto_train:  # chosen after quantizing; until then the least that can train
            sp.auto = stage_layers(model, first, head)
            sp.stage = (stage_select.least(sp.auto[0]), sp.auto[2])
        else:
            sp.stage = stage_from_keras(model, first, head, train=s.stage_train)
        echo(f"split at {first.name!r}: backbone {list(in_shape)} -> "
             f"{list(first.input.shape[1:])}, adaptive stage: "
             + ", ".join(l.describe() for l in (sp.auto[0] if s.auto_train else sp.stage[0]))
             + (" (what trains: chosen from the data below)" if s.auto_train else ""))
    if board is not None:
        _check_learner_alone(sp, n_in, _with_pq_bits(s, sp), board)
    return sp


def _with_pq_bits(s: ExportSettings, sp: _Split) -> ExportSettings:
    """--replay-codec pq:M on a Keras classifier: replay_bits = TOL_REPLAY_PQ(latent / M)."""
    if s.replay_codec is None or sp.head_mode != "classifier" or sp.keras_model is None:
        return s
    from ..learn.learner import pq_bits

    dim = sp.stage[0][0].in_size if sp.stage is not None else sp.W.shape[1]
    return replace(s, replay_bits=pq_bits(dim, pq_m(s.replay_codec)))


def _check_learner_alone(sp: _Split, n_in: int, s: ExportSettings, board: Board) -> None:
    """Fail fast (before quantizing) when the learner alone does not fit `board`."""
    rows = sp.W.shape[0] if sp.head_mode == "autoencoder" else max(s.max_classes or 0, sp.W.shape[0])
    layers0 = grow_rows(*sp.stage, rows)[0] if sp.stage is not None else None
    if layers0 is not None and s.stage_weights == "int16":
        layers0 = int16_stage(*grow_rows(*sp.stage, rows))[0]
    if s.auto_train:
        replay0 = s.replay_capacity or 0
        mm0 = memory_model(input_size=n_in, dim=layers0[0].in_size, rows=rows,
                           autoencoder=False, arena_bytes=0, replay_capacity=replay0,
                           replay_bits=s.replay_bits, replay_n_new=s.replay_n_new,
                           replay_n_old=s.replay_n_old, momentum=s.momentum, stage=layers0)
        stage_select.check_least(mm0, board_plan(mm0, board), replay0, s.stage_budget)
    check_fit(memory_model(input_size=n_in, dim=layers0[0].in_size if layers0 else sp.W.shape[1],
                           rows=rows, autoencoder=sp.head_mode == "autoencoder", arena_bytes=0,
                           replay_capacity=s.replay_capacity or 0, replay_bits=s.replay_bits,
                           replay_n_new=s.replay_n_new, replay_n_old=s.replay_n_old,
                           momentum=s.momentum, stage=layers0), board, name=s.name, arena_known=False)


def _quantize(sp: _Split, s: ExportSettings, echo: Echo) -> _Backbone:
    """Step 2, quantize: the Keras backbone (the model up to the cut) to int8 with TensorFlow's
    converter, calibrated on --calib (random inputs without it); a .tflite's backbone is int8
    already. Checks that the backbone's input and output are int8 and that its output is what
    the head (or stage) takes."""
    if sp.tfl is not None:
        tfl, X, calib_desc = sp.tfl, None, "taken from the .tflite file"
    else:
        keras = _keras()
        backbone = keras.Model(sp.keras_model.inputs, (sp.first or sp.head).input,
                               name=f"{s.name}_backbone")
        X, calib_desc = calibration_data(s.calib, sp.in_shape, label_column=s.label_column, echo=echo)
        echo(f"quantizing the backbone to int8 (calibration: {calib_desc})")
        tfl = quantize_backbone(backbone, X)
    m = parse_model(tfl, "backbone.tflite")
    inp, lat = io_tensors(m)
    bb = _Backbone(tfl, inp, lat, [op.opname for op in m.operators], calib_desc, X)
    if inp.dtype != "int8" or lat.dtype != "int8":
        raise TinyolError(f"backbone must have int8 input and output, has {inp.dtype} and {lat.dtype}")
    if bb.dim != (sp.stage[0][0].in_size if sp.stage else sp.W.shape[1]):
        raise TinyolError(f"backbone output has {bb.dim} values but the head takes {sp.W.shape[1]}")
    return bb


def _head_rows(sp: _Split, bb: _Backbone, s: ExportSettings) -> _Head:
    """The head's rows on the device: --max-classes rows (an autoencoder: its output size), the
    initial ones from the split, zeros beyond; the initial classes' names."""
    W, b = sp.W, sp.b
    init_rows = W.shape[0]
    if sp.head_mode == "autoencoder":
        if s.max_classes not in (None, init_rows):
            raise TinyolError("--max-classes does not apply to an autoencoder head")
        max_rows, out_dim = init_rows, init_rows
    else:
        max_rows = s.max_classes if s.max_classes is not None else init_rows
        if max_rows < init_rows:
            raise TinyolError(f"--max-classes {max_rows} is less than the {init_rows} initial classes")
        out_dim = 0
    Wp = np.zeros((max_rows, W.shape[1]), np.float32)
    bp = np.zeros((max_rows,), np.float32)
    Wp[:init_rows] = W
    bp[:init_rows] = b
    names = []
    if sp.head_mode == "classifier":
        class_names = s.class_names
        if class_names is None and s.calib is not None:
            try:
                class_names = load_source(s.calib, label_column=s.label_column)[2]
            except TinyolError:
                class_names = None
        names = [(class_names[i] if class_names and i < len(class_names) else str(i))
                 for i in range(init_rows)]
    return _Head(Wp, bp, init_rows, max_rows, out_dim, names)


def _lower(bb: _Backbone, out: Path, source: str, fc_weights: str, echo: Echo, conv_pixels: int = 0):
    """Step 3, lower: write backbone.tflite and the C that runs it (tinyol.model.codegen:
    backbone.c/.h, model_data.c/.h). Returns codegen's BackboneInfo (arena, weights, MACs)."""
    tflite_path = out / "backbone.tflite"
    tflite_path.write_bytes(bb.tfl)
    echo(f"backbone.tflite: {len(bb.tfl)} bytes, ops: {' '.join(bb.ops)}")
    return run_codegen(tflite_path, out, source, echo, fc_weights, conv_pixels)


def _fit_codec(sp: _Split, bb: _Backbone, s: ExportSettings, echo: Echo):
    """Step 4a, fit to the data: the 4-bit replay codec (``--replay-bits 4``, a classifier),
    fitted to the backbone's latents of the calibration inputs, or the PQ codebook (``--replay-codec
    pq:M``: k-means per sub-vector, an int8 [M, 256, sub] array); None otherwise."""
    if s.replay_codec is not None and (bb.X is None or sp.head_mode != "classifier"):
        raise TinyolError("--replay-codec pq:M learns its codebook from the backbone's latents of the "
                          "calibration data: it needs a Keras classifier and --calib",
                          hint="export the Keras model, or use --replay-bits 8, 7 or 4")
    if s.replay_codec is not None:
        codec = fit_replay_pq(bb.tfl, bb.X, bb.inp, bb.lat, pq_m(s.replay_codec), s.seed)
        echo(f"replay: product-quantized, {codec.shape[0]} sub-vectors of {codec.shape[2]} values, "
             f"{codec.shape[1]} codewords each (k-means on the calibration latents, seed {s.seed}): "
             f"{codec.shape[0]} B per latent, codebook {codec.size} B in flash")
        return codec
    if s.replay_bits != 4 or sp.head_mode != "classifier":
        return None
    if bb.X is None:
        raise TinyolError("--replay-bits 4 fits its codec to the backbone's latents of the "
                          "calibration data: it needs a Keras model and --calib",
                          hint="export the Keras model, or use --replay-bits 8 or 7")
    codec = fit_replay_codec(bb.tfl, bb.X, bb.inp, bb.lat)
    echo(f"replay: 4-bit codes, one 16-level grid per channel ({codec[0].size} channels, "
         f"steps {int(codec[1].min())}-{int(codec[1].max())} LSB) fitted to the calibration latents")
    return codec


def _choose_stage(sp: _Split, bb: _Backbone, head: _Head, info, codec, s: ExportSettings,
                  board: Board | None, source: str, echo: Echo):
    """Step 4b, fit to the data: with --stage-train auto, what of the adaptive stage trains,
    measured on the data (:func:`_choose_train`). Returns (stage, the manifest's selection or
    None); the stage as split otherwise."""
    if sp.stage is None or not s.auto_train:
        return sp.stage, None
    full, stage_names, flat = sp.auto
    selection = _choose_train(s, full, stage_names, flat, bb.tfl, bb.inp, bb.lat, head.max_rows, echo,
                              board=board, arena=int(info.arena_bytes), flash=int(info.weights_bytes),
                              last_layer=lambda: _last_layer(sp.keras_model, sp.head, sp.W, sp.b, bb.X,
                                                             s, source),
                              codec=codec)
    return (apply_train(full, stage_names, selection["spec"]), flat), selection


def _learner_settings(s: ExportSettings, capacity: int, head_mode: str, codec, stage=None) -> dict:
    """The manifest's "learner": the settings config.h gives the device."""
    learner = dict(lr=float(s.lr), momentum=float(s.momentum), weight_decay=float(s.weight_decay),
                   replay_capacity=int(capacity), replay_bits=int(s.replay_bits),
                   replay_n_new=int(s.replay_n_new), replay_n_old=int(s.replay_n_old), seed=int(s.seed))
    if head_mode == "autoencoder" and s.rehearse:
        raise TinyolError("--rehearse needs a classifier head",
                          hint="idle rehearsal replays labelled latents; an autoencoder keeps none")
    learner["rehearse"] = int(s.rehearse)
    if stage is not None and s.stage_lr_scale:
        learner["stage_lr_scale"] = float(np.float32(s.stage_lr_scale))
    learner["replay_policy"] = s.replay_policy
    if s.replay_codec is not None:
        learner["replay_codec"] = {"kind": "pq", "m": int(codec.shape[0]), "sub": int(codec.shape[2]),
                                   "codewords": int(codec.shape[1]),
                                   "codebook": base64.b64encode(codec.tobytes()).decode("ascii")}
    elif codec is not None:
        learner["replay_codec"] = {"channels": int(codec[0].size), "lo": codec[0].tolist(),
                                   "step": codec[1].tolist()}
    return learner


def _plan(sp: _Split, bb: _Backbone, head: _Head, info, stage, codec, s: ExportSettings,
          board: Board | None, echo: Echo) -> _Plan:
    """Step 5, plan: the memory model of what is exported (tinyol.model.plan), the replay
    capacity (the largest that fits the board unless given), the fit check and the budget."""
    # an arena of 0 is real: everything in the caller's buffers
    tflm_arena = tflm_arena_bytes(bb.tfl)
    arena, weights_bytes = int(info.arena_bytes), int(info.weights_bytes)
    if stage is not None:  # the last layer's rows grow to --max-classes, as the head's
        stage = grow_rows(stage[0], stage[1], head.max_rows, head.init_rows)
        if s.stage_weights == "int16":  # its trained tensors in int16 (tinyol.learn.stage.int16_stage)
            stage = int16_stage(*stage)
    # flash: the backbone's constants + the learner's initial parameters
    head_init_bytes = (4 * int(stage[1].size) if stage is not None
                       else 4 * head.max_rows * bb.dim + 4 * head.max_rows)
    mm = memory_model(input_size=int(np.prod(bb.inp.shape[1:])), dim=bb.dim, rows=head.max_rows,
                      autoencoder=sp.head_mode == "autoencoder", arena_bytes=arena,
                      replay_capacity=s.replay_capacity or 0, replay_bits=s.replay_bits,
                      replay_n_new=s.replay_n_new, replay_n_old=s.replay_n_old, momentum=s.momentum,
                      flash_model_bytes=weights_bytes + head_init_bytes,
                      stage=stage[0] if stage is not None else None)
    capacity = choose_replay_capacity(mm, board, s.replay_capacity, echo)
    mm.replay_capacity = capacity
    learner = _learner_settings(s, capacity, sp.head_mode, codec, stage)
    if stage is not None:
        trained = sum(l.n_train for l in stage[0])
        echo(f"adaptive stage: {len(stage[0])} layers, {mm.stage_params} parameters"
             + (f" ({trained} train, the rest stays in flash)" if trained < mm.stage_params else "")
             + f", {mm.learner()} bytes on the device (replay {mm.parts()['replay buffer']})")
    if board is not None:
        check_fit(mm, board, name=s.name)
        for line in board_plan(mm, board).lines():
            echo(f"memory: {line}")
        warn_store(mm, board, echo)
    bud = budget(mm, board, weights_bytes=weights_bytes, head_init_bytes=head_init_bytes)
    if board is None:
        echo(f"memory: RAM ~{bud['ram_bytes']} bytes (arena {arena}, learner "
             f"{bud['learner_bytes']}), flash ~{bud['flash_bytes']} (give --board to check the fit)")
    mem = {"arena_bytes": arena, "tflm_arena_bytes": tflm_arena, "macs": int(info.macs), **bud}
    return _Plan(mm, learner, mem, stage, head_init_bytes)


def _manifest(sp: _Split, bb: _Backbone, head: _Head, plan: _Plan, selection, s: ExportSettings,
              source: str) -> dict:
    """Step 6, the manifest (manifest.json, and what config.h is written from): the model, its
    input and latent quantization, the head, the learner, the memory, the adaptive stage."""
    inp, lat = bb.inp, bb.lat
    manifest = {
        "tinyol_version": __version__,
        "name": s.name,
        "source": source,
        "split_layer": sp.split_name,
        "input": {"shape": inp.shape[1:], "size": int(np.prod(inp.shape[1:])), "dtype": "int8",
                  "scale": float(np.float32(inp.scale)), "zero_point": inp.zero_point},
        "latent": {"dim": bb.dim, "scale": float(np.float32(lat.scale)), "zero_point": lat.zero_point},
        "head": {"mode": sp.head_mode, "classes": head.names, "init_classes": head.init_rows,
                 "max_classes": head.max_rows, "out_dim": head.out_dim},
        "model_hash": model_hash(bb.tfl),
        "learner": plan.learner,
        "memory": plan.memory,
        "board": s.board,
        "calibration": bb.calib_desc,
        "ops": bb.ops,
    }
    if s.fc_weights != "int8":  # absent: the default (int8), so earlier manifests stay as they are
        manifest["fc_weights"] = s.fc_weights
    if s.conv_pixels:  # absent: automatic
        manifest["conv_pixels"] = s.conv_pixels
    if plan.stage is not None:
        mm = plan.model
        stage_mem = stage_memory(plan.stage[0], mm.replay_capacity, mm.replay_bits, mm.n_new, 0,
                                 not mm.momentum)
        manifest["stage"] = stage_summary(plan.stage[0], stage_mem)
        if s.stage_train not in (None, "all"):
            manifest["stage"]["train_spec"] = selection["spec"] if selection else s.stage_train.strip()
        if selection is not None:
            manifest["stage"]["selection"] = selection
    return manifest


def _write_learner(out: Path, source: str, manifest: dict, head: _Head, stage, codec,
                   board: Board | None) -> None:
    """Step 7, write the learner's artifacts: its initial parameters (head_init.c/.npz, or
    stage_init.c/.npz for an adaptive stage), config.h, the 4-bit codec (replay_codec.c)."""
    if stage is not None:
        _deterministic_npz(out / "stage_init.npz",
                           {"params": stage[1], "n_classes": np.array(head.init_rows, dtype=np.int64),
                            "layers": np.array([l.as_tuple() for l in stage[0]], np.int64)})
        write_stage_init(out, source, stage[0], stage[1])
    else:
        _deterministic_npz(out / "head_init.npz",
                           {"W": head.W, "b": head.b, "n_classes": np.array(head.init_rows, dtype=np.int64)})
        write_head_init(out, source, head.W, head.b, with_backbone_h=True)
    write_config_h(out, source, manifest, board)
    if codec is not None:
        write_replay_codec(out, source, *(codec if isinstance(codec, tuple) else (codec,)))


def _write_manifest(out: Path, manifest: dict, source: str) -> dict:
    """Step 8: every artifact's sha256 into the manifest, and manifest.json."""
    manifest["artifacts"] = {a: sha256(out / a) for a in ARTIFACTS if (out / a).exists()}
    manifest["_generated_by"] = banner(source, comment=None)
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    (out / "manifest.json").write_text(text, encoding="utf-8")
    return manifest


AUTO_REPLAY_SLOTS = DEFAULT_LEARNER["replay_capacity"]  # kept free by auto without --replay-capacity
# (or 3/4 of the slots that fit with the classifier alone training, when that is fewer: the rest
# is what the choice may spend on training more)


def _last_layer(model, head, W, b, X, s: ExportSettings, source: str) -> dict:
    """The alternative to a deeper cut: the same model exported at its head (no --split), the
    one-layer learner. Its int8 backbone (quantized on the same calibration data), head and the
    memory numbers its own export would have (codegen run in a scratch folder)."""
    keras = _keras()
    bb = keras.Model(model.inputs, head.input, name=f"{s.name}_last_layer")
    tfl = quantize_backbone(bb, X)
    inp, lat = io_tensors(parse_model(tfl, "backbone.tflite"))
    with tempfile.TemporaryDirectory(prefix=".tinyol-last-") as d:
        (Path(d) / "backbone.tflite").write_bytes(tfl)
        info = run_codegen(Path(d) / "backbone.tflite", Path(d), source, lambda m: None, s.fc_weights,
                           s.conv_pixels)
    return {"tfl": tfl, "inp": inp, "lat": lat, "W": W, "b": b,
            "arena": int(info.arena_bytes), "flash": int(info.weights_bytes)}


def _choose_train(s: ExportSettings, layers, names, flat, tfl: bytes, inp, lat, rows: int,
                  echo: Echo, *, board: Board, arena: int, flash: int, last_layer=None,
                  codec=None) -> dict:
    """`--stage-train auto`: measure each layer's contribution on the calibration data with
    the twin and choose what trains (tinyol.model.stage_select), on the validation part of
    the task; then measure the recipe against the last layer alone (``last_layer()``: the head
    cut's backbone, :func:`_last_layer`), each with the replay slots the board leaves it, on
    the test part, never used to choose. Returns the manifest's "selection" entry (spec, table,
    accuracies, the recipe). Raises TinyolError when the task is saturated and when no recipe
    at this cut beats the last layer alone."""
    src = s.stage_data or s.calib
    X, y, _ = load_source(src, label_column=s.label_column)
    in_shape = tuple(int(d) for d in inp.shape[1:])
    if int(np.prod(X.shape[1:])) != int(np.prod(in_shape)):
        raise TinyolError(f"{'--stage-data' if s.stage_data else '--calib'} {src!r}: "
                          f"{int(np.prod(X.shape[1:]))} values per sample, the model input needs "
                          f"{int(np.prod(in_shape))}")
    n_known = layers[-1].out_c
    layers, flat = grow_rows(layers, flat, rows, n_known)  # measured as the device runs it
    idx = stage_select.subsample(y, rows, s.seed)
    Q = stage_select.latents(tfl, X[idx].reshape((-1,) + in_shape), inp, lat)
    task = stage_select.make_task(Q, y[idx], n_known, rows, s.seed)

    def staged(ls):
        """The candidate as the device keeps it: with --stage-weights int16 its trained tensors
        in int16 (their scales and rounded values: tinyol.learn.stage.int16_stage, as exported)."""
        return int16_stage(ls, flat) if s.stage_weights == "int16" else (ls, flat)

    def model_for(ls, slots):
        return memory_model(input_size=int(np.prod(in_shape)), dim=ls[0].in_size, rows=rows,
                            autoencoder=False, arena_bytes=arena, replay_capacity=slots,
                            replay_bits=s.replay_bits, replay_n_new=s.replay_n_new,
                            replay_n_old=s.replay_n_old, momentum=s.momentum,
                            flash_model_bytes=flash + 4 * int(flat.size), stage=staged(ls)[0])

    replay = s.replay_capacity
    if replay is None:  # room for 200 slots, or 3/4 of what the classifier alone leaves if fewer
        most = max_replay_slots(model_for(stage_select.least(layers), 0), board)
        replay = max(0, min(AUTO_REPLAY_SLOTS, 3 * int(most) // 4))
    cap = replay if replay > 0 else 0
    from ..learn import learner as L

    settings = L.Settings(lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay,
                          n_new=s.replay_n_new, n_old=s.replay_n_old if cap else 0,
                          mode=L.MODE_REPLAY if cap else L.MODE_SGD)
    lq = (float(np.float32(lat.scale)), int(lat.zero_point))
    held = ", ".join(str(c) for c in task.held_out)
    plural = len(task.held_out) > 1
    echo(f"stage-train auto: on {src}: "
         + (f"new class{'es' if plural else ''} {held} (" if task.truly_new else
            "leave-classes-out: " + (f"classes {held} play the new ones (" if plural
                                     else f"class {held} plays a new one (")) + f"{len(task.stream[1])} streamed, "
         f"{len(task.prefill[1])} in replay, {len(task.test[1])} to test; seed {s.seed})")

    def measure(ls):
        return stage_select.run_task(*staged(ls), task, latent_q=lq, settings=settings,
                                     capacity=min(cap, 0xFFFF), bits=s.replay_bits, seed=s.seed,
                                     codec=codec, stage_lr_scale=s.stage_lr_scale)

    def ram(ls):
        return memory.stage_bytes([l.as_tuple() for l in staged(ls)[0]], 0, s.replay_bits,
                                  s.replay_n_new, s.momentum != 0)

    def fits(ls):
        mm = model_for(ls, replay)
        return board_plan(mm, board).fits and (s.stage_budget is None or ram(ls) <= s.stage_budget)

    if not task.truly_new:
        echo(f"stage-train auto: note: {src} has no samples of new classes (labels {n_known}.."
             f"{rows - 1}): leaving known classes out is a proxy on classes the network was trained "
             "on, which underrates what training deeper gains; give --stage-data labelled samples "
             "of the classes the device will learn")

    def baseline(acc0):
        if acc0 >= stage_select.SATURATED:
            raise stage_select.saturation_error(task, acc0, src, n_known, rows)

    spec, table, summary = stage_select.select(layers, names, measure, ram, fits, echo, baseline)
    chosen = apply_train(layers, names, spec)
    summary["measured_accuracy"] = measure(chosen)
    for line in stage_select.table_lines(table, summary["baseline_accuracy"]):
        echo(f"  {line}")
    echo(f"stage-train auto: chose {spec} (learner {summary['learner_bytes']} B without replay; "
         f"{100 * summary['measured_accuracy']:.1f}% on the validation part, classifier alone "
         f"{100 * summary['baseline_accuracy']:.1f}%; keeps room for {replay} replay slots"
         + (f", budget {s.stage_budget} B" if s.stage_budget else "") + ")")
    summary.update(table=[dataclasses.asdict(r) for r in table], held_out=list(task.held_out),
                   replay_slots_reserved=int(replay), budget=s.stage_budget, seed=int(s.seed),
                   data=src, new_classes=bool(task.truly_new))
    if last_layer is None:
        return summary
    summary.update(_recipe(s, board, layers, names, flat, spec, table, task, idx, X, in_shape, rows,
                           lq, settings, model_for, ram, last_layer(), src, echo, codec, staged))
    summary["spec"] = summary["recipe"]["spec"]
    return summary


def _recipe(s: ExportSettings, board: Board, layers, names, flat, spec, table, task, idx, X, in_shape,
            rows, lq, settings, model_for, ram, last: dict, src: str, echo: Echo, codec=None,
            staged=None) -> dict:
    """The recipe `--stage-train auto` recommends: the chosen stage, the classifier alone at
    this cut and the last layer alone (the head cut's export), each with the replay slots it
    leaves on the board (or --replay-capacity at this cut), measured on the validation part
    (to choose) and the test part (the accuracy it expects, never used to choose). A cut is
    recommended only when it beats the last layer alone on the validation part by MIN_GAIN."""
    def slots(mm):
        return max(0, int(max_replay_slots(mm, board)))

    def capped(c):
        return min(c, 0xFFFF)

    least = stage_select.least(layers)
    frozen_spec = ",".join(f"{n}:frozen" for n, l in zip(names, layers[:-1])
                           if l.kind in stage_select.LINEAR)
    # the cut's candidates: the classifier alone, the greedy choice, and every single layer
    # that gained on the validation part, each with the slots it leaves (the search of what
    # trains jointly with the replay capacity: a layer that did not fit beside the reserved
    # slots may still pay with fewer)
    cands = [("least", frozen_spec), ("chosen", spec)]
    for r in table:
        if r.gain >= stage_select.MIN_GAIN:
            one = ",".join(f"{n}:{r.mode if n == r.layer else 'frozen'}"
                           for n, l in zip(names, layers[:-1]) if l.kind in stage_select.LINEAR)
            cands.append(("layer", one))
    seen, cut_cands = set(), []
    for key, sp in cands:
        if sp in seen:
            continue
        seen.add(sp)
        ls = least if sp == frozen_spec else apply_train(layers, names, sp)
        if s.replay_capacity is not None:
            n = s.replay_capacity if board_plan(model_for(ls, s.replay_capacity), board).fits else -1
        else:
            n = slots(model_for(ls, 0)) if board_plan(model_for(ls, 0), board).fits else -1
        if n < 0 or (s.stage_budget is not None and ram(ls) > s.stage_budget):
            continue
        cut_cands.append((sp, ls, n))
    # the last layer alone: its own latents (the head's input) of the same samples
    Qh = stage_select.latents(last["tfl"], X[idx].reshape((-1,) + in_shape), last["inp"], last["lat"])
    htask = task.over(Qh)
    dh = int(Qh.shape[1])
    W, b = last["W"], last["b"]
    Wg = np.zeros((rows, dh), np.float32)
    bg = np.zeros(rows, np.float32)
    Wg[:W.shape[0]], bg[:b.shape[0]] = W, b
    hq = (float(np.float32(last["lat"].scale)), int(last["lat"].zero_point))
    mm_h = memory_model(input_size=int(np.prod(in_shape)), dim=dh, rows=rows, autoencoder=False,
                        arena_bytes=last["arena"], replay_capacity=0, replay_bits=s.replay_bits,
                        replay_n_new=s.replay_n_new, replay_n_old=s.replay_n_old,
                        momentum=s.momentum, flash_model_bytes=last["flash"] + 4 * rows * (dh + 1))
    h_slots = slots(mm_h)
    h_codec = None
    if s.replay_bits == 4:  # the last layer's own codec, fitted to its latents of the same data
        from ..learn.learner import fit_codec4

        h_codec = fit_codec4(Qh, int(last["lat"].shape[-1]))
    cut = s.split
    n_old = s.replay_n_old

    def run_last(part):
        return stage_select.run_last_layer(
            Wg, bg, htask, latent_q=hq, settings=_settings_for(settings, h_slots, n_old),
            capacity=capped(h_slots), bits=s.replay_bits, seed=s.seed, part=part, codec=h_codec)

    rows_out = [{"key": "last", "recipe": "last layer alone (no --split)", "spec": None,
                 "slots": int(h_slots), "val": run_last("val"), "test": run_last("test")}]
    for sp, ls, n in cut_cands:
        def run_cut(part, ls=ls, n=n):
            return stage_select.run_task(
                *(staged(ls) if staged else (ls, flat)), task, latent_q=lq,
                settings=_settings_for(settings, n, n_old), capacity=capped(n), bits=s.replay_bits,
                seed=s.seed, part=part, codec=codec, stage_lr_scale=s.stage_lr_scale)
        label = "classifier alone" if sp == frozen_spec else ",".join(
            x for x in sp.split(",") if not x.endswith(":frozen"))
        rows_out.append({"key": "least" if sp == frozen_spec else "cut", "spec": sp,
                         "recipe": f"--split {cut}, {label}", "slots": int(n),
                         "val": run_cut("val"), "test": run_cut("test")})
    echo(f"stage-train auto: the recipe, each with the replay slots it leaves on {board.name} "
         f"({stage_select.ORDERS} stream orders; validation part to choose, test part to report):")
    for r in rows_out:
        echo(f"  {r['recipe']:<48} {r['slots']:>6} slots  val {100 * r['val']:5.1f}%  "
             f"test {100 * r['test']:5.1f}%")
    ll = rows_out[0]
    best = max(rows_out[1:], key=lambda r: (r["val"], r["key"] == "least", r["slots"]))
    rec = {"rows": rows_out, "last_layer_slots": int(h_slots), "last_layer_val": ll["val"],
           "last_layer_test": ll["test"]}
    if best["val"] - ll["val"] < stage_select.MIN_GAIN:
        raise TinyolError(
            f"--stage-train auto: no recipe at the cut {cut!r} beats the last layer alone on held-out "
            f"samples of {src}: best here {100 * best['val']:.1f}% ({best['recipe']}, {best['slots']} "
            f"replay slots), the last layer {100 * ll['val']:.1f}% with {h_slots} slots (validation "
            f"part; test part {100 * best['test']:.1f}% vs {100 * ll['test']:.1f}%)",
            hint="export without --split (the last layer learns alone), or name what trains at this "
                 "cut to export it anyway: --stage-train bias|all|LAYER")
    gain = best["test"] - ll["test"]
    if gain < 0:  # chosen on the validation part; the test part must not contradict it
        raise TinyolError(
            f"--stage-train auto: no recipe at the cut {cut!r} is sure to beat the last layer alone: "
            f"{best['recipe']} ({best['slots']} replay slots) beat it on the validation part of {src} "
            f"({100 * best['val']:.1f}% vs {100 * ll['val']:.1f}%) but measured worse on the test part "
            f"({100 * best['test']:.1f}% vs {100 * ll['test']:.1f}% with {h_slots} slots): the gain "
            "did not hold on samples it was not chosen on",
            hint="export without --split (the last layer learns alone), give --stage-data more "
                 "labelled samples of the new classes, or name what trains at this cut to export "
                 "it anyway: --stage-train bias|all|LAYER")
    rspec = best["spec"]
    echo(f"stage-train auto: recommends --split {cut} --stage-train {rspec} "
         f"({best['slots']} replay slots): expects {100 * best['test']:.1f}% on held-out samples, "
         f"{100 * gain:+.1f} points over the last layer alone ({100 * ll['test']:.1f}% with "
         f"{h_slots} slots)"
         + ("" if task.truly_new else "; on a leave-classes-out proxy, see the note above"))
    rec.update(spec=rspec, expected_accuracy=best["test"], expected_gain=gain,
               slots=int(best["slots"]))
    return {"recipe": rec}


def _settings_for(settings, slots: int, n_old: int):
    """The twin's settings for a run with ``slots`` replay slots (none: plain SGD)."""
    from ..learn import learner as L

    if slots > 0:
        return dataclasses.replace(settings, n_old=n_old, mode=L.MODE_REPLAY)
    return dataclasses.replace(settings, n_old=0, mode=L.MODE_SGD)


def refresh_config(model_dir: str, echo: Echo = lambda s: None, check: bool = True,
                   **changes) -> dict:
    """Rewrite config.h and the manifest's memory numbers of an existing export from its
    manifest.json (e.g. after the memory model changed); the backbone and head stay as they are.
    ``changes``: learner settings to change (replay_capacity=..., momentum=...) and/or board=...
    ``check``: refuse a configuration that does not fit the board."""
    out = Path(model_dir)
    m = read_manifest(out)
    if "board" in changes:
        m["board"] = changes.pop("board")
    m["learner"].update(changes)
    L, mem, head = m["learner"], m["memory"], m["head"]
    ae = head["mode"] == "autoencoder"
    rows = int(head["max_classes"])
    dim = int(m["latent"]["dim"])
    layers = None
    if m.get("stage"):
        layers = [Layer(**dict(zip(("kind", "act", "kh", "kw", "sh", "sw", "pt", "pl", "in_h", "in_w",
                                    "in_c", "out_h", "out_w", "out_c", "train", "wq", "bq"), d)))
                  for d in m["stage"]["descriptors"]]
    init_bytes = 4 * int(m["stage"]["params"]) if layers else 4 * rows * dim + 4 * rows
    mm = memory_model(input_size=int(m["input"]["size"]), dim=dim, rows=rows, autoencoder=ae,
                      arena_bytes=int(mem["arena_bytes"]), replay_capacity=int(L["replay_capacity"]),
                      replay_bits=int(L["replay_bits"]), replay_n_new=int(L["replay_n_new"]),
                      replay_n_old=int(L["replay_n_old"]), momentum=float(L["momentum"]),
                      flash_model_bytes=int(mem["weights_bytes"]) + init_bytes, stage=layers)
    board = get_board(m["board"]) if m.get("board") is not None else None  # resolved once
    if board is not None and check:
        check_fit(mm, board, name=m["name"])
    bud = budget(mm, board, weights_bytes=int(mem["weights_bytes"]), head_init_bytes=init_bytes)
    m["memory"] = {"arena_bytes": mem["arena_bytes"], "tflm_arena_bytes": mem.get("tflm_arena_bytes"),
                   "macs": mem["macs"], **bud}
    if layers:
        kept = {k: m["stage"][k] for k in ("train_spec", "selection") if k in m["stage"]}
        m["stage"] = {**stage_summary(layers, stage_memory(layers, mm.replay_capacity, mm.replay_bits,
                                                           mm.n_new, 0, not mm.momentum)), **kept}
    write_config_h(out, m["source"], m, board)
    m["artifacts"]["config.h"] = sha256(out / "config.h")
    (out / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    echo(f"rewrote {out}/config.h and manifest.json")
    return m

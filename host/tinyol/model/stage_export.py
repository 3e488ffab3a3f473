"""Keras layers after an early `--split` -> the adaptive stage (tinyol.learn.stage layers + their
float32 parameters) and its generated C (stage_init.c, config.h lines).

Supported after the cut: Dense, Conv1D, Conv2D (any kernel incl. 1x1, strides, 'same' or
'valid', no dilation, no groups), DepthwiseConv2D (any depth multiplier), ReLU / ReLU6 (as
layer activation, `ReLU` or `Activation`), BatchNormalization right after one of those
(folded into it at export), Flatten / Reshape (no-ops on HWC data), Dropout (no-op),
MaxPooling1D/2D, AveragePooling1D/2D, GlobalAveragePooling1D/2D, GlobalMaxPooling1D/2D.
The last trainable layer must be a Dense (the classifier whose rows grow with new classes);
a softmax may follow it. Sequential and Functional models alike: the layers from the cut to
the head must form a chain (each takes the previous one's output).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from ..errors import TinyolError
from ..learn.stage import (
    ACT_NONE,
    ACT_RELU,
    ACT_RELU6,
    AVGPOOL,
    CONV,
    DENSE,
    DWCONV,
    GAP,
    GMAXPOOL,
    LINEAR,
    MAXPOOL,
    TRAIN_ALL,
    TRAIN_BIAS,
    TRAIN_FROZEN,
    Layer,
    chain_ok,
    stage_hash,
)
from .cwriter import banner, float_array

_NOOP = {"Flatten", "Reshape", "Dropout", "SpatialDropout1D", "SpatialDropout2D",
         "GaussianDropout", "GaussianNoise", "AlphaDropout", "InputLayer"}
_SUPPORTED = ("Dense, Conv1D, Conv2D, DepthwiseConv2D, ReLU/ReLU6, BatchNormalization (after a "
              "linear layer), Flatten/Reshape, Max/AveragePooling1D/2D, Global(Average|Max)"
              "Pooling1D/2D, Dropout")
_POOLS = {"MaxPooling1D": MAXPOOL, "MaxPooling2D": MAXPOOL, "AveragePooling1D": AVGPOOL,
          "AveragePooling2D": AVGPOOL}


def _hwc(shape) -> tuple[int, int, int]:
    dims = [int(d) for d in tuple(shape)[1:]]
    if len(dims) == 1:
        return 1, 1, dims[0]
    if len(dims) == 2:
        return 1, dims[0], dims[1]
    if len(dims) == 3:
        return dims[0], dims[1], dims[2]
    raise TinyolError(f"stage input of rank {len(dims)} is not supported (1-D, 2-D or 3-D HWC)")


def _act_code(name: str, layer_name: str) -> int:
    codes = {"linear": ACT_NONE, "relu": ACT_RELU, "relu6": ACT_RELU6}
    if name not in codes:
        raise TinyolError(f"layer {layer_name!r} has activation {name!r}; the adaptive stage "
                          f"supports relu, relu6 and linear", hint="choose a later --split layer")
    return codes[name]


def _relu_layer_act(l) -> int | None:
    """Activation code of a standalone ReLU / Activation layer (None if it is not one)."""
    k = l.__class__.__name__
    if k == "Activation":
        name = getattr(l.activation, "__name__", str(l.activation))
        return _act_code(name, l.name) if name != "softmax" else None
    if k == "ReLU":
        mv = None if l.max_value is None else float(l.max_value)
        if float(getattr(l, "negative_slope", 0.0)) != 0.0 or float(getattr(l, "threshold", 0.0)) != 0.0:
            raise TinyolError(f"layer {l.name!r}: leaky/thresholded ReLU is not supported in the stage")
        if mv is None:
            return ACT_RELU
        if mv == 6.0:
            return ACT_RELU6
        raise TinyolError(f"layer {l.name!r}: ReLU with max_value {mv} is not supported (6 or none)")
    return None


def _same_pad(n_in: int, n_out: int, k: int, s: int) -> int:
    return max((n_out - 1) * s + k - n_in, 0) // 2


def stage_from_keras(model, first, head, train: str | None = None) -> tuple[list[Layer], np.ndarray]:
    """The stage from layer ``first`` to the Dense ``head`` (both included): its layers and
    flat float32 parameters (per layer W then b, C layouts of tol_stage.h). ``train``: what
    trains on the device (:func:`apply_train`; None = everything)."""
    out, names, flat = stage_layers(model, first, head)
    return apply_train(out, names, train), flat


def stage_layers(model, first, head) -> tuple[list[Layer], list[str], np.ndarray]:
    """:func:`stage_from_keras` with everything training, and the Keras layer name each stage
    layer comes from (what `--stage-train` names)."""
    layers_k = [l for l in model.layers if l.__class__.__name__ != "InputLayer"]
    i0, i1 = layers_k.index(first), layers_k.index(head)
    if i0 > i1:
        raise TinyolError(f"--split layer {first.name!r} comes after the head {head.name!r}")
    span = layers_k[i0:i1 + 1]
    for prev, l in zip(span, span[1:]):
        why = _chain_break(model, prev, l)
        if why:
            raise TinyolError(f"layer {l.name!r} ({l.__class__.__name__}) {why}; the adaptive "
                              f"stage must be a plain chain (no branches or skip connections)",
                              hint="choose a --split layer after the last merge")
    out: list[Layer] = []
    names: list[str] = []  # the Keras layer each stage layer comes from
    params: list[list[np.ndarray]] = []  # per stage layer [W, b] (mutable for BN folding)

    def add(name: str, layer: Layer) -> None:
        out.append(layer)
        names.append(name)

    for l in span:
        k = l.__class__.__name__
        if k in _NOOP:
            continue
        in_h, in_w, in_c = _hwc(l.input.shape)
        oh, ow, oc = _hwc(l.output.shape) if k not in ("Dense",) else (1, 1, 0)
        if k == "Dense":
            if len(l.input.shape) != 2:
                raise TinyolError(f"Dense layer {l.name!r} takes a {len(l.input.shape) - 1}-D input; "
                                  f"add Flatten before it")
            kern, *rest = l.get_weights()
            W = kern.T.astype(np.float32)
            b = (rest[0] if rest else np.zeros(W.shape[0])).astype(np.float32)
            act = getattr(l.activation, "__name__", "linear")
            if l is head and act == "softmax":
                act = "linear"
            add(l.name, Layer(DENSE, 1, 1, in_c, 1, 1, W.shape[0], _act_code(act, l.name)))
            params.append([W, b])
        elif k in ("Conv1D", "Conv2D", "DepthwiseConv2D"):
            dil = tuple(np.atleast_1d(l.dilation_rate))
            if any(int(d) != 1 for d in dil):
                raise TinyolError(f"layer {l.name!r}: dilated convolutions are not supported")
            if getattr(l, "groups", 1) != 1:
                raise TinyolError(f"layer {l.name!r}: grouped convolutions are not supported")
            if l.padding not in ("same", "valid"):
                raise TinyolError(f"layer {l.name!r}: padding {l.padding!r} is not supported")
            if getattr(l, "data_format", "channels_last") != "channels_last":
                raise TinyolError(f"layer {l.name!r}: only channels_last is supported")
            w = l.get_weights()
            kern = w[0].astype(np.float32)
            if k == "Conv1D":
                kh, kw, sh, sw = 1, kern.shape[0], 1, int(np.atleast_1d(l.strides)[0])
                kern = kern[None]  # [1][k][ci][co]
            else:
                kh, kw = kern.shape[:2]
                sh, sw = (int(s) for s in l.strides)
            if k == "DepthwiseConv2D":
                W = kern.reshape(kh, kw, -1)  # [ky][kx][ci*M + m]
                kind = DWCONV
            else:
                W = np.transpose(kern, (3, 0, 1, 2))  # [co][ky][kx][ci]
                kind = CONV
            ncout = oc
            b = (w[1] if len(w) > 1 else np.zeros(ncout)).astype(np.float32)
            same = l.padding == "same"
            pt = _same_pad(in_h, oh, kh, sh) if same else 0
            pl = _same_pad(in_w, ow, kw, sw) if same else 0
            act = getattr(l.activation, "__name__", "linear")
            add(l.name, Layer(kind, in_h, in_w, in_c, oh, ow, oc, _act_code(act, l.name),
                             kh, kw, sh, sw, pt, pl))
            params.append([np.ascontiguousarray(W, np.float32), b])
        elif k in ("GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalMaxPooling1D",
                   "GlobalMaxPooling2D"):
            if getattr(l, "keepdims", False):
                raise TinyolError(f"layer {l.name!r}: keepdims=True is not supported")
            add(l.name, Layer(GAP if "Average" in k else GMAXPOOL, in_h, in_w, in_c, 1, 1, in_c))
            params.append([np.zeros(0, np.float32), np.zeros(0, np.float32)])
        elif k in _POOLS:
            if l.padding not in ("same", "valid"):
                raise TinyolError(f"layer {l.name!r}: padding {l.padding!r} is not supported")
            if getattr(l, "data_format", "channels_last") != "channels_last":
                raise TinyolError(f"layer {l.name!r}: only channels_last is supported")
            ps, st = (tuple(int(v) for v in np.atleast_1d(a)) for a in (l.pool_size, l.strides))
            kh, kw, sh, sw = (1, ps[0], 1, st[0]) if k.endswith("1D") else (*ps, *st)
            if max(kh, kw, sh, sw) > 255:
                raise TinyolError(f"layer {l.name!r}: pool windows and strides up to 255",
                                  hint="use GlobalMaxPooling/GlobalAveragePooling for a whole axis")
            same = l.padding == "same"
            pt = _same_pad(in_h, oh, kh, sh) if same else 0
            pl = _same_pad(in_w, ow, kw, sw) if same else 0
            add(l.name, Layer(_POOLS[k], in_h, in_w, in_c, oh, ow, oc, ACT_NONE, kh, kw, sh, sw,
                             pt, pl))
            params.append([np.zeros(0, np.float32), np.zeros(0, np.float32)])
        elif k == "BatchNormalization":
            prev = out[-1] if out else None
            if prev is None or prev.kind not in LINEAR or prev.act != ACT_NONE:
                raise TinyolError(f"BatchNormalization {l.name!r} must follow a Dense/Conv layer "
                                  f"without activation to be folded",
                                  hint="choose a --split layer after it")
            if int(np.atleast_1d(l.axis)[0]) not in (-1, len(l.input.shape) - 1):
                raise TinyolError(f"BatchNormalization {l.name!r}: only the channel axis is supported")
            gamma, beta, mean, var = _bn_weights(l)
            sc = (gamma / np.sqrt(var + np.float32(l.epsilon))).astype(np.float32)
            W, b = params[-1]
            if prev.kind == DENSE or prev.kind == CONV:
                W = W * sc.reshape((-1,) + (1,) * (W.ndim - 1))
            else:  # DWCONV: out channel last
                W = W * sc
            b = (b - mean) * sc + beta
            params[-1] = [W.astype(np.float32), b.astype(np.float32)]
        else:
            a = _relu_layer_act(l)
            if a is None:
                if k in ("Softmax",) and l is not head:
                    continue
                raise TinyolError(f"layer {l.name!r} ({k}) cannot be in the adaptive stage; "
                                  f"supported: {_SUPPORTED}", hint="choose a later --split layer")
            prev = out[-1] if out else None
            if prev is None or prev.kind not in LINEAR or prev.act != ACT_NONE:
                raise TinyolError(f"activation layer {l.name!r} must follow a Dense/Conv layer "
                                  f"without activation (cut after it, or before that layer)",
                                  hint="choose another --split layer")
            out[-1] = Layer(**{**prev.__dict__, "act": a})
    if not chain_ok(out):
        raise TinyolError("the layers after --split do not form a stage tinyol can train "
                          f"({', '.join(x.describe() for x in out)})",
                          hint="the last trainable layer must be a Dense classifier")
    flat = np.concatenate([np.concatenate([W.ravel(), b.ravel()]) for W, b in params])
    return out, names, flat.astype(np.float32)


def apply_train(layers: list[Layer], names: list[str], spec: str | None) -> list[Layer]:
    """The lean stage's sparse update (docs/adaptive.md). spec: None or "all" (every
    parameter trains), "bias" (the classifier trains all, every other layer its biases), or
    "LAYER[:MODE],..." (the named Keras layers train MODE = all (default), bias or frozen;
    every other layer its biases). The classifier always trains all its parameters."""
    if spec is None or spec.strip() == "all":
        return layers
    linear = [i for i, l in enumerate(layers[:-1]) if l.kind in LINEAR]
    modes = {"all": TRAIN_ALL, "bias": TRAIN_BIAS, "frozen": TRAIN_FROZEN}
    want = {i: TRAIN_BIAS for i in linear}
    if spec.strip() != "bias":
        known = {names[i]: i for i in linear}
        for item in (t.strip() for t in spec.split(",") if t.strip()):
            nm, _, mode = item.partition(":")
            if nm == names[-1]:
                raise TinyolError(f"--stage-train: {nm!r} is the classifier; it always trains all "
                                  f"its parameters (its rows grow with new classes)")
            if nm not in known or (mode or "all") not in modes:
                raise TinyolError(f"--stage-train: {item!r} names no trainable layer of the stage "
                                  f"or no mode", hint=f"layers: {', '.join(known) or 'none'}; "
                                  f"modes: all, bias, frozen (e.g. {next(iter(known), 'conv3')}:all)")
            want[known[nm]] = modes[mode or "all"]
    return [dataclasses.replace(l, train=want.get(i, TRAIN_ALL)) for i, l in enumerate(layers)]


def _chain_break(model, prev, l) -> str | None:
    """Why layer ``l`` does not simply take ``prev``'s output (None: it does). A Sequential
    model is a chain by construction (a loaded one gives its layers one inbound node per
    rebuild, so tensor identity says nothing there); a Functional model is asked through its
    graph: the layer's inbound node must have ``prev`` as its only parent."""
    if model.__class__.__name__ == "Sequential":
        return None
    nodes = [n for n in getattr(l, "_inbound_nodes", []) if n.operation is l]
    if len(nodes) != 1:
        return "is called more than once (shared layer)"
    parents = getattr(nodes[0], "parent_nodes", None)
    if parents is None:  # not Keras 3's graph: the tensors tell
        return None if l.input is prev.output else f"does not take {prev.name!r}'s output"
    if len(parents) != 1:
        return f"merges {len(parents)} inputs ({', '.join(p.operation.name for p in parents)})"
    if parents[0].operation is not prev:
        return (f"takes {parents[0].operation.name!r}'s output, not {prev.name!r}'s (the layer "
                f"before it in model.layers)")
    return None


def _bn_weights(l):
    w = l.get_weights()
    n = int(l.input.shape[-1])
    names = [v.name for v in l.weights]
    get = {nm.split("/")[-1].split(":")[0]: v for nm, v in zip(names, w)}
    gamma = get.get("gamma", np.ones(n, np.float32))
    beta = get.get("beta", np.zeros(n, np.float32))
    return (np.asarray(gamma, np.float32), np.asarray(beta, np.float32),
            np.asarray(get["moving_mean"], np.float32), np.asarray(get["moving_variance"], np.float32))


def grow_rows(layers: list[Layer], params: np.ndarray, rows: int,
              keep: int | None = None) -> tuple[list[Layer], np.ndarray]:
    """The last Dense with ``rows`` outputs: the first ``keep`` exported rows, zeros after."""
    last = layers[-1]
    off = int(sum(l.n_params for l in layers[:-1]))
    W = params[off:off + last.n_weights].reshape(last.out_c, last.in_size)
    b = params[off + last.n_weights:]
    keep = last.out_c if keep is None else min(keep, last.out_c)
    W2 = np.zeros((rows, last.in_size), np.float32)
    b2 = np.zeros(rows, np.float32)
    W2[:keep], b2[:keep] = W[:keep], b[:keep]
    new_last = Layer(**{**last.__dict__, "out_c": rows})
    return layers[:-1] + [new_last], np.concatenate([params[:off], W2.ravel(), b2]).astype(np.float32)


def write_stage_init(out: Path, source: str, layers: list[Layer], params: np.ndarray) -> None:
    """stage_init.c: the layer list and the exported parameters."""
    rows = []
    for l in layers:
        rows.append("    {.kind = %d, .act = %d, .kh = %d, .kw = %d, .sh = %d, .sw = %d, .pt = %d, "
                    ".pl = %d,\n     .in_h = %d, .in_w = %d, .in_c = %d, .out_h = %d, .out_w = %d, "
                    ".out_c = %d, .train = %d, .wq = %d, .bq = %d}, /* %s */"
                    % (*l.as_tuple(), l.describe()))
    text = (banner(source)
            + "/* The adaptive stage (tol_stage.h): layers after the --split cut and their\n"
              " * exported float32 parameters, per layer W then b. */\n"
            + '#include "config.h"\n#include "tol_stage.h"\n\n'
            + f"_Static_assert(TOL_STAGE_LAYERS == {len(layers)}, \"stage_init.c vs config.h\");\n"
            + f"_Static_assert(TOL_STAGE_PARAMS == {params.size}, \"stage_init.c vs config.h\");\n\n"
            + "const tol_stage_layer_t tol_stage_layers[TOL_STAGE_LAYERS] = {\n"
            + "\n".join(rows) + "\n};\n\n"
            + "const float tol_stage_init_params[TOL_STAGE_PARAMS] = {\n"
            + float_array(params) + "};\n")
    (out / "stage_init.c").write_text(text, encoding="utf-8")


def config_lines(summary: dict) -> str:
    """The config.h block of a stage (the manifest's "stage" entry: stage_summary). Its memory
    is the learner's budget line (TOL_BUDGET_LEARNER_BYTES, host/tinyol/memory.py), which
    mcu/app/learner_stage.c asserts equal to TOL_STAGE_MEM_BYTES."""
    mem = summary["memory"]
    return ("\n/* adaptive stage (docs/adaptive.md): layers after --split, trained on the device */\n"
            f"#define TOL_STAGE_LAYERS              {len(summary['descriptors'])}\n"
            f"#define TOL_STAGE_PARAMS              {summary['params']}\n"
            f"#define TOL_STAGE_TRAINED             {summary.get('trained', summary['params'])}"
            f"  /* parameters that train (in RAM); the others stay in flash */\n"
            f"#define TOL_STAGE_HASH                0x{summary['hash']:08X}u\n"
            f"#define TOL_STAGE_MEM_BYTES           {mem['total']}  /* tol_stage_bytes(): weights "
            f"{mem['weights']}, grads {mem['grads']}, momentum {mem['momentum']}, activations "
            f"{mem['activations']}, queue {mem['queue']}, counters {mem['counters']}, replay "
            f"{mem['replay']} */\n")


def stage_summary(layers: list[Layer], mem: dict) -> dict:
    return {"layers": [l.describe() for l in layers], "descriptors": [list(l.as_tuple()) for l in layers],
            "params": mem["params"], "trained": sum(l.n_train for l in layers), "memory": {k: v for k, v in mem.items() if k != "params"},
            "hash": stage_hash(layers)}

"""Ahead-of-time C code generation for an int8 .tflite backbone.

``generate_backbone(tflite_path, out_dir, source_name)`` reads the flatbuffer
(without TensorFlow), checks every operator is one our kernels implement
bit-exactly (see mcu/include/tol_kernels.h), computes every requantization
constant on the host exactly as TFLM does at Prepare time, plans activation
memory into one static arena by tensor liveness, and writes:

  backbone.c    weights (const, flash), parameter structs, tol_backbone_invoke()
  backbone.h    sizes (TOL_BACKBONE_*), the invoke prototype
  model_data.c  the .tflite flatbuffer as `tol_model_data[]` (aligned 16)
  model_data.h

``run_tflm`` and ``tflm_arena_bytes`` drive TFLM's Python runtime (the
oracle) for tests and `tinyol verify`.
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import TinyolError
from . import tflm_int8 as T
from .cwriter import banner, int_array
from .tflite import Operator, Tensor, TfliteModel, load_model
from .tflm_int8 import mbqm, quantize_multiplier, round_half_away, w32

# Lazy on purpose: TFLM's Python runtime (run_tflm) is imported where it is used; it loads
# for seconds and generating C does not need it.

ARENA_ALIGN = 4
FC_WEIGHTS = ("int8", "int16")   # FULLY_CONNECTED weight storage: default first (smallest)

_ACTIVATIONS = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT"}
# Ops that only compute int32 shapes for a RESHAPE (Keras Flatten emits these).
_SHAPE_OPS = {"SHAPE", "STRIDED_SLICE", "PACK", "CONCATENATION", "GATHER", "SLICE", "CAST",
              "MUL", "REDUCE_PROD", "SQUEEZE", "RESHAPE", "EXPAND_DIMS", "FILL", "UNPACK"}
_ALIAS_OPS = {"RESHAPE", "SQUEEZE", "EXPAND_DIMS"}


# --------------------------------------------------------------------------- quantization

def _roundf(x: np.float32) -> int:
    """TfLiteRound on a float32 (roundf)."""
    return round_half_away(float(x))  # float(x) is exact


def activation_range(act: int, scale: float, zero_point: int) -> tuple[int, int]:
    """TFLM CalculateActivationRangeQuantized for int8 (float32 arithmetic)."""
    s = np.float32(scale)

    def quantize(f: float) -> int:
        return int(zero_point) + _roundf(np.float32(f) / s)

    name = _ACTIVATIONS.get(act, str(act))
    if name == "NONE":
        return -128, 127
    if name == "RELU":
        return max(-128, quantize(0.0)), 127
    if name == "RELU6":
        return max(-128, quantize(0.0)), min(127, quantize(6.0))
    if name == "RELU_N1_TO_1":
        return max(-128, quantize(-1.0)), min(127, quantize(1.0))
    raise ValueError(name)


def compute_padding(stride: int, dilation: int, in_size: int, k: int, out_size: int) -> int:
    """TFLM ComputePaddingWithOffset (the leading padding)."""
    eff = (k - 1) * dilation + 1
    total = max(0, (out_size - 1) * stride + eff - in_size)
    return total // 2


def compute_out_size(padding: int, in_size: int, k: int, stride: int, dilation: int) -> int:
    eff = (k - 1) * dilation + 1
    if padding == 0:  # SAME
        return (in_size + stride - 1) // stride
    return (in_size + stride - eff) // stride  # VALID


# --------------------------------------------------------------------------- result

@dataclass
class BackboneInfo:
    input_shape: tuple[int, ...]          # without batch, e.g. (8, 8, 1)
    input_scale: float
    input_zero_point: int
    latent_size: int
    latent_scale: float
    latent_zero_point: int
    arena_bytes: int                      # our static arena (activation memory)
    macs: int
    ops: list[tuple[int, str, str]] = field(default_factory=list)  # (index, opname, layer)
    weights_bytes: int = 0                # const data emitted into backbone.c
    fc_weights: str = "int8"              # FULLY_CONNECTED weight storage (FC_WEIGHTS)
    fc_shapes: list[tuple[int, int]] = field(default_factory=list)  # (out, in) of each FULLY_CONNECTED


# --------------------------------------------------------------------------- helpers

def layer_of(tensor_name: str) -> str:
    """Keras layer a TF tensor name comes from ('model/conv2d_1/Relu;...' -> 'conv2d_1')."""
    first = tensor_name.split(";")[0]
    parts = first.split("/")
    if len(parts) >= 2:
        return parts[1] if len(parts) > 2 or parts[0] else parts[-1]
    return first


def op_layer(m: TfliteModel, op: Operator) -> str:
    """Best guess of the Keras layer an operator comes from.

    TF names tensors '<model>/<layer>/<op>'; the model's output tensor is renamed
    ('StatefulPartitionedCall:0'), then the weights' name or the input's layer helps."""
    name = m.tensors[op.outputs[0]].name if op.outputs else ""
    if "/" in name:
        return layer_of(name)
    for i in op.inputs[1:]:
        if i >= 0 and m.tensors[i].is_const and "/" in m.tensors[i].name:
            return layer_of(m.tensors[i].name)
    if op.inputs and op.inputs[0] >= 0 and "/" in m.tensors[op.inputs[0]].name:
        return f"the layer after {layer_of(m.tensors[op.inputs[0]].name)}"
    return name or "?"


def describe_op(m: TfliteModel, op: Operator) -> str:
    name = m.tensors[op.outputs[0]].name if op.outputs else "?"
    return f"output tensor {name!r}, from layer {op_layer(m, op)!r}"


class _Gen:
    """Lowers a TfliteModel to C. One instance per generate_backbone() call."""

    def __init__(self, model: TfliteModel, source_name: str, fc_weights: str = "int8"):
        self.m = model
        self.source_name = source_name
        self.fc_weights = fc_weights         # FULLY_CONNECTED weights in flash: int8 or int16 (pre-widened)
        self.consts: list[str] = []        # C definitions of const arrays/structs
        self.calls: list[str] = []         # body of tol_backbone_invoke
        self.weights_bytes = 0
        self.macs = 0
        self.ops: list[tuple[int, str, str]] = []
        self.fc_shapes: list[tuple[int, int]] = []
        self.scratch: dict[int, int] = {}    # operator index -> scratch bytes (from the arena)
        self.blocks: dict[int, int] = {}     # CONV_2D with a scratch -> its output pixels (scratch_px)
        self.hint: str | None = None         # hint for refusals of the operator being lowered

    # -- errors ---------------------------------------------------------------
    def where(self, op: Operator) -> str:
        return f"at operator index {op.index} ({describe_op(self.m, op)})"

    def fail(self, op: Operator, what: str, hint: str | None = None):
        raise TinyolError(f"{what} {self.where(op)}", hint=hint or self.hint)

    # -- const arrays ---------------------------------------------------------
    def const_array(self, ctype: str, name: str, values) -> str:
        arr = np.asarray(values).reshape(-1)
        nbytes = {"int8_t": 1, "int32_t": 4, "uint32_t": 4}[ctype] * max(1, arr.size)
        self.weights_bytes += nbytes
        body = int_array(arr)
        if ctype == "uint32_t":
            body = re.sub(r"(\d+)", r"\1u", body)
        self.consts.append(f"static const {ctype} {name}[{max(1, arr.size)}] = {{\n{body}\n}};\n")
        return name


def _check_int8(gen: _Gen, op: Operator, t: Tensor, role: str):
    if t.dtype != "int8":
        gen.fail(op, f"{role} tensor {t.name!r} is {t.dtype}, only int8 is supported,")
    if t.scale.size < 1:
        gen.fail(op, f"{role} tensor {t.name!r} is not quantized,")


def _nhwc(gen: _Gen, op: Operator, t: Tensor) -> tuple[int, int, int]:
    shape = t.shape
    if len(shape) != 4:
        gen.fail(op, f"tensor {t.name!r} has shape {list(shape)}, expected [1, H, W, C],")
    if shape[0] != 1:
        gen.fail(op, f"batch size {shape[0]} != 1 in tensor {t.name!r}")
    return int(shape[1]), int(shape[2]), int(shape[3])


def _scale(t: Tensor) -> float:
    return float(np.float32(t.scale[0]))


def _zp(t: Tensor) -> int:
    return int(t.zero_point[0]) if t.zero_point.size else 0


def _activation(gen: _Gen, op: Operator, out: Tensor) -> tuple[int, int]:
    act = int(op.options.get("fusedActivationFunction", 0))
    if act not in (0, 1, 2, 3):
        gen.fail(op, f"unsupported fused activation {_ACTIVATIONS.get(act, act)}")
    return activation_range(act, _scale(out), _zp(out))


# --------------------------------------------------------------------------- generate

def _shape_only_ops(m: TfliteModel) -> set[int]:
    """Operators that only compute int32 shape tensors feeding RESHAPE's shape input."""
    consumers: dict[int, list[tuple[int, int]]] = {}
    for op in m.operators:
        for k, t in enumerate(op.inputs):
            if t >= 0:
                consumers.setdefault(t, []).append((op.index, k))
    dead: set[int] = set()
    changed = True
    while changed:
        changed = False
        for op in reversed(m.operators):
            if op.index in dead or op.opname not in _SHAPE_OPS:
                continue
            outs = [m.tensors[t] for t in op.outputs]
            if any(t.dtype not in ("int32", "int64") for t in outs):
                continue
            if any(t.index in m.outputs for t in outs):
                continue
            ok = True
            for t in op.outputs:
                for (ci, k) in consumers.get(t, []):
                    cop = m.operators[ci]
                    if ci in dead:
                        continue
                    if cop.opname in _ALIAS_OPS and k == 1:
                        continue
                    ok = False
            if ok:
                dead.add(op.index)
                changed = True
    return dead


def generate_backbone(tflite_path: str | Path, out_dir: str | Path, source_name: str,
                      fc_weights: str = "int8", conv_pixels: int = 0) -> BackboneInfo:
    """Write backbone.c/.h and model_data.c/.h for an int8 .tflite into out_dir.

    source_name is the name printed in the banner (e.g. "models/digits/backbone.tflite");
    the output bytes depend only on the model bytes, source_name and fc_weights.
    fc_weights "int16" stores FULLY_CONNECTED weights pre-widened (twice their flash,
    fewer instructions: tol_fully_connected_s8w16); "int8" (default) is the smallest.
    Raises TinyolError naming the operator index, op and layer for anything unsupported.
    """
    tflite_path = Path(tflite_path)
    out_dir = Path(out_dir)
    model = load_model(tflite_path)
    files, info = generate_sources(model, source_name, fc_weights, conv_pixels)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out_dir / name).write_bytes(text.encode("utf-8"))
    return info


def generate_sources(model: TfliteModel, source_name: str, fc_weights: str = "int8",
                     conv_pixels: int = 0) -> tuple[dict[str, str], BackboneInfo]:
    """Pure function behind generate_backbone: returns {filename: text} and the info.
    conv_pixels: 0 (default) gives each CONV_2D the largest pixel block (2-16 columns of
    scratch) that does not grow the arena; 4-16 asks for that block whatever it costs."""
    if conv_pixels and not (conv_pixels in (2, 4, 6, 8, 10, 12, 14, 16)):
        raise TinyolError(f"conv pixels {conv_pixels}: use an even number from 2 to 16 (0: automatic)")
    if fc_weights not in FC_WEIGHTS:
        raise TinyolError(f"FULLY_CONNECTED weights {fc_weights!r}: use one of {', '.join(FC_WEIGHTS)}")
    m = model
    gen = _Gen(m, source_name, fc_weights)
    if len(m.inputs) != 1 or len(m.outputs) != 1:
        raise TinyolError(f"the backbone must have one input and one output (has {len(m.inputs)} and {len(m.outputs)})")
    tin, tout = m.tensors[m.inputs[0]], m.tensors[m.outputs[0]]
    for t, role in ((tin, "input"), (tout, "output")):
        if t.dtype != "int8":
            raise TinyolError(f"model {role} tensor {t.name!r} is {t.dtype}; export with int8 input and output")
        if t.shape and t.shape[0] != 1:
            raise TinyolError(f"model {role} tensor {t.name!r} has batch size {t.shape[0]}; only batch 1 is supported")
    skip = _shape_only_ops(m)

    # storage: tensor index -> root tensor index (aliases), roots: "input"/"output"/arena
    root: dict[int, int] = {}

    def r(t: int) -> int:
        while t in root:
            t = root[t]
        return t

    # lowered steps: (op, c_call_prefix or "alias", inputs(tensor ids), output tensor id)
    steps: list[tuple[Operator, str, list[int], int]] = []
    packed: set[int] = set()  # operators whose inputs go to the kernel as one pointer array
    for op in m.operators:
        if op.index in skip:
            continue
        spec = _OPS.get(op.opname)
        if spec is None:
            gen.fail(op, f"unsupported op {op.opname}", hint=_refusal_hint(op.opname))
        gen.ops.append((op.index, op.opname, op_layer(m, op)))
        res = _lower(gen, op, spec)
        if res is None:  # alias (RESHAPE and friends)
            src = op.inputs[0]
            steps.append((op, "alias", [src], op.outputs[0]))
            continue
        call, act_inputs, is_packed = res
        if is_packed:
            packed.add(op.index)
        steps.append((op, call, act_inputs, op.outputs[0]))

    # ---- liveness & aliasing -------------------------------------------------
    ext_in, ext_out = m.inputs[0], m.outputs[0]
    copies: list[tuple[int, int, int]] = []  # (step index, src tensor, dst tensor) explicit memcpy
    for si, (op, call, ins, out) in enumerate(steps):
        if call == "alias":
            src = r(ins[0])
            if out == ext_out and src != ext_out:
                copies.append((si, ins[0], out))
            else:
                root[out] = src
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for si, (op, call, ins, out) in enumerate(steps):
        for t in ins:
            last[r(t)] = si
        o = r(out)
        first.setdefault(o, si)
        last[o] = max(last.get(o, si), si)
    buffers: list = [b for b in first if b not in (ext_in, ext_out)]
    sizes = {b: m.tensors[b].size for b in buffers}
    for si, (op, call, ins, out) in enumerate(steps):
        if gen.scratch.get(op.index):
            key = ("scratch", op.index)  # lives during its operator only
            buffers.append(key)
            sizes[key] = gen.scratch[op.index]
            first[key] = last[key] = si

    def place(sizes):
        """Greedy by size (TFLM's GreedyMemoryPlanner strategy): biggest first, lowest fitting offset."""
        order = sorted(buffers, key=lambda b: (-sizes[b], first[b], str(b)))
        placed: list[tuple[int, int, int, int]] = []  # (offset, size, first, last)
        offsets: dict[int, int] = {}
        for b in order:
            conflicts = sorted((o, s) for (o, s, f, l) in placed if not (l < first[b] or last[b] < f))
            off = 0
            for (o, s) in conflicts:
                if off + sizes[b] <= o:
                    break
                off = max(off, (o + s + ARENA_ALIGN - 1) // ARENA_ALIGN * ARENA_ALIGN)
            offsets[b] = off
            placed.append((off, sizes[b], first[b], last[b]))
        arena = max([o + s for (o, s, f, l) in placed], default=0)
        return offsets, (arena + ARENA_ALIGN - 1) // ARENA_ALIGN * ARENA_ALIGN

    offsets, arena = place(sizes)
    # CONV_2D pixel blocks (scratch_px, docs/kernels.md): a scratch of up to 16 pixel columns
    # instead of 2 wherever the larger one leaves the arena as small as it was (free speed:
    # each filter pair is read from flash once per block); conv_pixels > 2 asks for that many
    # whatever the arena becomes (RAM for speed, the arena the memory model prints).
    px_of: dict[int, int] = {}
    for idx in sorted(gen.blocks):
        npx = gen.blocks[idx] + (gen.blocks[idx] & 1)
        wanted = (conv_pixels,) if conv_pixels > 2 else () if conv_pixels == 2 else (16, 8, 4)
        for n in sorted({min(c, npx) for c in wanted if min(c, npx) >= 4}, reverse=True):
            trial = dict(sizes)
            trial[("scratch", idx)] = gen.scratch[idx] * (n // 2)
            o2, a2 = place(trial)
            if a2 <= arena or conv_pixels > 2:
                sizes, offsets, arena, px_of[idx] = trial, o2, a2, n
                break

    def ptr(t: int, const: bool) -> str:
        b = r(t)
        if b == ext_in:
            return "input"
        if b == ext_out:
            return "latent"
        return f"&tol_arena[{offsets[b]}]"

    body = []
    copy_at = {si: (s, d) for (si, s, d) in copies}
    for si, (op, call, ins, out) in enumerate(steps):
        layer = op_layer(m, op)
        if call == "alias":
            if si in copy_at:
                s, d = copy_at[si]
                body.append(f"    /* {op.index}: {op.opname} ({layer}) */\n"
                            f"    memcpy({ptr(d, False)}, {ptr(s, True)}, {m.tensors[d].size}u);\n")
            else:
                body.append(f"    /* {op.index}: {op.opname} ({layer}): aliases its input */\n")
            continue
        if op.index in packed:
            args = "(const int8_t *const[]){" + ", ".join(ptr(t, True) for t in ins) + "}, " + ptr(out, False)
        else:
            args = ", ".join([ptr(t, True) for t in ins] + [ptr(out, False)])
        body.append(f"    /* {op.index}: {op.opname} ({layer}) */\n    {call}{args});\n")

    for i, text in enumerate(gen.consts):  # scratch addresses are known now
        if "@SCRATCH@" in text:
            idx = int(text.split("tol_conv_params_t op", 1)[1].split(" ", 1)[0])
            text = text.replace("@SCRATCH@", f"&tol_arena[{offsets[('scratch', idx)]}]")
            if idx in px_of:
                text = text.replace(",\n};", f", .scratch_px = {px_of[idx]},\n}};", 1)
            gen.consts[i] = text

    info = BackboneInfo(
        input_shape=tuple(int(d) for d in tin.shape[1:]),
        input_scale=_scale(tin), input_zero_point=_zp(tin),
        latent_size=tout.size, latent_scale=_scale(tout), latent_zero_point=_zp(tout),
        arena_bytes=arena, macs=gen.macs, ops=gen.ops, weights_bytes=gen.weights_bytes,
        fc_weights=fc_weights, fc_shapes=gen.fc_shapes,
    )
    files = {
        "backbone.h": _backbone_h(source_name, info, tin),
        "backbone.c": _backbone_c(source_name, gen, body, info),
        "model_data.c": _model_data_c(source_name, m.raw),
        "model_data.h": _model_data_h(source_name, len(m.raw)),
    }
    return files, info


# --------------------------------------------------------------------------- op lowering
# One table (_OPS, at the end of this section) maps each TFLite builtin to an OpSpec:
# the C kernel, its parameter struct and a function that checks the operator and returns
# the struct's fields (emitting any const arrays first). _lower() does what every op shares:
# the int8 checks on its activation input and output, the equal-quantization check where
# TFLM requires it, and the struct emission. A new op is one entry plus its kernel.

Fields = list[list[tuple[str, object]]]   # params struct fields, one inner list per source line


@dataclass
class Lowered:
    fields: Fields
    inputs: list[int]                   # activation tensors passed to the kernel, in order
    kernel: str | None = None           # overrides OpSpec.kernel
    params_type: str | None = None      # overrides OpSpec.params_type
    packed: bool = False                # inputs passed as one array (const int8_t *const[])


@dataclass(frozen=True)
class OpSpec:
    kernel: str | None                  # C function; None: a pure alias (RESHAPE and friends)
    params_type: str | None             # C struct the kernel takes first
    lower: Callable[["_Gen", Operator, Tensor, Tensor], Lowered | None]
    hint: str                           # printed when this op's configuration is refused
    same_quant: bool = False            # input and output must share scale and zero point
    int8_input: bool = True             # check that the first input is quantized int8


def _params_struct(ptype: str, name: str, fields: Fields) -> str:
    lines = "".join("    " + ", ".join(f".{k} = {v}" for k, v in line) + ",\n" for line in fields)
    return f"static const {ptype} {name} = {{\n{lines}}};\n"


def _lower(gen: _Gen, op: Operator, spec: OpSpec):
    """(c call prefix, activation inputs, packed) for one operator, or None for an alias."""
    m = gen.m
    x, y = m.tensors[op.inputs[0]], m.tensors[op.outputs[0]]
    gen.hint = spec.hint
    if spec.int8_input:
        _check_int8(gen, op, x, "input")
    _check_int8(gen, op, y, "output")
    if spec.same_quant:
        _same_quant(gen, op, x, y)
    low = spec.lower(gen, op, x, y)
    if low is None or spec.kernel is None:
        return None
    n = f"op{op.index}"
    gen.consts.append(_params_struct(low.params_type or spec.params_type, n, low.fields))
    return f"{low.kernel or spec.kernel}(&{n}, ", low.inputs, low.packed


def _conv_col_bytes(window: int) -> int:
    """Bytes of a 2-pixel im2col scratch for a window of `window` values (TOL_CONV2D_SCRATCH_BYTES)."""
    return 4 * ((window + 3) // 4 * 4)


# windows whose 2-pixel columns the SIMD CONV_2D builds on its own stack when it has no scratch
_CONV_STACK_COL_BYTES = 256   # mcu/src/kernels/simd/tol_conv.c TOL_CONV_STACK_COL_BYTES


def _use_scratch(depthwise: bool, ic: int, oc: int) -> bool:
    """Give CONV_2D the 2-pixel im2col scratch (faster SIMD path) when it pays off:
    channels in whole words, or enough filters to amortize a scalar im2col
    (measured on Cortex-M4: 8x8x1 -> 16 filters is faster without)."""
    return not depthwise and (ic % 4 == 0 or oc >= 32)


def _per_channel_requant(gen: _Gen, op: Operator, x: Tensor, w: Tensor, y: Tensor, oc: int, what: str):
    in_s, out_s = _scale(x), _scale(y)
    fs = [float(np.float32(s)) for s in w.scale]
    if len(fs) not in (1, oc):
        gen.fail(op, f"{what} {len(fs)} scales for {oc} {'channels' if what.startswith('filter') else 'outputs'}")
    mults, shifts = [], []
    for c in range(oc):
        mq, sq = quantize_multiplier(float(in_s) * fs[c if len(fs) > 1 else 0] / float(out_s))
        mults.append(mq)
        shifts.append(sq)
    return mults, shifts


def _conv_common(gen: _Gen, op: Operator, x: Tensor, y: Tensor, depthwise: bool) -> Lowered:
    m = gen.m
    w = m.tensors[op.inputs[1]]
    b = m.tensors[op.inputs[2]] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
    if w.dtype != "int8" or w.data is None:
        gen.fail(op, f"filter {w.name!r} must be a constant int8 tensor,")
    if np.any(w.zero_point != 0):
        gen.fail(op, "filter zero point != 0 is not supported")
    if b is not None and (b.dtype != "int32" or b.data is None):
        gen.fail(op, f"bias {b.name!r} must be a constant int32 tensor (16x8 models are not supported),")
    ih, iw, ic = _nhwc(gen, op, x)
    oh, ow, oc = _nhwc(gen, op, y)
    if depthwise:
        _, kh, kw, wc = w.shape
        if wc != oc or oc % ic:
            gen.fail(op, f"depthwise filter shape {list(w.shape)} does not match input {ic} / output {oc} channels")
        dm = oc // ic
        wdata = w.data.reshape(kh, kw, oc)
    else:
        wo, kh, kw, wi = w.shape
        if wi != ic:
            gen.fail(op, f"grouped convolution (filter depth {wi} != input channels {ic}) is not supported")
        if wo != oc:
            gen.fail(op, "filter count does not match output channels")
        dm = 1
        wdata = w.data
    o = op.options
    sh, sw = int(o.get("strideH", 1)), int(o.get("strideW", 1))
    dh, dw = int(o.get("dilationHFactor", 1)), int(o.get("dilationWFactor", 1))
    padding = int(o.get("padding", 0))
    for (i, k, s, d, out) in ((ih, kh, sh, dh, oh), (iw, kw, sw, dw, ow)):
        if compute_out_size(padding, i, k, s, d) != out:
            gen.fail(op, "output shape does not match padding/stride")
    pt = compute_padding(sh, dh, ih, kh, oh)
    pl = compute_padding(sw, dw, iw, kw, ow)
    mults, shifts = _per_channel_requant(gen, op, x, w, y, oc, "filter has")
    amin, amax = _activation(gen, op, y)
    n = f"op{op.index}"
    gen.const_array("int8_t", f"{n}_w", wdata)
    if b is not None:
        gen.const_array("int32_t", f"{n}_b", b.data)
    gen.const_array("int32_t", f"{n}_m", mults)
    gen.const_array("int32_t", f"{n}_s", shifts)
    scratch = _use_scratch(depthwise, ic, oc)
    if scratch:
        gen.scratch[op.index] = _conv_col_bytes(kh * kw * ic)
        gen.blocks[op.index] = oh * ow
    gen.macs += oh * ow * oc * kh * kw * (1 if depthwise else ic)
    return Lowered([
        [("in_h", ih), ("in_w", iw), ("in_c", ic)],
        [("out_h", oh), ("out_w", ow), ("out_c", oc)],
        [("k_h", kh), ("k_w", kw), ("stride_h", sh), ("stride_w", sw)],
        [("dil_h", dh), ("dil_w", dw), ("pad_top", pt), ("pad_left", pl)],
        [("depth_mult", dm)],
        [("input_offset", -_zp(x)), ("output_offset", _zp(y)), ("act_min", amin), ("act_max", amax)],
        [("weights", f"{n}_w"), ("bias", f"{n}_b" if b is not None else "NULL")],
        [("out_mult", f"{n}_m"), ("out_shift", f"{n}_s")] + ([("scratch", "@SCRATCH@")] if scratch else []),
    ], [op.inputs[0]])


def _lower_conv(gen, op, x, y):
    return _conv_common(gen, op, x, y, False)


def _lower_dwconv(gen, op, x, y):
    low = _conv_common(gen, op, x, y, True)
    if _nhwc(gen, op, x)[2] == 1 and _nhwc(gen, op, y)[2] > 1:
        return _dwconv_as_conv(gen, op, low)
    return low


def _dwconv_as_conv(gen: _Gen, op: Operator, low: Lowered) -> Lowered:
    """A depthwise convolution of one input channel (depth multiplier = output channels, e.g.
    micro_speech's first layer) is a CONV_2D with in_c = 1: the same sums in the same order, the
    same per-channel requantization. Its filter [1][kh][kw][oc] is stored transposed, as CONV_2D's
    [oc][kh][kw][1], so the convolution kernel runs one dot product per kernel row instead of
    one tap per channel."""
    n = f"op{op.index}"
    w = gen.m.tensors[op.inputs[1]]
    _, kh, kw, oc = w.shape
    name = f"{n}_w"
    k = next(i for i, c in enumerate(gen.consts) if f" {name}[" in c)
    conv_w = np.ascontiguousarray(w.data.reshape(kh, kw, oc).transpose(2, 0, 1))
    gen.const_array("int8_t", name, conv_w)
    gen.consts[k] = gen.consts.pop()          # in place of the depthwise layout, same size
    gen.weights_bytes -= conv_w.size
    fields = [[(f, 1) if f == "depth_mult" else (f, v) for f, v in grp] for grp in low.fields]
    # a scratch whenever the kernel builds im2col columns anyway (on its stack, two pixels at a time,
    # when they fit _CONV_STACK_COL_BYTES: windows of up to 64 values): in the arena it takes pixel
    # blocks, each filter pair read from flash once per block. person_detect's 3x3 x 8 first layer: 2.57 M -> 2.27 M
    # estimated cycles on the L4R5ZI (1.05x -> 0.93x of CMSIS-NN), the arena unchanged
    # (docs/benchmarks-cycles.md)
    col = _conv_col_bytes(kh * kw)
    if _use_scratch(False, 1, oc) or col <= _CONV_STACK_COL_BYTES:
        gen.scratch[op.index] = col
        oh, ow, _ = _nhwc(gen, op, gen.m.tensors[op.outputs[0]])
        gen.blocks[op.index] = oh * ow
        fields[-1] = fields[-1] + [("scratch", "@SCRATCH@")]
    return Lowered(fields, low.inputs, kernel="tol_conv2d_s8")


def _lower_fc(gen: _Gen, op: Operator, x: Tensor, y: Tensor) -> Lowered:
    m = gen.m
    w = m.tensors[op.inputs[1]]
    b = m.tensors[op.inputs[2]] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
    if w.dtype != "int8" or w.data is None:
        gen.fail(op, f"weights {w.name!r} must be a constant int8 tensor,")
    if np.any(w.zero_point != 0):
        gen.fail(op, "weight zero point != 0 is not supported")
    if b is not None and (b.dtype != "int32" or b.data is None):
        gen.fail(op, f"bias {b.name!r} must be a constant int32 tensor,")
    if int(op.options.get("weightsFormat", 0)) != 0:
        gen.fail(op, "shuffled FULLY_CONNECTED weights are not supported")
    out_f, in_f = int(w.shape[0]), int(w.shape[1])
    if x.size % in_f:
        gen.fail(op, "input size is not a multiple of the weight depth")
    rows = x.size // in_f
    if rows != 1 and y.shape and y.shape[0] != 1 and len(y.shape) == 2:
        gen.fail(op, f"batch size {y.shape[0]} != 1")
    mults, shifts = _per_channel_requant(gen, op, x, w, y, out_f, "weights have")
    amin, amax = _activation(gen, op, y)
    n = f"op{op.index}"
    wide = gen.fc_weights == "int16"
    if wide:
        gen.const_array("uint32_t", f"{n}_w", fc16_weight_words(w.data.reshape(out_f, in_f)))
    else:
        gen.const_array("int8_t", f"{n}_w", w.data)
    if b is not None:
        gen.const_array("int32_t", f"{n}_b", b.data)
    gen.const_array("int32_t", f"{n}_m", mults)
    gen.const_array("int32_t", f"{n}_s", shifts)
    gen.macs += rows * in_f * out_f
    gen.fc_shapes.append((out_f, in_f))
    return Lowered([
        [("rows", rows), ("in_features", in_f), ("out_features", out_f)],
        [("input_offset", -_zp(x)), ("output_offset", _zp(y)), ("act_min", amin), ("act_max", amax)],
        [("weights", f"{n}_w"), ("bias", f"{n}_b" if b is not None else "NULL")],
        [("out_mult", f"{n}_m"), ("out_shift", f"{n}_s")],
    ], [op.inputs[0]], kernel="tol_fully_connected_s8w16" if wide else None,
        params_type="tol_fc16_params_t" if wide else None)


def fc16_weight_words(w: np.ndarray) -> np.ndarray:
    """int8 weights [out][in] -> uint32 words of tol_fc16_params_t's blocked int16 layout
    (mcu/include/tol_kernels.h): blocks of 4 rows, per group of 4 inputs each row's
    values in SXTAB16 lane order (0, 2, 1, 3), the depth tail interleaved by row;
    remaining rows one by one, their tail values each padded with a zero half."""
    w = np.asarray(w, dtype=np.int64)
    out_f, in_f = w.shape
    g4 = in_f // 4 * 4
    lanes = [0, 2, 1, 3]
    halves: list[np.ndarray] = []
    full = out_f // 4 * 4
    for o0 in range(0, full, 4):
        blk = w[o0:o0 + 4]
        grouped = blk[:, :g4].reshape(4, g4 // 4, 4)[:, :, lanes]          # [row][group][lane]
        halves.append(grouped.transpose(1, 0, 2).reshape(-1))          # group-major, then row
        halves.append(blk[:, g4:].T.reshape(-1))                       # tail: per input, rows 0..3
    for o in range(full, out_f):
        halves.append(w[o, :g4].reshape(g4 // 4, 4)[:, lanes].reshape(-1))
        tail = w[o, g4:]
        halves.append(np.stack([tail, np.zeros_like(tail)], axis=1).reshape(-1))
    h = (np.concatenate(halves) if halves else np.zeros(0, np.int64)) & 0xFFFF
    assert h.size % 2 == 0
    return (h[0::2] | (h[1::2] << 16)).astype(np.uint64)


def _same_quant(gen: _Gen, op: Operator, x: Tensor, y: Tensor):
    if _scale(x) != _scale(y) or _zp(x) != _zp(y):
        gen.fail(op, f"{op.opname} with different input/output quantization is not supported")


def _lower_pool(gen: _Gen, op: Operator, x: Tensor, y: Tensor) -> Lowered:
    ih, iw, c = _nhwc(gen, op, x)
    oh, ow, oc = _nhwc(gen, op, y)
    o = op.options
    kh, kw = int(o["filterHeight"]), int(o["filterWidth"])
    sh, sw = int(o["strideH"]), int(o["strideW"])
    padding = int(o.get("padding", 0))
    for (i, k, s, out) in ((ih, kh, sh, oh), (iw, kw, sw, ow)):
        if compute_out_size(padding, i, k, s, 1) != out:
            gen.fail(op, "output shape does not match padding/stride")
    pt, pl = compute_padding(sh, 1, ih, kh, oh), compute_padding(sw, 1, iw, kw, ow)
    amin, amax = _activation(gen, op, y)
    return Lowered([
        [("in_h", ih), ("in_w", iw), ("c", c), ("out_h", oh), ("out_w", ow)],
        [("k_h", kh), ("k_w", kw), ("stride_h", sh), ("stride_w", sw)],
        [("pad_top", pt), ("pad_left", pl), ("act_min", amin), ("act_max", amax)],
    ], [op.inputs[0]])


def _reduce_geometry(gen: _Gen, op: Operator, x: Tensor) -> tuple[int, int, int, list[int]]:
    """(outer, n, inner, axes) of a reduction over contiguous axes of x."""
    ax = gen.m.tensors[op.inputs[1]]
    shape = [int(d) for d in x.shape]
    if ax.data is None:
        gen.fail(op, f"{op.opname} with non-constant axes is not supported")
    if not shape or shape[0] != 1:
        gen.fail(op, f"tensor {x.name!r} has shape {shape}; only batch 1 is supported")
    axes = sorted({int(a) % len(shape) for a in np.asarray(ax.data).reshape(-1)})
    if not axes or axes[0] == 0:
        gen.fail(op, f"{op.opname} over the batch axis is not supported")
    if axes != list(range(axes[0], axes[-1] + 1)):
        gen.fail(op, f"{op.opname} over non-adjacent axes {axes} is not supported")
    outer = int(np.prod(shape[:axes[0]]))
    n = int(np.prod(shape[axes[0]:axes[-1] + 1]))
    inner = int(np.prod(shape[axes[-1] + 1:]))
    return outer, n, inner, axes


def _lower_mean(gen: _Gen, op: Operator, x: Tensor, y: Tensor) -> Lowered:
    outer, n_el, inner, axes = _reduce_geometry(gen, op, x)
    if y.size != outer * inner:
        gen.fail(op, "MEAN output size mismatch")
    in_s, out_s = np.float32(x.scale[0]), np.float32(y.scale[0])
    # TFLM's int8 MEAN always rescales (QuantizedMeanOrSum), also when input and output share
    # their quantization: a truncating integer mean differs by 1 LSB (checked against the runtime).
    requant = True
    mult, shift = quantize_multiplier(float(in_s) / float(out_s))
    # TFLM reference_ops::QuantizedMeanOrSum folds 1/n into the multiplier:
    s = min(n_el.bit_length() - 1, 32, 31 + shift)
    mult, shift = int((mult << s) // n_el), shift - s
    quant = [("input_zp", _zp(x)), ("output_zp", _zp(y)), ("mult", mult), ("shift", shift)]
    if outer == 1:  # GlobalAveragePooling1D/2D: the [h*w][c] kernel
        h, w = (x.shape[1], x.shape[2]) if len(x.shape) == 4 and axes == [1, 2] else (n_el, 1)
        return Lowered([[("h", h), ("w", w), ("c", inner), ("requant", int(requant))], quant],
                       [op.inputs[0]], kernel="tol_mean_hw_s8", params_type="tol_mean_params_t")
    return Lowered([[("outer", outer), ("n", n_el), ("inner", inner), ("requant", int(requant))], quant],
                   [op.inputs[0]])


def _lower_reduce_max(gen: _Gen, op: Operator, x: Tensor, y: Tensor) -> Lowered:
    outer, n_el, inner, _ = _reduce_geometry(gen, op, x)
    if y.size != outer * inner:
        gen.fail(op, "REDUCE_MAX output size mismatch")
    return Lowered([[("outer", outer), ("n", n_el), ("inner", inner)]], [op.inputs[0]])


def _const_operand(gen: _Gen, op: Operator) -> tuple[Tensor, Tensor, int]:
    """(activation input, constant input, index of the constant) of a binary op with one constant."""
    m = gen.m
    a, b = m.tensors[op.inputs[0]], m.tensors[op.inputs[1]]
    if a.is_const and b.is_const:
        gen.fail(op, f"{op.opname} of two constants is not supported")
    x, c, ci = (b, a, 0) if a.is_const else (a, b, 1)
    _check_int8(gen, op, c, "constant")
    y = m.tensors[op.outputs[0]]
    cs = list(c.shape)
    while cs and cs[0] == 1:
        cs.pop(0)
    xs = list(x.shape)
    if list(y.shape) != xs or (cs and xs[len(xs) - len(cs):] != cs):
        gen.fail(op, f"{op.opname} broadcasting {list(a.shape)} with {list(b.shape)} is not supported "
                     "(a constant per channel or a scalar is)")
    return x, c, ci


def _lower_mul(gen: _Gen, op: Operator, x0: Tensor, y: Tensor) -> Lowered:
    m = gen.m
    if not (m.tensors[op.inputs[0]].is_const or m.tensors[op.inputs[1]].is_const):
        gen.fail(op, "MUL of two activations is not supported (a constant operand is)")
    x, c, _ = _const_operand(gen, op)
    _check_int8(gen, op, x, "input")
    mult, shift = quantize_multiplier(float(np.float32(x.scale[0])) * float(np.float32(c.scale[0]))
                                      / float(np.float32(y.scale[0])))
    amin, amax = _activation(gen, op, y)
    n = f"op{op.index}"
    factor = np.asarray(c.data, np.int64).reshape(-1) - _zp(c)
    gen.const_array("int32_t", f"{n}_f", factor)
    return Lowered([
        [("size", y.size), ("period", factor.size), ("input_offset", -_zp(x)), ("factor", f"{n}_f")],
        [("out_mult", mult), ("out_shift", shift), ("output_offset", _zp(y))],
        [("act_min", amin), ("act_max", amax)],
    ], [x.index])


def _lower_add(gen: _Gen, op: Operator, x0: Tensor, y: Tensor) -> Lowered:
    m = gen.m
    a, b = m.tensors[op.inputs[0]], m.tensors[op.inputs[1]]
    sub = op.opname == "SUB"
    if a.is_const or b.is_const:
        return _lower_add_const(gen, op, y, sub)
    if sub:
        gen.fail(op, "SUB of two activations is not supported (a constant operand is)")
    _check_int8(gen, op, b, "input")
    if a.shape != b.shape or a.size != y.size:
        gen.fail(op, f"ADD with broadcasting ({list(a.shape)} + {list(b.shape)}) is not supported")
    left_shift = 20
    sa, sb, so = float(np.float32(a.scale[0])), float(np.float32(b.scale[0])), float(np.float32(y.scale[0]))
    twice_max = 2.0 * max(sa, sb)
    m1, s1 = quantize_multiplier(sa / twice_max)
    m2, s2 = quantize_multiplier(sb / twice_max)
    mo, so_ = quantize_multiplier(twice_max / ((1 << left_shift) * so))
    amin, amax = _activation(gen, op, y)
    return Lowered([
        [("size", y.size), ("in1_offset", -_zp(a)), ("in2_offset", -_zp(b)), ("left_shift", left_shift)],
        [("in1_mult", m1), ("in1_shift", s1), ("in2_mult", m2), ("in2_shift", s2)],
        [("out_mult", mo), ("out_shift", so_), ("output_offset", _zp(y))],
        [("act_min", amin), ("act_max", amax)],
    ], [op.inputs[0], op.inputs[1]])


def _lower_add_const(gen: _Gen, op: Operator, y: Tensor, sub: bool) -> Lowered:
    """ADD/SUB with a constant: TFLM's Add/Sub arithmetic with the constant's term precomputed."""
    x, c, ci = _const_operand(gen, op)
    _check_int8(gen, op, x, "input")
    if sub and ci == 0:
        gen.fail(op, "SUB of an activation from a constant is not supported (activation - constant is)")
    left_shift = 20
    sx, sc, so = np.float32(x.scale[0]), np.float32(c.scale[0]), np.float32(y.scale[0])
    if sub:  # sub_common.cc computes its multipliers in float32
        twice = np.float32(2) * max(sx, sc)
        mx, shx = quantize_multiplier(float(np.float32(sx / twice)))
        mc, shc = quantize_multiplier(float(np.float32(sc / twice)))
        mo, sho = quantize_multiplier(float(np.float32(twice / (np.float32(1 << left_shift) * so))))
    else:  # add_common.cc: double
        twice = 2.0 * max(float(sx), float(sc))
        mx, shx = quantize_multiplier(float(sx) / twice)
        mc, shc = quantize_multiplier(float(sc) / twice)
        mo, sho = quantize_multiplier(twice / ((1 << left_shift) * float(so)))
    cq = np.asarray(c.data, np.int64).reshape(-1) - _zp(c)
    addend = [mbqm(w32(int(v) << left_shift), mc, shc) for v in cq]
    if sub:
        addend = [-v for v in addend]
    amin, amax = _activation(gen, op, y)
    n = f"op{op.index}"
    gen.const_array("int32_t", f"{n}_a", addend)
    return Lowered([
        [("size", y.size), ("period", len(addend)), ("input_offset", -_zp(x)), ("left_shift", left_shift)],
        [("in_mult", mx), ("in_shift", shx), ("addend", f"{n}_a")],
        [("out_mult", mo), ("out_shift", sho), ("output_offset", _zp(y))],
        [("act_min", amin), ("act_max", amax)],
    ], [x.index], kernel="tol_add_const_s8", params_type="tol_add_const_params_t")


def _lower_pad(gen: _Gen, op: Operator, x: Tensor, y: Tensor) -> Lowered:
    m = gen.m
    pads = m.tensors[op.inputs[1]]
    ih, iw, c = _nhwc(gen, op, x)
    oh, ow, oc = _nhwc(gen, op, y)
    if pads.data is None:
        gen.fail(op, "PAD with non-constant paddings is not supported")
    p = np.asarray(pads.data).reshape(-1, 2)
    if p.shape[0] != 4 or p[0].any() or p[3].any():
        gen.fail(op, "PAD is supported on H and W only")
    value = _zp(y)
    if op.opname == "PADV2" and len(op.inputs) > 2 and op.inputs[2] >= 0:
        cv = m.tensors[op.inputs[2]]
        if cv.data is None:
            gen.fail(op, "PADV2 with a non-constant pad value is not supported")
        value = int(np.asarray(cv.data).reshape(-1)[0])
    _same_quant(gen, op, x, y)
    return Lowered([
        [("in_h", ih), ("in_w", iw), ("c", c), ("out_h", oh), ("out_w", ow)],
        [("pad_top", int(p[1][0])), ("pad_left", int(p[2][0])), ("pad_value", value)],
    ], [op.inputs[0]])


def _lower_requant(gen: _Gen, op: Operator, x: Tensor, y: Tensor) -> Lowered:
    mq, sq = quantize_multiplier(float(np.float32(x.scale[0])) / float(np.float32(y.scale[0])))
    in_zp, out_zp = _zp(x), _zp(y)
    if op.opname == "QUANTIZE":
        amin, amax = -128, 127
    elif op.opname == "RELU6":
        # TFLM's int8 RELU6 clamps in the input's quantization and ignores the output's:
        # out = clamp(in, in_zp, FloatToQuantizedType(6, in_scale, in_zp)).
        mq, sq, in_zp, out_zp = 1 << 30, 1, 0, 0  # identity requantization
        amin = _zp(x)
        amax = max(-128, min(127, _roundf(np.float32(6.0) / np.float32(x.scale[0])) + _zp(x)))
    else:
        s, zp = np.float32(y.scale[0]), _zp(y)
        amin = max(-128, zp + _roundf(np.float32(0.0) / s))
        amax = 127 if op.opname == "RELU" else min(127, zp + _roundf(np.float32(6.0) / s))
    return Lowered([
        [("size", y.size), ("input_zp", in_zp), ("mult", mq), ("shift", sq)],
        [("output_zp", out_zp), ("act_min", amin), ("act_max", amax)],
    ], [op.inputs[0]])


def _lower_lut(gen: _Gen, op: Operator, x: Tensor, y: Tensor) -> Lowered:
    """LOGISTIC, TANH, LEAKY_RELU, HARD_SWISH: TFLM's integer kernel tabulated over the input byte."""
    if x.size != y.size:
        gen.fail(op, "input and output sizes differ")
    sx, zx, sy, zy = _scale(x), _zp(x), _scale(y), _zp(y)
    try:
        if op.opname == "LOGISTIC":
            if zy != -128:
                gen.fail(op, f"LOGISTIC output zero point {zy} != -128 (TFLM requires -128),")
            table = T.logistic_table(sx, zx)
        elif op.opname == "TANH":
            table = T.tanh_table(sx, zx)
        elif op.opname == "LEAKY_RELU":
            table = T.leaky_relu_table(sx, zx, sy, zy, float(np.float32(op.options.get("alpha", 0.2))))
        else:
            table = T.hard_swish_table(sx, zx, sy, zy)
    except T.Unsupported as e:
        gen.fail(op, f"{e};")
    n = f"op{op.index}"
    gen.const_array("int8_t", f"{n}_lut", table)
    return Lowered([[("size", y.size), ("table", f"{n}_lut")]], [op.inputs[0]])


def _lower_softmax(gen: _Gen, op: Operator, x: Tensor, y: Tensor) -> Lowered:
    if _zp(y) != -128 or np.float32(y.scale[0]) != np.float32(1.0 / 256):
        gen.fail(op, "SOFTMAX output must have scale 1/256 and zero point -128 (as TFLM requires),")
    if x.size != y.size or not x.shape:
        gen.fail(op, "SOFTMAX input and output shapes differ")
    depth = int(x.shape[-1])
    if depth > 511:  # the Q12.19 sum must stay < 2^28: TFLM checks its output shift <= 31
        gen.fail(op, f"SOFTMAX over {depth} values is not supported (at most 511)")
    try:
        table = T.softmax_exp_table(_scale(x), float(np.float32(op.options.get("beta", 1.0))))
    except T.Unsupported as e:
        gen.fail(op, f"{e};")
    n = f"op{op.index}"
    gen.const_array("int32_t", f"{n}_exp", table)
    return Lowered([[("rows", x.size // depth), ("depth", depth), ("exp_table", f"{n}_exp")]], [op.inputs[0]])


def _lower_concat(gen: _Gen, op: Operator, x: Tensor, y: Tensor) -> Lowered:
    m = gen.m
    ins = [m.tensors[i] for i in op.inputs]
    rank = len(y.shape)
    axis = int(op.options.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    if int(op.options.get("fusedActivationFunction", 0)) != 0:
        gen.fail(op, "CONCATENATION with a fused activation is not supported")
    for t in ins:
        if t.is_const:
            gen.fail(op, f"CONCATENATION of the constant {t.name!r} is not supported")
        _check_int8(gen, op, t, "input")
        _same_quant(gen, op, t, y)
        if len(t.shape) != rank:
            gen.fail(op, "CONCATENATION inputs of different ranks")
    if not 0 < axis < rank:
        gen.fail(op, f"CONCATENATION along axis {axis} is not supported")
    outer = int(np.prod(y.shape[:axis]))
    inner = [int(np.prod(t.shape[axis:])) for t in ins]
    if sum(inner) * outer != y.size:
        gen.fail(op, "CONCATENATION shapes do not add up")
    n = f"op{op.index}"
    gen.const_array("int32_t", f"{n}_in", inner)
    return Lowered([[("outer", outer), ("n_inputs", len(ins)), ("inner", f"{n}_in")]], list(op.inputs),
                   packed=True)


def _lower_alias(gen: _Gen, op: Operator, x: Tensor, y: Tensor):
    if x.size != y.size:
        gen.fail(op, "reshape changes the element count")
    return None


_H_CONV = "use Conv1D/Conv2D with int8 weights (per-channel), dilation 1, and relu/relu6 or no activation"
_H_ACT = ("fused activations other than relu/relu6 are not supported: put tanh/sigmoid/leaky_relu/hard_swish "
          "in their own Activation layer, or use relu in the backbone")
_H_QUANT = "the converter gave this op a quantization TFLM's int8 kernel refuses; use relu in the backbone"

_OPS: dict[str, OpSpec] = {
    "CONV_2D": OpSpec("tol_conv2d_s8", "tol_conv_params_t", _lower_conv, _H_CONV),
    "DEPTHWISE_CONV_2D": OpSpec("tol_depthwise_conv2d_s8", "tol_conv_params_t", _lower_dwconv, _H_CONV),
    "FULLY_CONNECTED": OpSpec("tol_fully_connected_s8", "tol_fc_params_t", _lower_fc,
                              "use Dense layers with int8 weights and relu/relu6 or no activation"),
    "AVERAGE_POOL_2D": OpSpec("tol_avgpool2d_s8", "tol_pool_params_t", _lower_pool,
                              "use AveragePooling1D/2D with the same quantization in and out", same_quant=True),
    "MAX_POOL_2D": OpSpec("tol_maxpool2d_s8", "tol_pool_params_t", _lower_pool,
                          "use MaxPooling1D/2D with the same quantization in and out", same_quant=True),
    "MEAN": OpSpec("tol_mean_s8", "tol_reduce_params_t", _lower_mean,
                   "average over adjacent axes (GlobalAveragePooling1D/2D, or a mean over one axis)"),
    "REDUCE_MAX": OpSpec("tol_reduce_max_s8", "tol_reduce_params_t", _lower_reduce_max,
                         "take the max over adjacent axes (GlobalMaxPooling1D/2D)", same_quant=True),
    "ADD": OpSpec("tol_add_s8", "tol_add_params_t", _lower_add,
                  "Add two same-shape tensors, or add a per-channel constant (BatchNormalization, Normalization)"),
    "SUB": OpSpec("tol_add_const_s8", "tol_add_const_params_t", _lower_add,
                  "subtract a per-channel constant only (put a Normalization layer first)"),
    "MUL": OpSpec("tol_mul_const_s8", "tol_mul_const_params_t", _lower_mul,
                  "multiply by a per-channel constant only (BatchNormalization, Normalization, Rescaling)"),
    "PAD": OpSpec("tol_pad_s8", "tol_pad_params_t", _lower_pad, "use ZeroPadding1D/2D"),
    "PADV2": OpSpec("tol_pad_s8", "tol_pad_params_t", _lower_pad, "use ZeroPadding1D/2D"),
    "QUANTIZE": OpSpec("tol_requantize_s8", "tol_requant_params_t", _lower_requant, _H_QUANT),
    "RELU": OpSpec("tol_requantize_s8", "tol_requant_params_t", _lower_requant, _H_QUANT),
    "RELU6": OpSpec("tol_requantize_s8", "tol_requant_params_t", _lower_requant, _H_QUANT),
    "LOGISTIC": OpSpec("tol_lut_s8", "tol_lut_params_t", _lower_lut, _H_QUANT),
    "TANH": OpSpec("tol_lut_s8", "tol_lut_params_t", _lower_lut, _H_QUANT),
    "LEAKY_RELU": OpSpec("tol_lut_s8", "tol_lut_params_t", _lower_lut, _H_QUANT),
    "HARD_SWISH": OpSpec("tol_lut_s8", "tol_lut_params_t", _lower_lut, _H_QUANT),
    "SOFTMAX": OpSpec("tol_softmax_s8", "tol_softmax_params_t", _lower_softmax,
                      "softmax over the last axis with int8 output (scale 1/256, zero point -128)"),
    "CONCATENATION": OpSpec("tol_concat_s8", "tol_concat_params_t", _lower_concat,
                            "concatenate along a non-batch axis (the converter gives the inputs one quantization)",
                            int8_input=False),
    "RESHAPE": OpSpec(None, None, _lower_alias, "reshape without changing quantization", same_quant=True),
    "SQUEEZE": OpSpec(None, None, _lower_alias, "reshape without changing quantization", same_quant=True),
    "EXPAND_DIMS": OpSpec(None, None, _lower_alias, "reshape without changing quantization", same_quant=True),
}

# Ops we refuse, with what to do instead (shown as the error's hint).
_REFUSED_HINTS = {
    "SPACE_TO_BATCH_ND": "dilated convolutions become SPACE_TO_BATCH_ND/BATCH_TO_SPACE_ND: use dilation_rate=1",
    "BATCH_TO_SPACE_ND": "dilated convolutions become SPACE_TO_BATCH_ND/BATCH_TO_SPACE_ND: use dilation_rate=1",
    "DEQUANTIZE": "the backbone must be int8 from input to output: export with int8 input and output",
    "DIV": "divide by a constant with a Rescaling or Normalization layer (a MUL), not a division",
    "GELU": "use relu, relu6, tanh, sigmoid, leaky_relu or hard_swish",
    "EXP": "use relu, relu6, tanh, sigmoid, leaky_relu or hard_swish",
    "LOG": "use relu, relu6, tanh, sigmoid, leaky_relu or hard_swish",
    "SQRT": "scale inputs on the host or with a Normalization layer first",
    "RSQRT": "LayerNormalization is not supported: use BatchNormalization or a Normalization layer first",
    "POW": "use relu, relu6, tanh, sigmoid, leaky_relu or hard_swish",
    "SQUARED_DIFFERENCE": "LayerNormalization is not supported: use BatchNormalization or a Normalization layer first",
    "TRANSPOSE": "keep the data channels-last inside the model; transpose samples on the host",
    "TRANSPOSE_CONV": "upsample with UpSampling + Conv, or keep the decoder in float on the host",
    "RESIZE_NEAREST_NEIGHBOR": "resize the input on the host",
    "RESIZE_BILINEAR": "resize the input on the host",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "use Conv1D over a window instead of a recurrent layer",
    "BATCH_MATMUL": "use Dense layers (FULLY_CONNECTED) instead of attention/matrix products",
    "REDUCE_MIN": "use GlobalMaxPooling or GlobalAveragePooling",
    "SUM": "use GlobalAveragePooling (MEAN) instead of a sum",
    "ELU": "use relu, relu6, leaky_relu or hard_swish",
    "PRELU": "use LeakyReLU (a fixed slope) instead of PReLU",
    "MAXIMUM": "use relu/relu6 or MaxPooling",
    "MINIMUM": "use relu6",
    "SPLIT": "build the branches from the same tensor instead of splitting it",
    "STRIDED_SLICE": "crop the input on the host (Cropping layers become STRIDED_SLICE)",
    "SLICE": "crop the input on the host",
    "GATHER": "look-ups (Embedding) are not supported: feed the features directly",
    "ARG_MAX": "end the model in Dense (+softmax): the device takes the argmax",
}


def _refusal_hint(opname: str) -> str:
    h = _REFUSED_HINTS.get(opname)
    return h or ("tinyol's int8 kernels cover: " + ", ".join(sorted(_OPS))
                 + " (docs/export.md lists them with their limits)")


# --------------------------------------------------------------------------- emitters

def _backbone_h(source: str, info: BackboneInfo, tin: Tensor) -> str:
    h, w, c = (list(info.input_shape) + [1, 1, 1])[:3] if len(info.input_shape) == 3 else (0, 0, 0)
    return (
        banner(source)
        + "#ifndef TOL_BACKBONE_H\n#define TOL_BACKBONE_H\n\n"
        "#include <stdint.h>\n\n#include \"tol_status.h\"\n\n"
        f"#define TOL_BACKBONE_INPUT_SIZE {int(np.prod(info.input_shape))}   /* int8 input, [H][W][C] */\n"
        f"#define TOL_BACKBONE_INPUT_H {h}\n#define TOL_BACKBONE_INPUT_W {w}\n#define TOL_BACKBONE_INPUT_C {c}\n"
        f"#define TOL_BACKBONE_LATENT_SIZE {info.latent_size}   /* int8 latent vector */\n"
        f"#define TOL_BACKBONE_ARENA_BYTES {info.arena_bytes}   /* static activation arena */\n"
        f"#define TOL_BACKBONE_MACS {info.macs}UL\n"
        f"#define TOL_BACKBONE_WEIGHTS_BYTES {info.weights_bytes}   /* const data in flash */\n\n"
        "/* Run the backbone on one sample.\n"
        " * input  [in]  TOL_BACKBONE_INPUT_SIZE int8 values, quantized with the model's input\n"
        " *              scale/zero point; caller-owned, read only.\n"
        " * latent [out] TOL_BACKBONE_LATENT_SIZE int8 values; caller-owned; must not overlap input.\n"
        " * Returns TOL_ERR_ARG for NULL pointers, TOL_OK otherwise. Not reentrant (one static arena). */\n"
        "tol_status_t tol_backbone_invoke(const int8_t *input, int8_t *latent);\n\n"
        "#endif /* TOL_BACKBONE_H */\n"
    )


def _backbone_c(source: str, gen: _Gen, body: list[str], info: BackboneInfo) -> str:
    arena = info.arena_bytes
    return (
        banner(source)
        + "#include \"backbone.h\"\n\n#include <stddef.h>\n#include <stdint.h>\n#include <string.h>\n\n"
        "#include \"tol_kernels.h\"\n\n"
        f"/* {len(info.ops)} operators, {info.macs} MACs, {info.weights_bytes} bytes of constants. */\n\n"
        f"static _Alignas(4) int8_t tol_arena[{max(arena, 4)}];\n\n"
        + "\n".join(gen.consts)
        + "\ntol_status_t tol_backbone_invoke(const int8_t *input, int8_t *latent)\n{\n"
        "    if (input == NULL || latent == NULL) {\n        return TOL_ERR_ARG;\n    }\n"
        "    (void)tol_arena;\n"
        + "".join(body)
        + "    return TOL_OK;\n}\n"
    )


def _model_data_c(source: str, raw: bytes) -> str:
    vals = np.frombuffer(raw, dtype=np.uint8)
    lines = []
    for i in range(0, len(vals), 16):
        lines.append("    " + ", ".join(f"0x{v:02x}" for v in vals[i:i + 16]) + ",")
    return (
        banner(source)
        + "#include \"model_data.h\"\n\n"
        "_Alignas(16) const uint8_t tol_model_data[TOL_MODEL_DATA_LEN] = {\n" + "\n".join(lines) + "\n};\n"
    )


def _model_data_h(source: str, n: int) -> str:
    return (
        banner(source)
        + "#ifndef TOL_MODEL_DATA_H\n#define TOL_MODEL_DATA_H\n\n#include <stdint.h>\n\n"
        f"#define TOL_MODEL_DATA_LEN {n}u\n\n"
        "/* The backbone .tflite flatbuffer (for TFLM-based builds and verification). */\n"
        "extern const uint8_t tol_model_data[TOL_MODEL_DATA_LEN];\n\n"
        "#endif /* TOL_MODEL_DATA_H */\n"
    )


# --------------------------------------------------------------------------- TFLM oracle

def _tflm():
    try:
        from tflite_micro.python.tflite_micro import runtime
    except ImportError:
        raise TinyolError("TFLM's Python runtime is not installed",
                          hint="pip install --pre tflite-micro (the 'ml' extra)") from None
    return runtime


def run_tflm(tflite_path: str | Path, inputs_int8) -> np.ndarray:
    """Run a batch of int8 inputs [N, *input_shape] through TFLM; returns int8 [N, *output_shape]."""
    runtime = _tflm()
    data = Path(tflite_path).read_bytes()
    interp = runtime.Interpreter.from_bytes(data, arena_size=max(1 << 20, len(data) * 10))
    det = interp.get_input_details(0)
    shape = tuple(int(d) for d in det["shape"])
    x = np.asarray(inputs_int8, dtype=np.int8)
    x = x.reshape((-1,) + shape[1:])
    outs = []
    for i in range(x.shape[0]):
        interp.set_input(x[i:i + 1].reshape(shape), 0)
        interp.invoke()
        outs.append(np.array(interp.get_output(0), dtype=np.int8)[0])
    return np.stack(outs) if outs else np.zeros((0,), np.int8)


def tflm_arena_bytes(model: bytes | str | Path) -> int | None:
    """The tensor arena TFLM's Python runtime (a host build, 64-bit pointers) allocates for the
    model (a .tflite path or its bytes): its RecordingMicroAllocator's report, "Arena allocation
    total N bytes" (export records it as the manifest's memory.tflm_arena_bytes). None when the
    runtime is not installed or does not report."""
    data = model if isinstance(model, (bytes, bytearray)) else Path(model).read_bytes()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    arena = max(1 << 20, 16 * len(data))
    with tempfile.TemporaryFile() as log:  # the runtime prints on fds 1 and 2: read it from there
        sys.stdout.flush()
        sys.stderr.flush()
        saved = [os.dup(1), os.dup(2)]
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            from tflite_micro.python.tflite_micro import runtime

            it = runtime.Interpreter.from_bytes(bytes(data), arena_size=arena)
            it.print_allocations()
        except Exception:  # ImportError: no runtime; anything else: it cannot allocate the model
            return None
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
        log.seek(0)
        m = re.search(rb"Arena allocation total (\d+) bytes", log.read())
    return int(m.group(1)) if m else None

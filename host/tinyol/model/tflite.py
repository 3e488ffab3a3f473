"""Read a .tflite flatbuffer without importing TensorFlow.

Uses the generated flatbuffer schema module that ships inside the
``tflite-micro`` wheel (or, failing that, inside ``tensorflow``; that file is
loaded by path so TensorFlow's package ``__init__`` never runs). Importing this
module costs a few hundred milliseconds instead of the seconds TensorFlow takes.

    m = load_model("backbone.tflite")
    for op in m.operators:
        print(op.index, op.opname, [m.tensors[i].name for i in op.outputs])
"""
from __future__ import annotations

import importlib.util
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TinyolError

# Lazy on purpose: TFLM's schema module (it loads the tflite_micro package) and flatbuffers
# (TensorFlow's) are imported where a model is parsed or written.

_SCHEMA = None


def schema():
    """The flatbuffer schema module (``schema_py_generated``), loaded once."""
    global _SCHEMA
    if _SCHEMA is not None:
        return _SCHEMA
    try:
        from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as mod
    except ImportError:
        mod = None
        spec = importlib.util.find_spec("tensorflow")  # does not import tensorflow
        if spec is not None and spec.submodule_search_locations:
            for loc in spec.submodule_search_locations:
                path = Path(loc) / "lite" / "python" / "schema_py_generated.py"
                if path.is_file():
                    s = importlib.util.spec_from_file_location("tinyol_tflite_schema", path)
                    mod = importlib.util.module_from_spec(s)
                    s.loader.exec_module(mod)
                    break
        if mod is None:
            raise TinyolError(
                "cannot read .tflite files: no TFLite flatbuffer schema found",
                hint="install the 'ml' extra (pip install 'tinyol[ml]')",
            ) from None
    _SCHEMA = mod
    return mod


# TensorType enum value -> (name, numpy dtype)
_DTYPES = {
    0: ("float32", np.float32), 1: ("float16", np.float16), 2: ("int32", np.int32),
    3: ("uint8", np.uint8), 4: ("int64", np.int64), 6: ("bool", np.bool_),
    7: ("int16", np.int16), 9: ("int8", np.int8), 10: ("float64", np.float64),
}


@dataclass
class Tensor:
    """One tensor of the (first) subgraph."""

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str                     # "int8", "int32", "float32", ...
    scale: np.ndarray              # float32 [n] (empty if not quantized)
    zero_point: np.ndarray         # int64 [n]
    quantized_dimension: int
    data: np.ndarray | None        # constant data (reshaped), None for activations

    @property
    def size(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1

    @property
    def is_const(self) -> bool:
        return self.data is not None


@dataclass
class Operator:
    """One operator of the (first) subgraph, in execution order."""

    index: int
    opname: str                    # e.g. "CONV_2D"
    inputs: list[int]              # tensor indices, -1 = optional input absent
    outputs: list[int]
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class TfliteModel:
    tensors: list[Tensor]
    operators: list[Operator]
    inputs: list[int]
    outputs: list[int]
    raw: bytes

    def tensor(self, i: int) -> Tensor:
        return self.tensors[i]


def _opnames(s) -> dict[int, str]:
    return {v: k for k, v in vars(s.BuiltinOperator).items() if not k.startswith("_")}


def _options_dict(opts) -> dict[str, Any]:
    if opts is None:
        return {}
    out = {}
    for k, v in vars(opts).items():
        if isinstance(v, (bool, int, float, str)) or v is None:
            out[k] = v
        elif isinstance(v, np.ndarray):
            out[k] = v.tolist()
    return out


def load_model(path: str | Path) -> TfliteModel:
    """Parse a .tflite file (first subgraph only)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise TinyolError(f"cannot read {path}: {e.strerror}") from None
    return parse_model(raw, str(path))


def parse_model(raw: bytes, origin: str = "<bytes>") -> TfliteModel:
    s = schema()
    try:
        m = s.ModelT.InitFromObj(s.Model.GetRootAsModel(bytearray(raw), 0))
    except Exception as e:  # noqa: BLE001 - flatbuffers raises assorted errors on junk
        raise TinyolError(f"{origin} is not a valid .tflite file ({e})") from None
    if not m.subgraphs:
        raise TinyolError(f"{origin} has no subgraph")
    if len(m.subgraphs) > 1:
        raise TinyolError(f"{origin} has {len(m.subgraphs)} subgraphs; only single-subgraph models are supported")
    g = m.subgraphs[0]
    names = _opnames(s)
    tensors = []
    for i, t in enumerate(g.tensors):
        dname, np_dtype = _DTYPES.get(t.type, (f"type{t.type}", None))
        shape = tuple(int(d) for d in (t.shape if t.shape is not None else []))
        q = t.quantization
        scale = np.asarray(q.scale if q is not None and q.scale is not None else [], dtype=np.float32)
        zp = np.asarray(q.zeroPoint if q is not None and q.zeroPoint is not None else [], dtype=np.int64)
        qdim = int(q.quantizedDimension) if q is not None else 0
        data = None
        buf = m.buffers[t.buffer] if t.buffer < len(m.buffers) else None
        if buf is not None and buf.data is not None and len(buf.data) and np_dtype is not None:
            arr = np.frombuffer(bytes(np.asarray(buf.data, dtype=np.uint8)), dtype=np_dtype)
            data = arr.reshape(shape) if shape else arr.reshape(())
        elif buf is not None and getattr(buf, "offset", 0) and getattr(buf, "size", 0) and np_dtype is not None:
            arr = np.frombuffer(raw[buf.offset: buf.offset + buf.size], dtype=np_dtype)
            data = arr.reshape(shape) if shape else arr.reshape(())
        name = t.name.decode() if isinstance(t.name, bytes) else str(t.name)
        tensors.append(Tensor(i, name, shape, dname, scale, zp, qdim, data))
    ops = []
    for i, op in enumerate(g.operators or []):
        oc = m.operatorCodes[op.opcodeIndex]
        code = max(int(oc.builtinCode), int(oc.deprecatedBuiltinCode))
        opname = names.get(code, f"OP{code}")
        if opname == "CUSTOM":
            cc = oc.customCode.decode() if isinstance(oc.customCode, bytes) else oc.customCode
            opname = f"CUSTOM({cc})"
        ins = [int(x) for x in (op.inputs if op.inputs is not None else [])]
        outs = [int(x) for x in (op.outputs if op.outputs is not None else [])]
        ops.append(Operator(i, opname, ins, outs, _options_dict(op.builtinOptions)))
    return TfliteModel(tensors, ops, [int(x) for x in g.inputs], [int(x) for x in g.outputs], raw)


@dataclass
class TensorIO:
    """A model's input or output as an export records it: shape, dtype, the (first) scale and
    zero point (real = scale * (q - zero_point))."""

    shape: list[int]
    dtype: str
    scale: float
    zero_point: int


def _io(t: Tensor) -> TensorIO:
    return TensorIO([int(d) for d in t.shape], t.dtype, float(t.scale[0]) if t.scale.size else 0.0,
                    int(t.zero_point[0]) if t.zero_point.size else 0)


def io_tensors(m: TfliteModel) -> tuple[TensorIO, TensorIO]:
    """The one input and the one output of a backbone (a TinyolError for any other count)."""
    if len(m.inputs) != 1 or len(m.outputs) != 1:
        raise TinyolError(f"backbone must have one input and one output, has "
                          f"{len(m.inputs)} and {len(m.outputs)}")
    return _io(m.tensors[m.inputs[0]]), _io(m.tensors[m.outputs[0]])


# --------------------------------------------------------------------------- classifier split

@dataclass
class ClassifierSplit:
    """An int8 classifier cut at its last FULLY_CONNECTED (see ``split_classifier``)."""

    backbone: bytes                # .tflite of everything before the FC (output: the FC's input)
    weight: np.ndarray             # float32 [classes, dim], dequantized FC weights
    bias: np.ndarray               # float32 [classes], dequantized FC bias (zeros if none)
    fc_index: int                  # operator index of the FC in the original model
    tail: list[str]                # ops after the FC that the split drops (e.g. ["SOFTMAX"])


_HEAD_TAIL_OPS = {"SOFTMAX", "RESHAPE", "SQUEEZE"}
_SHAPE_SIDE_OPS = {"SHAPE", "STRIDED_SLICE", "PACK", "GATHER", "CAST", "SLICE"}  # a reshape's target shape


def _conv_as_fc(m: TfliteModel, op) -> bool:
    """A CONV_2D that is a FULLY_CONNECTED: a 1x1 filter on a 1x1 input (person_detect's and
    MobileNet's classifier: average pool, 1x1 conv, reshape, softmax)."""
    if op.opname != "CONV_2D" or len(op.inputs) < 2:
        return False
    x, w = m.tensors[op.inputs[0]], m.tensors[op.inputs[1]]
    return (len(x.shape) == 4 and list(x.shape[1:3]) == [1, 1] and len(w.shape) == 4
            and list(w.shape[1:3]) == [1, 1] and int(op.options.get("dilationHFactor", 1) or 1) == 1)


def classifier_head(m: TfliteModel) -> tuple[int, list[str]] | None:
    """(index of the last FULLY_CONNECTED, ops after it) when the model is a classifier that
    ends in a linear FULLY_CONNECTED (or a 1x1 CONV_2D on a 1x1 input, the same map)
    followed only by SOFTMAX (or reshapes); else None."""
    ops = m.operators
    i = len(ops) - 1
    while i >= 0 and ops[i].opname in _HEAD_TAIL_OPS | _SHAPE_SIDE_OPS:
        i -= 1
    if i < 0 or not (ops[i].opname == "FULLY_CONNECTED" or _conv_as_fc(m, ops[i])):
        return None
    if int(ops[i].options.get("fusedActivationFunction", 0)) != 0:
        return None  # a feature layer (Dense + relu), not logits
    chain = ops[i].outputs[0]
    side: set[int] = set()  # tensors of the shape arithmetic Keras' Reshape makes the converter emit
    for op in ops[i + 1:]:
        if op.opname in _SHAPE_SIDE_OPS:
            side.update(op.outputs)
            continue
        if not op.inputs or op.inputs[0] != chain or any(t in side for t in op.inputs[:1]):
            return None
        chain = op.outputs[0]
    if any(t in side for t in m.outputs):
        return None
    if m.outputs != [chain]:
        return None
    return i, [op.opname for op in ops[i + 1:] if op.opname not in _SHAPE_SIDE_OPS]


def _cut(raw: bytes, n_ops: int, output: int) -> bytes:
    """The model's first n_ops operators with `output` as its only output; unused tensors
    and their buffers are dropped. Deterministic bytes for the same input."""
    import flatbuffers

    s = schema()
    mt = s.ModelT.InitFromPackedBuf(bytearray(raw), 0)
    g = mt.subgraphs[0]
    g.operators = list(g.operators[:n_ops])
    used: list[int] = []
    # an LSTM's intermediates are tensors too (kept: the cut model still holds the op)
    inter = [i for op in g.operators if op.intermediates is not None for i in list(op.intermediates)]
    for t in list(g.inputs) + [i for op in g.operators for i in list(op.inputs) + list(op.outputs)] + inter + [output]:
        if t >= 0 and t not in used:
            used.append(t)
    used.sort()
    remap = {old: new for new, old in enumerate(used)}
    g.tensors = [g.tensors[i] for i in used]
    for op in g.operators:
        op.inputs = [remap[i] if i >= 0 else i for i in op.inputs]
        op.outputs = [remap[i] for i in op.outputs]
        if op.intermediates is not None and len(op.intermediates):
            op.intermediates = [remap[i] for i in op.intermediates]
    g.inputs = [remap[i] for i in g.inputs]
    g.outputs = [remap[output]]
    kept_buffers = {t.buffer for t in g.tensors}
    for bi, buf in enumerate(mt.buffers):
        if bi not in kept_buffers and bi != 0 and not any(
                md.buffer == bi for md in (mt.metadata or [])):
            buf.data = None
            buf.offset, buf.size = 0, 0
    mt.signatureDefs = None  # they name the old outputs
    b = flatbuffers.Builder(1024)
    b.Finish(mt.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def split_classifier(raw: bytes, origin: str = "<bytes>") -> ClassifierSplit | None:
    """Cut a full int8 classifier (... -> FULLY_CONNECTED [-> SOFTMAX]) at its last FC.

    The backbone is everything before the FC; the head is the FC, dequantized:
    W = w_int8 * w_scale (per output row), b = bias_int32 * input_scale * w_scale.
    Returns None when the model does not end in a linear FULLY_CONNECTED."""
    m = parse_model(raw, origin)
    found = classifier_head(m)
    if found is None:
        return None
    i, tail = found
    fc = m.operators[i]
    x, w = m.tensors[fc.inputs[0]], m.tensors[fc.inputs[1]]
    bias = m.tensors[fc.inputs[2]] if len(fc.inputs) > 2 and fc.inputs[2] >= 0 else None
    if w.data is None or w.dtype != "int8" or x.dtype != "int8":
        raise TinyolError(f"{origin}: the last {fc.opname} is not int8 with constant weights",
                          hint="convert the model with full int8 quantization (int8 input and output)")
    if fc.opname == "CONV_2D":  # [out, 1, 1, in]: the FC's [out, in]
        w = dataclasses.replace(w, shape=[int(w.shape[0]), int(w.shape[3])],
                                data=w.data.reshape(int(w.shape[0]), int(w.shape[3])))
    out_f, in_f = int(w.shape[0]), int(w.shape[1])
    if x.size != in_f:
        raise TinyolError(f"{origin}: the last FULLY_CONNECTED takes {x.size // in_f} rows; "
                          "the device head takes one vector", hint="add Flatten before the last Dense layer")
    if fc.inputs[0] in m.inputs:
        raise TinyolError(f"{origin}: the model is a single FULLY_CONNECTED; there is no backbone to freeze",
                          hint="export it with --split none --classes N, or add layers before it")
    ws = np.asarray(w.scale, np.float64)
    ws = np.broadcast_to(ws if ws.size == out_f else ws[:1], (out_f,))
    W = (w.data.astype(np.float64) - np.asarray(w.zero_point, np.float64).reshape(-1)[:1]) * ws[:, None]
    if bias is not None and bias.data is not None:
        b = bias.data.astype(np.float64) * float(np.float32(x.scale[0])) * ws
    else:
        b = np.zeros(out_f)
    return ClassifierSplit(_cut(raw, i, fc.inputs[0]), W.astype(np.float32), b.astype(np.float32), i, tail)

"""Numpy twin of the adaptive stage (mcu/src/tol_stage.c): several float32 layers after the
frozen int8 backbone, trained by backpropagation on the device (docs/adaptive.md).

Bit-identical with the C on whole streams: every sum is taken in the C loop order. Each
linear layer (Dense, Conv, DepthwiseConv) is described by its list of *connections* (output
element, input element, weight) generated in the C loop order (oy, ox, co, ky, kx, ci); the
forward sums, the weight/bias gradient sums and the input-delta sums are that list grouped by
output, by weight and by input (stable, so each group keeps the C order) and summed left to
right with ``np.add.accumulate``. Missing entries of a ragged group add -0.0, which leaves any
float32 sum unchanged. :func:`stage_bytes` is the memory model the exporter and the firmware
share (tol_stage_bytes).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..errors import TinyolError
from ..memory import stage_parts
from .learner import (
    LearnerError,
    OnlineConfig,
    OnlineLearner,
    predict_active,
    seqsum,
    softmax_active,
)

F32 = np.float32
DENSE, CONV, DWCONV, GAP, MAXPOOL, AVGPOOL, GMAXPOOL = 0, 1, 2, 3, 4, 5, 6
KINDS = {DENSE: "dense", CONV: "conv", DWCONV: "dwconv", GAP: "gap", MAXPOOL: "maxpool",
         AVGPOOL: "avgpool", GMAXPOOL: "globalmaxpool"}
LINEAR = (DENSE, CONV, DWCONV)  # the kinds with parameters
ACT_NONE, ACT_RELU, ACT_RELU6 = 0, 1, 2
TRAIN_ALL, TRAIN_BIAS, TRAIN_FROZEN = 0, 1, 2  # tol_stage_train_t: what of a layer trains
TRAINS = {TRAIN_ALL: "all", TRAIN_BIAS: "bias", TRAIN_FROZEN: "frozen"}
ACTS = {ACT_NONE: "none", ACT_RELU: "relu", ACT_RELU6: "relu6"}
MAX_LAYERS = 16
STATE_HEADER = 72
Q_MIN, Q_MAX = -32, 32767  # an int16 stage's exponents lie in [Q_MIN, -1]; |q| <= Q_MAX


@dataclasses.dataclass(frozen=True)
class Layer:
    """tol_stage_layer_t. Dense: in_h = in_w = out_h = out_w = 1, in_c = inputs."""

    kind: int
    in_h: int
    in_w: int
    in_c: int
    out_h: int
    out_w: int
    out_c: int
    act: int = ACT_NONE
    kh: int = 0
    kw: int = 0
    sh: int = 1
    sw: int = 1
    pt: int = 0
    pl: int = 0
    train: int = TRAIN_ALL
    wq: int = 0  # 0: trained weights in float32; < 0: in int16, value q * 2^wq (an int16 stage)
    bq: int = 0  # the same for the trained biases

    @property
    def in_size(self) -> int:
        return self.in_h * self.in_w * self.in_c

    @property
    def out_size(self) -> int:
        return self.out_h * self.out_w * self.out_c

    @property
    def n_weights(self) -> int:
        if self.kind == DENSE:
            return self.out_c * self.in_size
        if self.kind == CONV:
            return self.out_c * self.kh * self.kw * self.in_c
        if self.kind == DWCONV:
            return self.kh * self.kw * self.out_c
        return 0

    @property
    def n_params(self) -> int:
        return self.n_weights + self.out_c if self.kind in LINEAR else 0

    @property
    def n_train(self) -> int:
        """tol_stage_layer_trained: the parameters that train (the last n_train of W, b)."""
        if self.kind not in LINEAR or self.train == TRAIN_FROZEN:
            return 0
        return self.out_c if self.train == TRAIN_BIAS else self.n_params

    def ok(self) -> bool:
        """tol_stage_layer_ok_."""
        if min(self.in_h, self.in_w, self.in_c, self.out_c) <= 0 or self.act not in ACTS:
            return False
        if self.train not in TRAINS or (self.train and self.kind not in LINEAR):
            return False
        if not (Q_MIN <= self.wq <= 0 and Q_MIN <= self.bq <= 0):
            return False
        if self.kind == DENSE:
            return self.out_h == 1 and self.out_w == 1
        if self.kind in (GAP, GMAXPOOL):
            return (self.out_h == 1 and self.out_w == 1 and self.out_c == self.in_c
                    and self.act == ACT_NONE)
        if self.kind in (CONV, DWCONV, MAXPOOL, AVGPOOL):
            if min(self.kh, self.kw, self.sh, self.sw) <= 0:
                return False
            if self.kind == DWCONV and self.out_c % self.in_c:
                return False
            if self.kind in (MAXPOOL, AVGPOOL) and (self.out_c != self.in_c
                                                    or self.act != ACT_NONE):
                return False
            if self.pt >= self.kh or self.pl >= self.kw or self.out_h <= 0 or self.out_w <= 0:
                return False
            return ((self.out_h - 1) * self.sh < self.in_h + self.pt
                    and (self.out_w - 1) * self.sw < self.in_w + self.pl)
        return False

    def describe(self) -> str:
        k = KINDS[self.kind]
        act = "" if self.act == ACT_NONE else f"+{ACTS[self.act]}"
        if self.kind in (CONV, DWCONV, MAXPOOL, AVGPOOL):
            k += f"{self.kh}x{self.kw}/{self.sh}"
        if self.kind in (CONV, DWCONV, MAXPOOL, AVGPOOL) and self.sw != self.sh:
            k += f"x{self.sw}"
        tr = "" if self.train == TRAIN_ALL else f" ({TRAINS[self.train]})"
        if self.wq or self.bq:
            tr += " int16"
        return (f"{k}{act} [{self.in_h}x{self.in_w}x{self.in_c}] -> "
                f"[{self.out_h}x{self.out_w}x{self.out_c}]{tr}")

    def as_tuple(self) -> tuple:
        """The C struct's field order."""
        return (self.kind, self.act, self.kh, self.kw, self.sh, self.sw, self.pt, self.pl,
                self.in_h, self.in_w, self.in_c, self.out_h, self.out_w, self.out_c, self.train,
                self.wq, self.bq)

    def q_ok(self, q16: bool) -> bool:
        """tol_stage_q_ok_: in an int16 stage exactly the trained tensors have exponents."""
        if not q16:
            return self.wq == 0 and self.bq == 0
        tw = self.kind in LINEAR and self.train == TRAIN_ALL
        tb = self.kind in LINEAR and self.train != TRAIN_FROZEN
        return (self.wq != 0) == tw and (self.bq != 0) == tb


def chain_ok(layers) -> bool:
    """tol_stage_chain_ok_: shapes follow each other, last layer a linear Dense."""
    if not 1 <= len(layers) <= MAX_LAYERS:
        return False
    q = is_q16(layers)
    for i, l in enumerate(layers):
        if not l.ok() or not l.q_ok(q) or (i and l.in_size != layers[i - 1].out_size):
            return False
    return (layers[-1].kind == DENSE and layers[-1].act == ACT_NONE
            and layers[-1].train == TRAIN_ALL and layers[0].in_size <= 0xFFFF)


def is_q16(layers) -> bool:
    """An int16 stage: some layer keeps its trained parameters in int16."""
    return any(l.wq or l.bq for l in layers)


def n_params(layers) -> int:
    """P: every exported parameter (init_params)."""
    return sum(l.n_params for l in layers)


def n_trained(layers) -> int:
    """T: the parameters that train (the device's params[], the stage image)."""
    return sum(l.n_train for l in layers)


def trained_part(layers, params: np.ndarray) -> np.ndarray:
    """The trained parameters (T) out of the exported ones (P), layer after layer."""
    out, off = [], 0
    for l in layers:
        out.append(params[off + l.n_params - l.n_train:off + l.n_params])
        off += l.n_params
    return np.concatenate(out).astype(F32) if out else np.zeros(0, F32)


def int16_stage(layers, params: np.ndarray, headroom: float = 4.0) -> tuple[list, np.ndarray]:
    """The int16 stage of a float one (`--stage-weights int16`): each trained tensor (a
    TRAIN_ALL layer's weights, a trained layer's biases) gets the power-of-two scale 2^e,
    the smallest with ``headroom`` x its largest magnitude within +-Q_MAX (e in [Q_MIN, -1];
    an all-zero tensor takes its layer's other exponent, or -15), and its exported values
    rounded to q * 2^e, so the device starts from exactly them. Frozen tensors stay as they
    are (float32, in flash)."""
    params = np.asarray(params, F32).copy()
    out, off = [], 0

    def exp_of(t):
        m = float(np.max(np.abs(t))) if t.size else 0.0
        if not m > 0 or not math.isfinite(m):
            return None
        return int(min(-1, max(Q_MIN, math.ceil(math.log2(m * headroom / Q_MAX)))))

    for l in layers:
        if l.kind not in LINEAR or l.train == TRAIN_FROZEN:
            out.append(dataclasses.replace(l, wq=0, bq=0))
            off += l.n_params
            continue
        w = params[off:off + l.n_weights]
        b = params[off + l.n_weights:off + l.n_params]
        ew = exp_of(w) if l.train == TRAIN_ALL else None
        eb = exp_of(b)
        eb = eb if eb is not None else (ew if ew is not None else -15)
        ew = (ew if ew is not None else eb) if l.train == TRAIN_ALL else 0
        for t, e in ((w, ew), (b, eb)):
            if e:
                t[:] = (np.clip(np.rint(t * F32(2.0 ** -e)), -Q_MAX, Q_MAX) * F32(2.0 ** e)).astype(F32)
        out.append(dataclasses.replace(l, wq=ew, bq=eb))
        off += l.n_params
    return out, params


def stage_hash(layers) -> int:
    """tol_stage_hash: FNV-1a over every field as 4 little-endian bytes (`train` only when
    not 0, wq and bq only when either is not 0)."""
    h = 2166136261
    for l in layers:
        t = l.as_tuple()
        for f in (t if (l.wq or l.bq) else t[:15] if l.train else t[:14]):
            for b in range(4):
                h ^= (int(f) >> (8 * b)) & 0xFF
                h = (h * 16777619) & 0xFFFFFFFF
    return h


# --------------------------------------------------------------------------- memory model
def stage_memory(layers, replay_capacity: int = 0, replay_bits: int = 8, max_new: int = 1,
                 max_old: int = 0, no_momentum: bool = False) -> dict:
    """The stage's RAM, part by part (bytes); ``total`` == tol_stage_bytes(). The formula is
    tinyol.memory's (:func:`tinyol.memory.stage_parts`), the one memory model of the exporter,
    the build and `tinyol info`."""
    if not chain_ok(layers):
        raise TinyolError("inconsistent stage layers: each layer must take its predecessor's output")
    del max_old  # the batch is processed sample by sample: n_old costs no memory
    p = stage_parts([l.as_tuple() for l in layers], replay_capacity, replay_bits, max_new,
                    not no_momentum)
    parts = {"weights": p["stage weights"], "grads": p["gradients"], "momentum": p["momentum"],
             "activations": p["activations"], "queue": p["queue"], "counters": p["counters"],
             "replay": p["replay buffer"]}
    parts["total"] = sum(parts.values())
    parts["params"] = n_params(layers)
    return parts


def stage_bytes(layers, replay_capacity: int = 0, replay_bits: int = 8, max_new: int = 1,
                max_old: int = 0, no_momentum: bool = False) -> int:
    """tol_stage_bytes: the caller memory of one stage."""
    return stage_memory(layers, replay_capacity, replay_bits, max_new, max_old,
                        no_momentum)["total"]


# --------------------------------------------------------------------------- tables
def _connections(l: Layer):
    """(out, in, weight) index arrays of a linear layer, in the C loop order."""
    if l.kind == DENSE:
        o, i = np.meshgrid(np.arange(l.out_c), np.arange(l.in_size), indexing="ij")
        o, i = o.ravel(), i.ravel()
        return o, i, o * l.in_size + i
    if l.kind in (MAXPOOL, AVGPOOL, GMAXPOOL):
        if l.kind == GMAXPOOL:  # one window over the whole input
            l = dataclasses.replace(l, kh=l.in_h, kw=l.in_w, sh=1, sw=1, pt=0, pl=0)
        oy, ox, co, ky, kx = np.meshgrid(np.arange(l.out_h), np.arange(l.out_w),
                                         np.arange(l.out_c), np.arange(l.kh), np.arange(l.kw),
                                         indexing="ij")
        ci = co
    elif l.kind == CONV:
        oy, ox, co, ky, kx, ci = np.meshgrid(np.arange(l.out_h), np.arange(l.out_w),
                                             np.arange(l.out_c), np.arange(l.kh),
                                             np.arange(l.kw), np.arange(l.in_c), indexing="ij")
    else:
        oy, ox, co, ky, kx = np.meshgrid(np.arange(l.out_h), np.arange(l.out_w),
                                         np.arange(l.out_c), np.arange(l.kh), np.arange(l.kw),
                                         indexing="ij")
        ci = co // (l.out_c // l.in_c)
    oy, ox, co, ky, kx, ci = (a.ravel() for a in (oy, ox, co, ky, kx, ci))
    iy = oy * l.sh - l.pt + ky
    ix = ox * l.sw - l.pl + kx
    ok = (iy >= 0) & (iy < l.in_h) & (ix >= 0) & (ix < l.in_w)
    oy, ox, co, ky, kx, ci, iy, ix = (a[ok] for a in (oy, ox, co, ky, kx, ci, iy, ix))
    out = (oy * l.out_w + ox) * l.out_c + co
    inp = (iy * l.in_w + ix) * l.in_c + ci
    if l.kind in (MAXPOOL, AVGPOOL, GMAXPOOL):
        w = np.zeros_like(out)
    elif l.kind == CONV:
        w = ((co * l.kh + ky) * l.kw + kx) * l.in_c + ci
    else:
        w = (ky * l.kw + kx) * l.out_c + co
    return out, inp, w


def _group(keys: np.ndarray, n_keys: int) -> np.ndarray:
    """[n_keys, longest] positions into keys (stable: list order kept), -1 = none."""
    order = np.argsort(keys, kind="stable")
    counts = np.bincount(keys, minlength=n_keys)
    width = max(1, int(counts.max()) if counts.size else 1)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    sk = keys[order]
    pos = np.arange(order.size) - start[sk]
    table = np.full((n_keys, width), -1, np.int64)
    table[sk, pos] = order
    return table


def _pair(table: np.ndarray, ia: np.ndarray, na: int, ib: np.ndarray, nb: int):
    """Index arrays into a+[-0.0] and b+[1.0] for each table entry (missing: the sentinels,
    whose product -0.0 leaves a float32 sum unchanged)."""
    t = np.maximum(table, 0)
    # transposed ([entry, key]): the sums run down axis 0, one vector add per entry
    return (np.ascontiguousarray(np.where(table >= 0, ia[t], na).T),
            np.ascontiguousarray(np.where(table >= 0, ib[t], nb).T))


class _PoolTables:
    """A pooling layer: each output's window taps (input indices, (ky, kx) order, -1 = none)
    and the tap count; backward groups the (output, input) connections by input."""

    def __init__(self, l: Layer):
        o, i, _ = _connections(l)
        by_out = _group(o, l.out_size)
        self.taps = np.where(by_out >= 0, i[np.maximum(by_out, 0)], -1)
        self.n = (self.taps >= 0).sum(axis=1).astype(F32)
        self.conn_out, self.conn_in = o, i
        self.by_in = _group(i, l.in_size)


class _Tables:
    """Grouped connection tables of one linear layer, as gather indices."""

    def __init__(self, l: Layer):
        o, i, w = _connections(l)
        nw, ni, no = l.n_weights, l.in_size, l.out_size
        self.fwd = _pair(_group(o, no), w, nw, i, ni)      # w[.] * x[.]
        self.gw = _pair(_group(w, nw), o, no, i, ni)       # d[.] * x[.]
        self.dx = _pair(_group(i, ni), o, no, w, nw)       # d[.] * w[.]
        outs = np.arange(no)
        self.gb = _pair(_group(outs % l.out_c, l.out_c), outs, no, np.zeros(no, np.int64), 1)


_NEG0 = np.array([-0.0], F32)
_ONE = np.array([1.0], F32)


def _terms(idx, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.concatenate([a, _NEG0])[idx[0]] * np.concatenate([b, _ONE])[idx[1]]


def _acc(first: np.ndarray, terms: np.ndarray) -> np.ndarray:
    """first[k] + terms[0, k] + terms[1, k] + ... left to right (float32)."""
    m = np.concatenate([np.asarray(first, F32)[None, :], terms], axis=0)
    return np.add.accumulate(m, axis=0, dtype=F32)[-1]


def _act(act: int, v: np.ndarray) -> np.ndarray:
    if act == ACT_NONE:
        return v
    v = np.where(v > 0, v, F32(0.0)).astype(F32)
    if act == ACT_RELU6:
        v = np.where(v > 6, F32(6.0), v).astype(F32)
    return v


def _argmax(t: _PoolTables, x: np.ndarray) -> np.ndarray:
    """Per output: the input index of the first largest tap (the C scan: strictly larger
    replaces)."""
    v = np.where(t.taps >= 0, x[np.maximum(t.taps, 0)], F32(-np.inf))
    return t.taps[np.arange(t.taps.shape[0]), np.argmax(v, axis=1)]


def _pool_forward(l: Layer, t: _PoolTables, x: np.ndarray) -> np.ndarray:
    if l.kind == AVGPOOL:
        terms = np.where(t.taps >= 0, x[np.maximum(t.taps, 0)], F32(-0.0)).astype(F32)
        s = _acc(np.zeros(l.out_size, F32), np.ascontiguousarray(terms.T))
        return (s / t.n).astype(F32)
    return x[_argmax(t, x)].astype(F32)


def _pool_backward(l: Layer, t: _PoolTables, x: np.ndarray, d: np.ndarray) -> np.ndarray:
    """The input delta: each output's delta to its arg-max (max) or d / n to every tap (avg),
    added per input in connection order ((oy, ox, c), then taps)."""
    if l.kind == AVGPOOL:
        share = (d / t.n).astype(F32)[t.conn_out]
    else:
        arg = _argmax(t, x)
        share = np.where(t.conn_in == arg[t.conn_out], d[t.conn_out], F32(-0.0)).astype(F32)
    share = np.concatenate([share, _NEG0])
    terms = share[np.where(t.by_in >= 0, t.by_in, share.size - 1)]
    return _acc(np.zeros(l.in_size, F32), np.ascontiguousarray(terms.T))


def _hash32(x: np.ndarray) -> np.ndarray:
    """tol_stage_hash32_ (lowbias32) on uint32 arrays."""
    x = np.asarray(x, np.uint32).copy()
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
    return x


# --------------------------------------------------------------------------- stage
@dataclasses.dataclass
class StageConfig(OnlineConfig):
    """tol_stage_config_t: the layers and their exported parameters; the rest (replay buffer,
    batch bounds, settings, ...) is :class:`~tinyol.learn.learner.OnlineConfig`'s. Only layers and
    init_params may be given by position."""

    layers: list
    init_params: np.ndarray | None = None
    _: dataclasses.KW_ONLY
    # twin only (not on the device): learning rate lr / (1 + lr_decay * samples_seen), a
    # schedule measured for the recipe (docs/adaptive.md, "Recipe"); 0 = constant, the C's
    lr_decay: float = 0.0
    # tol_stage_config_t.stage_lr_scale: the layers below the classifier learn at
    # lr * stage_lr_scale (float32 product); 0 = at lr
    stage_lr_scale: float = 0.0

    def check(self, rows: int) -> None:
        if not (math.isfinite(self.stage_lr_scale) and self.stage_lr_scale >= 0):
            raise LearnerError("TOL_ERR_ARG")
        if is_q16(self.layers) and not self.no_momentum:
            raise LearnerError("TOL_ERR_ARG")  # an int16 stage has no momentum buffers
        super().check(rows)

    def check_settings(self, s) -> None:
        if is_q16(self.layers) and s.clip_norm != 0:
            raise LearnerError("TOL_ERR_ARG")  # no batch gradient to clip
        super().check_settings(s)

    @property
    def n_outputs(self) -> int:
        return self.layers[-1].out_c

    @property
    def nbytes(self) -> int:
        return stage_bytes(self.layers, self.replay_capacity, self.replay_bits, self.max_new,
                           self.max_old, self.no_momentum)


class Stage(OnlineLearner):
    """tol_stage: predict / learn / replay_add with the C call semantics (raises
    :class:`LearnerError` where the C returns a status other than TOL_OK); the queue, the
    call checks and the counters are :class:`OnlineLearner`'s, as for the head."""

    def __init__(self, cfg: StageConfig):
        layers = list(cfg.layers)
        if not chain_ok(layers):
            raise LearnerError("TOL_ERR_ARG")
        self.layers = layers
        self.latent = layers[0].in_size
        self.rows = layers[-1].out_c
        self._setup(cfg, self.latent, self.rows)
        if cfg.init_params is None and n_trained(layers) != n_params(layers):
            raise LearnerError("TOL_ERR_ARG")  # what does not train is read from the export
        self.n_params = n_trained(layers)  # T: params[] holds the trained parameters only
        # offsets of each layer's trained parameters in params[], and of all of them in the export
        self.offsets = np.concatenate([[0], np.cumsum([l.n_train for l in layers])]).astype(int)
        self.poffsets = np.concatenate([[0], np.cumsum([l.n_params for l in layers])]).astype(int)
        self.first_trained = min(i for i, l in enumerate(layers) if l.n_train)
        self.tables = [(_Tables(l) if l.kind in LINEAR else
                        _PoolTables(l) if l.kind in (MAXPOOL, AVGPOOL, GMAXPOOL) else None)
                       for l in layers]
        is_w = np.zeros(self.n_params, bool)
        exps = np.zeros(self.n_params, np.int64)
        below = np.zeros(self.n_params, bool)  # the layers below the classifier
        for i, (l, off) in enumerate(zip(layers, self.offsets)):
            if l.train == TRAIN_ALL:
                is_w[off:off + l.n_weights] = True
            exps[off:off + l.n_train] = l.bq
            if l.train == TRAIN_ALL:
                exps[off:off + l.n_weights] = l.wq
            below[off:off + l.n_train] = i + 1 < len(layers)
        self.is_w = is_w
        self.below = below
        self.q16 = is_q16(layers)
        # an int16 stage: value = q * scale, exactly (powers of two)
        self.qscale = np.ldexp(np.ones(self.n_params, F32), exps).astype(F32)
        self.qinv = np.ldexp(np.ones(self.n_params, F32), -exps).astype(F32)
        self.reset()

    # -- views of the last layer
    @property
    def last_w(self) -> np.ndarray:
        l, off = self.layers[-1], self.offsets[-2]
        return self.params[off:off + l.n_weights].reshape(l.out_c, l.in_size)

    @property
    def last_b(self) -> np.ndarray:
        l, off = self.layers[-1], self.offsets[-2]
        return self.params[off + l.n_weights:off + l.n_params]

    def layer_params(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Layer i's weights and biases: the trained ones from params[], the others from the
        export (tol_stage_wb_)."""
        l, off, poff = self.layers[i], self.offsets[i], self.poffsets[i]
        exp = self._init
        w = (self.params[off:off + l.n_weights] if l.train == TRAIN_ALL
             else exp[poff:poff + l.n_weights])
        b = (self.params[off + l.n_train - l.out_c:off + l.n_train] if l.train != TRAIN_FROZEN
             else exp[poff + l.n_weights:poff + l.n_params])
        return w, b

    @property
    def n_active(self) -> int:
        return int(self.active.sum())

    # -- what OnlineLearner asks of a learner
    @property
    def _rows(self) -> int:
        return self.rows

    def _active_rows(self) -> np.ndarray:
        return self.active

    def _last_probabilities(self) -> np.ndarray:
        return self.probs

    def _threshold(self) -> float:
        return math.inf

    def reset(self) -> None:
        self._reset_common()
        cfg = self.cfg
        self._init = (np.zeros(n_params(self.layers), F32) if cfg.init_params is None
                      else np.asarray(cfg.init_params, F32).reshape(n_params(self.layers)).copy())
        self.params = trained_part(self.layers, self._init)
        if self.q16:  # tol_stage_q_reset_: round to nearest (even), clamp
            with np.errstate(invalid="ignore", over="ignore"):
                v = np.rint((self.params * self.qinv).astype(F32))
            v = np.where(np.isnan(v), F32(0.0), v)
            self.q = np.clip(v, -Q_MAX, Q_MAX).astype(np.int16)
            self.params = (self.q.astype(F32) * self.qscale).astype(F32)
        k = cfg.init_classes
        self.last_w[k:] = 0
        self.last_b[k:] = 0
        if self.q16:
            l, off = self.layers[-1], self.offsets[-2]
            self.q[off + k * l.in_size:off + l.n_weights] = 0
            self.q[off + l.n_weights + k:off + l.n_params] = 0
        self.mom = np.zeros(self.n_params, F32)
        self.grads = np.zeros(self.n_params, F32)
        self.active = np.zeros(self.rows, bool)
        self.active[:k] = True
        self.probs = np.zeros(self.rows, F32)

    def _activate(self, r: int) -> None:
        if r >= self.rows or self.active[r]:
            return
        l, off = self.layers[-1], self.offsets[-2]
        d = l.in_size
        for arr in (self.params, self.mom) + ((self.q,) if self.q16 else ()):
            arr[off + r * d:off + (r + 1) * d] = 0
            arr[off + l.n_weights + r] = 0
        self.active[r] = True

    # -- forward / backward
    def _layer_forward(self, i: int, x: np.ndarray) -> np.ndarray:
        l, t = self.layers[i], self.tables[i]
        if l.kind == GAP:
            npx = l.in_h * l.in_w
            s = np.add.accumulate(np.concatenate([np.zeros((1, l.in_c), F32),
                                                  x.reshape(npx, l.in_c)]), axis=0, dtype=F32)[-1]
            return (s * (F32(1.0) / F32(npx))).astype(F32)
        if l.kind in (MAXPOOL, AVGPOOL, GMAXPOOL):
            return _pool_forward(l, t, x)
        w, b = self.layer_params(i)
        bias = b[np.arange(l.out_size) % l.out_c]
        return _act(l.act, _acc(bias, _terms(t.fwd, w, x)))

    def forward(self, x) -> list[np.ndarray]:
        """Every layer's output for latent x (float[latent]); the last is the logits."""
        outs = []
        h = np.asarray(x, F32)
        for i in range(len(self.layers)):
            h = self._layer_forward(i, h)
            outs.append(h)
        return outs

    def _softmax(self, z: np.ndarray) -> np.ndarray:
        return softmax_active(z, self.active)

    def _grad_add_f(self, x: np.ndarray, label: int, weight) -> None:
        outs = self.forward(x)
        p = self._softmax(outs[-1])
        self.probs = p
        t = np.zeros(self.rows, F32)
        t[label] = 1
        d = np.where(self.active, ((p - t) * F32(weight)).astype(F32), F32(0.0)).astype(F32)
        first = self.first_trained  # backward ends at the first layer that trains
        for i in range(len(self.layers) - 1, first - 1, -1):
            l, tb, off = self.layers[i], self.tables[i], self.offsets[i]
            y = outs[i]
            inp = outs[i - 1] if i > 0 else np.asarray(x, F32)
            if l.act != ACT_NONE:
                keep = (y > 0) & ((y < 6) if l.act == ACT_RELU6 else True)
                d = np.where(keep, d, F32(0.0)).astype(F32)
            if l.kind == GAP:
                npx = l.in_h * l.in_w
                d = np.tile((d * (F32(1.0) / F32(npx))).astype(F32), npx)
                continue
            if l.kind in (MAXPOOL, AVGPOOL, GMAXPOOL):
                if i > first:
                    d = _pool_backward(l, tb, inp, d)
                continue
            g = self.grads
            w, _ = self.layer_params(i)
            if l.train == TRAIN_ALL:
                gw = g[off:off + l.n_weights]
                g[off:off + l.n_weights] = _acc(gw, _terms(tb.gw, d, inp))
            if l.train != TRAIN_FROZEN:
                bo = off + l.n_train - l.out_c
                g[bo:bo + l.out_c] = _acc(g[bo:bo + l.out_c], _terms(tb.gb, d, _ONE))
            if i > first:
                d = _acc(np.zeros(l.in_size, F32), _terms(tb.dx, d, w))

    def _lr(self):
        """Per trained parameter: lr, or lr * stage_lr_scale below the classifier (tol_stage_lr_)."""
        s = self.settings
        lr = s.lr if not self.cfg.lr_decay else s.lr / (1.0 + self.cfg.lr_decay * self.samples_seen)
        lr, sc = F32(lr), F32(self.cfg.stage_lr_scale)
        if sc > 0:
            return np.where(self.below, F32(lr * sc), lr).astype(F32)
        return np.full(self.n_params, lr, F32)

    def _grad_zero(self) -> None:
        self.grads = np.zeros(self.n_params, F32)
        self._j = 0  # an int16 stage: the sample's place in the batch

    def _grad_add(self, x: np.ndarray, label: int, weight) -> None:
        if not self.q16:
            return self._grad_add_f(x, label, weight)
        # tol_stage_learn_q16_: this sample's gradient alone, applied at once
        self.grads = np.zeros(self.n_params, F32)
        self._grad_add_f(x, label, weight)
        g = self.grads
        key = (self.updates << 10) + self._j
        self._j += 1
        base = _hash32(np.array([(self.cfg.seed + 0x9E3779B9 * key) & 0xFFFFFFFF], np.uint32))[0]
        h = _hash32((np.uint32(base) + np.arange(self.n_params, dtype=np.uint32)).astype(np.uint32))
        u = ((h >> np.uint32(8)).astype(F32) * F32(2.0 ** -24)).astype(F32)
        wd = F32(self.settings.weight_decay)
        with np.errstate(over="ignore", invalid="ignore"):
            if wd != 0:
                g = np.where(self.is_w, (g + wd * self.params).astype(F32), g).astype(F32)
            delta = (-((self._lr() * g).astype(F32) * self.qinv)).astype(F32)
            v = (delta + u).astype(F32)
            r = np.floor(np.clip(v, F32(-65535.0), F32(65535.0)))
            nq = np.clip(self.q.astype(np.float64) + r, -Q_MAX, Q_MAX)
            keep = (delta == 0) | np.isnan(delta)
            nq = np.where(keep, self.q, nq)
        self.q = nq.astype(np.int16)
        self.params = (self.q.astype(F32) * self.qscale).astype(F32)

    def _step(self) -> bool:
        if self.q16:
            return True  # every sample updated the weights already; nothing is rejected
        s = self.settings
        lr, mu, wd, clip = self._lr(), F32(s.momentum), F32(s.weight_decay), F32(s.clip_norm)
        g = self.grads
        with np.errstate(over="ignore", invalid="ignore"):
            if clip > 0:
                norm = np.sqrt(seqsum(g * g)).astype(F32)
                if not np.isfinite(norm):
                    return False
                if norm > clip:
                    g = (g * F32(clip / norm)).astype(F32)
            g = np.where(self.is_w, (g + wd * self.params).astype(F32), g).astype(F32)
            v = (mu * self.mom + g).astype(F32) if not self.cfg.no_momentum else g
            wn = (self.params - lr * v).astype(F32)
        if not (np.isfinite(v).all() and np.isfinite(wn).all()):
            return False
        if not self.cfg.no_momentum:
            self.mom = v
        self.params = wn
        return True

    # -- calls
    def predict_f(self, x) -> tuple[int, float]:
        x = np.asarray(x, F32)
        if not np.isfinite(x).all():
            raise LearnerError("TOL_ERR_NONFINITE")
        best, prob, self.probs = predict_active(self.forward(x)[-1], self.active)
        return best, prob

    def predict(self, q) -> tuple[int, float]:
        return self.predict_f(self._deq(q))

    # idle-time rehearsal (tol_stage_rehearse): OnlineLearner.rehearse / idle

    # -- the stage image (tol_stage_image_read / tol_stage_push_commit)
    def image(self) -> bytes:
        """Every parameter as float32 LE, then the active flags (uint8[rows]): GET_STAGE's bytes.
        An int16 stage has none (TOL_ERR_UNSUPPORTED)."""
        if self.q16:
            raise LearnerError("TOL_ERR_UNSUPPORTED")
        return self.params.astype("<f4").tobytes() + self.active.astype(np.uint8).tobytes()

    def load_image(self, image: bytes) -> None:
        """SET_STAGE's commit: parameters and flags replaced, momentum and the queue cleared
        (class counts, replay buffer, PRNG and counters kept); a bad image changes nothing."""
        if self.q16:
            raise LearnerError("TOL_ERR_UNSUPPORTED")
        if len(image) != 4 * self.n_params + self.rows:
            raise LearnerError("TOL_ERR_RANGE")
        flags = np.frombuffer(image, np.uint8, self.rows, 4 * self.n_params)
        params = np.frombuffer(image, "<f4", self.n_params).astype(F32)
        if (flags > 1).any():
            raise LearnerError("TOL_ERR_RANGE")
        if not np.isfinite(params).all():
            raise LearnerError("TOL_ERR_NONFINITE")
        self.params = params.copy()
        self.active = flags.astype(bool)
        self.mom = np.zeros(self.n_params, F32)
        self.pending = []

"""Numpy reference of the on-device learner (mcu/src/tol_learner.c and friends).

The same algorithm as the C firmware, in float32, with the same PRNG
(xorshift32) and the same order of operations and random draws, so that a C
run and a numpy run of one stream give identical predictions and weights
equal to float rounding (sums are taken sequentially, like the C loops;
``np.exp`` may differ from ``expf`` in the last bit). docs/learner.md
describes the algorithm; this module is its executable specification and the
oracle the C tests compare against.

Classes mirror the C modules: :class:`Prng` (tol_prng), :class:`Head`
(tol_head), :class:`Replay` (tol_replay), :class:`AnomalyThreshold`
(tol_anomaly), :class:`Learner` (tol_learner). :class:`OnlineLearner` holds what
the head learner and the adaptive stage (stage.py) share around their arithmetic: the
queue of fresh samples, the call checks, replay_add, the counters and the result of a
learn call (:class:`Result`, tinyol.h's tinyol_result_t).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..errors import TinyolError

F32 = np.float32

# tol_learn_mode_t
MODE_FROZEN, MODE_SGD, MODE_REPLAY = 0, 1, 2
MODES = {"frozen": MODE_FROZEN, "sgd": MODE_SGD, "replay": MODE_REPLAY}
# tol_head_kind_t
HEAD_CLASSIFIER, HEAD_AUTOENCODER = 0, 1
# tol_replay_policy_t
POLICY_RESERVOIR, POLICY_BALANCED, POLICY_AR1 = 0, 1, 2
POLICIES = {"reservoir": POLICY_RESERVOIR, "balanced": POLICY_BALANCED, "ar1": POLICY_AR1}
REPLAY_MAX_BATCH = 32
MAX_OLD = 1024
REHEARSE_MAX = 255  # most rehearsal steps per idle period (a u8: settings.rehearse, the SAMPLE reply)


# --------------------------------------------------------------------------- PRNG
class Prng:
    """xorshift32 (13, 17, 5); identical to tol_prng.c."""

    def __init__(self, seed: int):
        self.seed(seed)

    def seed(self, seed: int) -> None:
        h = int(seed) & 0xFFFFFFFF  # fmix32 (MurmurHash3 finaliser)
        h ^= h >> 16
        h = (h * 0x85EBCA6B) & 0xFFFFFFFF
        h ^= h >> 13
        h = (h * 0xC2B2AE35) & 0xFFFFFFFF
        h ^= h >> 16
        self.state = h if h else 1

    def next(self) -> int:
        x = self.state
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        self.state = x
        return x

    def below(self, n: int) -> int:
        if n == 0:
            return 0
        return (self.next() * int(n)) >> 32


# --------------------------------------------------------------------------- helpers
def seqsum(a: np.ndarray) -> np.float32:
    """Left-to-right float32 sum (like a C loop), not numpy's pairwise sum."""
    a = np.asarray(a, dtype=F32).ravel()
    if a.size == 0:
        return F32(0.0)
    return F32(np.add.accumulate(a, dtype=F32)[-1])


_EXP_POLY = [F32(v) for v in ("1.98412698e-4", "1.38888889e-3", "8.33333333e-3",
                               "4.16666667e-2", "1.66666667e-1", "0.5", "1.0", "1.0")]


def expf(x) -> np.ndarray:
    """tol_head_expf: exp(x) for x <= 0 in the C function's float32 steps (bit-exact)."""
    x = np.asarray(x, F32)
    with np.errstate(all="ignore"):
        flush = ~(x >= F32(-87.0))  # also NaN
        x = np.where(flush, F32(0.0), np.minimum(x, F32(0.0))).astype(F32)
        kf = np.floor(x * F32("1.44269504") + F32(0.5)).astype(F32)
        r = (x - kf * F32("0.693359375")) - kf * F32("-2.12194440e-4")
        p = _EXP_POLY[0]
        for c in _EXP_POLY[1:]:
            p = (p * r + c).astype(F32)
        scale = ((kf.astype(np.int32) + 127).astype(np.uint32) << np.uint32(23)).view(F32)
        return np.where(flush, F32(0.0), p * scale).astype(F32)


def softmax_active(z: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Softmax over the active rows of z, 0 for the others (tol_head's and tol_stage's, the
    C order: max, expf of the differences, their sequential sum)."""
    p = np.zeros(len(z), F32)
    if not active.any():
        return p
    za = z[active]
    e = expf(za - za.max())
    p[active] = e / seqsum(e)
    return p


def predict_active(z: np.ndarray, active: np.ndarray) -> tuple[int, float, np.ndarray]:
    """What a classifier predicts from its logits z: the first largest active row, its softmax
    probability and every row's (:func:`softmax_active`); -1, 0.0 and zeros when no row is
    active (tol_head_predict's and tol_stage_predict_f's choice)."""
    if not active.any():
        return -1, 0.0, np.zeros(len(z), F32)
    idx = np.flatnonzero(active)
    best = int(idx[np.argmax(z[idx])])
    p = softmax_active(z, active)
    return best, float(p[best]), p


def dequantize(q, scale: float, zero_point: int) -> np.ndarray:
    """x = scale * (q - zero_point), float32 (as tol_learner's dequantize)."""
    q = np.asarray(q)
    return F32(scale) * (q.astype(np.int32) - int(zero_point)).astype(F32)


def round_half_away(v: np.ndarray) -> np.ndarray:
    """C roundf(): halves away from zero (numpy's round is half-to-even)."""
    v = np.asarray(v, dtype=F32)
    r = np.trunc(v)
    frac = v - r
    return (r + np.where(np.abs(frac) >= F32(0.5), np.sign(v), F32(0.0))).astype(F32)


def quantize(x, scale: float, zero_point: int) -> np.ndarray:
    """q = clip(round_half_away(x / scale) + zero_point, -128, 127), int8."""
    v = round_half_away(np.asarray(x, dtype=F32) / F32(scale)) + F32(zero_point)
    return np.clip(v, F32(-128.0), F32(127.0)).astype(np.int8)


def requant7(q) -> np.ndarray:
    """int8 -> 7 bits: round_half_away(q / 2) clipped to [-64, 63]."""
    v = np.asarray(q).astype(np.int32)
    h = np.where(v >= 0, (v + 1) // 2, -((-v + 1) // 2))
    return np.minimum(h, 63).astype(np.int8)


def pack7(q7) -> bytes:
    """Pack 7-bit values (each in [-64, 63]): 8 values -> 7 bytes, value k of a
    group at bits 7k..7k+6 of the group's little-endian 56-bit word."""
    q7 = np.asarray(q7).astype(np.int64)
    n = q7.size
    groups = (n + 7) // 8
    v = np.zeros(groups * 8, dtype=np.uint64)
    v[:n] = (q7 & 0x7F).astype(np.uint64)
    v = v.reshape(groups, 8)
    shifts = (np.arange(8, dtype=np.uint64) * np.uint64(7))
    words = np.bitwise_or.reduce(v << shifts, axis=1)
    out = ((words[:, None] >> (np.arange(7, dtype=np.uint64) * np.uint64(8))) & np.uint64(0xFF))
    return out.astype(np.uint8).tobytes()


def unpack7(data: bytes, n: int) -> np.ndarray:
    """Inverse of :func:`pack7`: n values sign-extended to int8."""
    b = np.frombuffer(bytes(data), dtype=np.uint8).astype(np.uint64).reshape(-1, 7)
    words = np.bitwise_or.reduce(b << (np.arange(7, dtype=np.uint64) * np.uint64(8)), axis=1)
    v = (words[:, None] >> (np.arange(8, dtype=np.uint64) * np.uint64(7))) & np.uint64(0x7F)
    v = v.astype(np.int32).ravel()[:n]
    return np.where(v >= 64, v - 128, v).astype(np.int8)


def code4(q, lo, step) -> np.ndarray:
    """tol_replay_code4: clip(round_half_away((q - lo) / step), 0, 15) in integers (uint8)."""
    v = np.asarray(q).astype(np.int32) - np.asarray(lo).astype(np.int32)
    k = np.asarray(step).astype(np.int32)
    c = np.where(v >= 0, (2 * v + k) // (2 * k), -((-2 * v + k) // (2 * k)))
    return np.clip(c, 0, 15).astype(np.uint8)


def decode4(code, lo, step) -> np.ndarray:
    """tol_replay_decode4: min(lo + step * code, 127) (int8)."""
    v = (np.asarray(lo).astype(np.int32)
         + np.asarray(step).astype(np.int32) * np.asarray(code).astype(np.int32))
    return np.minimum(v, 127).astype(np.int8)


def pack4(codes) -> bytes:
    """Two 4-bit codes per byte, value 2k in the low nibble (a short row padded with 0)."""
    c = np.asarray(codes, np.uint8).ravel()
    if c.size % 2:
        c = np.concatenate([c, np.zeros(1, np.uint8)])
    return (c[0::2] | (c[1::2] << 4)).astype(np.uint8).tobytes()


def fit_codec4(Q: np.ndarray, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """The 4-bit codec of latents shaped like Q [N, dim] (int8, calibration latents at the
    cut), one grid per channel (value i -> channel i % channels): lo = the channel's smallest
    value, step = the smallest that spans its largest within 16 levels (ceil(range / 15),
    at least 1). Returns (lo int8 [channels], step uint8 [channels])."""
    Q = np.asarray(Q).astype(np.int32).reshape(len(Q), -1)
    if Q.shape[1] % channels:
        raise TinyolError(f"latent of {Q.shape[1]} values does not split into {channels} channels")
    per = Q.reshape(len(Q), -1, channels).transpose(2, 0, 1).reshape(channels, -1)
    lo, hi = per.min(axis=1), per.max(axis=1)
    step = np.maximum(1, -(-(hi - lo) // 15))
    return lo.astype(np.int8), step.astype(np.uint8)


PQ_BASE = 128      # TOL_REPLAY_PQ(sub) = 128 + sub: product-quantized storage
PQ_CODEWORDS = 256  # TOL_REPLAY_PQ_CODEWORDS


def pq_bits(dim: int, m: int) -> int:
    """The bits code of PQ storage with m sub-vectors (TOL_REPLAY_PQ(dim / m))."""
    if m < 1 or dim % m or not 1 <= dim // m <= 127:
        raise TinyolError(f"pq:{m}: a latent of {dim} values does not split into {m} "
                          f"sub-vectors of 1..127 values",
                          hint=f"choose M dividing {dim}, at least {-(-dim // 127)}")
    return PQ_BASE + dim // m


def is_pq(bits: int) -> bool:
    return bits > PQ_BASE


def codec_name(bits: int, dim: int) -> str:
    """How the export option names a storage: '8', '4', 'pq:M'."""
    return f"pq:{dim // (bits - PQ_BASE)}" if is_pq(bits) else str(bits)


def pq_nearest(Q, book) -> np.ndarray:
    """tol_replay_pq_nearest for many sub-vectors: Q int8 [N, sub], book int8 [256, sub];
    the index (uint8 [N]) of the least integer sum of squared differences, lowest on ties."""
    e = np.asarray(Q).astype(np.int64)[:, None, :] - np.asarray(book).astype(np.int64)[None]
    return np.argmin((e * e).sum(axis=2), axis=1).astype(np.uint8)  # argmin: first of ties


def pq_encode(q, book) -> np.ndarray:
    """One int8 latent q [dim] -> its codes uint8 [M] (book int8 [M, 256, sub])."""
    M, _, sub = book.shape
    qs = np.asarray(q).astype(np.int8).reshape(M, sub)
    return np.array([pq_nearest(qs[m][None], book[m])[0] for m in range(M)], np.uint8)


def pq_decode(codes, book) -> np.ndarray:
    """Codes uint8 [M] -> the int8 latent [dim] they read back as."""
    M = book.shape[0]
    return book[np.arange(M), np.asarray(codes).astype(np.int64)].reshape(-1).astype(np.int8)


def fit_pq(Q: np.ndarray, m: int, seed: int = 0, iters: int = 25) -> np.ndarray:
    """The PQ codebook of latents shaped like Q [N, dim] (int8, calibration latents at the
    cut): per sub-vector, k-means (Lloyd, 256 centroids, k-means++ start from a
    np.random.default_rng(seed + sub-vector), ``iters`` rounds with the device's nearest
    rule) on the int8 values, centroids rounded half away to int8. Fewer distinct points than
    256: every distinct point is a codeword, the rest repeat the first. Returns int8
    [m, 256, dim/m]."""
    Q = np.asarray(Q).astype(np.int8).reshape(len(Q), -1)
    dim = Q.shape[1]
    sub = pq_bits(dim, m) - PQ_BASE
    book = np.zeros((m, PQ_CODEWORDS, sub), np.int8)
    for j in range(m):
        P = Q[:, j * sub:(j + 1) * sub]
        uniq = np.unique(P, axis=0)
        if len(uniq) <= PQ_CODEWORDS:
            book[j, :len(uniq)] = uniq
            book[j, len(uniq):] = uniq[0]
            continue
        rng = np.random.default_rng(seed + j)
        Pf = P.astype(np.float64)
        C = [Pf[rng.integers(len(Pf))]]
        d2 = ((Pf - C[0]) ** 2).sum(axis=1)
        for _ in range(1, PQ_CODEWORDS):
            C.append(Pf[rng.choice(len(Pf), p=d2 / d2.sum())] if d2.sum() > 0
                     else Pf[rng.integers(len(Pf))])
            d2 = np.minimum(d2, ((Pf - C[-1]) ** 2).sum(axis=1))
        C = np.clip(round_half_away(np.array(C)), -128, 127).astype(np.int8)
        for _ in range(iters):
            a = pq_nearest(P, C)
            new = C.copy()
            for k in np.unique(a):
                new[k] = np.clip(round_half_away(Pf[a == k].mean(axis=0)), -128, 127)
            if np.array_equal(new, C):
                break
            C = new
        book[j] = C
    return book


def row_bytes(dim: int, bits: int) -> int:
    """TOL_REPLAY_ROW_BYTES."""
    if is_pq(bits):
        return dim // (bits - PQ_BASE)
    return (4 * dim if bits == 32 else dim if bits == 8 else (dim + 1) // 2 if bits == 4
            else 7 * ((dim + 7) // 8))


def _align4(n: int) -> int:
    return (n + 3) & ~3


def head_bytes(dim: int, rows: int, max_batch: int = 1, momentum: bool = True) -> int:
    """TOL_HEAD_BYTES: W, b, [vW, vb], [gradient scratch gW, gb if max_batch > 1], z,
    batch errors and inputs, active flags."""
    return (4 * (((2 if momentum else 1) + (1 if max_batch > 1 else 0)) * (rows * dim + rows) + rows
                 + max_batch * (rows + dim)) + _align4(rows))


def replay_bytes(cap: int, dim: int, bits: int, n_classes: int) -> int:
    """TOL_REPLAY_BYTES: rows + class_seen + labels + counts."""
    return (_align4(cap * row_bytes(dim, bits)) + 4 * n_classes + _align4(2 * cap)
            + _align4(2 * n_classes))


DEFAULT_MAX_OLD = 16


def max_old_eff(cap: int, max_old: int) -> int:
    """TOL_LEARNER_MAX_OLD_EFF: max_old 0 means 16 with a buffer, 0 without."""
    return max_old if max_old > 0 else (DEFAULT_MAX_OLD if cap > 0 else 0)


def learner_bytes(dim: int, n_outputs: int, cap: int, bits: int, max_new: int = 1,
                  max_old: int = 0, no_momentum: bool = False) -> int:
    """TOL_LEARNER_BYTES_EX (the static buffer the firmware reserves);
    with the defaults it is TOL_LEARNER_BYTES."""
    return (head_bytes(dim, n_outputs, max_new + max_old_eff(cap, max_old), not no_momentum)
            + (replay_bytes(cap, dim, bits, n_outputs) if cap else 0)
            + 4 * (dim + 2 * n_outputs) + _align4(2 * max_new))


# --------------------------------------------------------------------------- head
class Head:
    """Dense head y = W x + b with active rows; mirrors tol_head.c."""

    def __init__(self, dim: int, rows: int, init_w=None, init_b=None, init_active: int = 0,
                 momentum_buffers: bool = True):
        self.dim, self.rows = int(dim), int(rows)
        self.momentum_buffers = bool(momentum_buffers)
        self.init_w = None if init_w is None else np.asarray(init_w, F32).reshape(rows, dim)
        self.init_b = None if init_b is None else np.asarray(init_b, F32).reshape(rows)
        self.init_active = int(init_active)
        self.reset()

    def reset(self) -> None:
        r, d, k = self.rows, self.dim, self.init_active
        self.w = np.zeros((r, d), F32)
        self.b = np.zeros(r, F32)
        if self.init_w is not None:
            self.w[:k] = self.init_w[:k]
        if self.init_b is not None:
            self.b[:k] = self.init_b[:k]
        self.vw = np.zeros((r, d), F32)
        self.vb = np.zeros(r, F32)
        self.gw = np.zeros((r, d), F32)
        self.gb = np.zeros(r, F32)
        self.active = np.zeros(r, bool)
        self.active[:k] = True
        self.probs = np.zeros(r, F32)

    @property
    def n_active(self) -> int:
        return int(self.active.sum())

    def activate(self, r: int) -> None:
        if r >= self.rows or self.active[r]:
            return
        self.w[r] = 0
        self.vw[r] = 0
        self.b[r] = 0
        self.vb[r] = 0
        self.active[r] = True

    def forward(self, x) -> np.ndarray:
        """Scores of all rows (0 for inactive); sequential sums like C."""
        x = np.asarray(x, F32)
        z = np.zeros(self.rows, F32)
        a = self.active
        if a.any():
            terms = np.concatenate([self.b[a][:, None], self.w[a] * x[None, :]], axis=1)
            z[a] = np.add.accumulate(terms, axis=1, dtype=F32)[:, -1]
        return z

    def softmax(self, z: np.ndarray) -> np.ndarray:
        return softmax_active(z, self.active)

    def predict(self, x) -> tuple[int, float]:
        """The best active row and its probability; self.probs keeps every row's (tol_head's z
        after a predict; left alone when no row is active: the C computes nothing then)."""
        if not self.active.any():
            return -1, 0.0
        best, prob, self.probs = predict_active(self.forward(x), self.active)
        return best, prob

    def grad_zero(self) -> None:
        self.gw[:] = 0
        self.gb[:] = 0

    def grad_add_ce(self, x, label: int, weight) -> float:
        x = np.asarray(x, F32)
        p = self.softmax(self.forward(x))
        a = self.active
        t = np.zeros(self.rows, F32)
        t[label] = 1
        g = (p - t) * F32(weight)
        self.gb[a] += g[a]
        self.gw[a] += g[a][:, None] * x[None, :]
        return float(-math.log(max(float(p[label]), 1e-30)))

    def mse(self, x, target) -> np.float32:
        e = self.forward(x) - np.asarray(target, F32)
        return F32(seqsum(e * e) / F32(self.rows))

    def grad_add_mse(self, x, target, weight) -> np.float32:
        x = np.asarray(x, F32)
        z = self.forward(x)
        e = z - np.asarray(target, F32)
        m = F32(seqsum(e * e) / F32(self.rows))
        coef = F32(2.0) / F32(self.rows) * F32(weight)
        g = e * coef
        a = self.active
        self.gb[a] += g[a]
        self.gw[a] += g[a][:, None] * x[None, :]
        return m

    def step(self, lr, momentum, weight_decay, clip_norm) -> bool:
        """SGD step; False (nothing changed) if it would diverge.

        The gradient is accumulated densely here; the C keeps it factored
        (per-sample errors and inputs) and sums the products in the same order
        (b ascending from 0.0f), which gives the same float32 values."""
        if momentum != 0 and not self.momentum_buffers:
            raise LearnerError("TOL_ERR_ARG")
        a = self.active
        lr, mu, wd, clip = F32(lr), F32(momentum), F32(weight_decay), F32(clip_norm)
        gw, gb = self.gw[a], self.gb[a]
        if clip > 0:
            sq = np.concatenate([gw, gb[:, None]], axis=1)
            norm = np.sqrt(seqsum(sq * sq)).astype(F32)
            if not np.isfinite(norm):
                return False
            if norm > clip:
                sc = F32(clip / norm)
                gw = gw * sc
                gb = gb * sc
        with np.errstate(over="ignore", invalid="ignore"):
            g = gw + wd * self.w[a]
            v = mu * self.vw[a] + g if self.momentum_buffers else g
            wn = self.w[a] - lr * v
            vb = mu * self.vb[a] + gb if self.momentum_buffers else gb
            bn = self.b[a] - lr * vb
        if not (np.isfinite(v).all() and np.isfinite(wn).all()
                and np.isfinite(vb).all() and np.isfinite(bn).all()):
            return False
        self.vw[a] = v
        self.w[a] = wn
        self.vb[a] = vb
        self.b[a] = bn
        return True

    def load(self, w, b, active=None) -> None:
        w = np.asarray(w, F32).reshape(self.rows, self.dim)
        b = np.asarray(b, F32).reshape(self.rows)
        if not (np.isfinite(w).all() and np.isfinite(b).all()):
            raise TinyolError("non-finite head")
        self.w, self.b = w.copy(), b.copy()
        self.vw[:] = 0
        self.vb[:] = 0
        self.active = np.ones(self.rows, bool) if active is None else np.asarray(active, bool).copy()


# --------------------------------------------------------------------------- replay
class Replay:
    """Latent replay buffer; mirrors tol_replay.c (see its header for the rules).

    ``store`` holds what the device stores: float32 rows, int8 rows, the
    7-bit values q7 or the 4-bit codes (unpacked; :meth:`packed_row` gives the device's bytes).
    4 bits need ``codec`` = (lo int8 [channels], step uint8 [channels]) (tol_replay_codec_t);
    PQ (bits = PQ_BASE + sub) needs ``codec`` = the codebook int8 [dim/sub, 256, sub] and
    ``store`` holds the codeword indices [capacity, dim/sub].
    """

    def __init__(self, capacity: int, dim: int, bits: int, n_classes: int, policy: int,
                 scale: float, zero_point: int, prng: Prng, codec=None):
        if bits not in (32, 8, 7, 4) and not (is_pq(bits) and dim % (bits - PQ_BASE) == 0
                                               and bits < 256):
            raise TinyolError(f"replay bits must be 32, 8, 7, 4 or PQ, not {bits}")
        if is_pq(bits):
            if codec is None:
                raise LearnerError("TOL_ERR_ARG")
            sub = bits - PQ_BASE
            book = np.asarray(codec).astype(np.int8)
            if book.shape != (dim // sub, PQ_CODEWORDS, sub):
                raise LearnerError("TOL_ERR_ARG")
            self.codebook = book
        if bits == 4:
            if codec is None:
                raise LearnerError("TOL_ERR_ARG")
            lo, step = (np.asarray(codec[0]).astype(np.int8), np.asarray(codec[1]).astype(np.uint8))
            if lo.size < 1 or lo.size != step.size or dim % lo.size or (step < 1).any():
                raise LearnerError("TOL_ERR_ARG")
            reps = dim // lo.size
            self.codec_lo, self.codec_step = np.tile(lo, reps), np.tile(step, reps)
        if policy not in (POLICY_RESERVOIR, POLICY_BALANCED, POLICY_AR1):
            raise TinyolError(f"unknown replay policy {policy}")
        self.capacity, self.dim, self.bits = int(capacity), int(dim), int(bits)
        self.n_classes, self.policy = int(n_classes), int(policy)
        self.scale, self.zero_point = F32(scale), int(zero_point)
        self.prng = prng
        self.store = (np.zeros((capacity, row_bytes(dim, bits)), np.uint8) if is_pq(bits)
                      else np.zeros((capacity, dim), F32 if bits == 32 else np.int8))
        self.clear()

    def clear(self) -> None:
        self.fill = 0
        self.seen = 0
        self.batches = 0
        self.labels = np.zeros(self.capacity, np.uint16)
        self.count = np.zeros(self.n_classes, np.int64)
        self.class_seen = np.zeros(self.n_classes, np.int64)

    @property
    def nbytes(self) -> int:
        return replay_bytes(self.capacity, self.dim, self.bits, self.n_classes)

    def _encode(self, x) -> np.ndarray:
        if self.bits == 32:
            return np.asarray(x, F32)
        q = quantize(x, self.scale, self.zero_point)
        if is_pq(self.bits):
            return pq_encode(q, self.codebook)
        if self.bits == 4:
            return code4(q, self.codec_lo, self.codec_step).astype(np.int8)
        return q if self.bits == 8 else requant7(q)

    def _store(self, slot: int, x, y: int) -> None:
        self.store[slot] = self._encode(x)
        if slot < self.fill:
            self.count[self.labels[slot]] -= 1
        else:
            self.fill += 1
        self.labels[slot] = y
        self.count[y] += 1

    def get(self, idx: int) -> tuple[np.ndarray, int]:
        row = self.store[idx]
        if self.bits == 32:
            x = row.copy()
        elif self.bits == 8:
            x = dequantize(row, self.scale, self.zero_point)
        elif is_pq(self.bits):
            x = dequantize(pq_decode(row, self.codebook), self.scale, self.zero_point)
        elif self.bits == 4:
            x = dequantize(decode4(row.astype(np.uint8), self.codec_lo, self.codec_step),
                           self.scale, self.zero_point)
        else:
            x = dequantize(2 * row.astype(np.int32), self.scale, self.zero_point)
        return x, int(self.labels[idx])

    def packed_row(self, idx: int) -> bytes:
        """The bytes the device holds for slot idx."""
        row = self.store[idx]
        if self.bits == 7:
            return pack7(row)
        if self.bits == 4:
            return pack4(row.astype(np.uint8))
        return row.tobytes()

    def draw(self) -> int:
        return self.prng.below(self.fill)

    def _find(self, c: int, k: int) -> int:
        return int(np.flatnonzero(self.labels[: self.fill] == c)[k])

    def _offer(self, x, y: int) -> None:
        self.seen += 1
        self.class_seen[y] += 1
        if self.fill < self.capacity:
            self._store(self.fill, x, y)
            return
        if self.policy == POLICY_RESERVOIR:
            j = self.prng.below(self.seen)
            if j < self.capacity:
                self._store(j, x, y)
            return
        largest = int(np.argmax(self.count))  # first maximum = smallest label
        if self.count[y] == self.count[largest]:
            j = self.prng.below(int(self.class_seen[y]))
            if j < self.count[y]:
                self._store(self._find(y, j), x, y)
        else:
            k = self.prng.below(int(self.count[largest]))
            self._store(self._find(largest, k), x, y)

    def add_batch(self, xs, labels) -> None:
        xs = np.asarray(xs, F32).reshape(-1, self.dim)
        labels = [int(v) for v in labels]
        n = len(labels)
        if not 1 <= n <= REPLAY_MAX_BATCH:
            raise TinyolError(f"replay batch of {n} is out of range 1..{REPLAY_MAX_BATCH}")
        if any(y >= self.n_classes or y < 0 for y in labels):
            raise TinyolError(f"label out of range 0..{self.n_classes - 1}")
        if self.policy != POLICY_AR1:
            for i in range(n):
                self._offer(xs[i], labels[i])
            self.batches += 1  # every policy keeps every counter (the policy may change later)
            return
        i = 0
        while i < n and self.fill < self.capacity:
            self.seen += 1
            self.class_seen[labels[i]] += 1
            self._store(self.fill, xs[i], labels[i])
            i += 1
        m = n - i
        if m > 0:
            perm = list(range(i, n))
            for k in range(m):
                self.seen += 1
                self.class_seen[labels[i + k]] += 1
            den = self.batches + 1
            q, r = divmod(self.capacity, den)
            h = m if q >= m else q + (1 if self.prng.below(den) < r else 0)
            for k in range(h):
                pick = k + self.prng.below(m - k)
                perm[k], perm[pick] = perm[pick], perm[k]
                slot = self.prng.below(self.capacity)
                self._store(slot, xs[perm[k]], labels[perm[k]])
        self.batches += 1


# --------------------------------------------------------------------------- anomaly
class AnomalyThreshold:
    """Welford during warm-up, then EMA; mirrors tol_anomaly.c."""

    def __init__(self, k=3.0, alpha=0.01, warmup=50):
        self.k, self.alpha, self.warmup = F32(k), F32(alpha), max(1, int(warmup))
        self.reset()

    def reset(self) -> None:
        self.n = 0
        self.mean = F32(0.0)
        self.m2 = F32(0.0)
        self.var = F32(0.0)

    @property
    def warming(self) -> bool:
        return self.n < self.warmup

    def threshold(self) -> float:
        if self.warming:
            return math.inf
        return float(F32(self.mean + self.k * np.sqrt(self.var, dtype=F32)))

    def update(self, score) -> None:
        s = F32(score)
        if self.n < self.warmup:
            self.n += 1
            d = F32(s - self.mean)
            self.mean = F32(self.mean + d / F32(self.n))
            self.m2 = F32(self.m2 + d * F32(s - self.mean))
            self.var = F32(self.m2 / F32(self.n))
            return
        self.n = min(self.n + 1, 0xFFFFFFFF)
        d = F32(s - self.mean)
        self.mean = F32(self.mean + self.alpha * d)
        self.var = F32((F32(1.0) - self.alpha) * F32(self.var + self.alpha * d * d))


# --------------------------------------------------------------------------- learner
@dataclasses.dataclass
class Settings:
    """tol_learner_settings_t (defaults = tol_learner_settings_default)."""

    lr: float = 0.03
    momentum: float = 0.0
    weight_decay: float = 0.0
    clip_norm: float = 0.0
    n_new: int = 1
    n_old: int = 16
    mode: int = MODE_REPLAY
    train_anomalies: int = 0
    threshold_k: float = 3.0
    ema_alpha: float = 0.01
    warmup: int = 50
    # idle-time rehearsal (classifiers: head and stage): replay-only SGD steps per idle period
    # (between two learned samples), 0..255, 0 = off (docs/adaptive.md, "Recipe")
    rehearse: int = 0
    # the replay policy of later offers (POLICY_*); reset takes the config's replay_policy
    # (this field of the config's settings is ignored, as in tol_learner_config_t)
    replay_policy: int = POLICY_RESERVOIR


@dataclasses.dataclass
class OnlineConfig:
    """What tol_learner_config_t and tol_stage_config_t share, declared once: the rows active
    after reset, the latent quantization, the replay buffer, the batch bounds, the momentum
    buffers, the seed and the initial settings. Keyword-only; :class:`Config` (the head) and
    ``stage.StageConfig`` add their model in front. :meth:`check` is what tol_learner_init and
    tol_stage_init both check of these fields, :meth:`check_settings` is
    tol_learner_settings_check (a learner adds its own fields' checks)."""

    _: dataclasses.KW_ONLY
    init_classes: int = 0
    latent_scale: float = 1.0
    latent_zero_point: int = 0
    replay_capacity: int = 0
    replay_bits: int = 8
    replay_policy: int = POLICY_RESERVOIR
    replay_codec: tuple | None = None  # 4 bits: (lo int8 [channels], step uint8 [channels]);
    # PQ: the codebook int8 [M, 256, sub]
    max_new: int = 1
    max_old: int = 0              # 0 = automatic (16 with a buffer)
    no_momentum: bool = False     # True: no momentum buffers, momentum must be 0
    seed: int = 1
    settings: Settings = dataclasses.field(default_factory=Settings)

    def check(self, rows: int) -> None:
        """TOL_ERR_ARG unless 1 <= max_new <= 32, max_old <= 1024, init_classes <= rows (the
        classifier rows), a finite latent scale > 0 and valid initial settings."""
        if not (1 <= self.max_new <= REPLAY_MAX_BATCH and 0 <= self.max_old <= MAX_OLD
                and 0 <= self.init_classes <= rows
                and math.isfinite(self.latent_scale) and self.latent_scale > 0
                and self.replay_policy in POLICIES.values()):
            raise LearnerError("TOL_ERR_ARG")
        self.check_settings(dataclasses.replace(self.settings, replay_policy=self.replay_policy))

    def check_settings(self, s: Settings) -> None:
        """tol_learner_settings_check: TOL_ERR_ARG unless lr, weight decay and clip norm are
        finite and >= 0, 0 <= momentum < 1 (0 without momentum buffers), 1 <= n_new <= max_new,
        n_old <= the effective max_old (with a buffer), a known mode and rehearse a u8."""
        ok = (all(math.isfinite(v) and v >= 0 for v in (s.lr, s.weight_decay, s.clip_norm))
              and 0 <= s.momentum < 1 and (s.momentum == 0 or not self.no_momentum)
              and 1 <= s.n_new <= self.max_new
              and (self.replay_capacity == 0
                   or 0 <= s.n_old <= max_old_eff(self.replay_capacity, self.max_old))
              and s.mode in MODES.values() and 0 <= s.rehearse <= REHEARSE_MAX
              and s.replay_policy in POLICIES.values())
        if not ok:
            raise LearnerError("TOL_ERR_ARG")


@dataclasses.dataclass
class Config(OnlineConfig):
    """tol_learner_config_t: the head (its size, kind and exported weights) and, for the
    autoencoder, the target quantization; the rest is :class:`OnlineConfig`'s. Only latent_dim
    and n_outputs may be given by position."""

    latent_dim: int
    n_outputs: int
    _: dataclasses.KW_ONLY
    head_kind: int = HEAD_CLASSIFIER
    init_weight: np.ndarray | None = None
    init_bias: np.ndarray | None = None
    target_scale: float = 1.0
    target_zero_point: int = 0

    @property
    def nbytes(self) -> int:
        return learner_bytes(self.latent_dim, self.n_outputs, self.replay_capacity,
                             self.replay_bits, self.max_new, self.max_old, self.no_momentum)

    def check_settings(self, s: Settings) -> None:
        """tol_learner_check_settings_: the shared checks, then the autoencoder's threshold
        factor (finite, >= 0) and EMA factor (0, 1]."""
        super().check_settings(s)
        if not (math.isfinite(s.threshold_k) and s.threshold_k >= 0 and 0 < s.ema_alpha <= 1):
            raise LearnerError("TOL_ERR_ARG")


class LearnerError(TinyolError):
    """Carries the C status name (e.g. 'TOL_ERR_LABEL')."""

    def __init__(self, status: str):
        super().__init__(status)
        self.status = status


@dataclasses.dataclass
class Result:
    """What one learn call did (tinyol_result_t; the SAMPLE reply's fields). error: the C
    status name when the call returned one (the counters are those after it)."""

    prediction: int
    probability: float
    label_probability: float = 0.0
    learned: bool = False
    new_class: bool = False
    samples_seen: int = 0
    updates: int = 0
    n_active: int = 0
    error: str | None = None

    @property
    def loss(self) -> float:
        """-log of the true label's probability, floored at 1e-7 (model.c's SAMPLE loss)."""
        return float(-np.log(np.float32(max(np.float32(self.label_probability), np.float32(1e-7)))))


class OnlineLearner:
    """The C call semantics tol_learner.c and tol_stage.c share around their arithmetic: the
    set-up and reset of what both hold (settings, PRNG, replay buffer, queue, counters), the
    settings checks, label and value checks, the queue of fresh samples (one update every
    n_new), a new label activating its row, the update on the queue plus replayed latents,
    replay_add, the counters. A learner provides ``_rows`` (labels below it),
    ``_active_rows()``, ``_activate(r)``, ``_grad_zero()``, ``_grad_add(x, label, weight)``
    (one sample's gradient, added), ``_step()`` (the SGD step: True, or False when refused as
    diverged), ``_last_probabilities()`` (every row's, from the last predict) and
    ``_threshold()``."""

    _rows: int
    anomalies: int = 0

    def _setup(self, cfg: OnlineConfig, dim: int, rows: int) -> None:
        """The checks and parts both inits share: cfg checked for `rows` classifier rows, the
        PRNG, the replay buffer of `dim`-float latents (None without capacity)."""
        cfg.check(rows)
        self.cfg = cfg
        self.prng = Prng(cfg.seed)
        self.replay = (Replay(cfg.replay_capacity, dim, cfg.replay_bits, rows, cfg.replay_policy,
                              cfg.latent_scale, cfg.latent_zero_point, self.prng,
                              codec=cfg.replay_codec)
                       if cfg.replay_capacity > 0 else None)

    def _reset_common(self) -> None:
        """What both resets do: settings back to cfg's, the PRNG reseeded, the replay buffer,
        class counts, queue and counters cleared."""
        cfg = self.cfg
        self.settings = dataclasses.replace(cfg.settings, replay_policy=cfg.replay_policy)
        self.prng.seed(cfg.seed)
        if self.replay is not None:
            self.replay.clear()
            self.replay.policy = cfg.replay_policy
        self.rehearsed = 0
        self.class_count = np.zeros(self._rows, np.int64)
        self.pending: list[tuple[np.ndarray, int]] = []
        self.samples_seen = self.updates = self.rejected = self.anomalies = 0

    def set_settings(self, s: Settings) -> None:
        """Validate (cfg.check_settings) and apply; the queue is dropped."""
        self.cfg.check_settings(s)
        self.settings = dataclasses.replace(s)
        self.pending = []
        if self.replay is not None:
            self.replay.policy = int(s.replay_policy)  # the slots stored stay

    def _check_classifier(self) -> None:
        """Raise where a learner has no classifier mode (the head in autoencoder mode)."""

    def _deq(self, q) -> np.ndarray:
        return dequantize(q, self.cfg.latent_scale, self.cfg.latent_zero_point)

    def _check_label(self, label: int) -> None:
        self._check_classifier()
        if not 0 <= label < self._rows:
            raise LearnerError("TOL_ERR_LABEL")

    def _grad_add_replayed(self, n: int, weight) -> None:
        """n latents drawn from the replay buffer, each row activated, their gradients added."""
        for _ in range(n):
            xr, yr = self.replay.get(self.replay.draw())
            self._activate(yr)
            self._grad_add(xr, yr, weight)

    def _update(self) -> bool:
        """One SGD step on the queue plus n_old replayed latents (replay mode with a non-empty
        buffer), each weighted 1 / batch; then the queue is offered to the buffer (replay
        mode). False (nothing changed, rejected counted) when the step diverged."""
        s = self.settings
        replay = s.mode == MODE_REPLAY and self.replay is not None
        n_old = s.n_old if (replay and self.replay.fill > 0) else 0
        weight = F32(1.0) / F32(len(self.pending) + n_old)
        self._grad_zero()
        for x, y in self.pending:
            self._grad_add(x, y, weight)
        self._grad_add_replayed(n_old, weight)
        if not self._step():
            self.rejected += 1
            return False
        self.updates += 1
        if replay:
            self.replay.add_batch(np.stack([x for x, _ in self.pending]),
                                  [y for _, y in self.pending])
        return True

    def learn_f(self, x, label: int) -> None:
        self._check_label(label)
        x = np.asarray(x, F32)
        if not np.isfinite(x).all():
            raise LearnerError("TOL_ERR_NONFINITE")
        if self.settings.mode == MODE_FROZEN:
            return
        newly = not self._active_rows()[label]
        rehearsed = self.rehearsed
        self._activate(label)
        self.pending.append((x.copy(), int(label)))
        self.samples_seen += 1
        self.class_count[label] += 1
        self.rehearsed = 0  # a new idle period begins after this sample
        if len(self.pending) < self.settings.n_new:
            return
        ok = self._update()
        self.pending = []
        if not ok:
            # the sample that met a diverged step counts nowhere (issue 34), as in the C
            self.samples_seen -= 1
            self.class_count[label] -= 1
            self.rehearsed = rehearsed
            if newly:
                self._active_rows()[label] = False
            raise LearnerError("TOL_ERR_DIVERGED")

    def learn(self, q, label: int) -> None:
        self._check_label(label)
        if self.settings.mode == MODE_FROZEN:
            return
        self.learn_f(self._deq(q), label)

    def learn_result(self, q, label: int, prediction: int, probability: float) -> Result:
        """learn() of the latent q just predicted (prediction, probability), returning what
        happened as tinyol_learn does (the true label's probability from that predict, as the C
        reads it); a refused call is in ``error``, not raised."""
        active = self._active_rows()
        r = Result(int(prediction), float(probability))
        if 0 <= label < self._rows and active[label]:
            r.label_probability = float(self._last_probabilities()[label])
        seen, n_active = self.samples_seen, int(active.sum())
        try:
            self.learn(q, label)
        except LearnerError as e:
            r.error = e.status
        active = self._active_rows()
        r.learned, r.new_class = self.samples_seen != seen, int(active.sum()) > n_active
        r.samples_seen, r.updates, r.n_active = self.samples_seen, self.updates, int(active.sum())
        return r

    def replay_add_f(self, x, label: int) -> None:
        if self.replay is None:
            raise LearnerError("TOL_ERR_UNSUPPORTED")
        if not 0 <= label < self._rows:
            raise LearnerError("TOL_ERR_LABEL")
        x = np.asarray(x, F32)
        if not np.isfinite(x).all():
            raise LearnerError("TOL_ERR_NONFINITE")
        self.replay.add_batch(x[None, :], [label])

    def replay_add(self, q, label: int) -> None:
        self.replay_add_f(self._deq(q), label)

    # -- idle-time rehearsal (tol_learner_rehearse, tol_stage_rehearse)
    rehearsed = 0  # rehearsal steps since the last learned sample

    def rehearse(self) -> bool:
        """One rehearsal step: an SGD step on n_old latents drawn from the replay buffer alone
        (weight 1 / n_old each, their rows activated as in an update; nothing is added to the
        buffer, the queue is left alone). Only for a classifier in replay mode with a non-empty
        buffer, n_old > 0 and fewer than settings.rehearse steps since the last learned sample;
        returns False (nothing done) otherwise. A diverged step counts as run (rejected += 1),
        changes no parameter and raises nothing, as the device's idle loop."""
        s = self.settings
        if (self.rehearsed >= s.rehearse or s.mode != MODE_REPLAY or self.replay is None
                or self.replay.fill == 0 or s.n_old == 0):
            return False
        try:
            self._check_classifier()
        except LearnerError:
            return False
        self.rehearsed += 1
        self._grad_zero()
        self._grad_add_replayed(s.n_old, F32(1.0) / F32(s.n_old))
        if self._step():
            self.updates += 1
        else:
            self.rejected += 1
        return True

    def idle(self, steps: int | None = None) -> int:
        """What the device does while no request comes: rehearsal steps until the idle
        period's budget (settings.rehearse) is spent, or `steps` of them (the count a device
        reported, to replay its stream exactly). Returns the steps run."""
        n = 0
        while (steps is None or n < steps) and self.rehearse():
            n += 1
        return n

    def stats(self) -> dict:
        active = self._active_rows()
        return {
            "samples_seen": self.samples_seen,
            "updates": self.updates,
            "rejected": self.rejected,
            "anomalies": self.anomalies,
            "n_active": int(active.sum()),
            "replay_fill": self.replay.fill if self.replay is not None else 0,
            "replay_capacity": self.cfg.replay_capacity,
            "class_count": self.class_count.tolist(),
            "threshold": self._threshold(),
        }


class Learner(OnlineLearner):
    """tol_learner: predict / learn / anomaly with the C call semantics.

    Methods raise :class:`LearnerError` where the C function returns a status
    other than TOL_OK (state changes follow the C exactly).
    """

    def __init__(self, cfg: Config):
        self._setup(cfg, cfg.latent_dim, cfg.n_outputs)
        init_active = cfg.n_outputs if cfg.head_kind == HEAD_AUTOENCODER else cfg.init_classes
        self.head = Head(cfg.latent_dim, cfg.n_outputs, cfg.init_weight, cfg.init_bias, init_active,
                         not cfg.no_momentum)
        self.reset()

    # -- lifecycle
    def reset(self) -> None:
        self._reset_common()
        self.head.reset()
        s = self.settings
        self.anomaly_stats = AnomalyThreshold(s.threshold_k, s.ema_alpha, s.warmup)

    def set_settings(self, s: Settings) -> None:
        super().set_settings(s)
        a = self.anomaly_stats
        a.k, a.alpha, a.warmup = F32(s.threshold_k), F32(s.ema_alpha), max(1, int(s.warmup))

    # -- what OnlineLearner asks of a learner
    @property
    def _rows(self) -> int:
        return self.cfg.n_outputs

    def _active_rows(self) -> np.ndarray:
        return self.head.active

    def _activate(self, r: int) -> None:
        self.head.activate(r)

    def _check_classifier(self) -> None:
        if self.cfg.head_kind != HEAD_CLASSIFIER:
            raise LearnerError("TOL_ERR_UNSUPPORTED")

    def _last_probabilities(self) -> np.ndarray:
        return self.head.probs

    def _threshold(self) -> float:
        return self.anomaly_stats.threshold()

    # -- helpers
    @staticmethod
    def _finite(x) -> bool:
        return bool(np.isfinite(np.asarray(x, F32)).all())

    # -- classifier
    def predict_f(self, x) -> tuple[int, float]:
        if self.cfg.head_kind != HEAD_CLASSIFIER:
            raise LearnerError("TOL_ERR_UNSUPPORTED")
        if not self._finite(x):
            raise LearnerError("TOL_ERR_NONFINITE")
        return self.head.predict(np.asarray(x, F32))

    def predict(self, q) -> tuple[int, float]:
        return self.predict_f(self._deq(q))

    def _grad_zero(self) -> None:
        self.head.grad_zero()

    def _grad_add(self, x, label: int, weight) -> None:
        self.head.grad_add_ce(x, label, weight)

    def _step(self) -> bool:
        s = self.settings
        return self.head.step(s.lr, s.momentum, s.weight_decay, s.clip_norm)

    # -- autoencoder
    def score_f(self, x, target) -> tuple[float, bool]:
        """tol_learner_score_f: score and flag, change nothing."""
        if self.cfg.head_kind != HEAD_AUTOENCODER:
            raise LearnerError("TOL_ERR_UNSUPPORTED")
        if not (self._finite(x) and self._finite(target)):
            raise LearnerError("TOL_ERR_NONFINITE")
        a = self.anomaly_stats
        score = self.head.mse(np.asarray(x, F32), np.asarray(target, F32))
        return float(score), (not a.warming) and float(score) > a.threshold()

    def _deq_target(self, q_target) -> np.ndarray:
        return dequantize(q_target, self.cfg.target_scale, self.cfg.target_zero_point)

    def score(self, q_latent, q_target) -> tuple[float, bool]:
        return self.score_f(self._deq(q_latent), self._deq_target(q_target))

    def anomaly_f(self, x, target) -> tuple[float, bool]:
        h, a, s = self.head, self.anomaly_stats, self.settings
        score, flag = self.score_f(x, target)
        x = np.asarray(x, F32)
        target = np.asarray(target, F32)
        score = F32(score)
        before = (a.n, a.mean, a.m2, a.var)
        self.samples_seen += 1
        if flag:
            self.anomalies += 1
        elif np.isfinite(score):
            a.update(score)
        if s.mode == MODE_FROZEN or (flag and not s.train_anomalies):
            return float(score), flag
        h.grad_zero()
        h.grad_add_mse(x, target, F32(1.0))
        if not self._step():
            self.rejected += 1
            # counts nowhere (issue 34): not in samples_seen, anomalies, the statistics
            self.samples_seen -= 1
            self.anomalies -= int(flag)
            a.n, a.mean, a.m2, a.var = before
            raise LearnerError("TOL_ERR_DIVERGED")
        self.updates += 1
        return float(score), flag

    def anomaly(self, q_latent, q_target) -> tuple[float, bool]:
        return self.anomaly_f(self._deq(q_latent), self._deq_target(q_target))

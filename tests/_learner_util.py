"""Build the C learner as a host shared library and drive it with ctypes.

`build_learner_lib(tmpdir)` compiles mcu/src/tol_{status,prng,head,replay,
anomaly,learner}.c plus a tiny test shim (sizes and read-only views) with the
project's strict warning flags. `CLearner` mirrors tinyol.learn.learner.Learner's
methods so a test can feed one stream to both and compare.
"""
from __future__ import annotations

import ctypes as C
import pathlib
import shutil
import subprocess

import numpy as np
from tinyol.learn.learner import Config, LearnerError, Settings

ROOT = pathlib.Path(__file__).resolve().parents[1]
MCU = ROOT / "mcu"
SOURCES = ["tol_status.c", "tol_prng.c", "tol_head.c", "tol_replay.c", "tol_anomaly.c", "tol_segs.c",
           "tol_state.c", "tol_learner.c"]
STRICT = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wconversion", "-Wdouble-promotion",
          "-Wshadow"]
ARM = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-O2"]

SHIM = r"""
#include "tol_learner.h"
size_t shim_sizeof_learner(void) { return sizeof(tol_learner_t); }
size_t shim_sizeof_state(void) { return sizeof(tol_state_t); }
size_t shim_learner_bytes(unsigned d, unsigned c, unsigned cap, unsigned bits, unsigned mx,
                          unsigned mo, unsigned mom)
{ return TOL_LEARNER_BYTES_EX(d, c, cap, bits, mx, mo, mom); }
size_t shim_learner_bytes5(unsigned d, unsigned c, unsigned cap, unsigned bits, unsigned mx)
{ return TOL_LEARNER_BYTES(d, c, cap, bits, mx); }
size_t shim_replay_bytes(unsigned cap, unsigned d, unsigned bits, unsigned c)
{ return TOL_REPLAY_BYTES(cap, d, bits, c); }
size_t shim_head_bytes(unsigned d, unsigned c, unsigned mb, unsigned mom)
{ return TOL_HEAD_BYTES(d, c, mb, mom); }
const float *shim_w(const tol_learner_t *L) { return L->head.w; }
const float *shim_b(const tol_learner_t *L) { return L->head.b; }
const uint8_t *shim_active(const tol_learner_t *L) { return L->head.active; }
const uint8_t *shim_replay_row(const tol_learner_t *L, unsigned i)
{ return &L->replay.rows[(size_t)i * L->replay.row_bytes]; }
unsigned shim_replay_label(const tol_learner_t *L, unsigned i) { return L->replay.labels[i]; }
unsigned shim_replay_fill(const tol_learner_t *L) { return L->replay.fill; }
unsigned shim_rehearsed(const tol_learner_t *L) { return L->rehearsed; }
"""


def compile_args(out: pathlib.Path, shim: pathlib.Path) -> list[str]:
    srcs = [str(MCU / "src" / s) for s in SOURCES] + [str(shim)]
    return ["gcc", *STRICT, "-O2", "-shared", "-fPIC", f"-I{MCU / 'include'}", "-o", str(out),
            *srcs, "-lm"]


def build_learner_lib(tmpdir: pathlib.Path) -> C.CDLL:
    shim = tmpdir / "shim.c"
    shim.write_text(SHIM)
    out = tmpdir / "libtol_learner.so"
    subprocess.run(compile_args(out, shim), check=True, capture_output=True, text=True)
    lib = C.CDLL(str(out))
    _declare(lib)
    return lib


STATE_T_BYTES = 512  # room for a tol_state_t (tests check sizeof against it)


def declare_state(lib: C.CDLL) -> None:
    """tol_state.h's calls: a learner's state stream read and written by byte range."""
    P = C.c_void_p
    for name, res, args in [("tol_state_bytes", C.c_uint32, [P]),
                            ("tol_state_read", None, [P, C.c_uint32, C.c_char_p, C.c_uint32]),
                            ("tol_state_write", C.c_int, [P, C.c_uint32, C.c_char_p, C.c_uint32])]:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


class StateStream:
    """The stream a learner's *_state_stream() gives (tol_state.h), over ctypes: `fn` is
    tol_learner_state_stream or tol_stage_state_stream, `header` the header bytes to fill (0:
    none, for a restore's step 2). Valid until the learner changes."""

    def __init__(self, lib: C.CDLL, fn, obj, parts: int, header: int = 0):
        self.lib = lib
        self.hdr = C.create_string_buffer(header) if header else None
        self.buf = C.create_string_buffer(STATE_T_BYTES)
        fn(obj, parts, self.hdr, self.buf)

    def __len__(self) -> int:
        return self.lib.tol_state_bytes(self.buf)

    def read(self, at: int, n: int) -> bytes:
        out = C.create_string_buffer(n)
        self.lib.tol_state_read(self.buf, at, out, n)
        return out.raw

    def write(self, at: int, data: bytes) -> int:
        return self.lib.tol_state_write(self.buf, at, data, len(data))


def arm_gcc() -> str | None:
    return shutil.which("arm-none-eabi-gcc")


# --------------------------------------------------------------------------- ctypes mirrors
class CSettings(C.Structure):
    _fields_ = [("lr", C.c_float), ("momentum", C.c_float), ("weight_decay", C.c_float),
                ("clip_norm", C.c_float), ("n_new", C.c_uint16), ("n_old", C.c_uint16),
                ("mode", C.c_uint8), ("train_anomalies", C.c_uint8), ("rehearse", C.c_uint8),
                ("replay_policy", C.c_uint8),
                ("threshold_k", C.c_float), ("ema_alpha", C.c_float), ("warmup", C.c_uint32)]


class CConfig(C.Structure):
    _fields_ = [("head_kind", C.c_uint8), ("replay_bits", C.c_uint8),
                ("replay_policy", C.c_uint8), ("no_momentum", C.c_uint8),
                ("latent_dim", C.c_uint16),
                ("n_outputs", C.c_uint16), ("init_classes", C.c_uint16),
                ("replay_capacity", C.c_uint16), ("max_new", C.c_uint16),
                ("max_old", C.c_uint16),
                ("init_weight", C.POINTER(C.c_float)), ("init_bias", C.POINTER(C.c_float)),
                ("latent_scale", C.c_float), ("latent_zero_point", C.c_int32),
                ("target_scale", C.c_float), ("target_zero_point", C.c_int32),
                ("seed", C.c_uint32), ("settings", CSettings),
                ("replay_codec", C.c_void_p),
                ("replay_mem", C.c_void_p), ("replay_mem_bytes", C.c_size_t)]


class CCodec(C.Structure):
    """tol_replay_codec_t."""
    _fields_ = [("lo", C.POINTER(C.c_int8)), ("step", C.POINTER(C.c_uint8)),
                ("channels", C.c_uint16)]


def c_codec(owner, codec) -> int | None:
    """A tol_replay_codec_t for ``codec`` = (lo, step) or a PQ codebook (int8 [M, 256, sub])
    kept alive on ``owner``; its address."""
    if codec is None:
        return None
    if not isinstance(codec, tuple):  # PQ
        owner._codebook = np.ascontiguousarray(codec, np.int8)
        owner._codec = CCodec(owner._codebook.ctypes.data_as(C.POINTER(C.c_int8)), None, 0)  # lo = the codebook
        return C.addressof(owner._codec)
    owner._codec_lo = np.ascontiguousarray(codec[0], np.int8)
    owner._codec_step = np.ascontiguousarray(codec[1], np.uint8)
    owner._codec = CCodec(owner._codec_lo.ctypes.data_as(C.POINTER(C.c_int8)),
                          owner._codec_step.ctypes.data_as(C.POINTER(C.c_uint8)),
                          len(owner._codec_lo))
    return C.addressof(owner._codec)


class CStats(C.Structure):
    _fields_ = [("samples_seen", C.c_uint32), ("updates", C.c_uint32),
                ("rejected", C.c_uint32), ("anomalies", C.c_uint32),
                ("n_active", C.c_uint16), ("n_outputs", C.c_uint16),
                ("replay_fill", C.c_uint16), ("replay_capacity", C.c_uint16),
                ("class_count", C.POINTER(C.c_uint32)), ("threshold", C.c_float),
                ("score_mean", C.c_float), ("score_std", C.c_float),
                ("replay_count", C.POINTER(C.c_uint16))]


def _declare(lib: C.CDLL) -> None:
    P = C.c_void_p
    i8p, f32p = C.POINTER(C.c_int8), C.POINTER(C.c_float)
    declare_state(lib)
    lib.tol_learner_state_stream.restype = None
    lib.tol_learner_state_stream.argtypes = [P, C.c_uint8, C.c_char_p, C.c_void_p]
    lib.shim_sizeof_state.restype = C.c_size_t
    assert lib.shim_sizeof_state() <= STATE_T_BYTES
    sigs = {
        "tol_status_name": (C.c_char_p, [C.c_int]),
        "tol_learner_init": (C.c_int, [P, P, C.c_size_t, C.POINTER(CConfig)]),
        "tol_learner_reset": (None, [P]),
        "tol_learner_predict": (C.c_int, [P, i8p, C.POINTER(C.c_int32), f32p]),
        "tol_learner_predict_f": (C.c_int, [P, f32p, C.POINTER(C.c_int32), f32p]),
        "tol_learner_learn": (C.c_int, [P, i8p, C.c_uint16]),
        "tol_learner_learn_f": (C.c_int, [P, f32p, C.c_uint16]),
        "tol_learner_replay_add": (C.c_int, [P, i8p, C.c_uint16]),
        "tol_learner_replay_add_f": (C.c_int, [P, f32p, C.c_uint16]),
        "tol_learner_anomaly": (C.c_int, [P, i8p, i8p, f32p, C.POINTER(C.c_uint8)]),
        "tol_learner_anomaly_f": (C.c_int, [P, f32p, f32p, f32p, C.POINTER(C.c_uint8)]),
        "tol_learner_rehearse": (C.c_int, [P]),
        "tol_learner_get_settings": (None, [P, C.POINTER(CSettings)]),
        "tol_learner_set_settings": (C.c_int, [P, C.POINTER(CSettings)]),
        "tol_learner_get_stats": (None, [P, C.POINTER(CStats)]),
        "tol_learner_settings_default": (None, [C.POINTER(CSettings)]),
        "tol_head_expf": (C.c_float, [C.c_float]),
        "tol_prng_seed": (None, [P, C.c_uint32]),
        "tol_prng_next": (C.c_uint32, [P]),
        "tol_prng_below": (C.c_uint32, [P, C.c_uint32]),
        "tol_replay_pack7": (None, [i8p, C.c_uint16, C.POINTER(C.c_uint8)]),
        "tol_replay_unpack7": (None, [C.POINTER(C.c_uint8), C.c_uint16, i8p]),
        "tol_replay_requant7": (C.c_int8, [C.c_int8]),
        "tol_replay_quantize": (None, [f32p, C.c_uint16, C.c_float, C.c_int32, i8p]),
        "shim_sizeof_learner": (C.c_size_t, []),
        "shim_learner_bytes": (C.c_size_t, [C.c_uint] * 7),
        "shim_learner_bytes5": (C.c_size_t, [C.c_uint] * 5),
        "tol_learner_score": (C.c_int, [P, i8p, i8p, f32p, C.POINTER(C.c_uint8)]),
        "tol_learner_score_f": (C.c_int, [P, f32p, f32p, f32p, C.POINTER(C.c_uint8)]),
        "shim_replay_bytes": (C.c_size_t, [C.c_uint] * 4),
        "shim_head_bytes": (C.c_size_t, [C.c_uint] * 4),
        "shim_w": (f32p, [P]),
        "shim_b": (f32p, [P]),
        "shim_active": (C.POINTER(C.c_uint8), [P]),
        "shim_replay_row": (C.POINTER(C.c_uint8), [P, C.c_uint]),
        "shim_replay_label": (C.c_uint, [P, C.c_uint]),
        "shim_replay_fill": (C.c_uint, [P]),
        "shim_rehearsed": (C.c_uint, [P]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def _fptr(a: np.ndarray):
    return a.ctypes.data_as(C.POINTER(C.c_float))


def _i8ptr(a: np.ndarray):
    return a.ctypes.data_as(C.POINTER(C.c_int8))


def settings_to_c(s: Settings) -> CSettings:
    return CSettings(s.lr, s.momentum, s.weight_decay, s.clip_norm, s.n_new, s.n_old, s.mode,
                     s.train_anomalies, s.rehearse, s.replay_policy, s.threshold_k, s.ema_alpha,
                     s.warmup)


def settings_from_c(c: CSettings) -> Settings:
    return Settings(**{name: getattr(c, name) for name, _ in CSettings._fields_})


class CLearner:
    """The C learner behind the numpy Learner's method names."""

    def __init__(self, lib: C.CDLL, cfg: Config, replay_apart: bool = False):
        """replay_apart: the replay buffer in a block of its own (config replay_mem), as the
        firmware does when the memory plan splits it off (host/tinyol/memory.py)."""
        self.lib, self.cfg = lib, cfg
        d, c = cfg.latent_dim, cfg.n_outputs
        self._w = (np.zeros((c, d), np.float32) if cfg.init_weight is None
                   else np.ascontiguousarray(cfg.init_weight, np.float32).reshape(c, d))
        self._b = (np.zeros(c, np.float32) if cfg.init_bias is None
                   else np.ascontiguousarray(cfg.init_bias, np.float32).reshape(c))
        self.ccfg = CConfig(cfg.head_kind, cfg.replay_bits, cfg.replay_policy,
                            int(cfg.no_momentum), d, c, cfg.init_classes,
                            cfg.replay_capacity, cfg.max_new, cfg.max_old, _fptr(self._w),
                            _fptr(self._b), cfg.latent_scale, cfg.latent_zero_point,
                            cfg.target_scale, cfg.target_zero_point, cfg.seed,
                            settings_to_c(cfg.settings), c_codec(self, cfg.replay_codec))
        self.nbytes = lib.shim_learner_bytes(d, c, cfg.replay_capacity, cfg.replay_bits,
                                             cfg.max_new, cfg.max_old, int(cfg.no_momentum))
        self.state = C.create_string_buffer(lib.shim_sizeof_learner())
        if replay_apart and cfg.replay_capacity:
            from tinyol import memory

            rb = memory.replay_bytes(cfg.replay_capacity, d, cfg.replay_bits, c)
            self.replay_mem = np.zeros(rb // 4, np.uint32)  # exactly its size: overruns would show
            self.ccfg.replay_mem, self.ccfg.replay_mem_bytes = self.replay_mem.ctypes.data, rb
            self.nbytes -= rb
        self.mem = np.zeros(self.nbytes // 4 + 1, np.uint32)  # 4-byte aligned
        self._check(lib.tol_learner_init(self.state, self.mem.ctypes.data, self.nbytes,
                                         C.byref(self.ccfg)))

    def _check(self, status: int) -> None:
        if status != 0:
            raise LearnerError(self.lib.tol_status_name(status).decode())

    @staticmethod
    def _f(x) -> np.ndarray:
        return np.ascontiguousarray(x, np.float32)

    @staticmethod
    def _q(q) -> np.ndarray:
        return np.ascontiguousarray(q, np.int8)

    def reset(self):
        self.lib.tol_learner_reset(self.state)

    def predict(self, q):
        q = self._q(q)
        lab, conf = C.c_int32(), C.c_float()
        self._check(self.lib.tol_learner_predict(self.state, _i8ptr(q), C.byref(lab),
                                                 C.byref(conf)))
        return lab.value, conf.value

    def predict_f(self, x):
        x = self._f(x)
        lab, conf = C.c_int32(), C.c_float()
        self._check(self.lib.tol_learner_predict_f(self.state, _fptr(x), C.byref(lab),
                                                   C.byref(conf)))
        return lab.value, conf.value

    def learn(self, q, label):
        q = self._q(q)
        self._check(self.lib.tol_learner_learn(self.state, _i8ptr(q), label))

    def learn_f(self, x, label):
        x = self._f(x)
        self._check(self.lib.tol_learner_learn_f(self.state, _fptr(x), label))

    def replay_add(self, q, label):
        q = self._q(q)
        self._check(self.lib.tol_learner_replay_add(self.state, _i8ptr(q), label))

    def replay_add_f(self, x, label):
        x = self._f(x)
        self._check(self.lib.tol_learner_replay_add_f(self.state, _fptr(x), label))

    def anomaly(self, ql, qt):
        ql, qt = self._q(ql), self._q(qt)
        s, f = C.c_float(), C.c_uint8()
        self._check(self.lib.tol_learner_anomaly(self.state, _i8ptr(ql), _i8ptr(qt), C.byref(s),
                                                 C.byref(f)))
        return s.value, bool(f.value)

    def anomaly_f(self, x, t):
        x, t = self._f(x), self._f(t)
        s, f = C.c_float(), C.c_uint8()
        self._check(self.lib.tol_learner_anomaly_f(self.state, _fptr(x), _fptr(t), C.byref(s),
                                                   C.byref(f)))
        return s.value, bool(f.value)

    def score(self, ql, qt):
        ql, qt = self._q(ql), self._q(qt)
        s, f = C.c_float(), C.c_uint8()
        self._check(self.lib.tol_learner_score(self.state, _i8ptr(ql), _i8ptr(qt), C.byref(s),
                                               C.byref(f)))
        return s.value, bool(f.value)

    def score_f(self, x, t):
        x, t = self._f(x), self._f(t)
        s, f = C.c_float(), C.c_uint8()
        self._check(self.lib.tol_learner_score_f(self.state, _fptr(x), _fptr(t), C.byref(s),
                                                 C.byref(f)))
        return s.value, bool(f.value)

    def rehearse(self) -> bool:
        """tol_learner_rehearse: True when a step ran, False when there was nothing to do."""
        status = self.lib.tol_learner_rehearse(self.state)
        if status != 0 and self.lib.tol_status_name(status).decode() == "TOL_ERR_UNSUPPORTED":
            return False
        self._check(status)
        return True

    @property
    def rehearsed(self) -> int:
        return self.lib.shim_rehearsed(self.state)

    def idle(self, steps: int | None = None) -> int:
        n = 0
        while (steps is None or n < steps) and self.rehearse():
            n += 1
        return n

    def get_settings(self) -> Settings:
        cs = CSettings()
        self.lib.tol_learner_get_settings(self.state, C.byref(cs))
        return settings_from_c(cs)

    def set_settings(self, s: Settings):
        cs = settings_to_c(s)
        self._check(self.lib.tol_learner_set_settings(self.state, C.byref(cs)))

    def stats(self) -> dict:
        st = CStats()
        self.lib.tol_learner_get_stats(self.state, C.byref(st))
        return {
            "samples_seen": st.samples_seen, "updates": st.updates, "rejected": st.rejected,
            "anomalies": st.anomalies, "n_active": st.n_active, "replay_fill": st.replay_fill,
            "replay_capacity": st.replay_capacity,
            "class_count": [st.class_count[i] for i in range(st.n_outputs)],
            "threshold": st.threshold,
        }

    @property
    def w(self) -> np.ndarray:
        c, d = self.cfg.n_outputs, self.cfg.latent_dim
        return np.ctypeslib.as_array(self.lib.shim_w(self.state), (c, d)).copy()

    @property
    def b(self) -> np.ndarray:
        return np.ctypeslib.as_array(self.lib.shim_b(self.state), (self.cfg.n_outputs,)).copy()

    @property
    def active(self) -> np.ndarray:
        return np.ctypeslib.as_array(self.lib.shim_active(self.state),
                                     (self.cfg.n_outputs,)).astype(bool)

    def replay_row(self, i: int) -> bytes:
        from tinyol.learn.learner import row_bytes
        n = row_bytes(self.cfg.latent_dim, self.cfg.replay_bits)
        return bytes(np.ctypeslib.as_array(self.lib.shim_replay_row(self.state, i), (n,)))

    def replay_labels(self) -> list[int]:
        fill = self.lib.shim_replay_fill(self.state)
        return [self.lib.shim_replay_label(self.state, i) for i in range(fill)]


# --------------------------------------------------------------------------- streams
def make_stream(rng: np.random.Generator, n: int, dim: int, n_classes: int, classes=None,
                scale: float = 0.05, zero_point: int = -128, sep: float = 1.0):
    """A synthetic int8 latent stream: class prototypes + noise, post-ReLU-like.

    Returns (q int8 [n, dim], y int [n], prototypes)."""
    protos = rng.uniform(0, 4 * sep, size=(n_classes, dim)).astype(np.float32)
    protos *= rng.random((n_classes, dim)) < 0.6
    classes = list(range(n_classes)) if classes is None else list(classes)
    y = rng.choice(classes, size=n)
    x = np.maximum(protos[y] + rng.normal(0, 0.6, size=(n, dim)), 0).astype(np.float32)
    q = np.clip(np.round(x / scale) + zero_point, -128, 127).astype(np.int8)
    return q, y.astype(int), protos


def run_rehearsing_pair(py, cl, dim: int, n_classes: int, idle_steps, n: int, prefill: int,
                        old_classes, new_classes):
    """A prequential stream with idle time after each sample, through a twin `py` and its C
    learner `cl` (head or stage): the replay buffer pre-filled with `prefill` latents of
    old_classes, then n samples of new_classes; after each, the C runs idle_steps(i) rehearsal
    steps (None: its whole budget) as a device's main loop does between two requests, and the
    twin replays the count the C reports (as a host replays a device's SAMPLE replies).
    Returns (predictions of py, of cl, the step counts)."""
    from tinyol.learn.learner import LearnerError
    pq, pyl, _ = make_stream(np.random.default_rng(5), prefill, dim, n_classes, classes=old_classes)
    for qi, yi in zip(pq, pyl):
        py.replay_add(qi, int(yi))
        cl.replay_add(qi, int(yi))
    q, y, _ = make_stream(np.random.default_rng(1), n, dim, n_classes, classes=new_classes)
    pp, pc, counts = [], [], []
    for i, (qi, yi) in enumerate(zip(q, y)):
        pp.append(py.predict(qi))
        pc.append(cl.predict(qi))
        for learner in (py, cl):
            try:
                learner.learn(qi, int(yi))
            except LearnerError as e:
                assert e.status == "TOL_ERR_DIVERGED", e.status
        k = cl.idle(idle_steps(i))
        counts.append(k)
        assert py.idle(k) == k and py.rehearsed == cl.rehearsed
    return pp, pc, counts


def run_pair(lib, cfg: Config, q, y, prefill=None, learn_float=False, replay_apart=False):
    """Run the same prequential stream through C and numpy; return both
    learners and their prediction lists."""
    from tinyol.learn.learner import Learner
    py, cl = Learner(cfg), CLearner(lib, cfg, replay_apart=replay_apart)
    if prefill is not None:
        for qi, yi in zip(*prefill):
            py.replay_add(qi, int(yi))
            cl.replay_add(qi, int(yi))
    preds_py, preds_c = [], []
    for qi, yi in zip(q, y):
        if learn_float:
            x = py._deq(qi)
            preds_py.append(py.predict_f(x))
            preds_c.append(cl.predict_f(x))
            py.learn_f(x, int(yi))
            cl.learn_f(x, int(yi))
        else:
            preds_py.append(py.predict(qi))
            preds_c.append(cl.predict(qi))
            py.learn(qi, int(yi))
            cl.learn(qi, int(yi))
    return py, cl, preds_py, preds_c


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    """max |a-b| / max(max |b|, 1e-12)."""
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-12))

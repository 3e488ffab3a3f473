"""Build the C adaptive stage (mcu/src/tol_stage.c) as a host shared library and drive it
with ctypes; `CStage` mirrors tinyol.learn.stage.Stage's methods."""
from __future__ import annotations

import ctypes as C
import pathlib
import subprocess

import numpy as np
from _learner_util import MCU, STRICT, CSettings, CStats, StateStream, c_codec, declare_state, settings_to_c
from tinyol.learn.learner import LearnerError
from tinyol.learn.stage import Layer, StageConfig

SOURCES = ["tol_status.c", "tol_prng.c", "tol_head.c", "tol_replay.c", "tol_anomaly.c", "tol_segs.c",
           "tol_state.c", "tol_learner.c", "tol_stage.c"]

SHIM = r"""
#include "tol_stage.h"
size_t shim_sizeof_stage(void) { return sizeof(tol_stage_t); }
const float *shim_params(const tol_stage_t *S) { return S->params; }
const int16_t *shim_q(const tol_stage_t *S) { return S->q; }
const float *shim_mom(const tol_stage_t *S) { return S->mom; }
const float *shim_probs(const tol_stage_t *S) { return S->probs; }
unsigned shim_n_params(const tol_stage_t *S) { return S->n_params; }
const uint8_t *shim_active(const tol_stage_t *S) { return S->active; }
const uint8_t *shim_replay_row(const tol_stage_t *S, unsigned i)
{ return &S->replay.rows[(size_t)i * S->replay.row_bytes]; }
unsigned shim_replay_label(const tol_stage_t *S, unsigned i) { return S->replay.labels[i]; }
unsigned shim_replay_fill(const tol_stage_t *S) { return S->replay.fill; }
unsigned shim_rehearsed(const tol_stage_t *S) { return S->rehearsed; }
"""


class CLayer(C.Structure):
    _fields_ = [(n, C.c_uint8) for n in ("kind", "act", "kh", "kw", "sh", "sw", "pt", "pl")] + \
               [(n, C.c_uint16) for n in ("in_h", "in_w", "in_c", "out_h", "out_w", "out_c")] + \
               [("train", C.c_uint8), ("wq", C.c_int8), ("bq", C.c_int8)]


class CStageConfig(C.Structure):
    _fields_ = [("layers", C.POINTER(CLayer)), ("n_layers", C.c_uint8),
                ("replay_bits", C.c_uint8), ("replay_policy", C.c_uint8),
                ("no_momentum", C.c_uint8), ("init_params", C.POINTER(C.c_float)),
                ("init_classes", C.c_uint16), ("replay_capacity", C.c_uint16),
                ("max_new", C.c_uint16), ("max_old", C.c_uint16),
                ("latent_scale", C.c_float), ("latent_zero_point", C.c_int32),
                ("seed", C.c_uint32), ("settings", CSettings), ("replay_codec", C.c_void_p),
                ("replay_mem", C.c_void_p), ("replay_mem_bytes", C.c_size_t),
                ("stage_lr_scale", C.c_float)]


def build_stage_lib(tmpdir: pathlib.Path, extra: list[str] | None = None) -> C.CDLL:
    shim = tmpdir / "shim.c"
    shim.write_text(SHIM)
    out = tmpdir / "libtol_stage.so"
    srcs = [str(MCU / "src" / s) for s in SOURCES] + [str(shim)]
    subprocess.run(["gcc", *STRICT, "-O2", *(extra or []), "-shared", "-fPIC",
                    f"-I{MCU / 'include'}", "-o", str(out), *srcs, "-lm"],
                   check=True, capture_output=True, text=True)
    lib = C.CDLL(str(out))
    P = C.c_void_p
    i8p, f32p = C.POINTER(C.c_int8), C.POINTER(C.c_float)
    sigs = {
        "tol_status_name": (C.c_char_p, [C.c_int]),
        "tol_stage_bytes": (C.c_size_t, [C.POINTER(CStageConfig)]),
        "tol_stage_params": (C.c_uint32, [C.POINTER(CLayer), C.c_uint8]),
        "tol_stage_hash": (C.c_uint32, [C.POINTER(CLayer), C.c_uint8]),
        "tol_stage_init": (C.c_int, [P, P, C.c_size_t, C.POINTER(CStageConfig)]),
        "tol_stage_reset": (None, [P]),
        "tol_stage_predict": (C.c_int, [P, i8p, C.POINTER(C.c_int32), f32p]),
        "tol_stage_predict_f": (C.c_int, [P, f32p, C.POINTER(C.c_int32), f32p]),
        "tol_stage_learn": (C.c_int, [P, i8p, C.c_uint16]),
        "tol_stage_learn_f": (C.c_int, [P, f32p, C.c_uint16]),
        "tol_stage_replay_add": (C.c_int, [P, i8p, C.c_uint16]),
        "tol_stage_rehearse": (C.c_int, [P]),
        "shim_rehearsed": (C.c_uint, [P]),
        "tol_stage_set_settings": (C.c_int, [P, C.POINTER(CSettings)]),
        "tol_stage_get_settings": (None, [P, C.POINTER(CSettings)]),
        "tol_stage_get_stats": (None, [P, C.POINTER(CStats)]),
        "tol_stage_state_stream": (None, [P, C.c_uint8, C.c_char_p, C.c_void_p]),
        "tol_stage_state_begin": (C.c_int, [P, C.c_char_p, C.c_uint32, C.POINTER(C.c_uint8),
                                            C.POINTER(C.c_uint32)]),
        "tol_stage_state_end": (C.c_int, [P, C.c_uint8]),
        "shim_sizeof_stage": (C.c_size_t, []),
        "shim_params": (f32p, [P]),
        "shim_q": (C.POINTER(C.c_int16), [P]),
        "shim_mom": (f32p, [P]),
        "shim_probs": (f32p, [P]),
        "shim_n_params": (C.c_uint, [P]),
        "shim_active": (C.POINTER(C.c_uint8), [P]),
        "shim_replay_row": (C.POINTER(C.c_uint8), [P, C.c_uint]),
        "shim_replay_label": (C.c_uint, [P, C.c_uint]),
        "shim_replay_fill": (C.c_uint, [P]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    declare_state(lib)
    return lib


def c_layers(layers: list[Layer]):
    arr = (CLayer * len(layers))()
    for k, l in enumerate(layers):
        for (name, _), v in zip(CLayer._fields_, l.as_tuple()):
            setattr(arr[k], name, v)
    return arr


class CStage:
    """The C stage behind the numpy Stage's method names."""

    def __init__(self, lib: C.CDLL, cfg: StageConfig, replay_apart: bool = False):
        """replay_apart: the replay buffer in a block of its own (config replay_mem), as the
        firmware does when the memory plan splits it off (host/tinyol/memory.py)."""
        self.lib, self.cfg = lib, cfg
        self._layers = c_layers(cfg.layers)
        n = sum(l.n_params for l in cfg.layers)
        self._init = (np.zeros(n, np.float32) if cfg.init_params is None
                      else np.ascontiguousarray(cfg.init_params, np.float32).reshape(n))
        self.ccfg = CStageConfig(self._layers, len(cfg.layers), cfg.replay_bits,
                                 cfg.replay_policy, int(cfg.no_momentum),
                                 self._init.ctypes.data_as(C.POINTER(C.c_float)),
                                 cfg.init_classes, cfg.replay_capacity, cfg.max_new, cfg.max_old,
                                 cfg.latent_scale, cfg.latent_zero_point, cfg.seed,
                                 settings_to_c(cfg.settings), c_codec(self, cfg.replay_codec))
        self.ccfg.stage_lr_scale = getattr(cfg, "stage_lr_scale", 0.0)
        self.whole_bytes = lib.tol_stage_bytes(C.byref(self.ccfg))
        if replay_apart and cfg.replay_capacity:
            from tinyol import memory

            rb = memory.replay_bytes(cfg.replay_capacity, cfg.layers[0].in_size, cfg.replay_bits,
                                     cfg.layers[-1].out_c)
            self.replay_mem = np.zeros(rb // 4, np.uint32)  # exactly its size
            self.ccfg.replay_mem, self.ccfg.replay_mem_bytes = self.replay_mem.ctypes.data, rb
        self.nbytes = lib.tol_stage_bytes(C.byref(self.ccfg))
        self.state = C.create_string_buffer(lib.shim_sizeof_stage())
        self.mem = np.zeros(self.nbytes // 4 + 1, np.uint32)
        self._check(lib.tol_stage_init(self.state, self.mem.ctypes.data, self.nbytes,
                                       C.byref(self.ccfg)))
        self.n_params = sum(l.n_train for l in cfg.layers)  # params[]: the trained ones
        self.rows = cfg.layers[-1].out_c

    def _check(self, status: int) -> None:
        if status != 0:
            raise LearnerError(self.lib.tol_status_name(status).decode())

    def predict(self, q) -> tuple[int, float]:
        q = np.ascontiguousarray(q, np.int8)
        lab, conf = C.c_int32(), C.c_float()
        self._check(self.lib.tol_stage_predict(self.state, q.ctypes.data_as(C.POINTER(C.c_int8)),
                                               C.byref(lab), C.byref(conf)))
        return lab.value, conf.value

    def learn(self, q, label: int) -> None:
        q = np.ascontiguousarray(q, np.int8)
        self._check(self.lib.tol_stage_learn(self.state, q.ctypes.data_as(C.POINTER(C.c_int8)),
                                             label))

    def replay_add(self, q, label: int) -> None:
        q = np.ascontiguousarray(q, np.int8)
        self._check(self.lib.tol_stage_replay_add(self.state,
                                                  q.ctypes.data_as(C.POINTER(C.c_int8)), label))

    def reset(self) -> None:
        self.lib.tol_stage_reset(self.state)

    def get_settings(self):
        from _learner_util import settings_from_c
        cs = CSettings()
        self.lib.tol_stage_get_settings(self.state, C.byref(cs))
        return settings_from_c(cs)

    def set_settings(self, s) -> None:
        self._check(self.lib.tol_stage_set_settings(self.state, C.byref(settings_to_c(s))))

    def rehearse(self) -> bool:
        st = self.lib.tol_stage_rehearse(self.state)
        if st != 0 and self.lib.tol_status_name(st).decode() == "TOL_ERR_UNSUPPORTED":
            return False
        self._check(st)
        return True

    def idle(self, steps=None) -> int:
        n = 0
        while (steps is None or n < steps) and self.rehearse():
            n += 1
        return n

    @property
    def rehearsed(self) -> int:
        return self.lib.shim_rehearsed(self.state)

    @property
    def q16(self) -> bool:
        return bool(self.lib.shim_q(self.state))

    @property
    def q(self) -> np.ndarray:
        """An int16 stage's trained parameters."""
        return np.ctypeslib.as_array(self.lib.shim_q(self.state), (self.n_params,)).copy()

    @property
    def params(self) -> np.ndarray:
        """The trained parameters' values (an int16 stage: q * 2^e, as the twin's params)."""
        if self.q16:
            exps = np.zeros(self.n_params, np.int64)
            off = 0
            for l in self.cfg.layers:
                exps[off:off + l.n_train] = l.bq
                if l.train == 0:
                    exps[off:off + l.n_weights] = l.wq
                off += l.n_train
            return (self.q.astype(np.float32) * np.ldexp(np.ones(self.n_params, np.float32), exps)).astype(np.float32)
        return np.ctypeslib.as_array(self.lib.shim_params(self.state), (self.n_params,)).copy()

    @property
    def active(self) -> np.ndarray:
        return np.ctypeslib.as_array(self.lib.shim_active(self.state), (self.rows,)).astype(bool)

    def stats(self) -> dict:
        st = CStats()
        self.lib.tol_stage_get_stats(self.state, C.byref(st))
        return {"samples_seen": st.samples_seen, "updates": st.updates, "rejected": st.rejected,
                "n_active": st.n_active, "replay_fill": st.replay_fill,
                "class_count": [st.class_count[i] for i in range(st.n_outputs)]}

    def replay_labels(self) -> list[int]:
        return [self.lib.shim_replay_label(self.state, i)
                for i in range(self.lib.shim_replay_fill(self.state))]

    def replay_row(self, i: int) -> bytes:
        from tinyol.learn.learner import row_bytes
        n = row_bytes(self.cfg.layers[0].in_size, self.cfg.replay_bits)
        return bytes(np.ctypeslib.as_array(self.lib.shim_replay_row(self.state, i), (n,)))

    def state_bytes(self, parts: int) -> bytes:
        s = StateStream(self.lib, self.lib.tol_stage_state_stream, self.state, parts, 72)
        return s.read(0, len(s))

    def restore(self, data: bytes, chunk: int = 50) -> None:
        parts, total = C.c_uint8(), C.c_uint32()
        self._check(self.lib.tol_stage_state_begin(self.state, data[:72], 72, C.byref(parts),
                                                   C.byref(total)))
        if total.value != len(data):
            raise LearnerError("TOL_ERR_MODEL")
        s = StateStream(self.lib, self.lib.tol_stage_state_stream, self.state, parts.value)
        for at in range(72, len(data), chunk):
            self._check(s.write(at, data[at:at + chunk]))
        self._check(self.lib.tol_stage_state_end(self.state, parts.value))

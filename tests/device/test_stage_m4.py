"""The C adaptive stage compiled for the Cortex-M4F and run in QEMU equals the numpy twin
(tinyol.learn.stage) bit for bit on whole streams: parameters, momentum buffers, every prediction
and confidence. The M4 build takes code paths a host build never compiles (VMLA/VLDM blocks of
mcu/src/tol_fmac.h in the stage's forward, backward and SGD loops): this is their oracle test.
Shapes cover 4-row Dense and Conv blocks over 8-wide inputs with remainders, leftover rows,
depthwise with a multiplier, GAP, and the momentum / weight decay / clipping / batch paths."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from _learner_util import make_stream
from test_stage_equiv import CMAX, LEAN, SETTINGS, STAGES, dense, make_cfg
from tinyol.learn.learner import LearnerError
from tinyol.learn.stage import ACT_RELU, Stage, stage_bytes

pytestmark = [pytest.mark.slow, pytest.mark.qemu]

if shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None:
    pytest.skip("needs arm-none-eabi-gcc and qemu-system-arm", allow_module_level=True)

CASES = {
    # Dense 40 -> 20 + ReLU (five 4-row blocks over 5 blocks of 8), Dense 20 -> 8 (2 blocks + 4)
    "dense_blocks_replay_i8": ([dense(40, 20, ACT_RELU), dense(20, CMAX)], "replay_i8"),
    "conv_c8_c12_momentum_wd_clip": (STAGES["conv_c8_c12_blocks"], "replay_7bit_momentum_wd_clip"),
    "dw_mult2_c8_gap_f32_batch": (STAGES["dw_mult2_c8_gap"], "replay_f32_ar1_batch"),
    "dw_mult1_c12_blocks_momentum": (STAGES["dw_mult1_c12_blocks"], "replay_7bit_momentum_wd_clip"),
    "conv1x1_dw_stride2_sgd": (STAGES["conv1x1_dw_stride2_flatten"], "sgd"),
    # pooling and the lean stage (biases only, frozen layers read from flash)
    "conv1d_maxpool_chain": (STAGES["conv1d_maxpool_chain"], "replay_i8"),
    "maxpool_avgpool_gmp": (STAGES["avgpool_at_cut_gmaxpool"], "replay_i8"),
    "lean_frozen_bias_all_momentum": (LEAN["conv1d_pool_chain_frozen_bias_all"],
                                      "replay_7bit_momentum_wd_clip"),
    "lean_bias_only": (LEAN["conv1d_pool_chain_bias_only"], "replay_i8"),
}


def _f(v) -> str:
    return f"{float(np.float32(v)).hex()}f"


def _rows(name, ty, a) -> str:
    a = np.asarray(a).reshape(max(len(a), 1), -1) if len(a) else np.zeros((1, 1), int)
    return (f"static const {ty} {name}[{a.shape[0]}][{a.shape[1]}] = {{"
            + ",".join("{" + ",".join(map(str, r)) + "}" for r in a) + "};\n")


def _header(cfg, pq, py, q, y) -> str:
    s, layers = cfg.settings, cfg.layers
    p = np.asarray(cfg.init_params, np.float32)
    defs = dict(SC_MEM=stage_bytes(layers, cfg.replay_capacity, cfg.replay_bits, cfg.max_new,
                                   cfg.max_old, cfg.no_momentum),
                SC_P=sum(l.n_train for l in layers), SC_N=len(y), SC_PREFILL=len(py), SC_BITS=cfg.replay_bits,
                SC_POLICY=cfg.replay_policy, SC_NO_MOMENTUM=int(cfg.no_momentum),
                SC_INIT=cfg.init_classes, SC_CAP=cfg.replay_capacity, SC_MAX_NEW=cfg.max_new,
                SC_SEED=cfg.seed, SC_N_NEW=s.n_new, SC_N_OLD=s.n_old, SC_MODE=s.mode)
    out = ["#include <stdint.h>", '#include "tol_stage.h"']
    out += [f"#define {k} {v}u" for k, v in defs.items()]
    out += [f"#define SC_SCALE {_f(cfg.latent_scale)}", f"#define SC_ZP ({cfg.latent_zero_point})",
            f"#define SC_LR {_f(s.lr)}", f"#define SC_MOMENTUM {_f(s.momentum)}",
            f"#define SC_WD {_f(s.weight_decay)}", f"#define SC_CLIP {_f(s.clip_norm)}", ""]
    text = "\n".join(out)
    text += ("static const tol_stage_layer_t sc_layers[] = {"
             + ",".join("{" + ",".join(map(str, l.as_tuple())) + "}" for l in layers) + "};\n")
    text += f"static const float sc_params[] = {{{','.join(_f(v) for v in p)}}};\n"
    text += _rows("sc_pq", "int8_t", pq) + _rows("sc_q", "int8_t", q)
    text += f"static const uint16_t sc_py[] = {{{','.join(map(str, list(py) or [0]))}}};\n"
    text += f"static const uint16_t sc_y[] = {{{','.join(map(str, y))}}};\n"
    return text


@pytest.mark.parametrize("name", list(CASES))
def test_m4_stage_stream_equals_twin_bit_for_bit(tmp_path, name):
    from tinyol.bench.tflm_bench import STAGE_SOURCES, run_learner_stream

    layers, setting = CASES[name]
    cfg = make_cfg(layers, **SETTINGS[setting])
    d = layers[0].in_size
    rng = np.random.default_rng(5)
    pq, py = np.zeros((0, d), np.int8), []
    if cfg.replay_capacity:
        pq, py, _ = make_stream(rng, 20, d, CMAX, classes=range(4))
    q, y, _ = make_stream(np.random.default_rng(1), 60, d, CMAX, classes=range(2, CMAX))
    ref = Stage(cfg)
    for qi, yi in zip(pq, py):
        ref.replay_add(qi, int(yi))
    preds = []
    for qi, yi in zip(q, y):
        preds.append(ref.predict(qi))
        try:
            ref.learn(qi, int(yi))
        except LearnerError as e:
            assert e.status == "TOL_ERR_DIVERGED"
    got = run_learner_stream(tmp_path, _header(cfg, pq, [int(v) for v in py], q, [int(v) for v in y]),
                             main="stage_stream.c", case="stage_case.h", sources=STAGE_SOURCES,
                             keys=("p", "m", "l", "c"))
    assert ref.updates >= 60 // cfg.settings.n_new - 3 and not np.array_equal(ref.params, cfg.init_params), "it learned"
    np.testing.assert_array_equal(np.frombuffer(got["p"], np.uint32), ref.params.view(np.uint32))
    mom = ref.mom if not cfg.no_momentum else np.zeros_like(ref.params)
    np.testing.assert_array_equal(np.frombuffer(got["m"], np.uint32), mom.view(np.uint32))
    assert np.frombuffer(got["l"], np.int32).tolist() == [p[0] for p in preds]
    np.testing.assert_array_equal(np.frombuffer(got["c"], np.float32),
                                  np.array([p[1] for p in preds], np.float32))

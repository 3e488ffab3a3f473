"""The int16 stage (`--stage-weights int16`, tol_stage.h "Lean trained weights") and the stage's
own learning rate (stage_lr_scale): the C (mcu/src/tol_stage.c, host-compiled) against its
numpy twin (tinyol.learn.stage) bit for bit on whole streams, its RAM against the memory
model, its state against the float stage's. Independent checks: the int16 stage learns the
stream; its rounding is the float update's on average."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from _learner_util import make_stream
from _stage_util import CStage, build_stage_lib
from test_stage_equiv import CMAX, LEAN, SETTINGS, STAGES, assert_same, make_cfg, run_pair
from tinyol import memory
from tinyol.learn.learner import POLICY_BALANCED, LearnerError, Settings
from tinyol.learn.stage import Stage, int16_stage, is_q16, n_trained, stage_bytes


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build_stage_lib(tmp_path_factory.mktemp("stage16"))


def q16_cfg(layers, setting="replay_i8", **kw):
    cfg = make_cfg(layers, **{**SETTINGS[setting], **kw})
    ql, qp = int16_stage(cfg.layers, cfg.init_params)
    return dataclasses.replace(cfg, layers=ql, init_params=qp, no_momentum=True)


Q16_STAGES = {k: STAGES[k] for k in ("dense_dense", "conv1x1_dw_stride2_flatten", "conv1d_maxpool_chain",
                                     "dw_mult2_c8_gap", "maxpool_overlap_same_avgpool")}
Q16_STAGES.update({k: LEAN[k] for k in ("conv1d_pool_chain_frozen_bias_all", "dw_frozen_dense_bias")})


@pytest.mark.parametrize("stage", list(Q16_STAGES))
def test_int16_stage_stream_c_matches_numpy(lib, stage):
    cfg = q16_cfg(Q16_STAGES[stage])
    assert is_q16(cfg.layers)
    py, cl, pp, pc = run_pair(lib, cfg)
    assert cl.q16 and py.q16
    np.testing.assert_array_equal(cl.q, py.q)
    assert_same(py, cl, pp, pc)
    assert py.updates > 100 and py.stats()["rejected"] == 0
    # what trains moved away from the export
    q0 = Stage(cfg).q
    assert (py.q != q0).mean() > 0.05


def test_int16_stage_weight_decay_batch_lr_scale_c_matches_numpy(lib):
    """Weight decay, a batch of 3 fresh + 4 replayed, float32 replay and the stage's own
    learning rate: still bit for bit."""
    cfg = q16_cfg(STAGES["conv_c8_c12_blocks"], "replay_f32_ar1_batch", stage_lr_scale=0.25)
    cfg = dataclasses.replace(cfg, settings=Settings(lr=0.1, n_new=3, n_old=4, weight_decay=1e-3))
    py, cl, pp, pc = run_pair(lib, cfg)
    np.testing.assert_array_equal(cl.q, py.q)
    assert_same(py, cl, pp, pc)


@pytest.mark.parametrize("codec", ["pq", "4bit"])
def test_int16_stage_compressed_replay_c_matches_numpy(lib, codec):
    """The int16 stage with compressed replay (issue 30's digits recipe: `--stage-weights int16`
    with `--replay-codec pq:M` or `--replay-bits 4`), class-balanced, the stage's own learning
    rate, idle rehearsal steps: C equals the twin bit for bit (every int16 parameter,
    prediction, stored row); the rows are the codec's size; the C's RAM is the memory model's."""
    from test_stage_equiv import _codec4, run_rehearsing
    from tinyol.learn.learner import fit_pq

    layers = STAGES["dense_dense"]
    d = layers[0].in_size
    if codec == "pq":
        book = fit_pq(make_stream(np.random.default_rng(4), 600, d, CMAX)[0], d // 2, seed=1)
        kw, row = dict(replay_bits=128 + 2, replay_codec=book), d // 2
    else:
        kw, row = dict(replay_bits=4, replay_codec=_codec4(layers)), (d + 1) // 2
    cfg = q16_cfg(layers, replay_capacity=30, replay_policy=POLICY_BALANCED, stage_lr_scale=3.0,
                  settings=Settings(lr=0.05, n_old=3, rehearse=2), **kw)
    py, cl, pp, pc, counts = run_rehearsing(lib, cfg, lambda i: None)
    assert cl.q16 and py.q16 and counts == [2] * 120
    np.testing.assert_array_equal(cl.q, py.q)
    assert_same(py, cl, pp, pc)
    assert len(py.replay.packed_row(0)) == row
    assert py.updates == 3 * 120 and py.stats()["rejected"] == 0
    assert (py.q != Stage(cfg).q).mean() > 0.05
    assert cl.nbytes == stage_bytes(cfg.layers, cfg.replay_capacity, cfg.replay_bits, cfg.max_new, 0, True)


@pytest.mark.parametrize("scale", [0.1, 3.0])
def test_stage_lr_scale_float_c_matches_numpy(lib, scale):
    cfg = make_cfg(STAGES["conv1d_maxpool_chain"], **SETTINGS["replay_7bit_momentum_wd_clip"],
                   stage_lr_scale=scale)
    py, cl, pp, pc = run_pair(lib, cfg)
    assert_same(py, cl, pp, pc)
    # the scale changed the learning (not a field nobody reads)
    ref, _, _, _ = run_pair(lib, dataclasses.replace(cfg, stage_lr_scale=0.0))
    assert not np.array_equal(ref.params, py.params)


def test_int16_stage_learns_and_tracks_the_float_stage(lib):
    """Not just equal: the int16 stage learns the stream as the float stage does (late
    accuracy within a few points of it, far above chance)."""
    layers = STAGES["dense_dense"]
    f_cfg = dataclasses.replace(make_cfg(layers, **SETTINGS["replay_i8"]), no_momentum=True)
    py16, _, pp16, _ = run_pair(lib, q16_cfg(layers), n=400)
    pyf, _, ppf, _ = run_pair(lib, f_cfg, n=400)
    _, y, _ = make_stream(np.random.default_rng(1), 400, 24, CMAX, classes=range(2, CMAX))
    late16 = np.mean([p[0] == t for p, t in zip(pp16[-150:], y[-150:])])
    latef = np.mean([p[0] == t for p, t in zip(ppf[-150:], y[-150:])])
    assert late16 > 0.7 and abs(late16 - latef) < 0.08, (late16, latef)


def test_int16_stage_memory_is_two_bytes_per_trained_parameter(lib):
    """The C's tol_stage_bytes equals the memory model (tinyol.memory), and the int16 stage
    keeps 2 bytes per trained parameter where the float stage keeps 8 (weights + gradients,
    no momentum)."""
    for name in ("conv1d_maxpool_chain", "dw_mult2_c8_gap"):
        cfg = q16_cfg(STAGES[name], replay_capacity=40)
        cl = CStage(lib, cfg)
        t = n_trained(cfg.layers)
        mm = stage_bytes(cfg.layers, cfg.replay_capacity, cfg.replay_bits, cfg.max_new, 0, True)
        assert cl.nbytes == mm
        f_layers = [dataclasses.replace(l, wq=0, bq=0) for l in cfg.layers]
        mf = stage_bytes(f_layers, cfg.replay_capacity, cfg.replay_bits, cfg.max_new, 0, True)
        assert mf - mm == 8 * t - memory._a4(2 * t)
        parts = memory.stage_parts([l.as_tuple() for l in cfg.layers], 40, 8, 1, False)
        assert parts["stage weights"] <= 2 * t + 2 and parts["gradients"] == 0


def test_int16_stage_refuses_momentum_and_clipping(lib):
    cfg = q16_cfg(STAGES["dense_dense"])
    with pytest.raises(LearnerError, match="TOL_ERR_ARG"):
        CStage(lib, dataclasses.replace(cfg, no_momentum=False))
    with pytest.raises(LearnerError, match="TOL_ERR_ARG"):
        Stage(dataclasses.replace(cfg, no_momentum=False))
    st = CStage(lib, cfg)
    with pytest.raises(LearnerError, match="TOL_ERR_ARG"):
        st.set_settings(Settings(lr=0.05, n_old=3, clip_norm=1.0))
    with pytest.raises(LearnerError, match="TOL_ERR_ARG"):
        Stage(cfg).set_settings(Settings(lr=0.05, n_old=3, clip_norm=1.0))


def test_int16_stage_state_round_trip_and_float_state_refused(lib):
    """Its state (int16 parameters, 2 bytes each) restores bit for bit and the stream goes on
    as the twin's; a float stage's state of the same layers is refused (TOL_ERR_MODEL), and
    the other way round."""
    cfg = q16_cfg(STAGES["conv1d_maxpool_chain"])
    py, cl, _, _ = run_pair(lib, cfg, n=60)
    blob = cl.state_bytes(0xFF)
    other = CStage(lib, cfg)
    other.restore(blob)
    np.testing.assert_array_equal(other.q, cl.q)
    q, y, _ = make_stream(np.random.default_rng(9), 30, cfg.layers[0].in_size, CMAX, classes=range(CMAX))
    for qi, yi in zip(q, y):
        other.learn(qi, int(yi))
        py.learn(qi, int(yi))
    np.testing.assert_array_equal(other.q, py.q)
    fcfg = dataclasses.replace(cfg, layers=[dataclasses.replace(l, wq=0, bq=0) for l in cfg.layers])
    fl = CStage(lib, fcfg)
    with pytest.raises(LearnerError, match="TOL_ERR_MODEL"):
        fl.restore(blob)
    with pytest.raises(LearnerError, match="TOL_ERR_MODEL"):
        CStage(lib, cfg).restore(fl.state_bytes(0xFF))


def test_int16_rounding_is_unbiased():
    """Stochastic rounding: an update of a quarter of a step moves a weight by a quarter of a
    step on average (round to nearest would never move it)."""
    layers = STAGES["dense_dense"]
    cfg = q16_cfg(layers, init_classes=CMAX)
    st = Stage(cfg)
    q0 = st.q.astype(np.float64)
    x = np.random.default_rng(4).uniform(0, 2, size=24).astype(np.float32)
    st._grad_zero()
    st.grads = np.zeros(st.n_params, np.float32)
    st._grad_add_f(x, 5, np.float32(1.0))
    g = st.grads.astype(np.float64)
    # set the lr so that the last layer's mean step is tiny against one int16 step
    moved = []
    for rep in range(40):
        st2 = Stage(cfg)
        st2.updates = rep
        st2._grad_zero()
        st2._grad_add(x, 5, np.float32(1.0))
        moved.append(st2.q.astype(np.float64) - q0)
    mean = np.mean(moved, axis=0)
    expect = -(st._lr().astype(np.float64) * g) * st.qinv.astype(np.float64)
    sel = np.abs(expect) > 0.05
    assert sel.sum() > 20
    corr = np.corrcoef(mean[sel], expect[sel])[0, 1]
    assert corr > 0.9, corr

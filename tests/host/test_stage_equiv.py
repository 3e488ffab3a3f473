"""The C adaptive stage (mcu/src/tol_stage.c) vs its numpy twin (tinyol.learn.stage) on whole
streams: identical predictions and confidences, bit-identical parameters, replay buffers and
counters, for every supported layer and multi-layer stages. Independent checks: the numpy
stage's gradients against finite differences and its forward pass against Keras."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from _learner_util import StateStream, make_stream, run_rehearsing_pair
from _stage_util import CStage, build_stage_lib, c_layers
from tinyol.errors import TinyolError
from tinyol.learn.learner import MODE_SGD, POLICY_AR1, POLICY_BALANCED, POLICY_RESERVOIR, LearnerError, Settings
from tinyol.learn.stage import (
    ACT_RELU,
    ACT_RELU6,
    AVGPOOL,
    CONV,
    DENSE,
    DWCONV,
    GAP,
    GMAXPOOL,
    MAXPOOL,
    TRAIN_BIAS,
    TRAIN_FROZEN,
    Layer,
    Stage,
    StageConfig,
    n_params,
    n_trained,
    stage_bytes,
    stage_hash,
    trained_part,
)

CMAX = 8


def dense(n_in, n_out, act=0):
    return Layer(DENSE, 1, 1, n_in, 1, 1, n_out, act)


def conv(h, w, c, co, k, s=1, same=True, act=0, dw=False, kh=None):
    kh = k if kh is None else kh
    if same:
        oh, ow = -(-h // s), -(-w // s)
        pt = max((oh - 1) * s + kh - h, 0) // 2
        pl = max((ow - 1) * s + k - w, 0) // 2
    else:
        oh, ow, pt, pl = (h - kh) // s + 1, (w - k) // s + 1, 0, 0
    return Layer(DWCONV if dw else CONV, h, w, c, oh, ow, co, act, kh, k, s, s, pt, pl)


def pool(h, w, c, k, s=None, same=False, kind=MAXPOOL, kh=None):
    """A pooling layer placed as a convolution's window (Keras: strides default to the pool)."""
    return dataclasses.replace(conv(h, w, c, c, k, s=k if s is None else s, same=same, kh=kh),
                               kind=kind)


STAGES = {
    "dense_dense": [dense(24, 16, ACT_RELU), dense(16, CMAX)],
    "dense3_relu6": [dense(24, 12, ACT_RELU6), dense(12, 10, ACT_RELU), dense(10, CMAX)],
    "conv3x3_same_gap": [conv(4, 4, 3, 6, 3, act=ACT_RELU), Layer(GAP, 4, 4, 6, 1, 1, 6),
                         dense(6, CMAX)],
    "conv1x1_dw_stride2_flatten": [conv(4, 4, 3, 4, 1, act=ACT_RELU6),
                                   conv(4, 4, 4, 8, 3, s=2, act=ACT_RELU, dw=True),
                                   dense(2 * 2 * 8, CMAX)],
    "conv1d_valid": [conv(1, 12, 2, 5, 3, same=False, act=ACT_RELU, kh=1), dense(50, CMAX)],
    "dw_valid_stride2_leftover": [conv(5, 5, 2, 2, 2, s=2, same=False, dw=True, act=ACT_RELU),
                                  Layer(GAP, 2, 2, 2, 1, 1, 2), dense(2, CMAX)],
    "conv_stride2_same_even": [conv(4, 6, 2, 3, 3, s=2, act=ACT_RELU),
                               dense(2 * 3 * 3, CMAX)],
    # channel counts that take the 8-wide blocks (and a remainder) of the optimized loops:
    # 4-row conv blocks over 8 and 12 input channels, a 2-row leftover, a 72-input Dense
    "conv_c8_c12_blocks": [conv(3, 4, 8, 12, 3, act=ACT_RELU),
                           conv(3, 4, 12, 6, 1, act=ACT_RELU6), dense(3 * 4 * 6, CMAX)],
    "dw_mult2_c8_gap": [conv(3, 3, 8, 16, 3, dw=True, act=ACT_RELU), Layer(GAP, 3, 3, 16, 1, 1, 16),
                        dense(16, 13, ACT_RELU), dense(13, CMAX)],
    # depthwise with multiplier 1 over 12 channels: the 8-channel blocks (forward and backward,
    # input deltas too: a 1x1 conv before it) and a remainder of 4
    "dw_mult1_c12_blocks": [conv(4, 4, 3, 12, 1, act=ACT_RELU),
                            conv(4, 4, 12, 12, 3, act=ACT_RELU, dw=True),
                            Layer(GAP, 4, 4, 12, 1, 1, 12), dense(12, CMAX)],
    # pooling: the Conv1D-pool chains of the models users bring (MaxPooling1D after every
    # convolution), overlapping windows (stride < pool), 'same' windows cut by the border,
    # average pooling (border windows count only their taps), global max, a pool at the cut
    "conv1d_maxpool_chain": [conv(1, 20, 3, 8, 5, same=False, act=ACT_RELU, kh=1),
                             pool(1, 16, 8, 2, kh=1), conv(1, 8, 8, 8, 3, act=ACT_RELU, kh=1),
                             pool(1, 8, 8, 2, kh=1), dense(32, 12, ACT_RELU), dense(12, CMAX)],
    "maxpool_overlap_same_avgpool": [conv(5, 5, 2, 4, 3),
                                     pool(5, 5, 4, 3, s=2, same=True),
                                     pool(3, 3, 4, 2, s=1, same=True, kind=AVGPOOL),
                                     dense(36, CMAX)],
    "avgpool_at_cut_gmaxpool": [pool(4, 6, 3, 2, kind=AVGPOOL), conv(2, 3, 3, 6, 2, act=ACT_RELU6),
                                Layer(GMAXPOOL, 2, 3, 6, 1, 1, 6), dense(6, CMAX)],
}

SETTINGS = {
    "sgd": dict(no_momentum=True, settings=Settings(lr=0.05, mode=MODE_SGD, n_old=0)),
    "replay_i8": dict(replay_capacity=30, replay_bits=8, replay_policy=POLICY_RESERVOIR,
                      settings=Settings(lr=0.05, n_old=3)),
    "replay_7bit_momentum_wd_clip": dict(replay_capacity=25, replay_bits=7,
                                         replay_policy=POLICY_BALANCED,
                                         settings=Settings(lr=0.05, momentum=0.9,
                                                           weight_decay=1e-3, clip_norm=0.5,
                                                           n_old=2)),
    "replay_f32_ar1_batch": dict(replay_capacity=20, replay_bits=32, replay_policy=POLICY_AR1,
                                 max_new=3, no_momentum=True,
                                 settings=Settings(lr=0.1, n_new=3, n_old=4)),
}


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build_stage_lib(tmp_path_factory.mktemp("stage"))


def make_cfg(layers, seed=3, **kw) -> StageConfig:
    rng = np.random.default_rng(seed)
    p = rng.normal(0, 0.3, size=n_params(layers)).astype(np.float32)
    kw.setdefault("init_classes", 4)
    return StageConfig(layers=layers, init_params=p, latent_scale=0.05, latent_zero_point=-128,
                       seed=7, **kw)


def run_pair(lib, cfg, n=160, prefill=30, replay_apart=False):
    d = cfg.layers[0].in_size
    rng = np.random.default_rng(5)
    py, cl = Stage(cfg), CStage(lib, cfg, replay_apart=replay_apart)
    if cfg.replay_capacity and prefill:
        pq, py_, _ = make_stream(rng, prefill, d, CMAX, classes=range(4))
        for qi, yi in zip(pq, py_):
            py.replay_add(qi, int(yi))
            cl.replay_add(qi, int(yi))
    q, y, _ = make_stream(np.random.default_rng(1), n, d, CMAX, classes=range(2, CMAX))
    pp, pc = [], []
    for qi, yi in zip(q, y):
        pp.append(py.predict(qi))
        pc.append(cl.predict(qi))
        for learner, out in ((py, "py"), (cl, "c")):
            try:
                learner.learn(qi, int(yi))
            except LearnerError as e:
                assert e.status == "TOL_ERR_DIVERGED", (out, e.status)
    return py, cl, pp, pc


def assert_same(py, cl, pp, pc):
    assert [p[0] for p in pp] == [p[0] for p in pc]
    assert [np.float32(p[1]) for p in pp] == [np.float32(p[1]) for p in pc]
    np.testing.assert_array_equal(cl.params, py.params)
    assert (cl.active == py.active).all()
    sc, sp = cl.stats(), py.stats()
    for k in ("samples_seen", "updates", "rejected", "n_active", "replay_fill", "class_count"):
        assert sc[k] == sp[k], k
    if py.replay is not None:
        assert cl.replay_labels() == py.replay.labels[: py.replay.fill].tolist()
        for i in range(py.replay.fill):
            assert cl.replay_row(i) == py.replay.packed_row(i)


def test_stage_replay_buffer_in_its_own_block_matches_numpy(lib):
    """The stage with its replay buffer in a block of its own (replay_mem, docs/boards.md: the
    stage in SRAM1, the buffer in SRAM2) learns bit for bit as the twin; tol_stage_bytes() then
    leaves the buffer out, by exactly memory.replay_bytes."""
    from tinyol import memory

    stage = next(iter(STAGES))
    cfg = make_cfg(STAGES[stage], **SETTINGS["replay_i8"])
    py, cl, pp, pc = run_pair(lib, cfg, replay_apart=True)
    assert_same(py, cl, pp, pc)
    rb = memory.replay_bytes(cfg.replay_capacity, cfg.layers[0].in_size, cfg.replay_bits,
                             cfg.layers[-1].out_c)
    assert cl.nbytes == cl.whole_bytes - rb and cl.replay_mem.any()


@pytest.mark.parametrize("stage", list(STAGES))
def test_stage_stream_c_matches_numpy(lib, stage):
    cfg = make_cfg(STAGES[stage], **SETTINGS["replay_i8"])
    py, cl, pp, pc = run_pair(lib, cfg)
    assert_same(py, cl, pp, pc)
    assert py.updates > 100 and py.active.all()
    # every layer trained (parameters moved away from the export)
    for i, l in enumerate(py.layers):
        if l.n_params:
            w, _ = py.layer_params(i)
            w0 = cfg.init_params[py.offsets[i]:py.offsets[i] + l.n_weights]
            assert not np.array_equal(w, w0), f"layer {i} did not change"


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_stage_settings_c_matches_numpy(lib, setting):
    cfg = make_cfg(STAGES["conv1x1_dw_stride2_flatten"], **SETTINGS[setting])
    py, cl, pp, pc = run_pair(lib, cfg)
    assert_same(py, cl, pp, pc)


def test_stage_learns_new_classes(lib):
    """Not just equal: the stage learns the stream (late accuracy far above chance)."""
    cfg = make_cfg(STAGES["dense_dense"], **SETTINGS["replay_i8"])
    py, cl, pp, pc = run_pair(lib, cfg, n=400)
    _, y, _ = make_stream(np.random.default_rng(1), 400, 24, CMAX, classes=range(2, CMAX))
    late = np.mean([p[0] == t for p, t in zip(pp[-100:], y[-100:])])
    assert late > 0.7


def lean(layers, *modes):
    """The stage with these train modes on its linear layers, in order (the last stays ALL)."""
    out, it = [], iter(modes)
    for l in layers[:-1]:
        out.append(dataclasses.replace(l, train=next(it)) if l.n_params else l)
    return out + [layers[-1]]


B, F, A = TRAIN_BIAS, TRAIN_FROZEN, 0
# the lean stage (sparse update): biases only, frozen layers (read from the export, backward
# through them), weights of a chosen layer, momentum/decay/clipping over what trains
LEAN = {
    "conv1d_pool_chain_bias_only": lean(STAGES["conv1d_maxpool_chain"], B, B, B),
    "conv1d_pool_chain_frozen_bias_all": lean(STAGES["conv1d_maxpool_chain"], F, B, A),
    "conv1d_pool_chain_first_trains_all": lean(STAGES["conv1d_maxpool_chain"], A, F, F),
    "dw_frozen_dense_bias": lean(STAGES["dw_mult2_c8_gap"], F, B),
    "conv_c8_c12_bias_frozen": lean(STAGES["conv_c8_c12_blocks"], B, F),
}


@pytest.mark.parametrize("stage", list(LEAN))
@pytest.mark.parametrize("setting", ["replay_i8", "replay_7bit_momentum_wd_clip"])
def test_lean_stage_stream_c_matches_numpy(lib, stage, setting):
    layers = LEAN[stage]
    cfg = make_cfg(layers, **SETTINGS[setting])
    py, cl, pp, pc = run_pair(lib, cfg)
    assert_same(py, cl, pp, pc)
    assert py.n_params == n_trained(layers) < n_params(layers)
    # what trains moved; what does not is still the export (the forward reads it from there)
    assert not np.array_equal(py.params, trained_part(layers, cfg.init_params))
    for i, l in enumerate(layers):
        w, b = py.layer_params(i)
        p0 = cfg.init_params[py.poffsets[i]:py.poffsets[i + 1]]
        if l.n_params and l.train == TRAIN_FROZEN:
            np.testing.assert_array_equal(np.concatenate([w, b]), p0)
        elif l.n_params and l.train == TRAIN_BIAS:
            np.testing.assert_array_equal(w, p0[:l.n_weights])
            assert not np.array_equal(b, p0[l.n_weights:])


@pytest.mark.parametrize("stage", list(LEAN))
def test_lean_gradient_is_the_full_gradient_restricted(stage):
    """A lean stage's gradient is, bit for bit, the full stage's gradient (checked against
    finite differences above) at the parameters that train."""
    layers = LEAN[stage]
    full = [dataclasses.replace(l, train=0) for l in layers]
    cfg_l, cfg_f = make_cfg(layers, init_classes=CMAX), make_cfg(full, init_classes=CMAX)
    sl, sf = Stage(cfg_l), Stage(cfg_f)
    x = np.random.default_rng(4).uniform(0, 2, size=layers[0].in_size).astype(np.float32)
    for st in (sl, sf):
        st.grads = np.zeros(st.n_params, np.float32)
        st._grad_add(x, 5, np.float32(0.5))
    np.testing.assert_array_equal(sl.grads, trained_part(layers, sf.grads))
    assert np.abs(sl.grads).max() > 0


def test_lean_state_and_image_roundtrip(lib):
    """SAVE/LOAD and the stage image carry the trained parameters only; another train mode
    of the same layers is another stage (its state is refused)."""
    layers = LEAN["conv1d_pool_chain_frozen_bias_all"]
    cfg = make_cfg(layers, replay_capacity=20, replay_bits=8,
                   settings=Settings(lr=0.05, momentum=0.5, n_old=3))
    py, cl, _, _ = run_pair(lib, cfg, n=50)
    data = cl.state_bytes(0x03)
    t = n_trained(layers)
    assert data[72:72 + 4 * t] == py.params.tobytes()
    fresh = CStage(lib, cfg)
    fresh.restore(data)
    assert fresh.state_bytes(0x03) == data
    q, y, _ = make_stream(np.random.default_rng(9), 20, cfg.layers[0].in_size, CMAX)
    for qi, yi in zip(q, y):
        a, b = fresh.predict(qi), py.predict(qi)
        assert a[0] == b[0] and np.float32(a[1]) == np.float32(b[1])
        for s in (fresh, py):
            s.learn(qi, int(yi))
    np.testing.assert_array_equal(fresh.params, py.params)
    assert len(py.image()) == 4 * t + CMAX
    other = CStage(lib, make_cfg(lean(STAGES["conv1d_maxpool_chain"], F, A, B),
                                 replay_capacity=20, replay_bits=8))
    assert stage_hash(other.cfg.layers) != stage_hash(layers)
    with pytest.raises(LearnerError, match="TOL_ERR_MODEL"):
        other.restore(data)


def test_lean_stage_is_4x_smaller_at_the_same_cut():
    """The issue's Sequential IMU network cut before conv3 (Conv1D 32 -> MaxPool -> Dense 32
    -> Dense 7): biases-only below the classifier takes >= 4x less than the float stage,
    by the one memory model (held equal to tol_stage_bytes above)."""
    chain = [conv(1, 22, 32, 32, 3, same=False, act=ACT_RELU, kh=1), pool(1, 20, 32, 2, kh=1),
             dense(320, 32, ACT_RELU), dense(32, 7)]
    full = stage_bytes(chain, 0, 8, 1, 0, True)
    assert stage_bytes(lean(chain, B, B), 0, 8, 1, 0, True) * 4 <= full
    assert stage_bytes(lean(chain, B, A), 0, 8, 1, 0, True) * 4 > full  # embed's weights: 10 k


def test_stage_bytes_model_matches_c(lib):
    import ctypes as C

    from _stage_util import CStageConfig
    for name, layers in {**STAGES, **LEAN}.items():
        for cap, bits, mx, nomom in ((0, 8, 1, 1), (30, 7, 3, 0), (12, 32, 2, 0)):
            arr = c_layers(layers)
            cc = CStageConfig(arr, len(layers), bits, 0, nomom, None, 0, cap, mx, 0, 0.05, 0, 1)
            assert lib.tol_stage_bytes(C.byref(cc)) == stage_bytes(layers, cap, bits, mx, 0,
                                                                   bool(nomom)), name
            assert lib.tol_stage_params(arr, len(layers)) == n_params(layers)
            assert lib.tol_stage_hash(arr, len(layers)) == stage_hash(layers)
    bad = [dense(24, 16), dense(15, CMAX)]
    cc = CStageConfig(c_layers(bad), 2, 8, 0, 0, None, 0, 0, 1, 0, 0.05, 0, 1)
    assert lib.tol_stage_bytes(C.byref(cc)) == 0
    with pytest.raises(TinyolError, match="inconsistent stage layers"):
        stage_bytes(bad)


def test_stage_state_roundtrip(lib):
    """Save mid-stream (queue non-empty, replay, momentum), restore into a fresh C stage:
    it goes on bit-identically with the numpy stage that never stopped."""
    cfg = make_cfg(STAGES["conv3x3_same_gap"], replay_capacity=20, replay_bits=7, max_new=2,
                   settings=Settings(lr=0.05, momentum=0.5, n_new=2, n_old=3))
    py, cl, _, _ = run_pair(lib, cfg, n=61)
    data = cl.state_bytes(0x03)
    fresh = CStage(lib, cfg)
    fresh.restore(data)
    assert fresh.state_bytes(0x03) == data
    q, y, _ = make_stream(np.random.default_rng(9), 40, cfg.layers[0].in_size, CMAX)
    for qi, yi in zip(q, y):
        assert fresh.predict(qi) == cl.predict(qi)
        assert np.float32(fresh.predict(qi)[1]) == np.float32(py.predict(qi)[1])
        for s in (fresh, cl, py):
            s.learn(qi, int(yi))
    np.testing.assert_array_equal(fresh.params, py.params)
    # a state of another stage is refused, and the stage is unchanged
    other = CStage(lib, make_cfg(STAGES["dense_dense"], replay_capacity=20, replay_bits=7,
                                 max_new=2))
    before = other.params
    with pytest.raises(LearnerError, match="TOL_ERR_MODEL"):
        other.restore(data)
    np.testing.assert_array_equal(other.params, before)
    # a corrupted parameter (NaN) is refused at the end and the stage reset to the export
    bad = bytearray(data)
    bad[72:76] = np.float32(np.nan).tobytes()
    with pytest.raises(LearnerError, match="TOL_ERR_RANGE"):
        fresh.restore(bytes(bad))
    np.testing.assert_array_equal(fresh.params[:4], cfg.init_params[:4])


def test_stage_state_stream_layout_and_chunking(lib):
    """The state stream (tol_segs under tol_stage_state_*): its segments hold the twin's
    parameters, flags, class counts and momentum at the documented offsets, and any chunking
    of a read (across the header and every segment boundary) or of a restore gives the same
    bytes."""
    cfg = make_cfg(STAGES["dense_dense"], replay_capacity=20, replay_bits=8, max_new=2,
                   settings=Settings(lr=0.05, momentum=0.5, n_new=2, n_old=3))
    py, cl, _, _ = run_pair(lib, cfg, n=41)
    data = cl.state_bytes(0x03)
    p, rows, d = py.n_params, py.rows, py.latent
    at = 72
    assert data[at:at + 4 * p] == py.params.tobytes()
    at += 4 * p
    assert data[at:at + rows] == py.active.astype(np.uint8).tobytes()
    at += rows
    assert data[at:at + 4 * rows] == py.class_count.astype(np.uint32).tobytes()
    at += 4 * rows
    queue = b"".join(x.astype(np.float32).tobytes() for x, _ in py.pending)
    assert len(py.pending) == 1 and data[at:at + len(queue)] == queue
    at += len(queue) + 2 * len(py.pending)
    assert data[at:at + 4 * p] == py.mom.tobytes()
    for chunk in (1, 7, 71, 72, 73, 4 * p + 1):
        got = b""
        s = StateStream(lib, lib.tol_stage_state_stream, cl.state, 0x03, 72)
        for off in range(0, len(data), chunk):
            got += s.read(off, min(chunk, len(data) - off))
        assert got == data, chunk
        fresh = CStage(lib, cfg)
        fresh.restore(data, chunk=chunk)
        assert fresh.state_bytes(0x03) == data, chunk


def _loss(stage: Stage, x, label):
    z = stage.forward(x)[-1].astype(np.float64)
    a = stage.active
    z = z[a] - z[a].max()
    p = np.exp(z) / np.exp(z).sum()
    return -np.log(p[list(np.flatnonzero(a)).index(label)])


@pytest.mark.parametrize("stage", ["dense3_relu6", "conv3x3_same_gap",
                                   "conv1x1_dw_stride2_flatten", "conv1d_valid",
                                   "dw_valid_stride2_leftover", "maxpool_overlap_same_avgpool",
                                   "avgpool_at_cut_gmaxpool"])
def test_stage_gradient_vs_finite_differences(stage):
    """The backward pass is the gradient of the loss (central differences, float64 loss)."""
    layers = STAGES[stage]
    cfg = make_cfg(layers, init_classes=CMAX)
    st = Stage(cfg)
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 2, size=layers[0].in_size).astype(np.float32)
    st.grads = np.zeros(st.n_params, np.float32)
    st._grad_add(x, 3, np.float32(1.0))
    g = st.grads.copy()
    idx = rng.choice(st.n_params, size=min(40, st.n_params), replace=False)
    base = st.params.copy()
    checked = 0
    # max pools: a smaller step, or it moves the arg-max of a near-tie window
    has_max = any(l.kind in (MAXPOOL, GMAXPOOL) for l in layers)
    for k in idx:
        eps = 3e-3 if has_max else 1e-2
        st.params = base.copy()
        st.params[k] += eps
        lp = _loss(st, x, 3)
        st.params = base.copy()
        st.params[k] -= eps
        lm = _loss(st, x, 3)
        fd = (lp - lm) / (2 * eps)
        if abs(fd) > 1e-3 or abs(g[k]) > 1e-3:
            checked += 1
        assert abs(fd - g[k]) < 2e-2 * max(1.0, abs(fd)), (k, fd, g[k])
    st.params = base
    assert checked >= 5


def test_stage_diverged_update_changes_nothing(lib):
    """An update that would overflow is refused whole, in C and numpy alike."""
    cfg = make_cfg(STAGES["dense_dense"], no_momentum=True,
                   settings=Settings(lr=3e38, mode=MODE_SGD, n_old=0))
    py, cl = Stage(cfg), CStage(lib, cfg)
    q, y, _ = make_stream(np.random.default_rng(4), 5, 24, CMAX, classes=[6])
    before = cl.params
    for s in (py, cl):
        with pytest.raises(LearnerError, match="TOL_ERR_DIVERGED"):
            s.learn(q[0], 6)
    np.testing.assert_array_equal(cl.params, before)
    np.testing.assert_array_equal(py.params, before)
    assert not cl.active[6] and not py.active[6]
    assert cl.stats()["rejected"] == py.stats()["rejected"] == 1
    # issue 34: the diverged sample counts nowhere (it advanced samples_seen and its class)
    for s in (py, cl):
        assert s.stats()["samples_seen"] == 0 and s.stats()["class_count"][6] == 0


def test_stage_init_refuses_bad_configs(lib):
    import ctypes as C

    cfg = make_cfg(STAGES["conv3x3_same_gap"])
    cs = CStage(lib, cfg)
    state = C.create_string_buffer(lib.shim_sizeof_stage())
    mem = np.zeros(cs.nbytes // 4 + 1, np.uint32)
    # one byte short: TOL_ERR_OVERFLOW
    assert lib.tol_stage_init(state, mem.ctypes.data, cs.nbytes - 1, C.byref(cs.ccfg)) == 16
    # a chain whose shapes do not follow each other: TOL_ERR_ARG
    bad = [dense(24, 16, ACT_RELU), dense(15, CMAX)]
    with pytest.raises(LearnerError, match="TOL_ERR_ARG"):
        CStage(lib, make_cfg(bad[:1] + [dense(16, CMAX, ACT_RELU)]))  # last layer with ReLU
    with pytest.raises(LearnerError, match="TOL_ERR_ARG"):
        Stage(make_cfg(bad[:1] + [dense(16, CMAX, ACT_RELU)]))


def test_stage_compiles_for_cortex_m4():
    import shutil
    import subprocess

    from _learner_util import ARM, MCU, STRICT
    gcc = shutil.which("arm-none-eabi-gcc")
    if gcc is None:
        pytest.skip("arm-none-eabi-gcc not installed")
    subprocess.run([gcc, *STRICT, *ARM, f"-I{MCU / 'include'}", "-c", str(MCU / "src/tol_stage.c"),
                    "-o", "/dev/null"], check=True)


def test_lean_fleet_arrays_are_the_trained_parameters():
    """The fleet moves what trains: a frozen layer has no Flower array, a bias-only layer one
    (its biases), a whole layer two; the image the twin gives decodes to the same arrays and
    back."""
    from tinyol.fleet.params import StageParams

    layers = LEAN["conv1d_pool_chain_frozen_bias_all"]
    st = Stage(make_cfg(layers, init_classes=5))
    sp = StageParams.from_image(layers, st.image())
    arrays = sp.to_ndarrays()
    assert [a.shape for a in arrays] == [(8,), (12, 32), (12,), (CMAX, 12), (CMAX,), (CMAX,)]
    np.testing.assert_array_equal(arrays[0], st.layer_params(2)[1])  # conv2's biases
    np.testing.assert_array_equal(arrays[1].ravel(), st.layer_params(4)[0])  # the Dense W
    back = sp.like(arrays)
    assert back.image() == st.image()
    with pytest.raises(Exception, match="does not fit a stage of 828 parameters"):
        StageParams.from_image(STAGES["conv1d_maxpool_chain"], st.image())


# ---------------------------------------------------------------------- idle-time rehearsal
def run_rehearsing(lib, cfg, idle_steps, n=120, prefill=30):
    """run_rehearsing_pair on a stage: 30 latents of classes 0-3 pre-filled, 120 of 2 and up."""
    py, cl = Stage(cfg), CStage(lib, cfg)
    pp, pc, counts = run_rehearsing_pair(py, cl, cfg.layers[0].in_size, CMAX, idle_steps, n, prefill,
                                         range(4), range(2, CMAX))
    return py, cl, pp, pc, counts


REHEARSE_STAGES = ["conv1d_maxpool_chain", "conv1x1_dw_stride2_flatten"]


@pytest.mark.parametrize("stage", REHEARSE_STAGES)
@pytest.mark.parametrize("setting", ["replay_i8", "replay_7bit_momentum_wd_clip", "replay_f32_ar1_batch"])
def test_rehearsal_c_matches_numpy(lib, stage, setting):
    """Idle rehearsal steps between samples (0 to the budget, varying): the C and the twin
    given the C's step counts stay bit-identical on a whole stream."""
    kw = dict(SETTINGS[setting])
    kw["settings"] = dataclasses.replace(kw["settings"], rehearse=3)
    cfg = make_cfg(STAGES[stage], **kw)
    py, cl, pp, pc, counts = run_rehearsing(lib, cfg, lambda i: None if i % 3 else i % 4)
    assert_same(py, cl, pp, pc)
    # the budget: at most 3 per idle period, all 3 when the idle time is unbounded
    assert max(counts) == 3 and all(c == 3 for i, c in enumerate(counts) if i % 3)
    assert py.updates + py.rejected == 120 // py.settings.n_new + sum(counts)


def test_rehearsal_lean_stage_c_matches_numpy(lib):
    cfg = make_cfg(LEAN["conv1d_pool_chain_frozen_bias_all"], **SETTINGS["replay_i8"])
    cfg.settings = dataclasses.replace(cfg.settings, rehearse=2)
    py, cl, pp, pc, counts = run_rehearsing(lib, cfg, lambda i: None)
    assert_same(py, cl, pp, pc)
    assert counts == [2] * 120


def test_rehearsal_changes_the_stage_and_keeps_the_queue(lib):
    """Rehearsal is real training (the parameters differ from a stream without it) that
    leaves the fresh-sample queue alone: with n_new = 3 a step between queued samples keeps
    them, and the next update takes all three."""
    base = dict(SETTINGS["replay_f32_ar1_batch"])
    with_r = make_cfg(STAGES["dense_dense"], **{**base, "settings": dataclasses.replace(
        base["settings"], rehearse=2)})
    without = make_cfg(STAGES["dense_dense"], **base)
    a, _, _, _, counts = run_rehearsing(lib, with_r, lambda i: None)
    b, _, _, _, zero = run_rehearsing(lib, without, lambda i: None)
    assert sum(counts) == 240 and sum(zero) == 0
    assert not np.array_equal(a.params, b.params)
    assert a.samples_seen == b.samples_seen == 120 and a.updates - b.updates == 240 - a.rejected


@pytest.mark.parametrize("why", ["frozen", "sgd", "no_old", "empty", "off"])
def test_rehearsal_refuses_without_replay(lib, why):
    """Nothing to rehearse: no step, no PRNG draw, nothing changed (C and twin alike)."""
    s = dict(SETTINGS["replay_i8"])
    st = dataclasses.replace(s["settings"], rehearse=0 if why == "off" else 4,
                             mode={"frozen": 0, "sgd": MODE_SGD}.get(why, 2),
                             n_old=0 if why == "no_old" else 3)
    cfg = make_cfg(STAGES["dense_dense"], **{**s, "settings": st})
    for learner in (Stage(cfg), CStage(lib, cfg)):
        if why != "empty":
            learner.replay_add(np.zeros(24, np.int8), 1)
        before = learner.params.copy()
        assert learner.idle() == 0 and not learner.rehearse()
        np.testing.assert_array_equal(learner.params, before)
        assert learner.stats()["updates"] == 0


def test_rehearse_setting_range(lib):
    cfg = make_cfg(STAGES["dense_dense"], **SETTINGS["replay_i8"])
    with pytest.raises(LearnerError):
        Stage(dataclasses.replace(cfg, settings=dataclasses.replace(cfg.settings, rehearse=256)))
    ok = dataclasses.replace(cfg, settings=dataclasses.replace(cfg.settings, rehearse=255))
    assert Stage(ok).settings.rehearse == 255


def test_rehearsal_state_keeps_the_setting(lib):
    """SAVE/LOAD carry the rehearse setting (STG1 header byte 37): a stage restored from a
    state saved with rehearse = 5 rehearses 5 steps per idle period."""
    cfg = make_cfg(STAGES["dense_dense"], **SETTINGS["replay_i8"])
    src = CStage(lib, dataclasses.replace(cfg, settings=dataclasses.replace(cfg.settings,
                                                                            rehearse=5)))
    src.replay_add(np.zeros(24, np.int8), 1)
    blob = src.state_bytes(1)
    assert blob[37] == 5
    dst = CStage(lib, cfg)
    dst.restore(blob)
    assert dst.idle() == 5


# ---------------------------------------------------------------------- replay policy setting
def test_stage_replay_policy_set_mid_stream_c_matches_numpy(lib):
    """The stage's replay policy is a setting too: reservoir, class-balanced after 60 samples,
    AR1 after 120; the stored slots stay at each change; C and twin bit-identical; the state
    carries the policy in use (STG1 header byte 6) and a stage built with reservoir restores it."""
    cfg = make_cfg(STAGES["dense_dense"], **SETTINGS["replay_i8"])
    d = cfg.layers[0].in_size
    q, y, _ = make_stream(np.random.default_rng(1), 180, d, CMAX, classes=range(2, CMAX))
    py, cl = Stage(cfg), CStage(lib, cfg)
    pp, pc = [], []
    for i, (qi, yi) in enumerate(zip(q, y)):
        if i in (60, 120):
            pol = POLICY_BALANCED if i == 60 else POLICY_AR1
            before = cl.replay_labels()
            py.set_settings(dataclasses.replace(py.settings, replay_policy=pol))
            cl.set_settings(dataclasses.replace(cl.get_settings(), replay_policy=pol))
            assert cl.get_settings().replay_policy == py.settings.replay_policy == pol
            assert cl.replay_labels() == before
        pp.append(py.predict(qi))
        pc.append(cl.predict(qi))
        py.learn(qi, int(yi))
        cl.learn(qi, int(yi))
    assert_same(py, cl, pp, pc)
    blob = cl.state_bytes(1)
    assert blob[6] == POLICY_AR1
    other = CStage(lib, cfg)
    assert other.get_settings().replay_policy == POLICY_RESERVOIR
    other.restore(blob)
    assert other.get_settings().replay_policy == POLICY_AR1


# --------------------------------------------------------------------------- 4-bit replay
def _codec4(layers, seed=5, clamp=False):
    """A 4-bit codec fitted (tinyol.learn.learner.fit_codec4) to the stream's latents, one grid
    per channel of the stage's input (HWC: the last axis). ``clamp``: a grid of the first
    channel moved high, so its codes read back past 127 and are clamped."""
    from tinyol.learn.learner import fit_codec4

    l0 = layers[0]
    q, _, _ = make_stream(np.random.default_rng(seed), 200, l0.in_size, CMAX)
    lo, step = fit_codec4(q, l0.in_c)
    if clamp:
        lo[0], step[0] = 100, 3
    return lo, step


@pytest.mark.parametrize("stage,policy,clamp", [("conv1x1_dw_stride2_flatten", POLICY_RESERVOIR, False),
                                                ("dense_dense", POLICY_BALANCED, True)])
def test_stage_4bit_replay_c_matches_numpy(lib, stage, policy, clamp):
    """4-bit replay with per-channel grids: C equals the twin bit for bit (every parameter,
    prediction, confidence and stored row), and the rows are 4 bits per value."""
    layers = STAGES[stage]
    cfg = make_cfg(layers, replay_capacity=30, replay_bits=4, replay_policy=policy,
                   replay_codec=_codec4(layers, clamp=clamp), settings=Settings(lr=0.05, n_old=3))
    py, cl, pp, pc = run_pair(lib, cfg)
    assert_same(py, cl, pp, pc)
    assert len(py.replay.packed_row(0)) == (layers[0].in_size + 1) // 2
    assert py.updates > 100


def test_stage_pq_replay_c_matches_numpy(lib):
    """PQ replay (k-means codebook, 2 values a sub-vector) in the adaptive stage: C equals the
    twin bit for bit, one byte per sub-vector; a PQ stage without its codebook is refused."""
    from tinyol.learn.learner import fit_pq

    layers = STAGES["dense_dense"]
    d = layers[0].in_size
    book = fit_pq(make_stream(np.random.default_rng(4), 600, d, CMAX)[0], d // 2, seed=1)
    cfg = make_cfg(layers, replay_capacity=30, replay_bits=128 + 2, replay_policy=POLICY_BALANCED,
                   replay_codec=book, settings=Settings(lr=0.05, n_old=3))
    py, cl, pp, pc = run_pair(lib, cfg)
    assert_same(py, cl, pp, pc)
    assert len(py.replay.packed_row(0)) == d // 2
    assert py.updates > 100
    with pytest.raises(LearnerError, match="TOL_ERR_ARG"):
        CStage(lib, dataclasses.replace(cfg, replay_codec=None))


def test_stage_4bit_state_roundtrip_and_needs_a_codec(lib):
    layers = STAGES["conv3x3_same_gap"]
    cfg = make_cfg(layers, replay_capacity=20, replay_bits=4, replay_codec=_codec4(layers),
                   max_new=2, settings=Settings(lr=0.05, n_new=2, n_old=3))
    py, cl, _, _ = run_pair(lib, cfg, n=61)
    data = cl.state_bytes(0x03)
    fresh = CStage(lib, cfg)
    fresh.restore(data)
    assert fresh.state_bytes(0x03) == data
    q, y, _ = make_stream(np.random.default_rng(9), 30, layers[0].in_size, CMAX)
    for qi, yi in zip(q, y):
        assert np.float32(fresh.predict(qi)[1]) == np.float32(py.predict(qi)[1])
        for s in (fresh, py):
            s.learn(qi, int(yi))
    np.testing.assert_array_equal(fresh.params, py.params)
    # a state saved at 8 bits is refused by the 4-bit stage (another configuration)
    c8 = CStage(lib, dataclasses.replace(cfg, replay_bits=8, replay_codec=None))
    with pytest.raises(LearnerError, match="TOL_ERR_MODEL"):
        fresh.restore(c8.state_bytes(0x03))
    # 4 bits without a codec, or with a grid of step 0: refused by both
    for codec in (None, (_codec4(layers)[0], np.zeros(layers[0].in_c, np.uint8))):
        bad = dataclasses.replace(cfg, replay_codec=codec)
        with pytest.raises(LearnerError, match="TOL_ERR_ARG"):
            CStage(lib, bad)
        with pytest.raises(LearnerError, match="TOL_ERR_ARG"):
            Stage(bad)

"""Behaviours of the learner (C library, with independent oracles)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from _learner_util import CLearner, build_learner_lib, make_stream
from tinyol.learn import learner as ref
from tinyol.learn.learner import (
    MODE_FROZEN,
    MODE_SGD,
    POLICY_BALANCED,
    POLICY_RESERVOIR,
    Config,
    Learner,
    LearnerError,
    Settings,
)

D, CMAX = 16, 10


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build_learner_lib(tmp_path_factory.mktemp("learner_b"))


def cfg(**kw) -> Config:
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.3, size=(CMAX, D)).astype(np.float32)
    b = rng.normal(0, 0.1, size=CMAX).astype(np.float32)
    s = kw.pop("settings", Settings(lr=0.1, mode=MODE_SGD, n_old=0))
    return Config(latent_dim=D, n_outputs=CMAX, init_classes=5, init_weight=w, init_bias=b,
                  latent_scale=0.05, latent_zero_point=-128, settings=s, **kw)


def softmax64(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def test_prng_known_values_and_match(lib):
    import ctypes
    st = ctypes.c_uint32()
    lib.tol_prng_seed(ctypes.byref(st), 0)  # fmix32(0) = 0 -> state 1
    assert st.value == 1
    lib.tol_prng_seed(ctypes.byref(st), 1)
    assert st.value == 0x514E28B7  # MurmurHash3 fmix32(1)
    lib.tol_prng_seed(ctypes.byref(st), 0)
    # xorshift32 from state 1, computed by hand with Python integers
    x, want = 1, []
    for _ in range(5):
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        want.append(x)
    assert want[0] == 270369
    assert [lib.tol_prng_next(ctypes.byref(st)) for _ in range(5)] == want
    p = ref.Prng(123)
    lib.tol_prng_seed(ctypes.byref(st), 123)
    for n in [1, 2, 3, 10, 1000, 2**31 + 5]:
        assert lib.tol_prng_below(ctypes.byref(st), n) == p.below(n)
    draws = [p.below(10) for _ in range(20000)]
    counts = np.bincount(draws, minlength=10)
    assert counts.min() > 1800 and counts.max() < 2200


def test_one_step_matches_float64_oracle(lib):
    c = cfg(settings=Settings(lr=0.1, momentum=0.9, weight_decay=0.01, mode=MODE_SGD, n_old=0))
    cl = CLearner(lib, c)
    rng = np.random.default_rng(1)
    w = c.init_weight.astype(np.float64)[:5].copy()
    b = c.init_bias.astype(np.float64)[:5].copy()
    vw, vb = np.zeros_like(w), np.zeros_like(b)
    for _ in range(3):
        x = rng.uniform(0, 2, D)
        y = int(rng.integers(0, 5))
        cl.learn_f(x.astype(np.float32), y)
        p = softmax64(w @ x + b)
        g = p.copy()
        g[y] -= 1
        gw = np.outer(g, x) + 0.01 * w
        vw = 0.9 * vw + gw
        vb = 0.9 * vb + g
        w -= 0.1 * vw
        b -= 0.1 * vb
    np.testing.assert_allclose(cl.w[:5], w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(cl.b[:5], b, rtol=1e-4, atol=1e-5)


def test_minibatch_gradient_is_averaged(lib):
    # n_new=3, no replay: one step with the mean gradient of three samples
    c = cfg(max_new=3, settings=Settings(lr=0.2, n_new=3, mode=MODE_SGD, n_old=0))
    cl = CLearner(lib, c)
    rng = np.random.default_rng(2)
    xs, ys = rng.uniform(0, 1, (3, D)), [0, 1, 2]
    w0 = c.init_weight.astype(np.float64)[:5]
    b0 = c.init_bias.astype(np.float64)[:5]
    for i in range(2):
        cl.learn_f(xs[i].astype(np.float32), ys[i])
    np.testing.assert_array_equal(cl.w[:5], c.init_weight[:5])  # queued, no step yet
    cl.learn_f(xs[2].astype(np.float32), ys[2])
    gw, gb = np.zeros_like(w0), np.zeros_like(b0)
    for x, y in zip(xs, ys):
        g = softmax64(w0 @ x + b0)
        g[y] -= 1
        gw += np.outer(g, x) / 3
        gb += g / 3
    np.testing.assert_allclose(cl.w[:5], w0 - 0.2 * gw, rtol=1e-5, atol=1e-6)
    assert cl.stats()["updates"] == 1


def test_new_class_activates_zero_row(lib):
    cl = CLearner(lib, cfg())
    assert cl.active.tolist() == [True] * 5 + [False] * 5
    assert np.all(cl.w[5:] == 0)
    x = np.linspace(0, 1, D).astype(np.float32)
    lab, _ = cl.predict_f(x)
    assert 0 <= lab < 5
    cl.learn_f(x, 7)
    assert cl.active[7] and not cl.active[6]
    # the new row started at zero: after one step it is -lr * (p7 - 1) * x
    z = cl.w[:5].astype(np.float64) @ x  # old rows changed too; recompute p from init
    w0, b0 = cfg().init_weight[:5].astype(np.float64), cfg().init_bias[:5].astype(np.float64)
    zz = np.concatenate([w0 @ x + b0, [0.0]])
    p7 = softmax64(zz)[-1]
    np.testing.assert_allclose(cl.w[7], 0.1 * (1 - p7) * x, rtol=1e-5)
    del z
    for _ in range(30):
        cl.learn_f(x, 7)
    assert cl.predict_f(x)[0] == 7
    assert cl.stats()["n_active"] == 6


def test_label_out_of_range_changes_nothing(lib):
    cl = CLearner(lib, cfg())
    w, b = cl.w, cl.b
    with pytest.raises(LearnerError) as e:
        cl.learn(np.zeros(D, np.int8), CMAX)
    assert e.value.status == "TOL_ERR_LABEL"
    assert (cl.w == w).all() and (cl.b == b).all()
    assert cl.stats()["samples_seen"] == 0


def test_nonfinite_rejected_weights_unchanged(lib):
    cl = CLearner(lib, cfg())
    cl.learn_f(np.ones(D, np.float32), 1)
    w, b = cl.w, cl.b
    for bad in (np.nan, np.inf, -np.inf):
        x = np.ones(D, np.float32)
        x[3] = bad
        with pytest.raises(LearnerError) as e:
            cl.learn_f(x, 2)
        assert e.value.status == "TOL_ERR_NONFINITE"
        with pytest.raises(LearnerError):
            cl.predict_f(x)
    assert (cl.w == w).all() and (cl.b == b).all()
    assert cl.stats()["samples_seen"] == 1


def test_diverging_update_restores_weights(lib):
    c = cfg(settings=Settings(lr=1e30, mode=MODE_SGD, n_old=0))
    cl, py = CLearner(lib, c), Learner(c)
    w, b = cl.w, cl.b
    x = np.full(D, 1e20, np.float32)
    for learner in (cl, py):
        with pytest.raises(LearnerError) as e:
            learner.learn_f(x, 8)
        assert e.value.status == "TOL_ERR_DIVERGED"
    assert (cl.w == w).all() and (cl.b == b).all()
    assert not cl.active[8] and not py.head.active[8]
    assert cl.stats()["rejected"] == 1 and cl.stats()["updates"] == 0
    # with clipping the same sample is a finite step
    c2 = cfg(settings=Settings(lr=0.1, clip_norm=1.0, mode=MODE_SGD, n_old=0))
    cl2 = CLearner(lib, c2)
    cl2.learn_f(np.full(D, 1e3, np.float32), 8)
    w0, b0 = c2.init_weight.copy(), c2.init_bias.copy()
    w0[5:], b0[5:] = 0, 0  # rows beyond the initial classes start at zero
    step = np.concatenate([(cl2.w - w0).ravel(), (cl2.b - b0).ravel()])
    assert np.linalg.norm(step) == pytest.approx(0.1, rel=1e-4)


def test_a_diverged_sample_counts_nowhere(lib):
    """Issue 34: a SAMPLE answered ERR_DIVERGED advanced samples_seen and its class count. The
    oracle is the learner that never saw it: after the same clean samples, C and twin must equal
    it in every counter but `rejected` (the diverged step changed no parameter: SGD, no replay,
    no momentum, so nothing else can differ)."""
    c = cfg(settings=Settings(lr=0.1, mode=MODE_SGD, n_old=0))
    q, y, _ = make_stream(np.random.default_rng(3), 6, D, CMAX)
    bad = np.full(D, 1e20, np.float32)
    huge = dataclasses.replace(c.settings, lr=1e30)
    for make in (lambda: CLearner(lib, c), lambda: Learner(c)):
        a, b = make(), make()
        for i, (qi, yi) in enumerate(zip(q, y)):
            if i == 3:  # a diverging sample of a new class in the middle of the stream
                a.set_settings(huge)
                with pytest.raises(LearnerError, match="TOL_ERR_DIVERGED"):
                    a.learn_f(bad, 8)
                a.set_settings(c.settings)
            for learner in (a, b):
                learner.learn(qi, int(yi))
        sa, sb = (x.stats() for x in (a, b))
        assert sa["rejected"] == 1 and sb["rejected"] == 0
        for k in ("samples_seen", "class_count", "n_active", "updates"):
            assert sa[k] == sb[k], (k, sa[k], sb[k])
        assert sa["samples_seen"] == 6 and sa["class_count"][8] == 0
    # a mini-batch of 2: the sample queued before the diverging one was answered and stays
    c2 = cfg(settings=Settings(lr=1e30, mode=MODE_SGD, n_old=0, n_new=2), max_new=2)
    for learner in (CLearner(lib, c2), Learner(c2)):
        learner.learn_f(np.ones(D, np.float32), 2)
        with pytest.raises(LearnerError, match="TOL_ERR_DIVERGED"):
            learner.learn_f(bad, 8)
        st = learner.stats()
        assert st["samples_seen"] == 1 and st["class_count"][2] == 1 and st["class_count"][8] == 0


def test_a_diverged_anomaly_update_counts_nowhere(lib):
    """The autoencoder's twin of the above: the diverged sample is scored in its warm-up (never
    flagged then), yet must leave samples_seen and the threshold statistics as the learner that
    never saw it has them."""
    from tinyol.learn.learner import HEAD_AUTOENCODER
    out = 8
    s = Settings(lr=0.05, threshold_k=3.0, ema_alpha=0.05, warmup=6)
    c = Config(latent_dim=D, n_outputs=out, head_kind=HEAD_AUTOENCODER, latent_scale=0.05,
               latent_zero_point=-128, target_scale=0.05, target_zero_point=0, settings=s)
    rng = np.random.default_rng(4)
    xs = rng.uniform(0, 2, size=(10, D)).astype(np.float32)
    ts = rng.uniform(0, 2, size=(10, out)).astype(np.float32)
    for make in (lambda: CLearner(lib, c), lambda: Learner(c)):
        a, b = make(), make()
        for i, (x, t) in enumerate(zip(xs, ts)):
            if i == 2:
                a.set_settings(dataclasses.replace(s, lr=1e30))
                with pytest.raises(LearnerError, match="TOL_ERR_DIVERGED"):
                    a.anomaly_f(np.full(D, 1e5, np.float32), np.zeros(out, np.float32))
                a.set_settings(s)
            ra, rb = a.anomaly_f(x, t), b.anomaly_f(x, t)
            assert ra == rb, (i, ra, rb)
        sa, sb = a.stats(), b.stats()
        assert sa["rejected"] == 1 and sa["samples_seen"] == sb["samples_seen"] == 10
        assert math.isfinite(sb["threshold"]) and sa["threshold"] == sb["threshold"]
        assert sa["anomalies"] == sb["anomalies"]


def test_reset_returns_to_initial_head(lib):
    c = cfg(replay_capacity=10, replay_bits=8, settings=Settings(lr=0.1, n_old=2))
    cl = CLearner(lib, c)
    q, y, _ = make_stream(np.random.default_rng(0), 50, D, CMAX)
    for a, t in zip(q, y):
        cl.learn(a, int(t))
    assert cl.stats()["replay_fill"] == 10 and cl.active.sum() > 5
    cl.reset()
    np.testing.assert_array_equal(cl.w[:5], c.init_weight[:5])
    np.testing.assert_array_equal(cl.b[:5], c.init_bias[:5])
    assert np.all(cl.w[5:] == 0) and cl.active.sum() == 5
    st = cl.stats()
    assert st["replay_fill"] == 0 and st["samples_seen"] == 0 and sum(st["class_count"]) == 0


def test_frozen_mode_and_settings_validation(lib):
    cl = CLearner(lib, cfg())
    s = cl.get_settings()
    assert s.lr == pytest.approx(0.1) and s.mode == MODE_SGD
    bad = dataclasses.replace(s, momentum=1.0)
    with pytest.raises(LearnerError) as e:
        cl.set_settings(bad)
    assert e.value.status == "TOL_ERR_ARG"
    assert cl.get_settings() == s
    cl.set_settings(dataclasses.replace(s, mode=MODE_FROZEN))
    w = cl.w
    cl.learn_f(np.ones(D, np.float32), 9)
    assert (cl.w == w).all() and not cl.active[9]


def test_default_settings_agree(lib):
    import ctypes

    from _learner_util import CSettings, settings_from_c
    cs = CSettings()
    lib.tol_learner_settings_default(ctypes.byref(cs))
    got = settings_from_c(cs)
    want = Settings()
    for f in dataclasses.fields(Settings):
        assert getattr(got, f.name) == pytest.approx(getattr(want, f.name)), f.name


# ----------------------------------------------------------------- 7-bit storage
def pack7_bits(values) -> bytes:
    """Independent packer: a bit string, value k at bit positions 7k..7k+6 (LSB first)."""
    bits = []
    for v in values:
        u = v & 0x7F
        bits += [(u >> i) & 1 for i in range(7)]
    bits += [0] * (-len(bits) % 56)
    return bytes(sum(bits[8 * j + i] << i for i in range(8)) for j in range(len(bits) // 8))


def test_pack7_matches_bit_level_and_round_trips(lib):
    import ctypes
    rng = np.random.default_rng(9)
    for n in [1, 7, 8, 9, 15, 16, 17, 31, 64, 100]:
        q7 = rng.integers(-64, 64, size=n).astype(np.int8)
        want = pack7_bits(q7.tolist())
        assert len(want) == 7 * ((n + 7) // 8)
        out = np.zeros(len(want), np.uint8)
        lib.tol_replay_pack7(q7.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)), n,
                             out.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)))
        assert out.tobytes() == want
        assert ref.pack7(q7) == want
        back = np.zeros(n, np.int8)
        lib.tol_replay_unpack7(out.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), n,
                               back.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)))
        np.testing.assert_array_equal(back, q7)
        np.testing.assert_array_equal(ref.unpack7(want, n), q7)


def test_requant7_all_values(lib):
    for q in range(-128, 128):
        want = int(math.copysign(math.floor(abs(q) / 2 + 0.5), q)) if q else 0
        want = min(want, 63)
        assert lib.tol_replay_requant7(q) == want
        assert int(ref.requant7(np.int8(q))) == want
        assert abs(2 * want - q) <= 1 or q == 127


def test_quantize_half_away(lib):
    import ctypes
    x = np.array([0.025, -0.025, 0.075, -0.075, 0.0249, 100.0, -100.0, 0.0], np.float32)
    q = np.zeros(x.size, np.int8)
    lib.tol_replay_quantize(x.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), x.size, 0.05, -3,
                            q.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)))
    np.testing.assert_array_equal(q, ref.quantize(x, 0.05, -3))
    want = [math.copysign(math.floor(abs(float(np.float32(v) / np.float32(0.05))) + 0.5), v)
            for v in x]
    np.testing.assert_array_equal(q, np.clip(np.array(want) - 3, -128, 127).astype(np.int8))


def test_seven_bit_replay_error_at_most_one_lsb(lib):
    c = Config(latent_dim=D, n_outputs=CMAX, latent_scale=0.05, latent_zero_point=-128,
               replay_capacity=5, replay_bits=7)
    cl, py = CLearner(lib, c), Learner(c)
    rng = np.random.default_rng(4)
    q = rng.integers(-128, 128, size=(5, D)).astype(np.int8)
    for i in range(5):
        cl.replay_add(q[i], i)
        py.replay_add(q[i], i)
    for i in range(5):
        x, _ = py.replay.get(i)
        back = np.round(x / np.float32(0.05)) - 128
        assert np.max(np.abs(back - q[i].astype(int))) <= 1
        assert cl.replay_row(i) == py.replay.packed_row(i)


# ----------------------------------------------------------------- replacement policies
def test_reservoir_inclusion_is_uniform(lib):
    n_items, cap, runs = 60, 12, 600
    hits = np.zeros(n_items)
    for seed in range(runs):
        c = Config(latent_dim=1, n_outputs=n_items, replay_capacity=cap, replay_bits=32,
                   replay_policy=POLICY_RESERVOIR, seed=seed)
        cl = CLearner(lib, c)
        for i in range(n_items):
            cl.replay_add_f(np.array([float(i)], np.float32), i)
        kept = cl.replay_labels()
        assert len(kept) == cap and len(set(kept)) == cap
        hits[kept] += 1
    p = cap / n_items
    # each item is kept with probability cap/n (binomial, 5 sigma band)
    sigma = math.sqrt(runs * p * (1 - p))
    assert np.all(np.abs(hits - runs * p) < 5 * sigma)
    # early and late halves equally represented
    assert abs(hits[:30].sum() - hits[30:].sum()) < 0.1 * hits.sum()


def test_balanced_policy_evens_out_classes(lib):
    c = Config(latent_dim=2, n_outputs=4, replay_capacity=30, replay_bits=8,
               replay_policy=POLICY_BALANCED, latent_scale=0.1)
    cl, py = CLearner(lib, c), Learner(c)
    labels = [0] * 300 + [1] * 40 + [2] * 15 + [0] * 100
    for i, y in enumerate(labels):
        x = np.array([i % 7, y], np.float32)
        cl.replay_add_f(x, y)
        py.replay_add_f(x, y)
    counts = np.bincount(cl.replay_labels(), minlength=4)
    assert counts.sum() == 30
    # 0 fills the buffer, 1 evicts 0 down to 15/15, 2 evicts from the largest
    # class in turn down to 10/10/10; later 0s only replace 0s (CBRS)
    assert counts.tolist() == [10, 10, 10, 0]
    assert cl.replay_labels() == py.replay.labels[:30].tolist()


def test_expf_bit_exact_and_accurate(lib):
    rng = np.random.default_rng(8)
    xs = np.concatenate([rng.uniform(-90, 0, 20000), rng.uniform(-1, 0, 20000),
                         [0.0, -0.0, -1e-30, -86.99, -87.0, -87.01, -100.0, 3.0, np.nan, -np.inf]]).astype(np.float32)
    c = np.array([lib.tol_head_expf(float(v)) for v in xs], np.float32)
    np.testing.assert_array_equal(c.view(np.uint32), ref.expf(xs).view(np.uint32))
    ok = xs >= -80  # away from the flush-to-zero end
    want = np.exp(np.minimum(xs[ok], 0).astype(np.float64))
    assert np.max(np.abs(c[ok] - want) / want) < 3e-7
    assert c[~(xs >= -87.0)].max() == 0.0 and c[xs == 3.0][0] == 1.0

"""C learner vs numpy reference learner on whole streams (the oracle is
tinyol.learn.learner; see docs/learner.md). Identical predictions, weights equal
to 1e-5 relative (max |dW| / max |W|)."""
from __future__ import annotations

import ctypes as C
import dataclasses
import subprocess
import zlib

import numpy as np
import pytest
from _learner_util import (
    ARM,
    MCU,
    SOURCES,
    STRICT,
    CLearner,
    arm_gcc,
    build_learner_lib,
    make_stream,
    rel_err,
    run_pair,
    run_rehearsing_pair,
)
from tinyol.learn.learner import (
    HEAD_AUTOENCODER,
    MODE_REPLAY,
    MODE_SGD,
    POLICY_AR1,
    POLICY_BALANCED,
    POLICY_RESERVOIR,
    Config,
    Learner,
    Settings,
)

D, CMAX = 24, 10


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build_learner_lib(tmp_path_factory.mktemp("learner"))


def base_cfg(rng, **kw) -> Config:
    w = rng.normal(0, 0.3, size=(CMAX, D)).astype(np.float32)
    b = rng.normal(0, 0.1, size=CMAX).astype(np.float32)
    settings = kw.pop("settings", Settings())
    return Config(latent_dim=D, n_outputs=CMAX, init_classes=5, init_weight=w, init_bias=b,
                  latent_scale=0.05, latent_zero_point=-128, seed=kw.pop("seed", 7),
                  settings=settings, **kw)


CASES = {
    "naive_sgd": dict(no_momentum=True, settings=Settings(lr=0.05, mode=MODE_SGD, n_old=0)),
    "momentum_decay_clip": dict(settings=Settings(lr=0.02, momentum=0.9, weight_decay=1e-3,
                                                  clip_norm=1.0, mode=MODE_SGD)),
    "replay_f32_reservoir": dict(replay_capacity=40, replay_bits=32,
                                 replay_policy=POLICY_RESERVOIR,
                                 settings=Settings(lr=0.05, n_old=4)),
    "replay_i8_reservoir": dict(replay_capacity=40, replay_bits=8, replay_policy=POLICY_RESERVOIR,
                                settings=Settings(lr=0.05, momentum=0.5, n_old=3)),
    "replay_7bit_balanced": dict(replay_capacity=30, replay_bits=7, replay_policy=POLICY_BALANCED,
                                 settings=Settings(lr=0.05, n_old=4, weight_decay=1e-4)),
    "replay_i8_ar1_batch": dict(replay_capacity=25, replay_bits=8, replay_policy=POLICY_AR1,
                                max_new=4, max_old=6, no_momentum=True,
                                settings=Settings(lr=0.05, n_new=4, n_old=6)),
    "replay_7bit_ar1": dict(replay_capacity=20, replay_bits=7, replay_policy=POLICY_AR1,
                            settings=Settings(lr=0.1, n_old=2)),
    "replay_f32_balanced_batch": dict(replay_capacity=30, replay_bits=32,
                                      replay_policy=POLICY_BALANCED, max_new=3,
                                      settings=Settings(lr=0.05, n_new=3, n_old=5,
                                                        momentum=0.9)),
}


def _codec4(channels: int):
    """A 4-bit codec fitted to the test stream's latents (tinyol.learn.learner.fit_codec4)."""
    from tinyol.learn.learner import fit_codec4

    return fit_codec4(make_stream(np.random.default_rng(5), 200, D, CMAX)[0], channels)


CASES.update({
    "replay_4bit_reservoir": dict(replay_capacity=40, replay_bits=4, replay_codec=_codec4(D),
                                  replay_policy=POLICY_RESERVOIR,
                                  settings=Settings(lr=0.05, momentum=0.5, n_old=3)),
    "replay_4bit_8ch_ar1_batch": dict(replay_capacity=25, replay_bits=4, replay_codec=_codec4(8),
                                      replay_policy=POLICY_AR1, max_new=4, max_old=6,
                                      no_momentum=True, settings=Settings(lr=0.05, n_new=4, n_old=6)),
})


def _codebook(m: int):
    """A PQ codebook (m sub-vectors) fitted to the test stream's latents by k-means
    (tinyol.learn.learner.fit_pq); 600 latents, so more distinct sub-vectors than codewords."""
    from tinyol.learn.learner import fit_pq

    return fit_pq(make_stream(np.random.default_rng(5), 600, D, CMAX)[0], m, seed=3)


CASES.update({
    "replay_pq6_reservoir": dict(replay_capacity=40, replay_bits=128 + D // 6,
                                 replay_codec=_codebook(6), replay_policy=POLICY_RESERVOIR,
                                 settings=Settings(lr=0.05, momentum=0.5, n_old=3)),
    "replay_pq24_balanced_batch": dict(replay_capacity=25, replay_bits=128 + 1,
                                       replay_codec=_codebook(24), replay_policy=POLICY_BALANCED,
                                       max_new=4, max_old=6, no_momentum=True,
                                       settings=Settings(lr=0.05, n_new=4, n_old=6)),
})


def test_pq_codec_c_matches_numpy(lib):
    """tol_replay_pq_nearest (C) = tinyol.learn.learner.pq_nearest on every sub-vector of
    latents the codebook was not fitted to, ties included (a codebook holding a codeword twice
    and latents equidistant from two): the index, so the decoded latent, is the same."""
    from tinyol.learn.learner import pq_nearest

    book = _codebook(6)  # [6, 256, 4]
    sub = book.shape[2]
    book[0, 7] = book[0, 3]  # a repeated codeword: the lower index wins
    q = make_stream(np.random.default_rng(77), 300, D, CMAX)[0]
    ties = np.zeros((2, D), np.int8)  # halfway between two codewords of sub-vector 0
    ties[:, :sub] = ((book[0, 1].astype(np.int16) + book[0, 2]) // 2).astype(np.int8)
    q = np.concatenate([q, ties, np.tile(book[0, 3], D // sub)[None].astype(np.int8)])
    f = lib.tol_replay_pq_nearest
    f.restype, f.argtypes = C.c_uint8, [C.POINTER(C.c_int8), C.POINTER(C.c_int8), C.c_uint16]
    got, want = [], []
    for m in range(book.shape[0]):
        bm = np.ascontiguousarray(book[m])
        P = np.ascontiguousarray(q[:, m * sub:(m + 1) * sub])
        want += pq_nearest(P, bm).tolist()
        got += [f(P[i].ctypes.data_as(C.POINTER(C.c_int8)), bm.ctypes.data_as(C.POINTER(C.c_int8)),
                  sub) for i in range(len(P))]
    assert got == want
    assert want[len(q) - 1] == 3  # the repeated codeword itself: index 3, not 7
    # an outside oracle for the twin: brute force in Python integers, the first least distance
    for i in range(len(q)):
        d = [sum((int(a) - int(c)) ** 2 for a, c in zip(q[i, :sub], book[0, k])) for k in range(256)]
        assert want[i] == d.index(min(d))
    assert len(set(want)) > 50  # the latents spread over many codewords


@pytest.mark.parametrize("name", ["replay_i8_reservoir", "replay_7bit_balanced", "replay_i8_ar1_batch"])
def test_replay_buffer_in_its_own_block_matches_numpy(lib, name):
    """The replay buffer in a block of its own (replay_mem: SRAM2 while the head is in SRAM1,
    docs/boards.md) learns bit for bit as the twin; the head's block is smaller by the buffer and
    the buffer's block holds exactly TOL_REPLAY_BYTES (a tighter one is refused)."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    cfg = base_cfg(rng, **dict(CASES[name]))
    pre = make_stream(rng, 60, D, CMAX, classes=range(5))[:2]
    q, y, _ = make_stream(np.random.default_rng(1), 300, D, CMAX, classes=range(3, 10))
    py, cl, pp, pc = run_pair(lib, cfg, q, y, prefill=pre, replay_apart=True)
    assert [p[0] for p in pp] == [p[0] for p in pc]
    np.testing.assert_array_equal(np.float32([p[1] for p in pc]), np.float32([p[1] for p in pp]))
    np.testing.assert_array_equal(cl.w, py.head.w)
    assert cl.replay_labels() == py.replay.labels[: py.replay.fill].tolist()
    assert all(cl.replay_row(i) == py.replay.packed_row(i) for i in range(py.replay.fill))
    assert cl.replay_mem.any()  # the rows went into the separate block
    whole = CLearner(lib, cfg)
    assert cl.nbytes == whole.nbytes - cl.ccfg.replay_mem_bytes
    # one byte short of either block: TOL_ERR_OVERFLOW, not a silent overrun
    from tinyol._defs import Status

    c = cl.ccfg
    c.replay_mem_bytes -= 1
    assert lib.tol_learner_init(cl.state, cl.mem.ctypes.data, cl.nbytes, C.byref(c)) == Status.ERR_OVERFLOW
    c.replay_mem_bytes += 1
    assert lib.tol_learner_init(cl.state, cl.mem.ctypes.data, cl.nbytes - 1, C.byref(c)) == Status.ERR_OVERFLOW
    assert lib.tol_learner_init(cl.state, cl.mem.ctypes.data, cl.nbytes, C.byref(c)) == 0


@pytest.mark.parametrize("name", list(CASES))
def test_stream_c_matches_numpy(lib, name):
    seed = zlib.crc32(name.encode())  # fixed across runs (hash() changes with PYTHONHASHSEED)
    print(f"seed {seed}")  # shown with the failure
    rng = np.random.default_rng(seed)
    cfg = base_cfg(rng, **dict(CASES[name]))
    # pre-training classes 0-4 go into the buffer first (as the study does),
    # then a stream of classes 3-9 (three of them new).
    pre = make_stream(rng, 60, D, CMAX, classes=range(5))[:2] if cfg.replay_capacity else None
    q, y, _ = make_stream(np.random.default_rng(1), 400, D, CMAX, classes=range(3, 10))
    py, cl, pp, pc = run_pair(lib, cfg, q, y, prefill=pre)
    assert [p[0] for p in pp] == [p[0] for p in pc]
    np.testing.assert_allclose([p[1] for p in pc], [p[1] for p in pp], rtol=1e-4, atol=1e-6)
    assert rel_err(cl.w, py.head.w) < 1e-5
    assert rel_err(cl.b, py.head.b) < 1e-5
    np.testing.assert_array_equal(cl.w, py.head.w)  # in fact bit-identical
    assert (cl.active == py.head.active).all()
    sc, sp = cl.stats(), py.stats()
    for k in ("samples_seen", "updates", "rejected", "n_active", "replay_fill", "class_count"):
        assert sc[k] == sp[k], k
    if cfg.replay_capacity:
        assert cl.replay_labels() == py.replay.labels[: py.replay.fill].tolist()
        for i in range(py.replay.fill):
            assert cl.replay_row(i) == py.replay.packed_row(i)
    # it learned something: the new classes are active and mostly recognised late on
    assert py.head.active[3:].all()
    late = [p[0] == t for p, t in zip(pp[-100:], y[-100:])]
    assert np.mean(late) > 0.5


def test_replayed_classes_not_yet_active_match(lib):
    """Replayed samples of classes whose rows are still inactive (pre-filled, never learned):
    each activates its row before its own forward pass, so the samples drawn before it see
    the row inactive and those after see it active. The C batches replayed samples (chunks of
    16, a chunk cut before each activation); 20 replayed per step spans two chunks."""
    rng = np.random.default_rng(11)
    cfg = base_cfg(rng, replay_capacity=60, replay_bits=8, max_old=20,
                   settings=Settings(lr=0.05, n_old=20))
    cfg = dataclasses.replace(cfg, init_classes=2)
    pre = make_stream(rng, 60, D, CMAX, classes=range(8))[:2]
    q, y, _ = make_stream(np.random.default_rng(2), 60, D, CMAX, classes=range(2))
    py, cl, pp, pc = run_pair(lib, cfg, q[:1], y[:1], prefill=pre)
    # the first step replays pre-filled classes 2-7: rows activated during the step
    assert py.head.active[2:8].sum() >= 3 and not py.head.active[8:].any()
    np.testing.assert_array_equal(cl.w, py.head.w)
    py, cl, pp, pc = run_pair(lib, cfg, q, y, prefill=pre)
    assert [p[0] for p in pp] == [p[0] for p in pc]
    np.testing.assert_array_equal(cl.w.view(np.uint32), py.head.w.view(np.uint32))
    np.testing.assert_array_equal(cl.b.view(np.uint32), py.head.b.view(np.uint32))
    assert (cl.active == py.head.active).all()


def test_float_entry_point_matches(lib):
    rng = np.random.default_rng(3)
    cfg = base_cfg(rng, replay_capacity=20, replay_bits=8, settings=Settings(lr=0.05, n_old=2))
    q, y, _ = make_stream(rng, 150, D, CMAX)
    py, cl, pp, pc = run_pair(lib, cfg, q, y, learn_float=True)
    assert [p[0] for p in pp] == [p[0] for p in pc]
    assert rel_err(cl.w, py.head.w) < 1e-5


def _ae_stream(rng, n, out, anomalies_at=()):
    basis = rng.normal(0, 1, size=(D, out)).astype(np.float32)
    lat = np.maximum(rng.normal(0.5, 0.5, size=(n, D)), 0).astype(np.float32)
    tgt = (lat @ basis / np.sqrt(D) + rng.normal(0, 0.05, size=(n, out))).astype(np.float32)
    lab = np.zeros(n, int)
    for i in anomalies_at:
        tgt[i] += rng.normal(0, 2.0, size=out).astype(np.float32)
        lab[i] = 1
    return lat, tgt, lab


def ae_cfg(out, **kw) -> Config:
    s = Settings(lr=0.05, momentum=0.0, threshold_k=3.0, ema_alpha=0.05, warmup=100)
    s = dataclasses.replace(s, **kw)
    return Config(latent_dim=D, n_outputs=out, head_kind=HEAD_AUTOENCODER, latent_scale=0.05,
                  latent_zero_point=-128, target_scale=0.05, target_zero_point=0, settings=s)


def test_anomaly_c_matches_numpy_and_detects(lib):
    rng = np.random.default_rng(11)
    out = 16
    anomalies = list(range(400, 600, 17))
    lat, tgt, lab = _ae_stream(rng, 600, out, anomalies)
    cfg = ae_cfg(out)
    py, cl = Learner(cfg), CLearner(lib, cfg)
    res_py, res_c = [], []
    for x, t in zip(lat, tgt):
        res_py.append(py.anomaly_f(x, t))
        res_c.append(cl.anomaly_f(x, t))
    assert [r[1] for r in res_py] == [r[1] for r in res_c]
    np.testing.assert_allclose([r[0] for r in res_c], [r[0] for r in res_py], rtol=1e-5)
    assert rel_err(cl.w, py.head.w) < 1e-5
    flags = np.array([r[1] for r in res_py])
    # every injected anomaly is flagged, few normal samples after warm-up are
    assert flags[anomalies].all()
    normal_after = [i for i in range(200, 600) if lab[i] == 0]
    assert flags[normal_after].mean() < 0.05
    assert not flags[:100].any()  # warm-up never flags


def test_anomaly_int8_entry(lib):
    rng = np.random.default_rng(5)
    out = 8
    lat, tgt, _ = _ae_stream(rng, 200, out)
    cfg = ae_cfg(out, warmup=20, momentum=0.5)
    py, cl = Learner(cfg), CLearner(lib, cfg)
    ql = np.clip(np.round(lat / 0.05) - 128, -128, 127).astype(np.int8)
    qt = np.clip(np.round(tgt / 0.05), -128, 127).astype(np.int8)
    for a, b in zip(ql, qt):
        assert py.anomaly(a, b)[1] == cl.anomaly(a, b)[1]
    assert rel_err(cl.w, py.head.w) < 1e-5


def test_sizes_match_python_formulas(lib):
    from tinyol.learn.learner import head_bytes, learner_bytes, replay_bytes
    for d, c, cap, bits, mx, mo, nomom in [(32, 10, 100, 7, 1, 16, 1), (33, 5, 0, 8, 4, 0, 0),
                                           (64, 10, 200, 32, 2, 8, 0), (7, 3, 13, 7, 1, 0, 1),
                                           (16, 640, 0, 8, 1, 0, 1), (1024, 7, 301, 128 + 16, 1, 16, 1),
                                           (30, 4, 9, 128 + 1, 2, 0, 0)]:
        assert lib.shim_learner_bytes(d, c, cap, bits, mx, mo, nomom) == learner_bytes(
            d, c, cap, bits, mx, mo, bool(nomom))
        assert lib.shim_learner_bytes5(d, c, cap, bits, mx) == learner_bytes(d, c, cap, bits, mx)
        assert lib.shim_replay_bytes(cap, d, bits, c) == replay_bytes(cap, d, bits, c)
        assert lib.shim_head_bytes(d, c, mx + mo, 1 - nomom) == head_bytes(d, c, mx + mo,
                                                                         not nomom)
    # 7-bit rows are 7/8 of int8 rows when dim is a multiple of 8
    assert replay_bytes(100, 32, 7, 10) - replay_bytes(100, 32, 8, 10) == -100 * 4
    # independent count for the 640x16 autoencoder head, batch 1, no momentum:
    # W + b + z + e (1 x 640) + x (1 x 16) floats + 640 flags
    assert head_bytes(16, 640, 1, False) == 4 * (640 * 16 + 640 + 640 + 640 + 16) + 640
    # max_old 0 = automatic: 16 with a buffer
    assert learner_bytes(32, 10, 50, 8, 1, 0) == learner_bytes(32, 10, 50, 8, 1, 16)


def test_learner_rejects_short_memory_and_bad_config(lib):
    import ctypes
    cfg = base_cfg(np.random.default_rng(0), replay_capacity=10, replay_bits=7)
    cl = CLearner(lib, cfg)
    mem = np.zeros(cl.nbytes // 4, np.uint32)
    assert lib.tol_learner_init(cl.state, mem.ctypes.data, cl.nbytes - 1,
                                ctypes.byref(cl.ccfg)) == 16  # TOL_ERR_OVERFLOW
    assert lib.tol_learner_init(cl.state, mem.ctypes.data + 2, cl.nbytes,
                                ctypes.byref(cl.ccfg)) == 1  # misaligned: TOL_ERR_ARG
    bad = dataclasses.replace(cfg, no_momentum=True, settings=Settings(momentum=0.9))
    with pytest.raises(Exception) as e:
        CLearner(lib, bad)
    assert getattr(e.value, "status", "") == "TOL_ERR_ARG"


def test_compiles_for_cortex_m4(tmp_path):
    gcc = arm_gcc()
    if gcc is None:
        pytest.skip("arm-none-eabi-gcc not on PATH")
    # every optimisation level: the inline-asm blocks of tol_fmac.h keep their register
    # operands few enough for the allocator at -O0 as at -O3 ("impossible constraints" otherwise)
    for opt in ("-O0", "-Os", "-O2", "-O3"):
        for s in [*SOURCES, "tol_stage.c"]:
            r = subprocess.run([gcc, *STRICT, *ARM, opt, f"-I{MCU / 'include'}", "-c", str(MCU / "src" / s),
                                "-o", str(tmp_path / (s + ".o"))], capture_output=True, text=True)
            assert r.returncode == 0, f"{s} {opt}: {r.stderr[-800:]}"


def test_real_digits_stream_c_matches_numpy(lib):
    """The shipped digits model: TFLM latents of digits 5-9, buffer pre-filled with 0-4."""
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2] / "models" / "digits"
    if not (root / "manifest.json").exists():
        pytest.skip("models/digits not exported")
    pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    from tinyol.data.datasets import load_source
    from tinyol.targets import twin as S
    model = S.load_model(root)
    X, y, _ = load_source("digits@test")
    Q = S.latents(model, S.quantize_input(X, *model.input_q))
    old, new = np.flatnonzero(y < 5), np.flatnonzero(y >= 5)
    for bits, policy in [(7, "balanced"), (8, "reservoir")]:
        settings, replay = S.learner_settings(model, replay_capacity=60, replay_bits=bits,
                                              replay_n_old=16, lr=0.03, policy=policy)
        cfg = S.make_learner(model, settings, replay).cfg
        py, cl, pp, pc = run_pair(lib, cfg, Q[new], y[new], prefill=(Q[old], y[old]))
        assert [p[0] for p in pp] == [p[0] for p in pc]
        assert rel_err(cl.w, py.head.w) < 1e-5
        assert rel_err(cl.b, py.head.b) < 1e-5
        # stronger than the contract: same float32 steps, so bit-identical
        np.testing.assert_array_equal(cl.w, py.head.w)
        assert [p[1] for p in pp] == [p[1] for p in pc]


FW_MAIN = r"""
#include <stdio.h>
int main(void)
{
    if (app_learner_init() != TOL_OK) return 2;
    int8_t q[TOL_LATENT_DIM];
    for (int i = 0; i < 120; i++) {
        for (int j = 0; j < TOL_LATENT_DIM; j++)
            q[j] = (int8_t)((i * 31 + j * 17 + (i * j) % 7) % 256 - 128);
        int32_t label;
        float conf;
        if (tol_learner_predict(&learner, q, &label, &conf) != TOL_OK) return 3;
        printf("%d %.9g\n", (int)label, (double)conf);
        if (tol_learner_learn(&learner, q, (uint16_t)(5 + i % 5)) != TOL_OK) return 4;
    }
    return 0;
}
"""


def test_doc_firmware_example_with_generated_config(tmp_path):
    """docs/learner.md's app-layer example, built natively against models/digits/config.h and
    head_init.c, matches the numpy learner configured from the manifest."""
    import json
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parents[2]
    model = root / "models" / "digits"
    if not (model / "config.h").exists():
        pytest.skip("models/digits not exported")
    doc = (root / "docs" / "learner.md").read_text()
    example = re.search(r'```c\n(#include "tol_learner.h"\n#include "config.h".*?)```', doc,
                        re.S).group(1)
    (tmp_path / "app.c").write_text(example + FW_MAIN)
    exe = tmp_path / "app"
    srcs = [str(MCU / "src" / s) for s in SOURCES] + [str(tmp_path / "app.c"),
                                                       str(model / "head_init.c")]
    subprocess.run(["gcc", *STRICT, "-O2", f"-I{MCU / 'include'}", f"-I{model}", "-o", str(exe),
                    *srcs, "-lm"], check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
    got = [(int(a), float(b)) for a, b in zip(out[::2], out[1::2])]
    m = json.loads((model / "manifest.json").read_text())
    npz = np.load(model / "head_init.npz")
    ln = m["learner"]
    cfg = Config(latent_dim=m["latent"]["dim"], n_outputs=m["head"]["max_classes"],
                 init_classes=m["head"]["init_classes"], init_weight=npz["W"],
                 init_bias=npz["b"], latent_scale=np.float32(m["latent"]["scale"]),
                 latent_zero_point=m["latent"]["zero_point"], replay_capacity=ln["replay_capacity"],
                 replay_bits=ln["replay_bits"], max_new=ln["replay_n_new"],
                 max_old=0, no_momentum=False, seed=ln["seed"],
                 settings=Settings(lr=ln["lr"], momentum=ln["momentum"],
                                   weight_decay=ln["weight_decay"], n_new=ln["replay_n_new"],
                                   n_old=ln["replay_n_old"]))
    py = Learner(cfg)
    D = cfg.latent_dim
    for i in range(120):
        q = np.array([(i * 31 + j * 17 + (i * j) % 7) % 256 - 128 for j in range(D)], np.int8)
        lab, conf = py.predict(q)
        assert got[i][0] == lab
        assert got[i][1] == pytest.approx(conf, rel=1e-6)
        py.learn(q, 5 + i % 5)


def test_real_anomaly_model_c_matches_numpy(lib):
    """The shipped 640x16 autoencoder head on TFLM latents of the sensor stream (int8 path)."""
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2] / "models" / "anomaly"
    if not (root / "manifest.json").exists():
        pytest.skip("models/anomaly not exported")
    pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    from tinyol.data.datasets import load_source
    from tinyol.targets import twin as S
    model = S.load_model(root)
    X, y, _ = load_source("sensor:anomalies@test")
    X, y = X[:250], y[:250]
    Xq = S.quantize_input(X, *model.input_q)
    Q = S.latents(model, Xq)
    settings, replay = S.learner_settings(model, momentum=0.5, warmup=40)
    cfg = S.make_learner(model, settings, replay).cfg
    py, cl = Learner(cfg), CLearner(lib, cfg)
    flags = []
    for q, t in zip(Q, Xq):
        sa, sb = py.score(q, t.reshape(-1)), cl.score(q, t.reshape(-1))
        assert sa == sb
        a, b = py.anomaly(q, t.reshape(-1)), cl.anomaly(q, t.reshape(-1))
        assert a == sa  # score() predicts exactly what anomaly() then reports
        assert a[1] == b[1] and a[0] == b[0]
        flags.append(a[1])
    np.testing.assert_array_equal(cl.w, py.head.w)
    np.testing.assert_array_equal(cl.b, py.head.b)
    assert cl.stats()["anomalies"] == sum(flags) > 0


# ---------------------------------------------------------------------- idle-time rehearsal
def run_rehearsing(lib, cfg, idle_steps, n=150, prefill=40):
    """run_rehearsing_pair on the head: 40 latents of classes 0-4 pre-filled, 150 of 3-9."""
    py, cl = Learner(cfg), CLearner(lib, cfg)
    pp, pc, counts = run_rehearsing_pair(py, cl, D, CMAX, idle_steps, n, prefill, range(5), range(3, 10))
    return py, cl, pp, pc, counts


def assert_same(py, cl, pp, pc):
    assert pp == pc  # labels and float32 confidences, every sample
    np.testing.assert_array_equal(cl.w.view(np.uint32), py.head.w.view(np.uint32))
    np.testing.assert_array_equal(cl.b.view(np.uint32), py.head.b.view(np.uint32))
    assert (cl.active == py.head.active).all()
    sc, sp = cl.stats(), py.stats()
    for k in ("samples_seen", "updates", "rejected", "n_active", "replay_fill", "class_count"):
        assert sc[k] == sp[k], k
    assert cl.replay_labels() == py.replay.labels[: py.replay.fill].tolist()
    for i in range(py.replay.fill):
        assert cl.replay_row(i) == py.replay.packed_row(i)


REHEARSE_CASES = ["replay_i8_reservoir", "replay_7bit_balanced", "replay_i8_ar1_batch",
                  "replay_f32_balanced_batch"]


@pytest.mark.parametrize("name", REHEARSE_CASES)
def test_head_rehearsal_c_matches_numpy(lib, name):
    """The head's idle rehearsal (tol_learner_rehearse) against its twin (Learner.idle): a
    varying number of steps between samples (0 to the budget of 3), bit-identical weights,
    predictions, counters and buffer on a whole stream. The batch cases (n_new 4 and 3) keep
    fresh samples queued across rehearsal steps: the twin holds its queue apart, so a step
    that overwrote the C's queue would show here."""
    kw = dict(CASES[name])
    kw["settings"] = dataclasses.replace(kw["settings"], rehearse=3)
    cfg = base_cfg(np.random.default_rng(zlib.crc32(name.encode())), **kw)
    py, cl, pp, pc, counts = run_rehearsing(lib, cfg, lambda i: None if i % 3 else i % 4)
    assert_same(py, cl, pp, pc)
    assert max(counts) == 3 and all(c == 3 for i, c in enumerate(counts) if i % 3)
    assert py.updates + py.rejected == 150 // py.settings.n_new + sum(counts)


def test_head_rehearsal_trains_and_keeps_the_queue(lib):
    """Rehearsal is real training (the weights differ from the same stream without it) and
    leaves queued fresh samples alone: with n_new = 4, every update still takes four."""
    kw = dict(CASES["replay_i8_ar1_batch"])
    with_r = base_cfg(np.random.default_rng(3), **{**kw, "settings": dataclasses.replace(
        kw["settings"], rehearse=2)})
    without = base_cfg(np.random.default_rng(3), **kw)
    a, ca, _, _, counts = run_rehearsing(lib, with_r, lambda i: None)
    b, cb, _, _, zero = run_rehearsing(lib, without, lambda i: None)
    assert counts == [2] * 150 and sum(zero) == 0
    assert not np.array_equal(ca.w, cb.w)
    assert a.samples_seen == b.samples_seen == 150
    assert b.updates == 150 // 4 + 0 and a.updates + a.rejected == b.updates + 300


@pytest.mark.parametrize("why", ["frozen", "sgd", "no_old", "empty", "off", "autoencoder"])
def test_head_rehearsal_refuses_without_replay(lib, why):
    """Nothing to rehearse: no step, no PRNG draw, nothing changed (C and twin alike)."""
    st = Settings(lr=0.05, n_old=0 if why == "no_old" else 3, rehearse=0 if why == "off" else 4,
                  mode={"frozen": 0, "sgd": MODE_SGD}.get(why, MODE_REPLAY))
    kw = dict(replay_capacity=20, replay_bits=8, settings=st)
    if why == "autoencoder":
        kw.update(head_kind=HEAD_AUTOENCODER, replay_capacity=0)
    cfg = base_cfg(np.random.default_rng(4), **kw)
    for learner in (Learner(cfg), CLearner(lib, cfg)):
        if why not in ("empty", "autoencoder"):
            learner.replay_add(np.zeros(D, np.int8), 1)
        w = np.array(learner.head.w if isinstance(learner, Learner) else learner.w)
        assert learner.idle() == 0 and not learner.rehearse()
        w2 = learner.head.w if isinstance(learner, Learner) else learner.w
        np.testing.assert_array_equal(w2, w)
        assert learner.stats()["updates"] == 0


# ---------------------------------------------------------------------- replay policy setting
def test_replay_policy_set_mid_stream_c_matches_numpy(lib):
    """The replay policy is a setting: reservoir, then class-balanced after 120 samples, then
    AR1 after 240 (C and twin bit-identical). A change keeps the slots already stored; the
    new policy decides the later offers (the run differs from one that never changed)."""
    cfg = base_cfg(np.random.default_rng(9), replay_capacity=30, replay_bits=8,
                   replay_policy=POLICY_RESERVOIR, settings=Settings(lr=0.05, n_old=4))
    q, y, _ = make_stream(np.random.default_rng(1), 360, D, CMAX, classes=range(3, 10))
    py, cl = Learner(cfg), CLearner(lib, cfg)
    same = Learner(cfg)
    assert cl.get_settings().replay_policy == py.settings.replay_policy == POLICY_RESERVOIR
    for i, (qi, yi) in enumerate(zip(q, y)):
        if i in (120, 240):
            pol = POLICY_BALANCED if i == 120 else POLICY_AR1
            labels_before = py.replay.labels[: py.replay.fill].tolist()
            for learner in (py, cl):
                learner.set_settings(dataclasses.replace(learner.get_settings() if learner is cl
                                                         else learner.settings, replay_policy=pol))
            assert cl.get_settings().replay_policy == py.settings.replay_policy == pol
            assert cl.replay_labels() == labels_before  # the stored slots stay
        assert py.predict(qi) == cl.predict(qi)
        same.predict(qi)
        for learner in (py, cl, same):
            learner.learn(qi, int(yi))
    np.testing.assert_array_equal(cl.w.view(np.uint32), py.head.w.view(np.uint32))
    assert cl.replay_labels() == py.replay.labels[: py.replay.fill].tolist()
    for i in range(py.replay.fill):
        assert cl.replay_row(i) == py.replay.packed_row(i)
    assert py.replay.labels.tolist() != same.replay.labels.tolist()
    # reset brings back the config's policy
    cl.reset()
    py.reset()
    assert cl.get_settings().replay_policy == py.settings.replay_policy == POLICY_RESERVOIR


def test_replay_policy_setting_range(lib):
    cfg = base_cfg(np.random.default_rng(2), replay_capacity=10, replay_bits=8)
    cl, py = CLearner(lib, cfg), Learner(cfg)
    from tinyol.learn.learner import LearnerError
    for learner, s in ((cl, cl.get_settings()), (py, py.settings)):
        with pytest.raises(LearnerError, match="TOL_ERR_ARG"):
            learner.set_settings(dataclasses.replace(s, replay_policy=3))
    # the config's policy is what init takes (the one in cfg.settings is ignored)
    c2 = dataclasses.replace(cfg, replay_policy=POLICY_AR1,
                             settings=dataclasses.replace(cfg.settings, replay_policy=POLICY_BALANCED))
    assert CLearner(lib, c2).get_settings().replay_policy == Learner(c2).settings.replay_policy == POLICY_AR1
    with pytest.raises(LearnerError):
        CLearner(lib, dataclasses.replace(cfg, replay_policy=3))
    with pytest.raises(LearnerError):
        Learner(dataclasses.replace(cfg, replay_policy=3))


def test_pq_option_refusals():
    """`--replay-codec pq:M`: a malformed codec, an M that does not divide the latent, a
    sub-vector over 127 values and PQ with --stage-train auto are each one TinyolError."""
    from tinyol.errors import TinyolError
    from tinyol.learn.learner import pq_bits
    from tinyol.model.export import ExportSettings

    assert pq_bits(32, 8) == 128 + 4 and pq_bits(256, 4) == 128 + 64
    for dim, m in ((32, 5), (256, 2), (32, 0)):  # 5 does not divide 32; 128 values a sub-vector
        with pytest.raises(TinyolError, match=f"pq:{m}"):
            pq_bits(dim, m)
    for codec in ("pq", "pq:x", "kmeans:8", "pq:0"):
        with pytest.raises(TinyolError, match="--replay-codec must be pq:M"):
            ExportSettings(replay_codec=codec).check()
    with pytest.raises(TinyolError, match="--stage-train auto"):
        ExportSettings(replay_codec="pq:8", stage_train="auto", board="nucleo_l476rg",
                       calib="digits:0-4@train").check()
    ExportSettings(replay_codec="pq:8").check()  # a good one passes

"""The learner's state stream (tol_learner_state_*): a learner restored from it
predicts and keeps learning bit-identically to the learner that was saved.
Oracle: the saved learner itself, continuing without a save/restore."""
from __future__ import annotations

import ctypes as C
import dataclasses

import numpy as np
import pytest
from _learner_util import CLearner, StateStream, build_learner_lib
from conftest import ROOT, compile_arm_objects
from tinyol.learn.learner import HEAD_AUTOENCODER, Config, LearnerError, Settings, fit_pq

REPLAY, MOMENTUM = 0x01, 0x02
HEADER = 104


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    lib = build_learner_lib(tmp_path_factory.mktemp("learner"))
    P = C.c_void_p
    lib.tol_learner_state_begin.argtypes = [P, C.c_char_p, C.c_uint32, C.POINTER(C.c_uint8),
                                            C.POINTER(C.c_uint32)]
    lib.tol_learner_state_end.argtypes = [P, C.c_uint8]
    lib.tol_learner_set_head_row.argtypes = [P, C.c_uint16, C.c_uint16, C.POINTER(C.c_float), C.c_uint16,
                                             C.c_float, C.c_uint8]
    return lib


def export(lrn: CLearner, parts: int, chunk: int = 37) -> bytes:
    lib = lrn.lib
    s = StateStream(lib, lib.tol_learner_state_stream, lrn.state, parts, HEADER)
    n = len(s)
    return b"".join(s.read(at, min(chunk, n - at)) for at in range(0, n, chunk))


def restore(lrn: CLearner, blob: bytes, chunk: int = 29) -> int:
    lib = lrn.lib
    parts, total = C.c_uint8(), C.c_uint32()
    rc = lib.tol_learner_state_begin(lrn.state, blob[:HEADER], HEADER, C.byref(parts), C.byref(total))
    if rc:
        return rc
    assert total.value == len(blob)
    s = StateStream(lib, lib.tol_learner_state_stream, lrn.state, parts.value)
    for at in range(HEADER, len(blob), chunk):
        assert s.write(at, blob[at:at + chunk]) == 0
    return lib.tol_learner_state_end(lrn.state, parts.value)


def classifier_cfg(**kw) -> Config:
    rng = np.random.default_rng(0)
    d, c = 12, 6
    base = dict(latent_dim=d, n_outputs=c, init_classes=3,
                init_weight=rng.normal(0, 0.3, (c, d)).astype(np.float32),
                init_bias=rng.normal(0, 0.1, c).astype(np.float32), latent_scale=0.05, latent_zero_point=-3,
                replay_capacity=20, replay_bits=7, max_new=4, seed=7,
                settings=Settings(lr=0.05, n_new=1, n_old=3))
    base.update(kw)
    return Config(**base)


def stream(n, d, c, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(-128, 128, (n, d), dtype=np.int8), rng.integers(0, c, n)


def run(lrn, xs, ys):
    preds = []
    for x, y in zip(xs, ys):
        preds.append(lrn.predict(x))
        try:
            lrn.learn(x, int(y))
        except LearnerError:
            pass
    return preds


SCENARIOS = {
    "replay7": (classifier_cfg(), REPLAY),
    "replay32_momentum": (classifier_cfg(replay_bits=32, settings=Settings(lr=0.03, momentum=0.9, n_old=2)),
                          REPLAY | MOMENTUM),
    "replay8_pending": (classifier_cfg(replay_bits=8, settings=Settings(lr=0.05, n_new=3, n_old=2)), REPLAY),
    "sgd_no_buffer": (classifier_cfg(replay_capacity=0, settings=Settings(mode=1)), 0),
    "no_momentum_buffers": (classifier_cfg(no_momentum=True), REPLAY | MOMENTUM),  # MOMENTUM part dropped
    # PQ slots: 4 sub-vectors of 3 values, codebook by k-means on another stream
    "replay_pq": (classifier_cfg(replay_bits=128 + 3, replay_codec=fit_pq(stream(400, 12, 6, 5)[0], 4)),
                  REPLAY),
}


def test_pq_slots_round_trip(lib):
    """A saved PQ buffer holds its codes (M bytes a slot): the restored learner's rows are the
    saved ones, byte for byte, and decode as the twin's; a learner at another storage refuses
    the state."""
    from _learner_util import run_pair

    cfg, parts = SCENARIOS["replay_pq"]
    xs, ys = stream(50, cfg.latent_dim, cfg.n_outputs, 1)
    py, a, _, _ = run_pair(lib, cfg, xs, ys)
    rows = [a.replay_row(i) for i in range(a.stats()["replay_fill"])]
    assert rows == [py.replay.packed_row(i) for i in range(py.replay.fill)] and len(rows[0]) == 4
    blob = export(a, parts)
    slim = export(a, 0)
    assert len(blob) - len(slim) == 20 * 4 + 20 * 2 + 6 * 4 + 6 * 2  # codes + labels + seen + count
    b = CLearner(lib, cfg)
    assert restore(b, blob) == 0
    assert [b.replay_row(i) for i in range(len(rows))] == rows
    other = CLearner(lib, dataclasses.replace(cfg, replay_bits=8, replay_codec=None))
    assert restore(other, blob) != 0


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_restored_learner_continues_bit_identically(lib, name):
    cfg, parts = SCENARIOS[name]
    a = CLearner(lib, cfg)
    xs, ys = stream(50, cfg.latent_dim, cfg.n_outputs, 1)
    run(a, xs, ys)  # 50 samples: the 3-per-update case leaves 2 queued
    blob = export(a, parts)
    b = CLearner(lib, cfg)
    run(b, *stream(9, cfg.latent_dim, cfg.n_outputs, 99))  # some other state, to be overwritten
    assert restore(b, blob) == 0
    assert export(b, parts) == blob
    assert np.array_equal(a.w, b.w) and np.array_equal(a.b, b.b)
    assert a.stats() == b.stats()
    xs2, ys2 = stream(60, cfg.latent_dim, cfg.n_outputs, 2)
    pa, pb = run(a, xs2, ys2), run(b, xs2, ys2)
    assert pa == pb
    assert a.w.tobytes() == b.w.tobytes() and a.b.tobytes() == b.b.tobytes()
    assert a.stats() == b.stats()


def test_without_replay_part_the_buffer_restarts_empty(lib):
    cfg = classifier_cfg()
    a = CLearner(lib, cfg)
    run(a, *stream(30, cfg.latent_dim, cfg.n_outputs, 3))
    full, slim = export(a, REPLAY), export(a, 0)
    assert len(full) - len(slim) == 20 * 7 * ((12 + 7) // 8) + 20 * 2 + 6 * 4 + 6 * 2  # rows + labels + seen + count
    b = CLearner(lib, cfg)
    assert restore(b, slim) == 0
    assert np.array_equal(a.w, b.w)
    assert b.stats()["replay_fill"] == 0 and a.stats()["replay_fill"] == 20
    assert b.stats()["samples_seen"] == a.stats()["samples_seen"]


def test_autoencoder_state_roundtrip(lib):
    d, out = 6, 10
    rng = np.random.default_rng(5)
    cfg = Config(latent_dim=d, n_outputs=out, head_kind=HEAD_AUTOENCODER, latent_scale=0.05, target_scale=0.02,
                 init_weight=rng.normal(0, 0.1, (out, d)).astype(np.float32), init_bias=np.zeros(out, np.float32),
                 replay_capacity=8, replay_bits=8, settings=Settings(lr=0.01, n_old=2, warmup=5))
    a = CLearner(lib, cfg)
    lat = rng.integers(-128, 128, (40, d), dtype=np.int8)
    tgt = rng.integers(-128, 128, (40, out), dtype=np.int8)
    for x, t in zip(lat[:20], tgt[:20]):
        a.anomaly(x, t)
    b = CLearner(lib, cfg)
    assert restore(b, export(a, REPLAY | MOMENTUM)) == 0
    ra = [a.anomaly(x, t) for x, t in zip(lat[20:], tgt[20:])]
    rb = [b.anomaly(x, t) for x, t in zip(lat[20:], tgt[20:])]
    assert ra == rb and a.stats() == b.stats()


def test_state_of_another_configuration_is_refused(lib):
    a = CLearner(lib, classifier_cfg())
    blob = export(a, REPLAY)
    other = CLearner(lib, classifier_cfg(replay_capacity=21))
    before = other.w
    assert restore(other, blob) == 15  # TOL_ERR_MODEL, nothing changed
    assert np.array_equal(other.w, before)
    bad = bytearray(blob)
    bad[0] ^= 0xFF
    assert restore(CLearner(lib, classifier_cfg()), bytes(bad)) == 1  # TOL_ERR_ARG


def test_nonfinite_weights_reset_to_the_exported_head(lib):
    cfg = classifier_cfg()
    a = CLearner(lib, cfg)
    run(a, *stream(20, cfg.latent_dim, cfg.n_outputs, 4))
    blob = bytearray(export(a, REPLAY))
    blob[HEADER:HEADER + 4] = np.float32(np.nan).tobytes()
    b = CLearner(lib, cfg)
    assert restore(b, bytes(blob)) == 2  # TOL_ERR_RANGE
    fresh = CLearner(lib, cfg)
    assert np.array_equal(b.w, fresh.w) and b.stats() == fresh.stats()


def test_set_head_row(lib):
    cfg = classifier_cfg()
    a = CLearner(lib, cfg)
    w = np.arange(5, dtype=np.float32)
    fp = w.ctypes.data_as(C.POINTER(C.c_float))
    assert lib.tol_learner_set_head_row(a.state, 4, 3, fp, 5, C.c_float(0.5), 1) == 0
    assert np.array_equal(a.w[4, 3:8], w) and a.b[4] == 0.5 and a.stats()["n_active"] == 4
    assert lib.tol_learner_set_head_row(a.state, 0, 0, None, 0, C.c_float(0.0), 0) == 0
    assert a.stats()["n_active"] == 3
    assert lib.tol_learner_set_head_row(a.state, 6, 0, None, 0, C.c_float(0.0), 1) == 2  # row out of range
    assert lib.tol_learner_set_head_row(a.state, 1, 10, fp, 5, C.c_float(0.0), 1) == 2  # past the row's end
    w[2] = np.inf
    before = a.w
    assert lib.tol_learner_set_head_row(a.state, 1, 0, fp, 5, C.c_float(0.0), 1) == 3
    assert np.array_equal(a.w, before)


def test_learner_compiles_for_cortex_m4():
    compile_arm_objects([ROOT / "mcu/src/tol_learner.c"], [ROOT / "mcu/include"])




def test_state_carries_replay_policy_and_rehearse(lib):
    """The replay policy and the rehearse budget are settings saved with the state (header
    byte 7: the policy in use, byte 38: rehearse). A learner exported with reservoir restored
    from a state saved with class-balanced + rehearse 3 continues with those, bit-identically."""
    cfg = classifier_cfg(replay_bits=8)
    a = CLearner(lib, cfg)
    run(a, *stream(30, cfg.latent_dim, cfg.n_outputs, 1))
    a.set_settings(dataclasses.replace(a.get_settings(), replay_policy=1, rehearse=3))
    run(a, *stream(30, cfg.latent_dim, cfg.n_outputs, 3))
    blob = export(a, REPLAY)
    assert blob[7] == 1 and blob[38] == 3
    b = CLearner(lib, cfg)
    assert b.get_settings().replay_policy == 0
    assert restore(b, blob) == 0
    s = b.get_settings()
    assert (s.replay_policy, s.rehearse) == (1, 3)
    assert b.idle() == a.idle() == 3  # the budget, from the restored setting
    xs, ys = stream(80, cfg.latent_dim, cfg.n_outputs, 4)
    assert run(a, xs, ys) == run(b, xs, ys)
    assert a.replay_labels() == b.replay_labels() and a.w.tobytes() == b.w.tobytes()


def test_state_saved_before_the_settings_loads(lib):
    """A state written before the policy and rehearse were settings: byte 7 held the config's
    policy and byte 38 was zero (the header is zero-filled). It restores with rehearse off and
    that policy; a policy byte out of range is a malformed state (TOL_ERR_ARG)."""
    cfg = classifier_cfg(replay_bits=8, replay_policy=2)
    a = CLearner(lib, cfg)
    run(a, *stream(30, cfg.latent_dim, cfg.n_outputs, 1))
    old = bytearray(export(a, REPLAY))
    assert old[7] == 2 and old[38] == 0
    b = CLearner(lib, classifier_cfg(replay_bits=8))  # built with reservoir
    assert restore(b, bytes(old)) == 0
    assert (b.get_settings().replay_policy, b.get_settings().rehearse) == (2, 0)
    old[7] = 3
    assert restore(CLearner(lib, cfg), bytes(old)) == 1

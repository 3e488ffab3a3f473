"""tinyol.h's adaptive stage for your own firmware (tinyol_stage_*, mcu/embed/tinyol_stage.c;
docs/embedding.md, "An adaptive stage") on models/digits_adaptive (digits exported with
`--split embed`: Dense 256->32+ReLU and the classifier train).

Oracle: the numpy twin of the stage (tinyol.learn.stage, with the manifest's settings and seed)
on latents from TFLM's own runtime (the tflite-micro wheel): the result of every call, field by
field, and the prediction's probability bit for bit. Also: each config.h default is written once
in mcu/ (issue 35)."""
from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
from conftest import ROOT, compile_arm_objects, compile_shared

MCU = ROOT / "mcu"
MODEL = ROOT / "models" / "digits_adaptive"
N_STREAM = 80


def _sources():
    return ([s for s in sorted((MCU / "src").glob("*.c")) if s.name != "tol_server.c"]
            + sorted((MCU / "src/kernels/ref").glob("*.c"))
            + [s for s in sorted((MCU / "embed").glob("*.c")) if s.name != "tinyol_head.c"]
            + [MODEL / "backbone.c", MODEL / "stage_init.c", ROOT / "tests/c/flash_sim.c"])


def _lib():
    # mcu/embed without the head's file (it needs head_init.c, which a stage model has not),
    # as mcu/platform/common/tinyol_build.py links a stage firmware
    lib = compile_shared(_sources() + [ROOT / "tests/c/embed_stage_shim.c"], [MCU / "include", MODEL])
    lib.shim_stage_predict.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32),
                                       ctypes.POINTER(ctypes.c_float)]
    lib.shim_stage_learn_plain.argtypes = [ctypes.c_uint16]
    lib.shim_stage_learn.argtypes = [ctypes.c_uint16, ctypes.c_void_p, ctypes.c_void_p]
    lib.shim_stage_learn_sample.argtypes = [ctypes.c_void_p, ctypes.c_uint16, ctypes.c_void_p,
                                            ctypes.c_void_p]
    return lib


def _stream():
    from tinyol.data.datasets import load_source
    from tinyol.targets.twin import load_model, quantize_input

    X, y, _ = load_source("digits:5-9@train")
    idx = np.random.default_rng(3).permutation(len(y))[:N_STREAM]
    model = load_model(MODEL)
    return model, quantize_input(X[idx], *model.input_q).reshape(len(idx), -1), np.asarray(y[idx], int)


def test_stage_learn_returns_what_the_twin_says():
    """tinyol_stage_predict + tinyol_stage_learn (even samples) and tinyol_stage_learn_sample
    (odd ones) against the twin's predict + learn_result on the same stream."""
    pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    from tinyol.targets.twin import latents, learner_settings, make_learner

    lib = _lib()
    assert lib.shim_stage_init_small() == 16  # TOL_ERR_OVERFLOW: the memory is too small
    assert lib.shim_stage_init() == 0
    assert lib.shim_stage_learn_plain(0) == 1  # TOL_ERR_ARG: nothing predicted to learn
    model, Xq, y = _stream()
    twin = make_learner(model, *learner_settings(model))
    assert type(twin).__name__ == "Stage"
    out, prob = np.zeros(6, np.int32), np.zeros(2, np.float32)
    label, conf = ctypes.c_int32(), ctypes.c_float()
    fresh = 0
    for i, (x, q, t) in enumerate(zip(Xq, latents(model, Xq), y)):
        x, t = np.ascontiguousarray(x, np.int8), int(t)
        pred, p = twin.predict(q)
        r = twin.learn_result(q, t, pred, p)
        if i % 2:
            assert lib.shim_stage_learn_sample(x.ctypes.data, t, out.ctypes.data, prob.ctypes.data) == 0
        else:
            assert lib.shim_stage_predict(x.ctypes.data, ctypes.byref(label), ctypes.byref(conf)) == 0
            assert (label.value, np.float32(conf.value).tobytes()) == (pred, np.float32(p).tobytes())
            assert lib.shim_stage_learn(t, out.ctypes.data, prob.ctypes.data) == 0
        assert r.error is None
        assert out.tolist() == [r.prediction, r.learned, r.new_class, r.samples_seen, r.updates, r.n_active], i
        assert prob[0].tobytes() == np.float32(r.probability).tobytes()
        assert prob[1].tobytes() == np.float32(r.label_probability).tobytes()
        fresh += r.new_class
    assert fresh >= 1 and out[4] > 0  # the stream taught it new classes and it stepped
    assert lib.shim_stage_seen() == N_STREAM
    lib.shim_stage_reset()
    assert lib.shim_stage_seen() == 0


def test_stage_embed_compiles_for_the_m4():
    """The stage's library files with the strict flags for Cortex-M4, and mcu/embed as a whole
    for a model without a stage (tinyol_stage.c then compiles to nothing)."""
    compile_arm_objects([MCU / "embed/tinyol_stage.c", MCU / "embed/tinyol.c"], [MCU / "include", MODEL])
    compile_arm_objects(sorted((MCU / "embed").glob("*.c")), [MCU / "include", ROOT / "models/digits"])


def test_each_config_default_is_written_once():
    """A config.h value that older exports lack is defaulted (#ifndef NAME / #define NAME) in one
    place of mcu/, not once per learner."""
    seen: dict[str, list[str]] = {}
    for f in sorted(MCU.rglob("*.[ch]")):
        for name in re.findall(r"^#ifndef (TOL_\w+)\s*(?:/\*.*)?\n#define \1\b", f.read_text(), re.M):
            if not name.endswith("_H"):  # not an include guard
                seen.setdefault(name, []).append(str(f.relative_to(ROOT)))
    assert {"TOL_REPLAY_POLICY", "TOL_REHEARSE"} <= set(seen)
    twice = {k: v for k, v in seen.items() if len(v) > 1}
    assert not twice, twice

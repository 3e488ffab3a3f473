"""tinyol as a library in the user's own firmware (mcu/include/tinyol.h, docs/embedding.md).

Oracles: the numpy reference learner (host/tinyol/learn/learner.py) on latents from TFLM's
own runtime (the tflite-micro wheel), prediction for prediction and confidence for
confidence; the flash simulator of the persistence tests for save/load.
The example firmware (examples/sensor_learner) is built with PlatformIO through
library.json and run natively and in QEMU.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, compile_shared

MCU = ROOT / "mcu"
DIGITS = ROOT / "models" / "digits"
EXAMPLE = ROOT / "examples" / "sensor_learner"
N_STREAM = 120


def _lib():
    srcs = ([s for s in sorted((MCU / "src").glob("*.c")) if s.name != "tol_server.c"]
            + sorted((MCU / "src/kernels/ref").glob("*.c")) + sorted((MCU / "embed").glob("*.c"))
            + [DIGITS / "backbone.c", DIGITS / "head_init.c", ROOT / "tests/c/flash_sim.c",
               ROOT / "tests/c/embed_shim.c"])
    lib = compile_shared(srcs, [MCU / "include", DIGITS])
    lib.shim_predict.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_float)]
    lib.shim_learn.argtypes = [ctypes.c_uint16]
    lib.shim_learn_sample.argtypes = [ctypes.c_void_p, ctypes.c_uint16]
    lib.shim_learn_result.argtypes = [ctypes.c_uint16, ctypes.c_void_p, ctypes.c_void_p]
    lib.shim_learn_sample_result.argtypes = [ctypes.c_void_p, ctypes.c_uint16, ctypes.c_void_p,
                                             ctypes.c_void_p]
    lib.shim_quantize.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.shim_anomaly.argtypes = [ctypes.c_void_p]
    lib.shim_init_split.argtypes = [ctypes.c_uint32, ctypes.c_uint32]
    lib.sim_setup.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint8, ctypes.c_uint32]
    return lib


def _stream():
    """A fixed, shuffled stream of digits (all ten classes; 5-9 never seen in pretraining)."""
    from tinyol.data.datasets import load_source
    from tinyol.targets.twin import load_model, quantize_input

    X, y, _ = load_source("digits:0-9@train")
    idx = np.random.default_rng(7).permutation(len(y))[:N_STREAM]
    model = load_model(DIGITS)
    return model, quantize_input(X[idx], *model.input_q).reshape(len(idx), -1), np.asarray(y[idx], int)


def _reference(model, Xq, y):
    """Predictions and confidences of the numpy reference learner (predict, then learn)."""
    from tinyol.targets.twin import latents, learner_settings, make_learner

    lrn = make_learner(model, *learner_settings(model))
    preds, confs = [], []
    for q, t in zip(latents(model, Xq), y):
        p, c = lrn.predict(q)
        preds.append(int(p))
        confs.append(np.float32(c))
        lrn.learn(q, int(t))
    return preds, confs


def _accuracy_new(preds, y, last: int = 40) -> float:
    """Prequential accuracy on the new classes 5-9 over the last `last` samples."""
    p, t = np.asarray(preds[-last:]), np.asarray(y[-last:])
    return float(np.mean(p[t >= 5] == t[t >= 5]))


def test_library_api_learns_like_the_reference_learner():
    pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    lib = _lib()
    assert lib.shim_init() == 0
    assert lib.shim_init_small() == 16  # TOL_ERR_OVERFLOW: memory below TINYOL_MEM_BYTES
    assert lib.shim_init() == 0
    model, Xq, y = _stream()
    assert lib.shim_input_size() == Xq.shape[1]
    assert lib.shim_learn(3) == 1  # TOL_ERR_ARG: nothing predicted yet
    preds, confs = [], []
    label, conf = ctypes.c_int32(), ctypes.c_float()
    for x, t in zip(Xq, y):
        x = np.ascontiguousarray(x, np.int8)
        assert lib.shim_predict(x.ctypes.data, ctypes.byref(label), ctypes.byref(conf)) == 0
        preds.append(label.value)
        confs.append(np.float32(conf.value))
        assert lib.shim_learn(int(t)) == 0
    assert lib.shim_learn(int(y[0])) == 1  # each prediction is learned at most once
    ref_preds, ref_confs = _reference(model, Xq, y)
    assert preds == ref_preds
    assert [c.tobytes() for c in confs] == [c.tobytes() for c in ref_confs]
    assert lib.shim_seen() == N_STREAM
    assert _accuracy_new(preds, y) > 0.5  # it learned the five classes pretraining never saw
    assert lib.shim_anomaly(Xq[0].ctypes.data) == 12  # TOL_ERR_UNSUPPORTED on a classifier


def test_split_placement_learns_like_the_reference_learner():
    """tinyol_init_split (the replay buffer in a block of its own, as a firmware places it in
    SRAM2 or SRAM1 by the memory plan): the same predictions and confidences as the reference
    learner; either block a few bytes short is TOL_ERR_OVERFLOW."""
    pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    lib = _lib()
    from tinyol.model.folder import load_manifest

    assert lib.shim_replay_mem_bytes() == load_manifest(DIGITS)["memory"]["replay_bytes"] > 0
    assert lib.shim_init_split(8, 0) == 16 and lib.shim_init_split(0, 8) == 16
    assert lib.shim_init_split(0, 0) == 0
    model, Xq, y = _stream()
    preds, confs = [], []
    label, conf = ctypes.c_int32(), ctypes.c_float()
    for x, t in zip(Xq, y):
        x = np.ascontiguousarray(x, np.int8)
        assert lib.shim_predict(x.ctypes.data, ctypes.byref(label), ctypes.byref(conf)) == 0
        preds.append(label.value)
        confs.append(np.float32(conf.value))
        assert lib.shim_learn(int(t)) == 0
    ref_preds, ref_confs = _reference(model, Xq, y)
    assert preds == ref_preds
    assert [c.tobytes() for c in confs] == [c.tobytes() for c in ref_confs]


def test_learn_returns_what_happened_like_the_reference_learner():
    """tinyol_learn's result, field by field, against the numpy learner on the same stream:
    the prediction and its probability, the true label's probability (the loss), learned,
    new class and the counters after the call. Every other sample goes through
    tinyol_learn_sample (predict + learn in one call)."""
    pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    from tinyol.targets.twin import latents, learner_settings, make_learner

    lib = _lib()
    assert lib.shim_init() == 0
    model, Xq, y = _stream()
    lrn = make_learner(model, *learner_settings(model))
    out, prob = np.zeros(6, np.int32), np.zeros(2, np.float32)
    label, conf = ctypes.c_int32(), ctypes.c_float()
    new_classes = 0
    for i, (x, q, t) in enumerate(zip(Xq, latents(model, Xq), y)):
        x, t = np.ascontiguousarray(x, np.int8), int(t)
        pred, p = lrn.predict(q)
        probs = lrn.head.softmax(lrn.head.forward(lrn._deq(q)))
        fresh = not lrn.head.active[t]
        r = lrn.learn_result(q, t, pred, p)  # the twin's tinyol_learn
        if i % 2:
            assert lib.shim_learn_sample_result(x.ctypes.data, t, out.ctypes.data, prob.ctypes.data) == 0
        else:
            assert lib.shim_predict(x.ctypes.data, ctypes.byref(label), ctypes.byref(conf)) == 0
            assert lib.shim_learn_result(t, out.ctypes.data, prob.ctypes.data) == 0
        st = lrn.stats()
        assert out.tolist() == [pred, 1, int(fresh), st["samples_seen"], st["updates"], st["n_active"]], i
        assert out.tolist() == [r.prediction, r.learned, r.new_class, r.samples_seen, r.updates, r.n_active]
        assert prob[0].tobytes() == np.float32(p).tobytes()
        want = probs[t] if not fresh else np.float32(0)
        assert prob[1].tobytes() == want.tobytes() == np.float32(r.label_probability).tobytes()
        assert r.error is None
        new_classes += fresh
    assert new_classes == 5  # digits 5-9: the classes pretraining never saw
    assert st["updates"] > 0


def test_library_quantize_and_persistence_round_trip():
    lib = _lib()
    model, Xq, y = _stream()
    from tinyol.data.datasets import load_source
    from tinyol.targets.twin import quantize_input

    X, _, _ = load_source("digits:0-9@train")
    xf = np.ascontiguousarray(X[0], np.float32).reshape(-1)
    q = np.zeros(len(xf), np.int8)
    assert lib.shim_quantize(xf.ctypes.data, q.ctypes.data) == 0
    assert np.array_equal(q, quantize_input(X[:1], *model.input_q).reshape(-1))
    bad = xf.copy()
    bad[5] = np.nan
    assert lib.shim_quantize(bad.ctypes.data, q.ctypes.data) == 3  # TOL_ERR_NONFINITE

    assert lib.sim_setup(64 * 1024, 2048, 0xFF, 0) == 0
    assert lib.shim_init() == 0
    assert lib.shim_store_open() == 0
    assert lib.shim_load() == 14  # TOL_ERR_NO_RECORD: empty flash
    for x, t in zip(Xq[:60], y[:60]):
        assert lib.shim_learn_sample(np.ascontiguousarray(x).ctypes.data, int(t)) == 0
    label, conf = ctypes.c_int32(), ctypes.c_float()

    def predictions():
        out = []
        for x in Xq[60:]:
            assert lib.shim_predict(np.ascontiguousarray(x).ctypes.data, ctypes.byref(label),
                                    ctypes.byref(conf)) == 0
            out.append((label.value, conf.value))
        return out

    learned = predictions()
    assert lib.shim_save() == 0
    lib.shim_reset()
    assert predictions() != learned  # forgot everything
    assert lib.shim_store_open() == 0  # as after a reboot
    assert lib.shim_load() == 0
    assert lib.shim_seen() == 60
    assert predictions() == learned


# --------------------------------------------------------------- the example firmware
def _pio_build(env: str) -> Path:
    os.environ.setdefault("PLATFORMIO_CORE_DIR", str(ROOT / ".pio-core"))
    proc = subprocess.run([sys.executable, "-m", "platformio", "run", "-d", str(EXAMPLE), "-e", env],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PLATFORMIO_NO_ANSI": "true"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "tinyol library: model=" in out
    assert f"kernels={'ref' if env == 'native' else 'simd'}" in out
    build = EXAMPLE / ".pio" / "build" / env
    if env != "native":  # the user's firmware links the learner, not our protocol or main loop
        linked = (build / "firmware.map").read_text()
        assert "tinyol_predict" in linked and "tol_learner_learn" in linked
        for absent in ("tol_server_feed", "tol_proto_parse", "tol_cobs_", "tol_model_handle"):
            assert absent not in linked, absent
    return build / ("firmware" if env == "native" else "firmware.elf")


def _drive(url: str, Xq, y) -> tuple[list[int], list[int], str]:
    """Play sensor and labeller: 'r' + reading per value, 'l' + label after each prediction."""
    host, port = url.removeprefix("socket://").rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=60)
    f = s.makefile("rb")

    def line() -> str:
        raw = f.readline()
        assert raw, "the example firmware closed the connection"
        return raw.decode().strip()

    boot = line()
    while not boot.startswith("boot"):
        boot = line()
    preds, confs = [], []
    for x, t in zip(Xq, y):
        s.sendall(b"".join(b"r" + bytes([int(v) & 0xFF]) for v in x))
        words = line().split()
        assert words[0] == "pred", words
        preds.append(int(words[1]))
        confs.append(int(words[2]))
        s.sendall(b"l" + bytes([int(t)]))
        assert line().split()[:2] == ["learned", str(int(t))]
    s.sendall(b"q")
    stats = line()
    s.close()
    return preds, confs, boot + " | " + stats


@pytest.mark.slow
@pytest.mark.parametrize("target", ["native", pytest.param("qemu", marks=pytest.mark.qemu)])
def test_example_firmware_links_the_library_and_learns(target):
    pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    if target == "qemu" and not shutil.which("arm-none-eabi-gcc"):
        pytest.skip("arm-none-eabi-gcc not installed")
    from tinyol.targets import emulator

    image = _pio_build("native" if target == "native" else "nucleo_l476rg")
    model, Xq, y = _stream()
    t = (emulator.start_native(image, timeout=300) if target == "native"
         else emulator.start_qemu("nucleo_l476rg", image, timeout=300))
    try:
        preds, confs, info = _drive(t.url, Xq, y)
    finally:
        t.stop()
    assert info.startswith(f"boot model=digits inputs={Xq.shape[1]} classes=10")
    assert info.endswith(f"stats {N_STREAM} {N_STREAM} {len(set(y.tolist()))} {min(N_STREAM, 200)}")
    ref_preds, ref_confs = _reference(model, Xq, y)
    assert preds == ref_preds
    assert confs == [int(np.float32(c) * np.float32(1e6)) for c in ref_confs]
    assert _accuracy_new(preds, y) > 0.5


@pytest.mark.slow
def test_cmake_static_library_learns_like_the_reference(tmp_path):
    """The plain-C layout (docs/embedding.md, examples/cmake): a static library with CMake."""
    pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    if not shutil.which("cmake"):
        pytest.skip("cmake not installed")
    b = tmp_path / "build"
    for argv in (["cmake", "-S", ROOT / "examples/cmake", "-B", b, f"-DTINYOL_MODEL={DIGITS}"],
                 ["cmake", "--build", b, "-j2"]):
        p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    model, Xq, y = _stream()
    data = b"".join(np.asarray(x, np.int8).tobytes() + bytes([int(t)]) for x, t in zip(Xq, y))
    out = subprocess.run([str(b / "tinyol_stdin")], input=data, capture_output=True, timeout=120).stdout
    lines = out.decode().split("\n")
    preds = [int(l.split()[1]) for l in lines if l.startswith("pred")]
    confs = [np.float32(float(l.split()[2])) for l in lines if l.startswith("pred")]
    ref_preds, ref_confs = _reference(model, Xq, y)
    assert preds == ref_preds
    assert [c.tobytes() for c in confs] == [np.float32(c).tobytes() for c in ref_confs]
    assert f"seen {N_STREAM}" in lines

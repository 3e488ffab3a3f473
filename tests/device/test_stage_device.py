"""The adaptive stage on the device (models/digits_adaptive: digits exported with
`--split embed`, so Dense 256->32+ReLU and the Dense classifier both train on the board).
Oracle: the numpy twin (tinyol.learn.stage via `tinyol simulate`'s reference run) on the same
stream: predictions sample for sample, confidences bit for bit; SAVE/LOAD and
GET_STAGE/SET_STAGE move the whole stage (oracle: the image read before)."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from _stream_util import reference_run
from conftest import ROOT
from tinyol._defs import Msg
from tinyol.data.datasets import load_source
from tinyol.learn.stage import stage_memory
from tinyol.link.device import Device
from tinyol.link.protocol import DeviceError
from tinyol.link.stream import stream
from tinyol.targets import emulator

pytestmark = pytest.mark.slow

MODEL = "models/digits_adaptive"
MANIFEST = json.loads((ROOT / MODEL / "manifest.json").read_text())


@pytest.fixture(scope="module")
def digits_stream():
    X, y = load_source("digits:5-9@train")[:2]
    perm = np.random.default_rng(7).permutation(len(y))[:240]
    return X[perm], y[perm]


@pytest.fixture(scope="module")
def reference(digits_stream):
    return reference_run(str(ROOT / MODEL), *digits_stream)


@pytest.fixture(scope="module")
def native_fw(firmware):
    return firmware("native", model=MODEL)


def _check(recs, ref, n):
    preds = np.array([r.prediction for r in recs])
    mism = np.flatnonzero(preds != ref["predictions"][:n])
    assert len(mism) == 0, f"{len(mism)} predictions differ from the twin, first at {mism[:5]}"
    conf = np.array([r.confidence for r in recs], np.float32)
    np.testing.assert_array_equal(conf, np.asarray(ref["confidence"][:n], np.float32))
    assert [r.samples_seen for r in recs] == ref["samples_seen"][:n]


def test_reference_learns_new_classes(reference, digits_stream):
    """The twin itself learns the five new digits (the stage is not a no-op)."""
    y = digits_stream[1]
    late = np.mean(reference["predictions"][-80:] == y[-80:])
    assert late > 0.8, late
    assert reference["learner"].active.all()


def test_native_stream_equals_twin(native_fw, digits_stream, reference):
    X, y = digits_stream
    with emulator.start_native(native_fw.program, timeout=120) as t, Device.open(t.url) as dev:
        info = dev.info
        s, recs = stream(dev, X, y, MANIFEST, mode="train", window=4)
        st = dev.stats()
        image = dev.get_stage()
    _check(recs, reference, len(y))
    lrn = reference["learner"]
    assert st.class_counts == lrn.class_count.tolist() and st.replay_fill == lrn.replay.fill
    # the whole stage, bit for bit
    n = lrn.n_params
    assert image[:4 * n] == lrn.params.astype("<f4").tobytes()
    assert image[4 * n:] == lrn.active.astype(np.uint8).tobytes()
    # INFO reports the stage the exporter's memory model sized
    mem = stage_memory(lrn.layers, 32, 8, 1, 0, True)
    assert (info.stage_layers, info.stage_params, info.stage_bytes) == (2, n, mem["total"])
    assert info.stage_bytes == MANIFEST["stage"]["memory"]["total"]


def test_native_save_load_and_push_keep_the_whole_stage(native_fw, digits_stream, tmp_path):
    X, y = digits_stream
    probe = np.stack([np.clip(np.round(x.ravel() / MANIFEST["input"]["scale"])
                              + MANIFEST["input"]["zero_point"], -128, 127).astype(np.int8)
                      for x in X[:20]])
    with emulator.start_native(native_fw.program, state_dir=tmp_path, timeout=120) as t:
        with Device.open(t.url) as dev:
            stream(dev, X[:100], y[:100], MANIFEST, mode="train", window=1)
            saved = dev.save()
            img = dev.get_stage()
            before = [(r.prediction, r.value) for r in (dev.predict(x) for x in probe)]
            stream(dev, X[100:160], y[100:160], MANIFEST, mode="train", window=1)
            assert dev.get_stage() != img  # learning moved the stage
            loaded = dev.load()
            assert loaded.seq == saved.seq
            assert dev.get_stage() == img
            assert [(r.prediction, r.value) for r in (dev.predict(x) for x in probe)] == before
            # PULL/PUSH: reset to the export, push the pulled image back
            dev.reset()
            assert dev.get_stage() != img
            assert dev.set_stage(img) == int(np.frombuffer(img[-10:], np.uint8).sum())
            assert dev.get_stage() == img
            assert [(r.prediction, r.value) for r in (dev.predict(x) for x in probe)] == before
            # a broken image is staged, refused at the commit, and nothing live changes
            bad = bytearray(img)
            bad[8:12] = struct.pack("<f", float("nan"))
            with pytest.raises(DeviceError) as e:
                dev.set_stage(bytes(bad))
            assert "NONFINITE" in str(e.value)
            assert dev.get_stage() == img
            # an interrupted push fences the stage (no predict, no save) until it completes ...
            dev.link.request(Msg.SET_STAGE, struct.pack("<I", 0) + img[:100])
            for call in (lambda: dev.predict(probe[0]), lambda: dev.save()):
                with pytest.raises(DeviceError, match="BUSY"):
                    call()
            assert dev.set_stage(img) == int(np.frombuffer(img[-10:], np.uint8).sum())  # restarts at 0
            # ... or LOAD rolls it back: the staged bytes are gone, a continuation is refused
            dev.link.request(Msg.SET_STAGE, struct.pack("<I", 0) + img[:100])
            assert dev.load().seq == saved.seq
            with pytest.raises(DeviceError) as e:
                dev.link.request(Msg.SET_STAGE, struct.pack("<I", 100) + img[100:200])
            assert "RANGE" in str(e.value)
            assert dev.get_stage() == img
            assert [(r.prediction, r.value) for r in (dev.predict(x) for x in probe)] == before
    # a restart loads the saved stage
    with emulator.start_native(native_fw.program, state_dir=tmp_path, timeout=120) as t:
        with Device.open(t.url) as dev:
            assert dev.store_status() == ("loaded", saved.seq)
            assert dev.get_stage() == img


@pytest.mark.qemu
def test_qemu_stream_equals_twin(firmware, digits_stream, reference):
    """The Cortex-M4 build (FPU, -ffp-contract=off via -std=c11) in QEMU: bit-identical too."""
    X, y = digits_stream
    n = 120
    fw = firmware("nucleo_l476rg", model=MODEL, test_build=True)
    with emulator.start_qemu("nucleo_l476rg", fw.elf, timeout=400) as t:
        with Device.open(t.url, timeout=10) as dev:
            s, recs = stream(dev, X[:n], y[:n], MANIFEST, mode="train", window=4, timeout=10.0)
            image = dev.get_stage()
    _check(recs, reference, n)
    assert len(image) == 4 * reference["learner"].n_params + 10


def test_cli_pull_push_info_for_a_stage(native_fw, digits_stream, tmp_path, capsys):
    """`tinyol pull` / `push` move the whole stage; `tinyol info` shows it."""
    from tinyol.cli import main

    X, y = digits_stream
    with emulator.start_native(native_fw.program, timeout=120) as t:
        with Device.open(t.url) as dev:
            stream(dev, X[:40], y[:40], MANIFEST, mode="train", window=1)
            learned = dev.get_stage()
        assert main(["pull", "--port", t.url, "--out", str(tmp_path / "stage.npz")]) == 0
        with Device.open(t.url) as dev:
            dev.reset()
            assert dev.get_stage() != learned
        assert main(["push", "--port", t.url, "--in", str(tmp_path / "stage.npz")]) == 0
        with Device.open(t.url) as dev:
            assert dev.get_stage() == learned
        # a one-layer head file is not a stage: the device refuses it with one clear error
        capsys.readouterr()
        assert main(["push", "--port", t.url, "--in",
                     str(ROOT / "models/digits/head_init.npz"), "--force"]) != 0
        assert "adaptive stage of 2 layers" in capsys.readouterr().err
        assert main(["info", "--port", t.url]) == 0
        out = capsys.readouterr().out
        assert f"2 layers, {MANIFEST['stage']['params']} parameters" in out
    assert bytes(np.load(tmp_path / "stage.npz")["stage_image"]) == learned


def test_native_cut_stage_push_is_fenced_until_reset(native_fw, digits_stream, tmp_path):
    """The push fence (issue 13) for the stage: a SET_STAGE push cut part way leaves the
    device refusing SAMPLE, PREDICT and SAVE (ERR_BUSY) without auto-saving; RESET rolls
    back to the exported stage (oracle: stage_init.npz), a complete push commits."""
    from tinyol._defs import Status

    X, y = digits_stream
    x = np.clip(np.round(X[0].ravel() / MANIFEST["input"]["scale"]) + MANIFEST["input"]["zero_point"],
                -128, 127).astype(np.int8)
    z = np.load(ROOT / MODEL / "stage_init.npz")
    exported = (z["params"].astype("<f4").tobytes()
                + (np.arange(MANIFEST["head"]["max_classes"]) < int(z["n_classes"])).astype(np.uint8).tobytes())
    with emulator.start_native(native_fw.program, state_dir=tmp_path, timeout=120) as t:
        with Device.open(t.url) as dev:
            assert dev.get_stage() == exported
            dev.set("autosave", 1)  # every update would save: the fence must stop it
            stream(dev, X[:30], y[:30], MANIFEST, mode="train", window=1)
            learned = dev.get_stage()
            st0 = dev.stats()
            pushed = bytearray(learned)
            pushed[:4 * 64] = np.full(64, 0.5, "<f4").tobytes()
            per = dev.info.max_payload - 4
            for off in (0, per):  # two slices of many; the link dies after them
                p = dev.link.request(Msg.SET_STAGE, struct.pack("<I", off) + bytes(pushed[off:off + per]))
                assert struct.unpack_from("<IIIB", p)[1:] == (off + per, len(learned), 0)
            for call in (lambda: dev.sample(x, int(y[0])), lambda: dev.predict(x), lambda: dev.save()):
                with pytest.raises(DeviceError) as e:
                    call()
                assert e.value.status == Status.ERR_BUSY
            st = dev.stats()
            assert (st.samples_seen, st.persist.saves) == (st0.samples_seen, st0.persist.saves)
            assert dev.get_stage() == learned  # nothing live changed
            dev.reset()  # roll back: the exported stage, fence lifted
            assert dev.get_stage() == exported
            assert dev.sample(x, int(y[0])).samples_seen == 1
            assert dev.stats().persist.saves == st0.persist.saves + 1  # auto-save runs again
            assert dev.set_stage(bytes(pushed)) >= 5  # a complete push commits
            assert dev.get_stage() == bytes(pushed)
            assert dev.predict(x).prediction >= 0
            dev.set("autosave", 0)

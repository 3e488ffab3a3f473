"""End to end: digits streamed through a running firmware (native process, QEMU)
must give the predictions of the numpy reference learner (`tinyol simulate`) on
the same stream, model, seed and settings; over a link that flips, drops and
duplicates bytes every sample is still learned exactly once; a device reset or
a vanished device mid-stream is reported, never streamed through.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from _stream_util import FaultProxy, reference_run
from conftest import ROOT
from tinyol.data.datasets import load_source
from tinyol.link.device import Device
from tinyol.link.protocol import DeviceGone, DeviceReset
from tinyol.link.stream import Stream, stream
from tinyol.targets import emulator

MODEL = "models/digits"
MANIFEST = json.loads((ROOT / MODEL / "manifest.json").read_text())


@pytest.fixture(scope="module")
def digits_stream():
    X, y, _ = load_source("digits:5-9@train")
    perm = np.random.default_rng(7).permutation(len(y))[:300]
    return X[perm], y[perm]


@pytest.fixture(scope="module")
def reference(digits_stream):
    X, y = digits_stream
    return reference_run(str(ROOT / MODEL), X, y)


@pytest.fixture(scope="module")
def native_fw(firmware):
    return firmware("native", model=MODEL)


def _check_against_reference(summary, records, ref, n):
    """ref: reference run on the stream in the order the device learned it (samples_seen)."""
    preds = np.array([r.prediction for r in records])
    assert summary.samples == n and len(records) == n
    order = np.argsort([r.samples_seen for r in records])
    preds = preds[order]
    records = [records[i] for i in order]
    mism = np.flatnonzero(preds != ref["predictions"][:n])
    assert len(mism) == 0, (f"{len(mism)} predictions differ from the reference learner, first at "
                            f"rows {mism[:5].tolist()}: device {preds[mism[:5]].tolist()} vs "
                            f"reference {ref['predictions'][mism[:5]].tolist()}")
    conf = np.array([r.confidence for r in records])
    np.testing.assert_allclose(conf, ref["confidence"][:n], rtol=1e-3, atol=1e-4)  # expf vs np.exp drift
    assert [r.samples_seen for r in records] == ref["samples_seen"][:n]
    assert all(r.learned for r in records)
    return order


@pytest.mark.parametrize("window", [1, 4, 7])
def test_native_stream_equals_reference_learner(native_fw, digits_stream, reference, window):
    X, y = digits_stream
    with emulator.start_native(native_fw.program, timeout=60) as t, Device.open(t.url) as dev:
        s, recs = stream(dev, X, y, MANIFEST, mode="train", window=window)
        st = dev.stats()
    order = _check_against_reference(s, recs, reference, len(y))
    assert (order == np.arange(len(y))).all(), "a clean link keeps the order"
    assert st.samples_seen == len(y) and st.duplicates == 0 and s.retries == 0
    ref_lrn = reference["learner"]
    assert st.class_counts == ref_lrn.class_count.tolist()
    assert st.replay_fill == ref_lrn.replay.fill


def test_native_sgd_mode_equals_reference_learner(native_fw, digits_stream):
    """MODE=1 (naive TinyOL, no replay) set over the link: same as the reference in sgd mode."""
    X, y = digits_stream
    with emulator.start_native(native_fw.program, timeout=60) as t, Device.open(t.url) as dev:
        assert dev.set("mode", 1) == 1
        s, recs = stream(dev, X, y, MANIFEST, mode="train", window=4)
    ref = reference_run(str(ROOT / MODEL), X, y, mode="sgd")
    _check_against_reference(s, recs, ref, len(y))


FAULTS = {  # per byte, both directions
    "light": dict(flip=0.001, drop=0.0005, dup=0.0005),  # ~1 exchange in 5 damaged
    "heavy": dict(flip=0.003, drop=0.002, dup=0.002),    # ~1 exchange in 2 damaged
}


@pytest.mark.parametrize("seed,faults,window,n", [(1, "light", 4, 200), (2, "light", 4, 200),
                                                  (3, "heavy", 7, 150), (4, "heavy", 2, 80)])
def test_faulty_link_learns_every_sample_exactly_once(native_fw, digits_stream, seed, faults,
                                                      window, n):
    """Bytes flipped, dropped or duplicated in both directions (seeded proxy)."""
    X, y = digits_stream
    with emulator.start_native(native_fw.program, timeout=60) as t, \
            FaultProxy(t.url, **FAULTS[faults], seed=seed, protect_first=200) as px:
        with Device.open(px.url, timeout=0.3, retries=30) as dev:
            s, recs = stream(dev, X[:n], y[:n], MANIFEST, mode="train", window=window, timeout=0.1,
                             retries=60)
            px.enabled = False
            st = dev.stats()
    assert sum(px.counts[k] for k in ("flip", "drop", "dup")) > n / 10, px.counts  # faults happened
    assert s.retries > 0
    assert st.samples_seen == n, f"device learned {st.samples_seen} samples, {n} were sent"
    assert sum(st.class_counts) == n
    assert np.bincount(y[:n], minlength=10).tolist() == st.class_counts
    # each sample exactly once, in the order the device learned them (a loss may swap a few
    # within the window): the reference learner on that order predicts the same
    order = np.argsort([r.samples_seen for r in recs])
    assert sorted(r.samples_seen for r in recs) == list(range(1, n + 1))
    ref = reference_run(str(ROOT / MODEL), X[:n][order], y[:n][order])
    _check_against_reference(s, recs, ref, n)


def test_device_reset_mid_stream_is_reported(native_fw, digits_stream, tmp_path):
    X, y = digits_stream
    port = emulator.free_port()
    targets = [emulator.start_native(native_fw.program, port=port, state_dir=tmp_path, timeout=60)]
    try:
        with FaultProxy(targets[0].url) as px, Device.open(px.url, timeout=0.5) as dev:
            assert dev.info.boot_count == 1
            st = Stream(dev, MANIFEST, mode="train", window=4, timeout=0.3)

            def reset_at_100(rec):
                if rec.index == 100:
                    targets[0].stop()  # power glitch: the process dies, then boots again
                    targets.append(emulator.start_native(native_fw.program, port=port,
                                                         state_dir=tmp_path, timeout=60))

            with pytest.raises(DeviceReset) as e:
                st.run(((i, X[i], int(y[i])) for i in range(len(y))), on_record=reset_at_100)
            assert "reset" in str(e.value)
            assert 100 <= st.summary.samples < 110
            assert st.summary.stopped_by == "reset"
    finally:
        for t in targets:
            t.stop()


def test_device_gone_mid_stream_is_one_clear_error(native_fw, digits_stream):
    X, y = digits_stream
    t = emulator.start_native(native_fw.program, timeout=60)
    with Device.open(t.url) as dev:
        st = Stream(dev, MANIFEST, mode="train", window=4, timeout=0.3, retries=2)

        def vanish(rec):
            if rec.index == 50:
                t.stop()

        with pytest.raises(DeviceGone) as e:
            st.run(((i, X[i], int(y[i])) for i in range(len(y))), on_record=vanish)
    msg = str(e.value)
    assert "\n" not in msg and "samples" in msg
    assert 50 <= st.summary.samples < 60


@pytest.mark.slow
@pytest.mark.qemu
def test_qemu_stream_equals_reference_learner(firmware, digits_stream, reference):
    """The Cortex-M4 build (SIMD kernels) in QEMU: same predictions as the reference."""
    X, y = digits_stream
    fw = firmware("nucleo_l476rg", model=MODEL, test_build=True)
    with emulator.start_qemu("nucleo_l476rg", fw.elf, timeout=240) as t:
        with Device.open(t.url, timeout=5) as dev:
            s, recs = stream(dev, X, y, MANIFEST, mode="train", window=4, timeout=3.0)
            st = dev.stats()
    _check_against_reference(s, recs, reference, len(y))
    assert st.samples_seen == len(y)


@pytest.mark.slow
@pytest.mark.qemu
def test_qemu_exit_mid_stream_is_reported(firmware, digits_stream):
    """QEMU stops (EXIT message, test build) while samples are in flight: one clear error
    that says how many samples were done."""
    from tinyol.link.protocol import Frame
    X, y = digits_stream
    fw = firmware("nucleo_l476rg", model=MODEL, test_build=True)
    with emulator.start_qemu("nucleo_l476rg", fw.elf, timeout=120) as t:
        with Device.open(t.url, timeout=5) as dev:
            st = Stream(dev, MANIFEST, mode="train", window=4, timeout=1.0, retries=2)

            def exit_at_30(rec):
                if rec.index == 30:
                    dev.link.send_frame(Frame(0x0E, 1, bytes([7])))  # EXIT with code 7

            with pytest.raises((DeviceGone, DeviceReset)) as e:
                st.run(((i, X[i], int(y[i])) for i in range(len(y))), on_record=exit_at_30)
        assert t.wait(20) == 7
    assert "\n" not in str(e.value) and "samples" in str(e.value)
    assert 30 < st.summary.samples <= 35


def test_native_anomaly_stream_equals_reference(firmware):
    """The autoencoder head (models/anomaly): the device's scores and flags equal the
    reference learner's on the same stream (sensor windows with faults)."""
    from tinyol.model.folder import quantize
    from tinyol.targets.twin import latents, learner_settings, load_model, make_learner
    X, y, _ = load_source("sensor:anomalies")
    X, y = X[:300], y[:300]
    model = load_model(ROOT / "models/anomaly")
    manifest = json.loads((ROOT / "models/anomaly/manifest.json").read_text())
    fw = firmware("native", model="models/anomaly")
    with emulator.start_native(fw.program, timeout=60) as t, Device.open(t.url) as dev:
        s, recs = stream(dev, X, y, manifest, mode="train", window=4)
    lrn = make_learner(model, *learner_settings(model))
    Xq = np.stack([quantize(x.ravel(), *model.input_q) for x in X])
    ref = [lrn.anomaly(q, xq) for q, xq in zip(latents(model, Xq), Xq)]
    assert [r.prediction for r in recs] == [int(f) for _, f in ref]
    np.testing.assert_allclose([r.confidence for r in recs], [sc for sc, _ in ref], rtol=1e-3)
    assert s.flagged == sum(f for _, f in ref) > 0


@pytest.mark.slow
def test_demo_on_the_native_target(tmp_path):
    """`tinyol demo --emulator native`: learns the new classes, replay keeps the old ones."""
    from tinyol.cli import main
    assert main(["demo", "--emulator", "native", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "summary.json").read_text())
    before, after, nore = (res[k] for k in ("before", "after", "no_replay"))
    assert before["accuracy"] == pytest.approx(0.5, abs=0.02)  # knows 0-4 only
    assert after["accuracy"] > 0.75 and after["accuracy"] > nore["accuracy"] + 0.3
    assert min(after["per_class"][str(c)] for c in range(5)) > 0.5  # replay protects 0-4
    assert (tmp_path / "curve.png").stat().st_size > 1000
    assert len((tmp_path / "run.jsonl").read_text().splitlines()) == 400 + 627

"""The int16 stage on the device (`--stage-weights int16`, issue 30): models/digits cut before
`embed`, its trained weights in int16 (2 B each, no gradient buffer), 4-bit replay and the
stage's own learning rate (--stage-lr-scale), on the native target and in QEMU. Oracle: the
numpy twin (tinyol.learn.stage, built from the same manifest) on the same prefill and stream:
every prediction and confidence bit for bit (each depends on every trained weight); SAVE /
RESET / LOAD mid-stream brings the int16 weights back (the stream goes on equal to the twin
that never stopped); the stage image (pull / push) is refused in one line."""
from __future__ import annotations

import json

import numpy as np
import pytest
from tinyol.data.datasets import load_source
from tinyol.link.device import Device
from tinyol.model.folder import quantize
from tinyol.targets import emulator
from tinyol.targets.twin import latents, learner_settings, load_model, make_learner

pytestmark = [pytest.mark.slow, pytest.mark.tf]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from tinyol.model.export import export_model

    d = tmp_path_factory.mktemp("stage16") / "stage16"
    export_model("models/digits/digits.keras", str(d), split="embed", calib="digits:0-4@train",
                 max_classes=10, board="nucleo_l476rg", replay_bits=4, replay_capacity=60,
                 stage_weights="int16", stage_lr_scale=0.5, name="stage16")
    return d


def _run(dev, model, n, persist):
    X0, y0 = load_source("digits:0-4@train")[:2]
    X, y = load_source("digits:5-9@train")[:2]
    perm = np.random.default_rng(4).permutation(len(y))[:n]
    pre = np.stack([quantize(x.ravel(), *model.input_q) for x in X0[:80]])
    Xq = np.stack([quantize(x.ravel(), *model.input_q) for x in X[perm]])
    y = y[perm]
    settings, replay = learner_settings(model)
    twin = make_learner(model, settings, replay)
    assert twin.q16 and twin.cfg.stage_lr_scale == np.float32(0.5)
    for xq, t in zip(pre, y0[:80]):
        dev.replay_add(xq, int(t))
        twin.replay_add(latents(model, xq[None])[0], int(t))
    Q = latents(model, Xq)
    right = 0
    for i in range(n):
        if persist and i == n // 2:
            dev.save()
            dev.reset()
            dev.load()
        r = dev.sample(Xq[i], int(y[i]))
        p, c = twin.predict(Q[i])
        assert (r.prediction, np.float32(r.value)) == (p, np.float32(c)), f"sample {i}"
        right += p == y[i]
        twin.learn(Q[i], int(y[i]))
    st = dev.stats()
    assert st.updates == twin.updates == n and st.samples_seen == twin.samples_seen
    assert not np.array_equal(twin.q, make_learner(model, settings, replay).q)  # it learned
    return twin


def test_export_says_int16(model_dir):
    man = json.loads((model_dir / "manifest.json").read_text())
    mem = man["stage"]["memory"]
    assert mem["grads"] == 0 and mem["momentum"] == 0
    assert mem["weights"] == 2 * man["stage"]["trained"] + (2 * man["stage"]["trained"]) % 4
    assert "int16" in " ".join(man["stage"]["layers"])


def test_native_int16_stage_equals_twin(firmware, model_dir):
    model = load_model(model_dir)
    fw = firmware("native", model=str(model_dir))
    with emulator.start_native(fw.program, timeout=120) as t, Device.open(t.url) as dev:
        _run(dev, model, 40, persist=True)
        with pytest.raises(Exception) as e:  # no stage image to pull
            dev.get_stage()
        assert "UNSUPPORTED" in str(e.value).upper() or "not supported" in str(e.value).lower()


@pytest.mark.qemu
def test_qemu_int16_stage_equals_twin(firmware, model_dir):
    """The Cortex-M4 build in QEMU: the same bits (no SAVE: QEMU's flash is not writable)."""
    model = load_model(model_dir)
    fw = firmware("nucleo_l476rg", model=str(model_dir), test_build=True)
    with emulator.start_qemu("nucleo_l476rg", fw.elf, timeout=400) as t:
        with Device.open(t.url, timeout=10) as dev:
            _run(dev, model, 16, persist=False)


@pytest.fixture(scope="module")
def pq_dir(tmp_path_factory):
    """Issue 30's combination: the int16 stage with product-quantized replay (pq:64, the
    codebook in flash), class-balanced."""
    from tinyol.model.export import export_model

    d = tmp_path_factory.mktemp("stage16pq") / "stage16pq"
    export_model("models/digits/digits.keras", str(d), split="embed", calib="digits:0-4@train",
                 max_classes=10, board="nucleo_l476rg", replay_codec="pq:64", replay_capacity=60,
                 stage_weights="int16", stage_lr_scale=0.5, replay_policy="balanced", name="stage16pq")
    return d


@pytest.mark.qemu
def test_int16_stage_pq_replay_equals_twin_native_and_qemu(firmware, pq_dir):
    """The int16 stage with PQ replay: native (with SAVE / RESET / LOAD mid-stream) and the
    Cortex-M4 build in QEMU equal the twin bit for bit."""
    model = load_model(pq_dir)
    assert model.manifest["learner"]["replay_codec"]["m"] == 64
    fw = firmware("native", model=str(pq_dir))
    with emulator.start_native(fw.program, timeout=120) as t, Device.open(t.url) as dev:
        twin = _run(dev, model, 40, persist=True)
        assert twin.replay is not None and len(twin.replay.packed_row(0)) == 64
    fw = firmware("nucleo_l476rg", model=str(pq_dir), test_build=True)
    with emulator.start_qemu("nucleo_l476rg", fw.elf, timeout=400) as t:
        with Device.open(t.url, timeout=10) as dev:
            _run(dev, model, 16, persist=False)


@pytest.mark.qemu
def test_int16_stage_pq_replay_with_idle_rehearsal_equals_twin(firmware, pq_dir):
    """Issue 30's digits recipe (the int16 stage, PQ replay, class-balanced, idle rehearsal
    steps between samples: docs/study.md, "Digits' wide grid"), on native and on the Cortex-M4
    build in QEMU: every reply equals the twin after the steps the device reports, and each
    waited-out idle period ran the whole budget."""
    from _rehearse_util import check_rehearsal_ran, digits_stream, stream_with_rehearsal, twin_with_budget
    from tinyol._defs import Setting

    budget = 4
    data = digits_stream(str(pq_dir), 7, n=30)

    def stream(dev, n):
        assert dev.set(Setting.REHEARSE, budget) == budget
        twin = twin_with_budget(data[0], budget)
        assert twin.q16
        counts = stream_with_rehearsal(dev, twin, data, n, budget)
        check_rehearsal_ran(twin, counts, dev.stats(), budget)

    fw = firmware("native", model=str(pq_dir))
    with emulator.start_native(fw.program, timeout=120) as t, Device.open(t.url) as dev:
        stream(dev, 30)
    fw = firmware("nucleo_l476rg", model=str(pq_dir), test_build=True)
    with emulator.start_qemu("nucleo_l476rg", fw.elf, timeout=400) as t:
        with Device.open(t.url, timeout=10) as dev:
            stream(dev, 24)

"""4-bit latent replay on the device (issue 30): models/digits exported with `--replay-bits 4`
(the one-layer head) and cut before `embed` (the adaptive stage), on the native target and in
QEMU. The export fits one 16-level grid per latent channel to the calibration latents
(replay_codec.c, const, in flash); the device encodes each latent when it enters the buffer and
decodes it when it is replayed. Oracle: the numpy twin (tinyol.learn.learner / stage, the same
codec from the manifest) on the same prefill and stream: every prediction and confidence and,
at the end, every trained parameter bit for bit; SAVE/LOAD brings the 4-bit buffer back (the
stream goes on equal to the twin that never stopped); INFO reports 4-bit storage.
The same for product-quantized replay (`--replay-codec pq:M`: k-means codebooks in
replay_codec.c, one codeword index a sub-vector)."""
from __future__ import annotations

import numpy as np
import pytest
from tinyol.data.datasets import load_source
from tinyol.link.device import Device
from tinyol.model.folder import quantize
from tinyol.targets import emulator
from tinyol.targets.twin import latents, learner_settings, load_model, make_learner

pytestmark = [pytest.mark.slow, pytest.mark.tf]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from tinyol.model.export import export_model

    d = tmp_path_factory.mktemp("replay4")
    export_model("models/digits/digits.keras", str(d / "head4"), calib="digits:0-4@train",
                 max_classes=10, board="nucleo_l476rg", replay_bits=4, replay_capacity=300,
                 name="head4")
    export_model("models/digits/digits.keras", str(d / "stage4"), split="embed",
                 calib="digits:0-4@train", max_classes=10, board="nucleo_l476rg", replay_bits=4,
                 replay_capacity=60, name="stage4")
    export_model("models/digits/digits.keras", str(d / "headpq"), calib="digits:0-4@train",
                 max_classes=10, board="nucleo_l476rg", replay_codec="pq:8", replay_capacity=300,
                 name="headpq")
    export_model("models/digits/digits.keras", str(d / "stagepq"), split="embed",
                 calib="digits:0-4@train", max_classes=10, board="nucleo_l476rg",
                 replay_codec="pq:16", replay_capacity=60, name="stagepq")
    return {"head": d / "head4", "stage": d / "stage4", "headpq": d / "headpq", "stagepq": d / "stagepq"}


CODEC4 = ("head", "stage")


def _data(model, n):
    X0, y0 = load_source("digits:0-4@train")[:2]
    X, y = load_source("digits:5-9@train")[:2]
    perm = np.random.default_rng(4).permutation(len(y))[:n]
    pre = np.stack([quantize(x.ravel(), *model.input_q) for x in X0[:80]])
    Xq = np.stack([quantize(x.ravel(), *model.input_q) for x in X[perm]])
    return pre, y0[:80], Xq, y[perm]


def _run(dev, model, n, kind, persist=True):
    pre, y0, Xq, y = _data(model, n)
    settings, replay = learner_settings(model)
    twin = make_learner(model, settings, replay)
    for xq, t in zip(pre, y0):
        dev.replay_add(xq, int(t))
        twin.replay_add(latents(model, xq[None])[0], int(t))
    Q = latents(model, Xq)
    half = n // 2
    for i in range(n):
        if persist and i == half:  # SAVE, RESET (the export), LOAD: the 4-bit buffer and the learner come back
            dev.save()
            dev.reset()
            dev.load()
        r = dev.sample(Xq[i], int(y[i]))
        p, c = twin.predict(Q[i])
        assert (r.prediction, np.float32(r.value)) == (p, np.float32(c)), f"sample {i}"
        twin.learn(Q[i], int(y[i]))
    st = dev.stats()
    assert st.updates == twin.updates and st.samples_seen == twin.samples_seen
    if kind.startswith("head"):
        w, b, active = dev.get_head()
        np.testing.assert_array_equal(w.view(np.uint32), twin.head.w.view(np.uint32))
        np.testing.assert_array_equal(b.view(np.uint32), twin.head.b.view(np.uint32))
        assert (active == twin.head.active).all()
    else:  # the stage image: every parameter, then the active flags (pull's payload)
        assert dev.get_stage() == twin.image()
    assert twin.replay.bits == model.manifest["learner"]["replay_bits"] == (4 if kind in CODEC4 else
                                                                           twin.replay.bits)
    assert twin.replay.fill == min(model.manifest["learner"]["replay_capacity"], 80 + n)
    return twin


def test_export_writes_the_codec(models):
    import json

    for kind, d in ((k, models[k]) for k in CODEC4):
        man = json.loads((d / "manifest.json").read_text())
        c = man["learner"]["replay_codec"]
        dim = man["latent"]["dim"]
        assert man["learner"]["replay_bits"] == 4 and dim % c["channels"] == 0
        assert all(1 <= s <= 17 for s in c["step"]) and all(-128 <= v <= 127 for v in c["lo"])
        text = (d / "replay_codec.c").read_text()
        assert f"tol_replay_codec_step, {c['channels']}u" in text
        assert "TOL_REPLAY_CODEC" in (d / "config.h").read_text()
        # the memory model: half a byte per value
        assert man["memory"]["learner_parts"]["replay buffer"] >= \
            man["learner"]["replay_capacity"] * (dim // 2)


def test_export_writes_the_pq_codebook(models):
    """pq:M: M sub-vectors of dim/M values, 256 int8 codewords each, in the manifest and in
    replay_codec.c (the same numbers); the buffer counts M bytes a slot."""
    import base64
    import json

    for kind, m in (("headpq", 8), ("stagepq", 16)):
        d = models[kind]
        man = json.loads((d / "manifest.json").read_text())
        c, dim = man["learner"]["replay_codec"], man["latent"]["dim"]
        assert (c["kind"], c["m"], c["sub"], c["codewords"]) == ("pq", m, dim // m, 256)
        assert man["learner"]["replay_bits"] == 128 + dim // m
        book = np.frombuffer(base64.b64decode(c["codebook"]), np.int8)
        assert book.size == 256 * dim
        text = (d / "replay_codec.c").read_text()
        body = text.split("tol_replay_codebook[")[1].split("{")[1].split("}")[0]
        assert np.array_equal(np.array([int(v) for v in body.replace(",", " ").split()], np.int8), book)
        assert f"TOL_REPLAY_PQ({dim // m})" in text and "TOL_REPLAY_CODEC" in (d / "config.h").read_text()
        assert len({bytes(book.reshape(m, 256, -1)[0, k]) for k in range(256)}) > 100  # k-means spread
        assert man["memory"]["learner_parts"]["replay buffer"] >= man["learner"]["replay_capacity"] * m


@pytest.mark.parametrize("kind", ["head", "stage", "headpq", "stagepq"])
def test_native_4bit_replay_equals_twin(firmware, models, kind):
    model = load_model(models[kind])
    fw = firmware("native", model=str(models[kind]))
    with emulator.start_native(fw.program, timeout=120) as t, Device.open(t.url) as dev:
        assert dev.info.replay_bits == model.manifest["learner"]["replay_bits"]
        _run(dev, model, 40, kind)


@pytest.mark.qemu
@pytest.mark.parametrize("kind", ["head", "stage", "headpq"])
def test_qemu_4bit_replay_equals_twin(firmware, models, kind):
    """The Cortex-M4 build in QEMU: the same bits (no SAVE: QEMU's flash is not writable)."""
    model = load_model(models[kind])
    fw = firmware("nucleo_l476rg", model=str(models[kind]), test_build=True)
    with emulator.start_qemu("nucleo_l476rg", fw.elf, timeout=400) as t:
        with Device.open(t.url, timeout=10) as dev:
            _run(dev, model, 16, kind, persist=False)  # QEMU's flash is not writable


def test_fleet_twin_carries_the_codec(models):
    """The fleet's virtual boards build their learner from the manifest: 4-bit storage with
    the export's grids (no device needed)."""
    import json

    from tinyol.fleet.members import make_twin

    for kind, d in ((k, models[k]) for k in CODEC4):
        c = json.loads((d / "manifest.json").read_text())["learner"]["replay_codec"]
        tw = make_twin(load_model(d), f"twin-{kind}", learn_mode="replay")
        rb = tw.lrn.replay
        assert rb.bits == 4
        assert (rb.codec_lo[:c["channels"]] == np.asarray(c["lo"], np.int8)).all()
        assert (rb.codec_step[:c["channels"]] == np.asarray(c["step"], np.uint8)).all()
    import base64

    for kind in ("headpq", "stagepq"):
        c = json.loads((models[kind] / "manifest.json").read_text())["learner"]["replay_codec"]
        rb = make_twin(load_model(models[kind]), f"twin-{kind}", learn_mode="replay").lrn.replay
        assert rb.bits == 128 + c["sub"]
        assert rb.codebook.tobytes() == base64.b64decode(c["codebook"])

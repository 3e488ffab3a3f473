"""REPLAY_ADD: latents stored for replay without training, in the order the
numpy reference's `replay_add` stores them (same policy, same PRNG)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT
from tinyol._defs import Status
from tinyol.data.datasets import load_source
from tinyol.link.device import Device
from tinyol.link.protocol import DeviceError
from tinyol.model.folder import quantize
from tinyol.targets import emulator
from tinyol.targets.twin import latents, learner_settings, load_model, make_learner

MODEL = ROOT / "models" / "digits"


@pytest.fixture(scope="module")
def data():
    Xo, yo, _ = load_source("digits:0-4@train")
    Xn, yn, _ = load_source("digits:5-9@train")
    rng = np.random.default_rng(3)
    po, pn = rng.permutation(len(yo))[:260], rng.permutation(len(yn))[:120]
    return (Xo[po], yo[po]), (Xn[pn], yn[pn])


def test_replay_add_then_stream_equals_reference(firmware, data):
    (Xo, yo), (Xn, yn) = data
    model = load_model(MODEL)
    settings, replay = learner_settings(model)
    ref = make_learner(model, settings, replay)
    q = lambda X: np.stack([quantize(x.ravel(), *model.input_q) for x in X])  # noqa: E731
    Qo, Qn = latents(model, q(Xo)), latents(model, q(Xn))
    for lat, t in zip(Qo, yo):
        ref.replay_add(lat, int(t))
    want = []
    for lat, t in zip(Qn, yn):
        want.append(ref.predict(lat)[0])
        ref.learn(lat, int(t))

    fw = firmware("native", model="models/digits")
    with emulator.start_native(fw.program, timeout=120) as t, Device.open(t.url) as dev:
        for x, lbl in zip(q(Xo), yo):
            fill, cap = dev.replay_add(x, int(lbl))
        st = dev.stats()
        assert (fill, cap) == (min(len(yo), cap), st.replay_capacity)
        assert st.samples_seen == 0 and st.updates == 0  # stored, not learned
        assert fill == ref.replay.fill
        got = [dev.sample(x, int(lbl)).prediction for x, lbl in zip(q(Xn), yn)]
        with pytest.raises(DeviceError) as e:
            dev.replay_add(q(Xn[:1])[0], 10)  # the head has 10 outputs: labels 0..9
        assert e.value.status == Status.ERR_LABEL
    assert got == want

"""Idle-time rehearsal on a device against its numpy twin, shared by the head's and the stage's
device tests (test_head_rehearse_device.py, test_stage_rehearse_device.py). The device runs
replay-only steps between requests and says in every SAMPLE/PREDICT reply how many ran since
the last learned sample; the twin is given those counts (idle(k)) and must then equal the
device sample for sample. Idle periods are waited out by polling STATS (no sleeping), so the
tests do not depend on how fast the host sends."""
from __future__ import annotations

import numpy as np
from conftest import ROOT
from tinyol.data.datasets import load_source
from tinyol.model.folder import quantize
from tinyol.targets.twin import latents, learner_settings, load_model, make_learner


def digits_stream(model_dir: str, seed: int, n: int = 80):
    """(model, int8 inputs, their latents, labels): n samples of digits 5-9, shuffled by seed."""
    X, y = load_source("digits:5-9@train")[:2]
    perm = np.random.default_rng(seed).permutation(len(y))[:n]
    model = load_model(ROOT / model_dir)
    Xq = np.stack([quantize(x.ravel(), *model.input_q) for x in X[perm]])
    return model, Xq, latents(model, Xq), y[perm]


def twin_with_budget(model, budget: int):
    """The model's learner twin with its exported settings and `budget` rehearsal steps."""
    settings, replay = learner_settings(model)
    settings.rehearse = budget
    return make_learner(model, settings, replay)


def wait_idle(dev, twin, polls: int = 20000) -> None:
    """The twin runs its whole idle budget; poll STATS until the device has run as many steps
    (its update + rejected counters): a bounded loop of requests, no sleeping."""
    twin.idle()
    want = twin.updates + twin.rejected
    for _ in range(polls):
        st = dev.stats()
        if st.updates + st.rejected >= want:
            assert st.updates + st.rejected == want
            return
    raise AssertionError(f"the device did not finish its idle budget ({want} steps)")


def stream_with_rehearsal(dev, twin, data, n: int, budget: int, wait_every: int = 3,
                          at: dict | None = None) -> list[int]:
    """Stream n samples prequentially; before every wait_every-th sample (and before each
    sample in `at`, whose action then runs) the idle budget is waited out. Each reply's
    prediction and confidence must equal the twin's after it ran the steps the device reports.
    Returns the reported step counts."""
    _, Xq, Q, y = data
    at = at or {}
    counts = []
    for i in range(n):
        if i in at or (i % wait_every == 0 and i):
            wait_idle(dev, twin)
            if i in at:
                at[i]()
        r = dev.sample(Xq[i], int(y[i]))
        extra = r.rehearsed - twin.rehearsed
        assert extra >= 0 and twin.idle(extra) == extra
        counts.append(r.rehearsed)
        p, c = twin.predict(Q[i])
        assert (r.prediction, np.float32(r.value)) == (p, np.float32(c)), f"sample {i}"
        twin.learn(Q[i], int(y[i]))
        assert r.samples_seen == twin.samples_seen
    wait_idle(dev, twin)
    r = dev.predict(Xq[0])  # reports the steps after the last sample
    assert r.rehearsed == twin.rehearsed == budget
    return counts


def check_rehearsal_ran(twin, counts: list[int], st, budget: int) -> None:
    """The device's counters equal the twin's, and rehearsal really ran: every waited-out
    period shows the whole budget, and the learner made more steps than samples."""
    assert st.updates == twin.updates and st.samples_seen == twin.samples_seen
    assert all(c == budget for c in counts[3::3]) and twin.updates > twin.samples_seen + 20

"""Idle-time rehearsal and the replay-policy setting for the one-layer head, on the device
(issue 19): models/digits (split at its last layer) on the native target and in QEMU. Between
requests the firmware's main loop runs replay-only SGD steps of the head (tol_learner_rehearse,
its samples in the batch slots after the queue's); every SAMPLE/PREDICT reply says how many
ran since the last learned sample. SET replay_policy changes which latents stay from then on.
Oracle: the numpy twin (tinyol.learn.learner.Learner) given the device's counts (idle(k)) and
the same policy change equals the device on the whole stream: predictions, confidences and,
at the end, every head weight bit for bit. Idle periods are waited out by polling STATS (no
sleeping), so the test does not depend on how fast the host sends."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from _rehearse_util import check_rehearsal_ran, digits_stream, stream_with_rehearsal, twin_with_budget
from conftest import ROOT
from tinyol._defs import Setting
from tinyol.cli import main as cli_main
from tinyol.data.datasets import load_source
from tinyol.learn.learner import POLICY_BALANCED, POLICY_RESERVOIR
from tinyol.link.device import Device
from tinyol.link.protocol import DeviceError
from tinyol.model.folder import quantize
from tinyol.targets import emulator
from tinyol.targets.twin import latents, learner_settings, load_model, make_learner

MODEL = "models/digits"
BUDGET = 2
SWITCH = 20  # the sample before which the replay policy becomes class-balanced


@pytest.fixture(scope="module")
def digits():
    return digits_stream(MODEL, 12)


def _stream(dev, digits, n):
    model = digits[0]
    twin = twin_with_budget(model, BUDGET)
    # a buffer to rehearse from from the start: the pre-training classes' latents
    X0, y0 = load_source("digits:0-4@train")[:2]
    for x, t in zip(X0[:40], y0[:40]):
        xq = quantize(x.ravel(), *model.input_q)
        dev.replay_add(xq, int(t))
        twin.replay_add(latents(model, xq[None])[0], int(t))
    assert dev.get(Setting.REHEARSE) == 0  # models/digits exports rehearse 0
    assert dev.set(Setting.REHEARSE, BUDGET) == BUDGET
    twin.set_settings(dataclasses.replace(twin.settings, rehearse=BUDGET))

    def switch():
        assert dev.get(Setting.REPLAY_POLICY) == POLICY_RESERVOIR
        assert dev.set(Setting.REPLAY_POLICY, POLICY_BALANCED) == POLICY_BALANCED
        twin.set_settings(dataclasses.replace(twin.settings, replay_policy=POLICY_BALANCED))

    counts = stream_with_rehearsal(dev, twin, digits, n, BUDGET, at={SWITCH: switch})
    return twin, counts, dev.get_head(), dev.stats()


def _check_end(twin, counts, head, st):
    w, b, active = head
    np.testing.assert_array_equal(w.view(np.uint32), twin.head.w.view(np.uint32))
    np.testing.assert_array_equal(b.view(np.uint32), twin.head.b.view(np.uint32))
    np.testing.assert_array_equal(active, twin.head.active)
    check_rehearsal_ran(twin, counts, st, BUDGET)


@pytest.mark.slow
def test_native_head_rehearsal_and_policy_equal_twin(firmware, digits, capsys):
    fw = firmware("native", model=MODEL)
    with emulator.start_native(fw.program, timeout=120) as t:
        with Device.open(t.url) as dev:
            twin, counts, head, st = _stream(dev, digits, 60)
            # saved with the state: SAVE, reset (the export's settings), LOAD brings them back
            dev.save()
            dev.reset()
            assert (dev.get(Setting.REHEARSE), dev.get(Setting.REPLAY_POLICY)) == (0, POLICY_RESERVOIR)
            dev.load()
            assert (dev.get(Setting.REHEARSE), dev.get(Setting.REPLAY_POLICY)) == (BUDGET, POLICY_BALANCED)
            with pytest.raises(DeviceError):
                dev.set(Setting.REPLAY_POLICY, 3)
        # the CLI: the policy by name, shown with the other settings
        assert cli_main(["set", "-p", t.url, "--replay-policy", "ar1", "--json"]) == 0
        now = json.loads(capsys.readouterr().out)
        assert now["replay_policy"] == "ar1" and now["rehearse"] == BUDGET
    _check_end(twin, counts, head, st)


@pytest.mark.slow
@pytest.mark.qemu
def test_qemu_head_rehearsal_and_policy_equal_twin(firmware, digits):
    """The Cortex-M4 build in QEMU: the idle loop between frames, the same bits."""
    fw = firmware("nucleo_l476rg", model=MODEL, test_build=True)
    with emulator.start_qemu("nucleo_l476rg", fw.elf, timeout=400) as t:
        with Device.open(t.url, timeout=10) as dev:
            twin, counts, head, st = _stream(dev, digits, 24)
    _check_end(twin, counts, head, st)


def test_native_export_sets_policy_and_rehearse(firmware, tmp_path):
    """The export's replay_policy and rehearse (manifest learner.* -> config.h TOL_REPLAY_POLICY,
    TOL_REHEARSE) are what the head's firmware boots with, what `tinyol reset` brings back, and
    what the twin's settings read from the manifest."""
    import shutil

    from tinyol.model.export import refresh_config
    d = tmp_path / "digits"
    shutil.copytree(ROOT / MODEL, d)
    refresh_config(str(d), check=False, replay_policy="balanced", rehearse=2)
    text = (d / "config.h").read_text()
    assert "#define TOL_REPLAY_POLICY            1" in text and "#define TOL_REHEARSE                 2u" in text
    settings, replay = learner_settings(load_model(d))
    assert (settings.rehearse, replay["policy"]) == (2, POLICY_BALANCED)
    assert make_learner(load_model(d), settings, replay).settings.replay_policy == POLICY_BALANCED
    fw = firmware("native", model=str(d))
    with emulator.start_native(fw.program, timeout=120) as t, Device.open(t.url) as dev:
        assert (dev.get(Setting.REPLAY_POLICY), dev.get(Setting.REHEARSE)) == (POLICY_BALANCED, 2)
        dev.set(Setting.REPLAY_POLICY, POLICY_RESERVOIR)
        dev.reset()
        assert dev.get(Setting.REPLAY_POLICY) == POLICY_BALANCED


def test_export_refuses_an_unknown_policy():
    from tinyol.errors import TinyolError
    from tinyol.model.export import ExportSettings
    with pytest.raises(TinyolError, match="--replay-policy must be one of reservoir, balanced, ar1"):
        ExportSettings(replay_policy="fifo").check()
    ExportSettings(replay_policy="ar1", rehearse=255).check()

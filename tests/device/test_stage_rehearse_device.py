"""Idle-time rehearsal on the device (issue 19, item 3): models/digits_adaptive (the stage cut
before `embed`) with `SET rehearse`, on the native target and in QEMU. Between requests the
firmware's main loop runs replay-only SGD steps at the cut; every SAMPLE/PREDICT reply says
how many ran since the last learned sample. Oracle: the numpy twin (tinyol.learn.stage) given
those counts (Stage.idle(k)) equals the device on the whole stream: predictions, confidences
and, at the end, every trained parameter bit for bit. Some idle periods are waited out (the host
polls STATS until the device's update counter shows the whole budget spent), so the test
does not depend on how fast the host sends."""
from __future__ import annotations

import json

import numpy as np
import pytest
from _rehearse_util import check_rehearsal_ran, digits_stream, stream_with_rehearsal, twin_with_budget
from conftest import ROOT
from tinyol._defs import Setting
from tinyol.cli import main as cli_main
from tinyol.link.device import Device
from tinyol.link.protocol import DeviceError
from tinyol.targets import emulator
from tinyol.targets.twin import learner_settings, load_model

pytestmark = pytest.mark.slow

MODEL = "models/digits_adaptive"
MANIFEST = json.loads((ROOT / MODEL / "manifest.json").read_text())
BUDGET = 2


@pytest.fixture(scope="module")
def digits():
    return digits_stream(MODEL, 11)


def _stream_with_rehearsal(dev, digits, n):
    twin = twin_with_budget(digits[0], BUDGET)
    assert dev.set(Setting.REHEARSE, BUDGET) == BUDGET and dev.get(Setting.REHEARSE) == BUDGET
    counts = stream_with_rehearsal(dev, twin, digits, n, BUDGET)
    return twin, counts, dev.get_stage(), dev.stats()


def _check_end(twin, counts, image, st):
    n = twin.n_params
    assert image[:4 * n] == twin.params.astype("<f4").tobytes()
    assert image[4 * n:] == twin.active.astype(np.uint8).tobytes()
    check_rehearsal_ran(twin, counts, st, BUDGET)


def test_native_rehearsal_equals_twin(firmware, digits):
    fw = firmware("native", model=MODEL)
    with emulator.start_native(fw.program, timeout=120) as t, Device.open(t.url) as dev:
        twin, counts, image, st = _stream_with_rehearsal(dev, digits, 60)
        # persisted like the other settings: SAVE then LOAD after a reset keeps rehearse
        dev.save()
        dev.reset()
        assert dev.get(Setting.REHEARSE) == 0  # the export's (digits_adaptive: off)
        dev.load()
        assert dev.get(Setting.REHEARSE) == BUDGET
        with pytest.raises(DeviceError):
            dev.set(Setting.REHEARSE, 256)
    _check_end(twin, counts, image, st)


def test_native_export_sets_the_default(firmware, tmp_path, capsys):
    """The export's rehearse (manifest learner.rehearse -> config.h TOL_REHEARSE) is what the
    firmware boots with, and what the twin's settings read from the manifest."""
    import shutil

    from tinyol.model.export import refresh_config
    d = tmp_path / "da"
    shutil.copytree(ROOT / MODEL, d)
    refresh_config(str(d), check=False, rehearse=3)
    assert "#define TOL_REHEARSE                 3u" in (d / "config.h").read_text()
    assert learner_settings(load_model(d))[0].rehearse == 3
    fw = firmware("native", model=str(d))
    with emulator.start_native(fw.program, timeout=120) as t:
        assert cli_main(["set", "-p", t.url, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["rehearse"] == 3
        with Device.open(t.url) as dev:
            dev.set(Setting.REHEARSE, 0)
            dev.reset()  # back to the export's
            assert dev.get(Setting.REHEARSE) == 3


@pytest.mark.qemu
def test_qemu_rehearsal_equals_twin(firmware, digits):
    """The Cortex-M4 build in QEMU: the idle loop between frames, the same bits."""
    fw = firmware("nucleo_l476rg", model=MODEL, test_build=True)
    with emulator.start_qemu("nucleo_l476rg", fw.elf, timeout=400) as t:
        with Device.open(t.url, timeout=10) as dev:
            twin, counts, image, st = _stream_with_rehearsal(dev, digits, 24)
    _check_end(twin, counts, image, st)

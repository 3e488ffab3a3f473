"""What the board knows, and what a save keeps (issue 33).

The native target imitating the NUCLEO-L432KC (`--board nucleo_l432kc`) has the L432KC's store:
32 KB, two slots of 16 KB (tol_store_init on that geometry). A digits head with a 600-latent replay
buffer outgrows a slot part way: tinyol.memory.store_layout says at which fill, the firmware's own
SAVE is the oracle (parts, the STATS record block), on the L432KC's geometry and on the L476RG's.
`tinyol info` after a save and after a restart shows the store as it is (not the boot state) and
the learner's classes and replay fill per class, checked against the stream that was sent.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import ROOT
from tinyol import memory
from tinyol.boards import BOARDS
from tinyol.cli import main
from tinyol.link.device import Device
from tinyol.targets import emulator

pytestmark = pytest.mark.slow

CAPACITY = 600


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from tinyol.model.export import refresh_config

    d = tmp_path_factory.mktemp("knows") / "digits600"
    shutil.copytree(ROOT / "models" / "digits", d)
    man = refresh_config(str(d), board="nucleo_l432kc", replay_capacity=CAPACITY)
    return d, memory.Model.from_manifest(man)


@pytest.fixture(scope="module")
def build(firmware, model):
    return firmware("native", model=str(model[0]))


def _feed(dev, n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n)
    for x, t in zip(rng.integers(-128, 128, (n, 64), dtype=np.int8), y):
        dev.sample(x, int(t))
    return y


@pytest.mark.parametrize("board", ["nucleo_l432kc", "nucleo_l476rg"])
def test_save_keeps_the_buffer_while_a_slot_holds_it(build, model, board, tmp_path):
    """The host's store model (slot size, the fill up to which a save keeps the buffer) is the
    firmware's on both boards' geometry: at fill = replay_saved the record has the buffer, one
    latent more and SAVE leaves it out and says so (STATS record block)."""
    _, m = model
    b = BOARDS[board]
    lay = memory.store_layout(m, b.flash_bytes, b.page_bytes)
    with emulator.start(board, build, emulator="native", state_dir=tmp_path, timeout=120) as t, \
            Device.open(t.url) as dev:
        keep = min(lay.replay_saved, CAPACITY)
        _feed(dev, keep, 1)
        r = dev.save()
        st = dev.stats()
        assert st.replay_fill == keep and r.parts & 1, (keep, r)
        assert r.bytes == memory.STORE_HEADER_BYTES + memory.state_bytes(m, replay_fill=keep)
        assert (st.record.slot_bytes, st.persist.slots) == (lay.slot_bytes, lay.slots)
        assert st.record.origin == "saved" and st.record.has_replay and not st.record.replay_left_out
        if lay.whole:  # the L476RG's 128 KB store: 12 slots hold the full buffer
            _feed(dev, CAPACITY - keep + 5, 2)
            assert dev.save().parts & 1 and dev.stats().replay_fill == CAPACITY
            return
        _feed(dev, 1, 2)
        r = dev.save()
        st = dev.stats()
        assert not r.parts & 1 and r.bytes == lay.head_record
        assert st.record.replay_left_out and not st.record.has_replay
        assert st.record.save_bytes == memory.STORE_HEADER_BYTES + memory.state_bytes(m, replay_fill=keep + 1)
    assert board == "nucleo_l432kc" and keep < CAPACITY  # the case: the L432KC drops it


class _Out:
    def __init__(self, code, out, err):
        self.exit_code, self.output = code, out + err


def test_info_shows_the_store_and_the_learner_as_they_are(build, model, tmp_path, capsys):
    def run(_main, argv):
        code = _main(argv)
        o = capsys.readouterr()
        return _Out(code, o.out, o.err)

    d, m = model
    with emulator.start("nucleo_l432kc", build, emulator="native", state_dir=tmp_path, timeout=120) as t:
        with Device.open(t.url) as dev:
            y = _feed(dev, 100, 3)
        r = run(main, ["info", "--port", t.url, "--json"])
        v = json.loads(r.output)
        assert v["stored"]["now"] == "empty" and v["stored"]["at_boot"] == "empty"
        counts = np.bincount(y, minlength=10)
        assert v["learner"]["samples_per_class"] == {str(c): int(n) for c, n in enumerate(counts) if n}
        assert v["learner"]["replay"]["per_class"] == v["learner"]["samples_per_class"]  # 100 < capacity
        assert v["learner"]["replay"]["fill"] == 100 and v["learner"]["replay"]["bits"] == 8
        assert v["learner"]["settings"]["replay_policy"] == "reservoir"
        save = run(main, ["save", "--port", t.url, "--json"])
        s = json.loads(save.output)
        assert s["includes_replay"] and s["replay_left_out"] is False
        v = json.loads(run(main, ["info", "--port", t.url, "--json"]).output)
        st = v["stored"]
        assert (st["now"], st["record"], st["includes_replay"], st["updates_since"]) == ("record", "saved", True, 0)
        assert st["bytes"] == s["bytes"] and st["slot"] == s["slot"] and st["at_boot"] == "empty"
        text = run(main, ["info", "--port", t.url]).output
        assert "stored state: record 1 in slot 0" in text and "head + replay buffer" in text
        assert "at boot: empty" in text
        with Device.open(t.url) as dev:
            _feed(dev, 500, 4)  # 600 > what a 16 KB slot holds
        save = run(main, ["save", "--port", t.url])
        assert save.exit_code == 0 and "replay buffer NOT saved" in save.output
        assert "--store-bytes" in save.output and "--replay-capacity" in save.output
    # a restart: the board knows what it loaded, and that the buffer was not in it
    with emulator.start("nucleo_l432kc", build, emulator="native", state_dir=tmp_path, timeout=120) as t:
        v = json.loads(run(main, ["info", "--port", t.url, "--json"]).output)
        st = v["stored"]
        assert (st["at_boot"], st["record"], st["includes_replay"]) == ("loaded", "loaded", False)
        assert v["learner"]["replay"]["fill"] == 0 and v["learner"]["samples_seen"] == 600
        assert v["boot_count"] == 2 and (v["store"], v["store_seq"]) == ("loaded", 2)
        assert st["seq"] == 2


def test_info_shows_the_anomaly_threshold_and_its_statistics(firmware, capsys):
    """An autoencoder (models/anomaly) on native: `tinyol info` gives the threshold, the score
    mean and std it is made of, and the flagged count; oracle: the numpy twin on the same stream."""
    from tinyol.cli import main
    from tinyol.data.datasets import load_source
    from tinyol.link.stream import stream
    from tinyol.model.folder import quantize
    from tinyol.targets.twin import latents, learner_settings, load_model, make_learner

    X, y, _ = load_source("sensor:anomalies")
    X, y = X[:200], y[:200]
    model = load_model(ROOT / "models/anomaly")
    manifest = json.loads((ROOT / "models/anomaly/manifest.json").read_text())
    fw = firmware("native", model="models/anomaly")
    with emulator.start_native(fw.program, timeout=60) as t:
        with Device.open(t.url) as dev:
            stream(dev, X, y, manifest, mode="train", window=4)
        assert main(["info", "--port", t.url, "--json"]) == 0
        v = json.loads(capsys.readouterr().out)
        assert main(["info", "--port", t.url]) == 0
        text = capsys.readouterr().out
    lrn = make_learner(model, *learner_settings(model))
    Xq = np.stack([quantize(x.ravel(), *model.input_q) for x in X])
    flagged = sum(f for _, f in (lrn.anomaly(q, xq) for q, xq in zip(latents(model, Xq), Xq)))
    a, ref = v["learner"]["anomaly"], lrn.anomaly_stats
    assert a["flagged"] == flagged > 0
    np.testing.assert_allclose([a["score_mean"], a["score_std"], a["threshold"]],
                               [ref.mean, np.sqrt(ref.var), ref.threshold()], rtol=1e-3)
    assert a["k"] == pytest.approx(float(ref.k))
    assert "classes" not in text and f"{flagged} flagged" in text and "x std" in text
    assert "up to" not in text  # an autoencoder has no classes to grow


def test_store_bytes_knob_moves_the_store_on_the_board_and_on_native(firmware, model, tmp_path):
    """`--store-bytes`: the linker puts the store where the knob says (the L432KC's last 44 KB
    instead of 32 KB), the native target imitating the board gets the same region, and there the
    600-latent buffer now fits a slot whole (memory.store_layout says so first)."""
    import subprocess

    from tinyol.errors import TinyolError
    from tinyol.targets.firmware import BuildConfig, build

    d, m = model
    b = BOARDS["nucleo_l432kc"]
    store = memory.store_layout(m, b.flash_bytes, b.page_bytes).store_bytes_for_whole()
    assert store == 2 * 11 * 2048  # two slots of 11 pages for the 21,974-byte full record
    lay = memory.store_layout(m, b.flash_bytes, b.page_bytes, store)
    assert lay.whole and lay.full_record == 21974
    elf = build(BuildConfig("nucleo_l432kc", str(d), store_bytes=store)).elf
    syms = {f[2]: int(f[0], 16) for f in (l.split() for l in subprocess.check_output(
        ["arm-none-eabi-nm", str(elf)], text=True).splitlines()) if len(f) == 3}
    assert syms["_store_start"] == 0x08000000 + b.flash_bytes - store
    with pytest.raises(TinyolError, match="store region of 1000 bytes"):
        build(BuildConfig("nucleo_l432kc", str(d), store_bytes=1000))
    nat = build(BuildConfig("native", str(d), store_bytes=store))
    with emulator.start("nucleo_l432kc", nat, emulator="native", state_dir=tmp_path, timeout=120) as t, \
            Device.open(t.url) as dev:
        _feed(dev, CAPACITY, 5)
        r = dev.save()
        assert r.parts & 1 and dev.stats().record.slot_bytes == lay.slot_bytes
        assert dev.board().store_start == 0x08000000 + b.flash_bytes - store

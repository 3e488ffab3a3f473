"""Persistence end to end on the native target (digits model): SAVE, restart with
the same --state dir, and the device carries on exactly where it was; a power
cut during SAVE (the simulated flash ends the process at a chosen step)
leaves the previous record. Oracle: an identical device that never restarted."""
from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
from conftest import ROOT
from tinyol.link.device import Device
from tinyol.link.protocol import DeviceError
from tinyol.targets import emulator

pytestmark = pytest.mark.slow

MODEL = "models/digits"


@pytest.fixture(scope="module")
def program(firmware):
    return firmware("native", MODEL).program


def state(path):
    path.mkdir(parents=True, exist_ok=True)
    return path


def samples(n, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(-128, 128, (n, 64), dtype=np.int8), rng.integers(0, 10, n)


def feed(dev, xs, ys):
    return [(r.prediction, r.value, r.loss, r.samples_seen) for r in
            (dev.sample(x, int(y)) for x, y in zip(xs, ys))]


def test_restart_continues_with_the_same_state(program, tmp_path):
    s1, s2 = samples(120, 1), samples(80, 2)
    probe = samples(20, 3)[0]
    # device A: learn, save, restart, learn more
    with emulator.start_native(program, state_dir=state(tmp_path / "a"), timeout=120) as t:
        with Device.open(t.url) as dev:
            assert dev.store_status() == ("empty", 0)
            feed(dev, *s1)
            saved = dev.save()
            assert saved.seq == 1 and saved.parts & 1  # replay buffer included
            before = [dev.predict(x) for x in probe]
            head = dev.get_head()
            stats = dev.stats()
    with emulator.start_native(program, state_dir=state(tmp_path / "a"), timeout=120) as t:
        with Device.open(t.url) as dev:
            assert dev.info.boot_count == 2
            assert dev.store_status() == ("loaded", 1)
            after = [dev.predict(x) for x in probe]
            assert [(r.prediction, r.value) for r in after] == [(r.prediction, r.value) for r in before]
            for a, b in zip(dev.get_head(), head):
                assert np.array_equal(a, b)
            st = dev.stats()
            assert (st.samples_seen, st.updates, st.class_counts, st.replay_fill) == (
                stats.samples_seen, stats.updates, stats.class_counts, stats.replay_fill)
            assert st.persist.store == "loaded" and st.persist.seq == 1
            cont_a = feed(dev, *s2)
    # device B: the same stream without a restart
    with emulator.start_native(program, state_dir=state(tmp_path / "b"), timeout=120) as t:
        with Device.open(t.url) as dev:
            feed(dev, *s1)
            cont_b = feed(dev, *s2)
    assert cont_a == cont_b


def test_save_load_and_wear_counters(program, tmp_path):
    xs, ys = samples(30, 4)
    with emulator.start_native(program, state_dir=tmp_path, timeout=120) as t:
        with Device.open(t.url) as dev:
            with pytest.raises(DeviceError, match="ERR_NO_RECORD"):
                dev.load()
            feed(dev, xs[:10], ys[:10])
            r1 = dev.save()
            w1 = dev.get_head()[0]
            feed(dev, xs[10:], ys[10:])
            assert not np.array_equal(dev.get_head()[0], w1)
            loaded = dev.load()
            assert loaded.seq == r1.seq and loaded.samples_seen == 10
            assert np.array_equal(dev.get_head()[0], w1)
            results = [dev.save() for _ in range(4)]
            assert [r.slot for r in results] == [1, 2, 3, 4]  # round-robin through the slots
            assert [r.seq for r in results] == [2, 3, 4, 5]
            p = dev.stats().persist
            assert p.saves == 5 and p.seq == 5
            # a record of the digits model: 104-byte learner header + head + class counts + replay
            payload = 104 + 10 * 32 * 4 + 10 * 4 + 10 + 10 * 4 + 10 * (32 + 2) + 10 * 4 + 10 * 2
            assert p.bytes_per_save == 40 + payload
            assert p.pages_per_save == -(-p.bytes_per_save // 2048)
            # slots sized for the largest digits record (40 + 9784 bytes: 5 pages of 2 KB);
            # the native region is 128 KB = 64 pages -> 12 slots
            assert (p.slots, p.pages_per_slot) == (12, 5)
            assert p.erases == 5  # every save erases its page, even a slot's first use (0xFF proves nothing)
            assert p.saves_left == 10_000 * 12 - 5  # each slot's pages: one erase per 12 saves
        # a second lap: fill all 12 slots, then one more save reuses slot 0, one page erased each time
        with Device.open(t.url) as dev:
            for _ in range(7):
                dev.save()
            assert dev.stats().persist.erases == 12
            r = dev.save()
            assert r.slot == 0 and r.pages == 1
            assert dev.stats().persist.erases == 13


@pytest.mark.parametrize("torn", [False, True])
def test_power_cut_during_save_keeps_the_previous_record(program, tmp_path, torn):
    """Cut at chosen steps of a save; torn: the step is left half done (a torn double-word that
    reads with an ECC error, or a half-erased page). Every boot: the previous record, and the
    boot counter keeps counting."""
    xs, ys = samples(40, 5)
    state_dir = state(tmp_path / "s")
    with emulator.start_native(program, state_dir=state_dir, timeout=120) as t:
        with Device.open(t.url) as dev:
            feed(dev, xs[:20], ys[:20])
            dev.save()
            head_saved = dev.get_head()
    # the interrupted save writes 40 + 2894 bytes (40 samples learned): 367 double-words, the
    # commit double-word last; its slot's 2 pages are erased first (steps 0 and 1)
    boots = 1
    for cut in (0, 1, 2, 150, 367, 368):   # 368: the commit double-word
        env = dict(os.environ, TINYOL_FLASH_CUT_AFTER=str(cut), TINYOL_FLASH_CUT_TORN=str(int(torn)))
        proc = subprocess.Popen([str(program), "--port", "0", "--state", str(state_dir)], env=env,
                                stdout=subprocess.PIPE, text=True)
        try:
            url = proc.stdout.readline().split()[-1]
            with Device.open(url, timeout=2, retries=0) as dev:
                assert dev.store_status()[0] == "loaded"
                boots += 1
                assert dev.info.boot_count == boots
                feed(dev, xs[20:], ys[20:])
                with pytest.raises(Exception):
                    dev.save(timeout=2)
            assert proc.wait(10) == 75
        finally:
            proc.kill()
            proc.wait()
        with emulator.start_native(program, state_dir=state_dir, timeout=120) as t:
            with Device.open(t.url) as dev:
                assert dev.store_status() == ("loaded", 1)
                boots += 1
                assert dev.info.boot_count == boots
                for a, b in zip(dev.get_head(), head_saved):
                    assert np.array_equal(a, b)
    with emulator.start_native(program, state_dir=state_dir, timeout=120) as t:
        with Device.open(t.url) as dev:
            feed(dev, xs[20:], ys[20:])
            assert dev.save().seq == 2


def test_set_head_then_get_head_roundtrip(program, tmp_path):
    rng = np.random.default_rng(9)
    w = rng.normal(0, 1, (10, 32)).astype(np.float32)
    b = rng.normal(0, 1, 10).astype(np.float32)
    active = np.array([1, 1, 0, 1, 0, 0, 1, 1, 1, 0], bool)
    with emulator.start_native(program, timeout=120) as t:
        with Device.open(t.url) as dev:
            dev.set_head(w, b, active)
            gw, gb, ga = dev.get_head()
            assert np.array_equal(gw, w) and np.array_equal(gb, b) and np.array_equal(ga, active)
            assert dev.stats().n_active == 6
            with pytest.raises(Exception, match="shape"):
                dev.set_head(w[:, :31], b, active)


def test_native_without_state_dir_still_saves_in_memory(program):
    with emulator.start_native(program, timeout=120) as t:
        with Device.open(t.url) as dev:
            dev.sample(samples(1, 1)[0][0], 3)
            assert dev.save().seq == 1
            assert dev.load().samples_seen == 1


_ = ROOT


def test_autosave_every_n_updates(program, tmp_path):
    xs, ys = samples(12, 6)
    with emulator.start_native(program, state_dir=state(tmp_path / "s"), timeout=120) as t:
        with Device.open(t.url) as dev:
            assert dev.get("autosave") == 0  # off by default
            assert dev.set("autosave", 5) == 5
            feed(dev, xs, ys)
            st = dev.stats()
            assert st.updates == 12
            assert (st.persist.saves, st.persist.seq, st.persist.autosave_updates) == (2, 2, 5)
    with emulator.start_native(program, state_dir=tmp_path / "s", timeout=120) as t:
        with Device.open(t.url) as dev:
            assert dev.store_status() == ("loaded", 2)
            assert dev.stats().samples_seen == 10

"""The replay buffer in a region of its own (issue 33): a learner that fits no region whole goes
to SRAM1 and its replay buffer to SRAM2 (or SRAM3 on the L4R5).

The case from the issue: a keyword model written the way users write it (Keras Sequential,
conv1..conv3, GlobalAveragePooling, Dropout), trained here on synthetic MFCC-like data, exported
with an adaptive stage at conv3 for the NUCLEO-L432KC. Before the split the plan refused it with
SRAM1 over by thousands of bytes and SRAM2 empty. Oracles: the arm-none-eabi linker (the objects'
addresses and sizes in the ELF), and the numpy twin on the same stream in QEMU (predictions and
confidences bit for bit, replay fill and class counts equal).
"""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from tinyol import memory
from tinyol.boards import BOARDS

L432 = BOARDS["nucleo_l432kc"]
REGIONS = memory.board_regions(L432)


def _stage_model(capacity: int) -> memory.Model:
    """The conv3 stage of the keyword model below, by hand (C field order of tol_stage_layer_t):
    conv 3x3 16 -> 12 (13x3), GAP, dense 12 -> 10 rows."""
    layers = ((1, 1, 3, 3, 1, 1, 1, 1, 13, 3, 16, 13, 3, 12, 0),
              (3, 0, 0, 0, 0, 0, 0, 0, 13, 3, 12, 1, 1, 12, 0),
              (0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 12, 1, 1, 10, 0))
    return memory.Model(input_size=490, latent_dim=624, outputs=10, autoencoder=False,
                        arena_bytes=2576, replay_capacity=capacity, replay_bits=8, stage=layers)


def test_split_only_when_the_whole_learner_fits_nowhere():
    """Whole first (as before the split): a small buffer keeps the learner in one region; a
    buffer too big for SRAM1 beside the stage goes to SRAM2 alone; the items add up."""
    small = memory.plan(_stage_model(4), L432.name, REGIONS)
    assert small.fits and not small.split and small.learner_region == "RAM"
    m = _stage_model(20)
    whole = [memory.plan(m, L432.name, REGIONS, learner_region=r) for r in ("RAM", "RAM2")]
    assert not any(p.fits for p in whole)  # what the plan said before: refused
    assert whole[0].over[0] == "SRAM1" and whole[0].regions[1].used == 0  # SRAM2 left empty
    p = memory.plan(m, L432.name, REGIONS)
    assert p.fits and p.split and (p.learner_region, p.replay_region) == ("RAM", "RAM2")
    ram, ram2 = p.regions
    replay = m.parts()["replay buffer"]
    assert ram2.items == {"replay buffer": replay} and replay == 20 * 624 + 4 * 10 + 2 * 20 + 2 * 10  # rows, class_seen, labels, count
    assert ram.items["learner"] == m.learner() - replay
    assert any("its replay buffer in SRAM2" in line for line in p.lines())
    # the largest capacity now counts SRAM2 for the buffer: more slots than whole placement allows
    assert memory.largest_capacity(m, L432.name, REGIONS) > 20


def test_store_layout_matches_the_record_format():
    """memory.store_layout against the sizes docs/persistence.md measured on the digits model
    (8,374 B with 200 latents, 1,514 B head only) and tol_store_init's slot rule."""
    m = memory.Model(input_size=64, latent_dim=32, outputs=10, autoencoder=False, arena_bytes=0,
                     replay_capacity=200)
    s = memory.store_layout(m, 1024 * 1024, 2048)
    assert (s.full_record, s.head_record) == (8374, 1514)
    assert s.whole and s.slot_bytes == 5 * 2048 and s.slots == 12  # the doc's table: 12 slots of 5 pages
    s432 = memory.store_layout(m, 256 * 1024, 2048)
    assert s432.whole and s432.slots == 3
    big = memory.Model(input_size=64, latent_dim=32, outputs=10, autoencoder=False, arena_bytes=0,
                       replay_capacity=600)
    b = memory.store_layout(big, 256 * 1024, 2048)  # 32 KB store: at most 2 slots of 16 KB
    assert not b.whole and b.slot_bytes == 16384 and b.slots == 2
    assert b.replay_saved == (16384 - 40 - memory.state_bytes(big, replay_fill=0)) // 34
    assert memory.state_bytes(big, replay_fill=b.replay_saved) + 40 <= b.slot_bytes
    assert memory.state_bytes(big, replay_fill=b.replay_saved + 1) + 40 > b.slot_bytes
    w = b.store_bytes_for_whole()
    assert memory.store_layout(big, 256 * 1024, 2048, w).whole
    assert not memory.store_layout(big, 256 * 1024, 2048, w - 4096).whole and w == 2 * 11 * 2048


# ---------------------------------------------------------------------------------------------
# the case end to end: export, the linker, QEMU

def _train_keyword_model(path, calib):
    from tinyol.model.export import _keras

    keras = _keras()
    rng = np.random.default_rng(0)
    n, classes = 600, 6
    y = rng.integers(0, classes, n)
    X = rng.normal(0, 1, (n, 49, 10, 1)).astype(np.float32)
    for c in range(classes):  # a class-dependent patch in time and frequency
        X[y == c, (c * 7) % 40:(c * 7) % 40 + 8, c % 10, 0] += 2.0
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((49, 10, 1)),
        keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu", name="conv1"),
        keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu", name="conv2"),
        keras.layers.Conv2D(12, 3, padding="same", activation="relu", name="conv3"),
        keras.layers.GlobalAveragePooling2D(name="gap"),
        keras.layers.Dropout(0.2),
        keras.layers.Dense(classes, name="head"),
    ], name="kws_conv3")
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(X, y, epochs=3, batch_size=32, verbose=0)
    model.save(path)
    np.savez(calib, X=X[:200], y=y[:200])
    return X, y


@pytest.fixture(scope="module")
def keyword_dir(tmp_path_factory):
    from tinyol.model.export import export_model

    tmp = tmp_path_factory.mktemp("kws")
    X, y = _train_keyword_model(tmp / "kws.keras", tmp / "calib.npz")
    out = tmp / "kws"
    export_model(str(tmp / "kws.keras"), str(out), split="conv3", calib=str(tmp / "calib.npz"),
                 max_classes=10, board="nucleo_l432kc", replay_capacity=20, name="kws")
    return out, X, y


def _nm(elf):
    out = subprocess.check_output(["arm-none-eabi-nm", "-S", str(elf)], text=True)
    return {f[3]: (int(f[0], 16), int(f[1], 16)) for f in (l.split() for l in out.splitlines())
            if len(f) == 4}


@pytest.mark.slow
@pytest.mark.tf
@pytest.mark.qemu
def test_conv3_stage_fits_the_l432kc_with_its_replay_in_sram2(keyword_dir, firmware, capsys):
    from _stream_util import reference_run
    from tinyol.cli import main
    from tinyol.link.device import Device
    from tinyol.link.stream import stream
    from tinyol.targets import emulator

    d, X, y = keyword_dir
    man = json.loads((d / "manifest.json").read_text())
    m = memory.Model.from_manifest(man)
    # before: the learner whole in SRAM1 (the only region it could take) is refused, SRAM2 empty
    before = memory.plan(m, L432.name, REGIONS, learner_region="RAM")
    assert not before.fits and before.over[0] == "SRAM1" and before.over[1] > 6000
    plan = memory.plan(m, L432.name, REGIONS)
    assert plan.fits and (plan.learner_region, plan.replay_region) == ("RAM", "RAM2")
    assert man["memory"]["replay_region"] == "SRAM2" and man["memory"]["learner_region"] == "SRAM1"
    # the linker's verdict: it links, the two blocks where the plan put them, to the byte
    fw = firmware("nucleo_l432kc", model=str(d), test_build=True)
    sym = _nm(fw.elf)
    replay = m.parts()["replay buffer"]
    assert sym["tol_replay_mem"] == (0x10000000, replay)  # SRAM2 at 0x10000000 (RM0394 2.2.2)
    addr, size = sym["tol_learner_mem"]
    assert 0x20000000 <= addr < 0x20000000 + L432.ram_bytes and size == m.learner() - replay
    # and it runs: the device learns bit for bit as the twin, its buffer filling in SRAM2
    n = 60
    ref = reference_run(str(d), X[:n], y[:n])
    with emulator.start_qemu("nucleo_l432kc", fw.elf, timeout=400) as t:
        with Device.open(t.url, timeout=10) as dev:
            _, recs = stream(dev, X[:n], y[:n], man, mode="train", window=4, timeout=10.0)
            st = dev.stats()
    np.testing.assert_array_equal([r.prediction for r in recs], ref["predictions"])
    np.testing.assert_array_equal(np.array([r.confidence for r in recs], np.float32),
                                  np.asarray(ref["confidence"], np.float32))
    lrn = ref["learner"]
    assert st.replay_fill == lrn.replay.fill == 20 and st.replay_capacity == 20
    assert st.class_counts == lrn.class_count.tolist()
    # and what a save of this stage keeps on the L432KC's store (QEMU has no flash: native
    # imitating the board): the stage's record model (memory.store_layout) against its SAVE
    lay = memory.store_layout(m, L432.flash_bytes, L432.page_bytes)
    assert 0 < lay.replay_saved < 20 and "then the stage alone" in lay.line()
    nat = firmware("native", model=str(d))
    k = lay.replay_saved
    with emulator.start("nucleo_l432kc", nat, emulator="native", timeout=120) as t:
        with Device.open(t.url) as dev:
            stream(dev, X[:k], y[:k], man, mode="train", window=4)
            r = dev.save()
            assert r.parts & 1 and r.bytes == 40 + memory.state_bytes(m, replay_fill=k)
            stream(dev, X[k:k + 1], y[k:k + 1], man, mode="train")
        capsys.readouterr()
        assert main(["save", "--port", t.url, "--json"]) == 0
        s = json.loads(capsys.readouterr().out)
        assert (s["includes_replay"], s["replay_left_out"], s["bytes"]) == (False, True, lay.head_record)
        assert main(["save", "--port", t.url]) == 0
        out = capsys.readouterr()
        assert f"{lay.head_record} bytes (stage)" in out.out and "board has the stage only" in out.err

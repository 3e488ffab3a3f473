"""The adaptive stage (mcu/app/learner_stage.c) in the one memory model (host/tinyol/memory.py),
against the same linker as tests/device/test_memory.py (whose sweep it reuses): a file of its own
so the two sweeps link on two test workers at once.
"""
from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from test_memory import ROOT, _sweep
from tinyol import memory
from tinyol.boards import BOARDS



@pytest.fixture(scope="module")
def stage_dirs(tmp_path_factory):
    """models/digits_adaptive (a 2-layer stage of 81 KB) and a small 2-layer stage exported for
    the NUCLEO-L432KC without --replay-capacity (sized by the exporter)."""
    from tinyol.model.export import _keras, export_model

    tmp = tmp_path_factory.mktemp("memstage")
    dirs = {"digits_adaptive": tmp / "digits_adaptive"}
    shutil.copytree(ROOT / "models" / "digits_adaptive", dirs["digits_adaptive"])
    keras = _keras()
    inp = keras.Input((64,))
    h = keras.layers.Dense(48, activation="relu", name="d0")(inp)
    h = keras.layers.Dense(24, activation="relu", name="d1")(h)
    src = tmp / "small.keras"
    keras.Model(inp, keras.layers.Dense(6, name="head")(h), name="small").save(src)
    dirs["small_stage"] = tmp / "small_stage"
    export_model(str(src), str(dirs["small_stage"]), split="d1", name="small_stage", max_classes=8,
                 board="nucleo_l432kc")
    # as exported: the sweeps below refresh small_stage in place (other capacities), the
    # int16 comparison needs the export's own manifest whatever ran first
    dirs["small_stage_as_exported"] = tmp / "small_stage_as_exported"
    shutil.copytree(dirs["small_stage"], dirs["small_stage_as_exported"])
    # the lean stage (d1 trains its biases only, its weights stay in flash)
    dirs["lean_stage"] = tmp / "lean_stage"
    export_model(str(src), str(dirs["lean_stage"]), split="d1", name="lean_stage", max_classes=8,
                 board="nucleo_l432kc", stage_train="bias")
    # the int16 stage (--stage-weights int16: 2 B per trained parameter, no gradient buffer)
    dirs["int16_stage"] = tmp / "int16_stage"
    export_model(str(src), str(dirs["int16_stage"]), split="d1", name="int16_stage", max_classes=8,
                 board="nucleo_l432kc", stage_weights="int16", stage_lr_scale=0.5)
    # what trains chosen from data (--stage-train auto): tests/device/test_stage_select.py's network,
    # where only layer a's weights can separate classes 2 and 3 (so the cut beats the last
    # layer alone and auto recommends it)
    L = keras.layers
    m = keras.Sequential([keras.Input((4,)), L.Dense(4, name="pre"), L.Dense(4, name="a"),
                          L.Dense(4, activation="relu", name="b"), L.Dense(4, name="head")])
    eye = np.eye(4, dtype=np.float32)
    wa = eye.copy()
    wa[3, 2], wa[3, 3] = 1.0, 0.0
    m.get_layer("pre").set_weights([eye, np.zeros(4, np.float32)])
    m.get_layer("a").set_weights([wa, np.zeros(4, np.float32)])
    m.get_layer("b").set_weights([eye, np.full(4, 0.2, np.float32)])
    wh = 4 * eye
    wh[2, 3] = 4.0
    m.get_layer("head").set_weights([wh, np.zeros(4, np.float32)])
    m.save(tmp / "sel.keras")
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 120)
    X = (np.eye(4, dtype=np.float32)[y] + rng.uniform(0, 0.1, (len(y), 4))).astype(np.float32)
    np.savez(tmp / "calib.npz", X=X, y=y)
    dirs["auto_stage"] = tmp / "auto_stage"
    export_model(str(tmp / "sel.keras"), str(dirs["auto_stage"]), split="a", name="auto_stage",
                 max_classes=6, board="nucleo_l432kc", stage_train="auto", mode="classifier",
                 calib=str(tmp / "calib.npz"), lr=0.1)
    return dirs


@pytest.mark.slow
@pytest.mark.tf
def test_stage_fits_equals_links(stage_dirs):
    """Stages split (L432: the stage in SRAM2, its auto-sized replay buffer in SRAM1), in SRAM2 (L432,
    40 slots) and SRAM3 (L4R5); the exporter's automatically sized replay capacity links and one
    slot more does not, in any placement (the linker's verdict). Five links: the stage
    formula is held against the C by tests/host/test_stage_equiv.py, placement and the fixed part here."""
    man = json.loads((stage_dirs["small_stage"] / "manifest.json").read_text())
    auto = man["learner"]["replay_capacity"]
    m = memory.Model.from_manifest(man)
    assert m.stage and m.learner() == man["stage"]["memory"]["total"]
    b = BOARDS["nucleo_l432kc"]
    assert auto == memory.largest_capacity(m, b.name, memory.board_regions(b)) > 0
    report = _sweep(stage_dirs, [
        ("nucleo_l432kc", "small_stage", {}, False),                      # as exported: auto-sized
        ("nucleo_l432kc", "small_stage", {"replay_capacity": auto + 1}, True),  # every placement
        ("nucleo_l432kc", "small_stage", {"replay_capacity": 40}, False),
        ("nucleo_l4r5zi", "digits_adaptive", {}, False),
    ])
    # (auto + 1 may link only within SRAM1's 16-byte padding slack, which _sweep checks); the
    # auto-sized buffer is too big for the learner to fit anywhere whole: the stage in SRAM2, its
    # replay buffer in SRAM1
    got = [(f, l if f else None, r if f else None) for _, _, _, f, l, r in report]
    assert got == [(True, True, "RAM2+RAM"), (False, None, None), (True, True, "RAM2"),
                   (True, True, "RAM3")], report


@pytest.mark.slow
@pytest.mark.tf
def test_auto_stage_fits_equals_links(stage_dirs):
    """--stage-train auto's choice is held to the same linker: the capacity the export sized
    around it links, one slot more does not; its learner is what tinyol.memory says."""
    man = json.loads((stage_dirs["auto_stage"] / "manifest.json").read_text())
    sel = man["stage"]["selection"]
    assert man["stage"]["train_spec"] == sel["spec"] and sel["spec"].startswith("a:all")
    assert man["learner"]["replay_capacity"] >= sel["replay_slots_reserved"]
    report = _sweep(stage_dirs, [("nucleo_l432kc", "auto_stage", {}, False),
                                 ("nucleo_l432kc", "auto_stage", {"replay_capacity": "auto+1"},
                                  False)])
    assert [(f, l if f else None) for _, _, _, f, l, _ in report] == [(True, True), (False, None)]


@pytest.mark.slow
@pytest.mark.tf
def test_lean_stage_fits_equals_links(stage_dirs):
    """The lean stage's budget is the linker's too: the automatically sized capacity links,
    one slot more does not; the trained parameters alone take RAM (d1's 1,152 weights not)."""
    man = json.loads((stage_dirs["lean_stage"] / "manifest.json").read_text())
    assert man["stage"]["trained"] == 24 + 8 * 25 and man["stage"]["memory"]["weights"] == 4 * 224
    full = json.loads((stage_dirs["small_stage"] / "manifest.json").read_text())
    assert man["learner"]["replay_capacity"] > full["learner"]["replay_capacity"]
    report = _sweep(stage_dirs, [("nucleo_l432kc", "lean_stage", {}, False),
                                 ("nucleo_l432kc", "lean_stage", {"replay_capacity": "auto+1"},
                                  False)])
    assert [(f, l if f else None) for _, _, _, f, l, _ in report] == [(True, True), (False, None)]


@pytest.mark.slow
@pytest.mark.tf
def test_int16_stage_fits_equals_links(stage_dirs):
    """--stage-weights int16 is the linker's too: its trained weights take 2 bytes each and no
    gradient (the float stage: 8), the automatically sized capacity links, one slot more does
    not; the exported weights are the float stage's rounded to their int16 grid."""
    man = json.loads((stage_dirs["int16_stage"] / "manifest.json").read_text())
    full = json.loads((stage_dirs["small_stage_as_exported"] / "manifest.json").read_text())
    t = man["stage"]["trained"]
    assert t == full["stage"]["trained"] == 48 * 24 + 24 + 8 * 25
    assert man["stage"]["memory"]["weights"] == 2 * t and man["stage"]["memory"]["grads"] == 0
    assert full["stage"]["memory"]["weights"] + full["stage"]["memory"]["grads"] == 8 * t
    # on the L432KC both leave the replay buffer all of SRAM1 (the plan splits it off): the
    # same slots, the int16 learner 6 bytes per trained parameter smaller
    assert man["learner"]["replay_capacity"] == full["learner"]["replay_capacity"]
    assert full["memory"]["learner_bytes"] - man["memory"]["learner_bytes"] == 6 * t
    assert man["learner"]["stage_lr_scale"] == 0.5
    cfg = (stage_dirs["int16_stage"] / "config.h").read_text()
    assert re.search(r"#define TOL_STAGE_LR_SCALE\s+0\.5f", cfg)
    init = (stage_dirs["int16_stage"] / "stage_init.c").read_text()
    exps = [int(v) for v in re.findall(r"\.wq = (-?\d+)", init)]
    assert len(exps) == 2 and all(e < 0 for e in exps)
    p16 = np.load(stage_dirs["int16_stage"] / "stage_init.npz")["params"]
    pf = np.load(stage_dirs["small_stage"] / "stage_init.npz")["params"]
    e = exps[0]  # d1's weights: on the grid 2^e, within half a step of the float export
    w16, wf = p16[:48 * 24], pf[:48 * 24]
    np.testing.assert_array_equal(np.rint(w16 * 2.0 ** -e), w16 * 2.0 ** -e)
    assert np.abs(w16 - wf).max() <= 2.0 ** (e - 1)
    report = _sweep(stage_dirs, [("nucleo_l432kc", "int16_stage", {}, False),
                                 ("nucleo_l432kc", "int16_stage", {"replay_capacity": "auto+1"},
                                  False)])
    assert [(f, l if f else None) for _, _, _, f, l, _ in report] == [(True, True), (False, None)]


@pytest.mark.slow
@pytest.mark.tf
def test_int16_stage_pq_replay_fits_equals_links(stage_dirs):
    """Issue 30's digits recipe as the study exports it (docs/study.md, "The int16 stage with
    compressed replay"): digits cut before `embed`, `--stage-weights int16 --replay-codec
    pq:64` for the NUCLEO-L476RG, the buffer the export sizes: the plan splits it from the
    stage as the linker places it, the largest capacity links, one slot more does not."""
    from tinyol.model.export import export_model

    d = stage_dirs["digits_adaptive"].parent / "digits16pq"
    export_model(str(ROOT / "models" / "digits" / "digits.keras"), str(d), split="embed",
                 calib="digits:0-4@train", max_classes=10, board="nucleo_l476rg", name="digits16pq",
                 stage_weights="int16", replay_codec="pq:64", stage_lr_scale=10.0)
    stage_dirs["digits16pq"] = d
    man = json.loads((d / "manifest.json").read_text())
    t = man["stage"]["trained"]
    assert man["stage"]["memory"]["weights"] == memory._a4(2 * t) and man["stage"]["memory"]["grads"] == 0
    assert man["learner"]["replay_codec"]["m"] == 64 and man["learner"]["replay_capacity"] > 1000
    report = _sweep(stage_dirs, [("nucleo_l476rg", "digits16pq", {}, False),
                                 ("nucleo_l476rg", "digits16pq", {"replay_capacity": "auto+1"}, False)])
    assert [(f, l if f else None) for _, _, _, f, l, _ in report] == [(True, True), (False, None)]

"""`tinyol export --stage-train auto` (tinyol.model.stage_select): what of the adaptive stage
trains, chosen from the calibration data by contribution analysis on the twin.

The synthetic case is built so that the right answer is known without the selector: class
c lights input feature c; the frozen layer `a` adds features 2 and 3 into one unit, so
classes 2 and 3 reach the classifier as the same latent. Nothing above `a` can tell them
apart (their inputs to `b` and to the classifier are equal), and no bias can either (a bias
is the same for every input): only `a`'s weights can separate them. So the choice must train
`a` whole, and gains nothing from `b`."""
from __future__ import annotations

import json

import numpy as np
import pytest
from tinyol import memory
from tinyol.boards import BOARDS
from tinyol.errors import TinyolError

pytestmark = [pytest.mark.tf]  # the export tests; the last one needs no TF
BOARD = "nucleo_l476rg"


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    import keras

    d = tmp_path_factory.mktemp("auto")
    L = keras.layers
    m = keras.Sequential([keras.Input((4,)), L.Dense(4, name="pre"), L.Dense(4, name="a"),
                          L.Dense(4, activation="relu", name="b"), L.Dense(4, name="head")])
    eye = np.eye(4, dtype=np.float32)
    wa = eye.copy()
    wa[3, 2], wa[3, 3] = 1.0, 0.0           # a: unit 2 = x2 + x3, unit 3 = 0
    m.get_layer("pre").set_weights([eye, np.zeros(4, np.float32)])
    m.get_layer("a").set_weights([wa, np.zeros(4, np.float32)])
    m.get_layer("b").set_weights([eye, np.full(4, 0.2, np.float32)])
    wh = 4 * eye
    wh[2, 3] = 4.0                           # classes 2 and 3 read the same unit
    m.get_layer("head").set_weights([wh, np.zeros(4, np.float32)])
    m.save(d / "m.keras")
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 120)
    X = (np.eye(4, dtype=np.float32)[y] + rng.uniform(0, 0.1, (len(y), 4))).astype(np.float32)
    np.savez(d / "calib.npz", X=X, y=y)
    return d


def _export(case, out, **kw):
    from tinyol.model.export import export_model

    lines = []
    kw.setdefault("name", "m")  # one name for every folder: it is in the backbone and config.h
    m = export_model(str(case / "m.keras"), str(case / out), split="a", calib=str(case / "calib.npz"),
                     max_classes=6, board=BOARD, lr=0.1, mode="classifier", replay_capacity=100, echo=lines.append, **kw)
    return m, lines


@pytest.fixture(scope="module")
def auto(case):
    return _export(case, "auto", stage_train="auto")


def test_auto_picks_the_layer_that_matters(auto):
    m, lines = auto
    sel = m["stage"]["selection"]
    assert m["stage"]["train_spec"] == sel["spec"]
    modes = dict(item.split(":") for item in sel["spec"].split(","))
    assert modes["a"] == "all", (sel["spec"], "\n".join(lines))
    assert modes["b"] != "all"               # b's weights cannot separate classes 2 and 3
    table = {(r["layer"], r["mode"]): r for r in sel["table"]}
    assert table["a", "all"]["gain"] > 0.1   # a's weights: classes 2 and 3 come apart
    for key in (("a", "bias"), ("b", "bias"), ("b", "all")):
        assert table[key]["gain"] < table["a", "all"]["gain"] / 2, key
    assert sel["measured_accuracy"] > sel["baseline_accuracy"] + 0.1
    assert any(line.startswith("stage-train auto: chose ") for line in lines)
    # the RAM each candidate adds: 8 B per trained parameter (weights + gradients, no momentum)
    assert table["a", "all"]["bytes"] == 8 * 20 and table["a", "bias"]["bytes"] == 8 * 4


def test_auto_round_trips_into_the_hand_given_spec(case, auto):
    m, _ = auto
    m2, _ = _export(case, "hand", stage_train=m["stage"]["train_spec"])
    for f in ("stage_init.c", "config.h", "stage_init.npz", "backbone.c"):
        assert (case / "auto" / f).read_bytes() == (case / "hand" / f).read_bytes(), f
    assert m2["stage"]["hash"] == m["stage"]["hash"]
    assert m2["stage"]["train_spec"] == m["stage"]["train_spec"] and "selection" not in m2["stage"]
    # refreshing config.h from the manifest (tinyol.model.export.refresh_config) keeps the record
    from tinyol.model.export import refresh_config

    before = (case / "hand" / "config.h").read_bytes()
    m3 = refresh_config(str(case / "auto"))
    assert m3["stage"]["train_spec"] == m["stage"]["train_spec"]
    assert m3["stage"]["selection"] == json.loads(json.dumps(m["stage"]["selection"]))
    assert (case / "auto" / "config.h").read_bytes() == before


def test_auto_is_deterministic_and_respects_the_budget(case, auto):
    m, _ = auto
    sel = m["stage"]["selection"]
    a_all = next(r for r in sel["table"] if (r["layer"], r["mode"]) == ("a", "all"))
    # a budget that just admits a's weights: the same measurements and choice, within it
    budget = sel["baseline_learner_bytes"] + a_all["bytes"]
    mb, _ = _export(case, "budget", stage_train="auto", stage_budget=budget)
    selb = mb["stage"]["selection"]
    assert selb["table"] == sel["table"]     # same seed, same measurements
    assert selb["spec"] == sel["spec"] and selb["recipe"] == sel["recipe"]
    assert "a:all" in selb["spec"] and selb["learner_bytes"] <= budget
    mdl = memory.Model.from_manifest(json.loads((case / "budget" / "manifest.json").read_text()))
    parts = mdl.parts()
    assert mdl.learner() - parts["replay buffer"] <= budget
    b = BOARDS[BOARD]
    assert memory.plan(mdl, b.name, memory.board_regions(b), flash_bytes=b.flash_bytes).fits
    # one byte less keeps a's weights out: the cut then trains the classifier alone, which
    # cannot beat the last layer (classes 2 and 3 reach both as the same latent): refused,
    # nothing written
    with pytest.raises(TinyolError, match="no recipe at the cut 'a' beats the last layer alone"):
        _export(case, "budget1", stage_train="auto", stage_budget=budget - 1)
    assert not (case / "budget1").exists()


def test_auto_recipe_beats_the_last_layer_on_held_out_samples(auto):
    """The recipe printed and recorded: the last layer alone (its own export's slots), the
    classifier alone at the cut and the chosen stage, on the validation and the test part.
    Only a's weights can separate classes 2 and 3, so the last layer cannot, and the chosen
    recipe must beat it on the test part too (never used to choose)."""
    m, lines = auto
    rec = m["stage"]["selection"]["recipe"]
    keys = [r["key"] for r in rec["rows"]]
    assert keys[0] == "last" and "least" in keys and rec["spec"] == m["stage"]["train_spec"]
    best = next(r for r in rec["rows"] if r["spec"] == rec["spec"])
    assert best["val"] - rec["last_layer_val"] >= 0.005 and best["test"] >= rec["last_layer_test"]
    assert rec["expected_gain"] == best["test"] - rec["last_layer_test"] > 0
    assert rec["last_layer_slots"] > best["slots"]   # the last layer keeps more slots
    said = [ln for ln in lines if "recommends --split a" in ln]
    assert said and f"over the last layer alone ({100 * rec['last_layer_test']:.1f}%" in said[0]


def test_auto_says_when_its_task_is_saturated(case):
    """Calibration data of two classes the network separates already: leaving one out, the
    classifier alone scores 100 % on held-out samples: the export stops and says what to give."""
    d = np.load(case / "calib.npz")
    keep = d["y"] < 2
    np.savez(case / "two.npz", X=d["X"][keep], y=d["y"][keep])
    with pytest.raises(TinyolError, match="its task is saturated") as e:
        _export(case, "sat", stage_train="auto", stage_data=str(case / "two.npz"))
    assert "labels 4..5" in e.value.hint and "--stage-data" in e.value.hint
    assert not (case / "sat").exists()


def test_auto_budget_that_fits_nothing(case):
    with pytest.raises(TinyolError, match="nothing fits --stage-budget 64 B"):
        _export(case, "none", stage_train="auto", stage_budget=64)
    assert not (case / "none").exists()


def test_auto_needs_board_and_labelled_calib(case):
    from tinyol.model.export import ExportSettings

    with pytest.raises(TinyolError, match="needs --board"):
        ExportSettings(split="a", calib="x.npz", stage_train="auto").check()
    with pytest.raises(TinyolError, match="needs labelled --calib"):
        ExportSettings(split="a", board=BOARD, stage_train="auto").check()
    with pytest.raises(TinyolError, match="applies to --stage-train auto"):
        ExportSettings(split="a", board=BOARD, stage_train="bias", stage_budget=100).check()


def test_auto_cli_one_line_error_and_info_shows_the_choice(case, auto, capsys):
    from tinyol.cli import main

    argv = ["export", str(case / "m.keras"), "-o", str(case / "cli"), "--split", "a", "--calib",
            str(case / "calib.npz"), "--mode", "classifier", "--board", BOARD, "--stage-train", "auto",
            "--stage-budget", "64"]
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    assert [ln for ln in err.splitlines() if ln.startswith("error:")] == [
        next(ln for ln in err.splitlines() if "nothing fits --stage-budget 64 B" in ln)]
    try:
        code = main(["info", "--model", str(case / "auto")])
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr().out
    assert code in (0, None)
    assert f"adaptive stage trains: {auto[0]['stage']['train_spec']} (chosen by --stage-train auto" in out


def test_task_uses_the_new_classes_when_the_data_has_them():
    from tinyol.model.stage_select import make_task

    y = np.repeat(np.arange(5), 10)          # rows 0-2 known, 3-4 new (max 6 rows)
    Q = np.arange(50, dtype=np.int8)[:, None]
    t = make_task(Q, y, 3, 6, seed=7)
    assert t.truly_new and t.held_out == (3, 4) and t.n_kept == 3
    assert list(t.order[:5]) == [0, 1, 2, 3, 4]
    assert set(t.prefill[1]) == {0, 1, 2} and set(t.stream[1]) == {3, 4}
    assert len(t.stream[1]) == 10 and len(t.prefill[1]) == 15
    assert len(t.val[1]) == 10 and len(t.test[1]) == 15  # per class: 5 train, 2 val, 3 test
    seen = np.concatenate([t.prefill[0], t.stream[0], t.val[0], t.test[0]]).ravel()
    assert sorted(seen) == list(range(50))   # every sample once
    # by position: each class's training part comes before its validation and test parts
    for c in range(5):
        tr = np.concatenate([t.prefill[0], t.stream[0]]).ravel()
        tr = tr[(tr >= 10 * c) & (tr < 10 * c + 10)]
        assert max(tr) < min(t.val[0].ravel()[(t.val[0].ravel() >= 10 * c) & (t.val[0].ravel() < 10 * c + 10)])
    assert (t.over(Q + 1).test[0] == t.test[0] + 1).all()  # the same samples over other latents
    # without new classes: leave a third of the known ones out (one of three), rows permuted
    t2 = make_task(Q[:30], y[:30], 3, 6, seed=7)
    assert not t2.truly_new and len(t2.held_out) == 1 and t2.n_kept == 2
    assert t2.order[2] == t2.held_out[0] and set(t2.stream[1]) == {2}
    with pytest.raises(TinyolError, match="at least two classes"):
        make_task(Q[:10], y[:10], 3, 6, seed=7)


def test_auto_with_the_int16_stage(case, auto):
    """`--stage-train auto --stage-weights int16`: the candidates are measured as the device
    keeps them (int16 trained tensors, 2 B per trained parameter, no gradients), so a's weights
    cost a quarter of the float stage's RAM and are still the choice; the export equals the
    hand-given spec's at int16 (the choice is an ordinary spec)."""
    m16, lines = _export(case, "auto16", stage_train="auto", stage_weights="int16")
    sel, self32 = m16["stage"]["selection"], auto[0]["stage"]["selection"]
    modes = dict(item.split(":") for item in sel["spec"].split(","))
    assert modes["a"] == "all", "\n".join(lines)
    table = {(r["layer"], r["mode"]): r for r in sel["table"]}
    t32 = {(r["layer"], r["mode"]): r for r in self32["table"]}
    assert table["a", "all"]["gain"] > 0.1
    # 20 trained parameters: 8 B each in float32 (weights + gradients), 2 B each in int16
    assert t32["a", "all"]["bytes"] == 8 * 20 and table["a", "all"]["bytes"] == memory._a4(2 * 20)
    assert sel["recipe"]["spec"] == sel["spec"] and sel["recipe"]["expected_gain"] > 0
    hand, _ = _export(case, "hand16", stage_train=sel["spec"], stage_weights="int16")
    for f in ("stage_init.c", "config.h", "stage_init.npz"):
        assert (case / "auto16" / f).read_bytes() == (case / "hand16" / f).read_bytes(), f
    assert hand["stage"]["hash"] == m16["stage"]["hash"] != auto[0]["stage"]["hash"]

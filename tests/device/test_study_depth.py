"""docs/study.md's depth section is what tinyol_studies.depth renders from the committed raw
results (docs/study_depth.json), and those results were measured on the data sets it names."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from tinyol_studies import depth as SD

ROOT = Path(__file__).resolve().parents[2]


def _results() -> list[dict]:
    return json.loads((ROOT / "docs" / "study_depth.json").read_text())


def test_depth_section_is_rendered_from_the_committed_results():
    res = _results()
    doc = (ROOT / "docs" / "study.md").read_text(encoding="utf-8")
    assert doc.count(SD.MARK_BEGIN) == 1
    section = doc[doc.index(SD.MARK_BEGIN):doc.index(SD.MARK_END) + len(SD.MARK_END)] + "\n"
    assert section == SD.markdown(res, len(res[0]["joint"]))  # what follows the section is others'
    assert "synthetic" not in section.lower()


def test_committed_results_cover_both_datasets_and_every_cut():
    res = {r["name"]: r for r in _results() if "scenario" not in r}
    assert set(res) == {"digits", "watch"}
    assert [r.get("scenario") for r in _results()] == [None, None, "users"]
    w = res["watch"]
    assert [c["cut"] for c in w["cuts"]] == ["head", "embed", "conv3", "conv2"]
    assert all(c["fits"] for c in w["cuts"])          # conv2 is the deepest cut there is
    for r in res.values():
        for c in r["cuts"]:
            assert len(c["replay"]) == len(r["joint"]) and all(0 <= a <= 1 for a in c["replay"])
        # the floor stays below every cut with replay, the upper bound above the best
        assert np.mean(r["naive"]["acc"]) < min(np.mean(c["replay"]) for c in r["cuts"])
        assert np.mean(r["joint"]) > max(np.mean(c["replay"]) for c in r["cuts"])


@pytest.mark.skipif(importlib.util.find_spec("seglearn") is None,
                    reason="seglearn (the watch data) not installed: make setup")
def test_watch_results_were_measured_on_the_watch_source():
    from tinyol.data.datasets import load_source

    w = next(r for r in _results() if r["name"] == "watch")
    _, yte, _ = load_source("watch@test")
    _, ytr, _ = load_source("watch@train")
    assert w["n_test"] == min(SD.WATCH_TEST, len(yte))
    assert w["n_stream"] == min(SD.WATCH_STREAM, int(np.isin(ytr, SD.WATCH_NEW).sum()))


def _raw_watch() -> dict:
    from tinyol.data.datasets import watch_recordings

    return watch_recordings()


@pytest.mark.skipif(importlib.util.find_spec("seglearn") is None,
                    reason="seglearn (the watch data) not installed: make setup")
def test_new_users_split_keeps_calibration_and_test_apart():
    from tinyol.data.datasets import load_source

    d = _raw_watch()
    Xu, yu, _ = load_source("watch@test")
    sp = SD.watch_user_split()
    # every new-user window is in exactly one part, and is the raw recording at its offset
    parts = np.concatenate([sp["calib"], sp["test"], sp["gap"]])
    assert np.array_equal(np.sort(parts), np.arange(len(yu)))
    for i in range(len(yu)):
        r, t = sp["rec"][i], sp["start"][i]
        assert int(d["subject"][r]) in (8, 9, 10) and yu[i] == int(d["y"][r])
        assert np.array_equal(Xu[i], np.asarray(d["X"][r][t:t + 100], np.float32))
    for r in np.unique(sp["rec"]):
        n = (len(d["X"][r]) - 100) // 50 + 1
        mine = sp["rec"] == r
        cal = sp["start"][mine & (sp["part"] == 0)]
        te = sp["start"][mine & (sp["part"] == 1)]
        # the first half calibrates, the second half tests: no sample in both
        assert len(cal) == n // 2 and cal.min() == 0 and len(te) >= n - n // 2 - 1
        assert cal.max() + 100 <= te.min()
        assert te.max() + 100 <= len(d["X"][r])
    # the stream: every calibration window once, recordings whole and in time order
    orders = []
    for seed in range(3):
        o = SD.users_stream_order(sp, seed)
        assert np.array_equal(np.sort(o), sp["calib"])
        rec = sp["rec"][o]
        runs = rec[np.r_[True, rec[1:] != rec[:-1]]]
        assert len(runs) == len(np.unique(rec))            # each recording streamed in one piece
        assert all(np.all(np.diff(sp["start"][o][rec == r]) == 50) for r in runs)
        orders.append(tuple(runs))
    assert len(set(orders)) == 3                            # the seed is the recordings' order


@pytest.mark.skipif(importlib.util.find_spec("seglearn") is None,
                    reason="seglearn (the watch data) not installed: make setup")
def test_new_users_results_were_measured_on_that_split():
    from tinyol.data.datasets import load_source

    u = next(r for r in _results() if r.get("scenario") == "users")
    d = _raw_watch()
    ns = [(len(x) - 100) // 50 + 1 for x, s in zip(d["X"], d["subject"]) if int(s) >= 8]
    _, ytr, _ = load_source("watch@train")
    _, yu, _ = load_source("watch@test")
    assert u["n_pretrain"] == len(ytr) and u["recordings"] == len(ns) == 42
    assert u["n_calib"] == sum(n // 2 for n in ns)
    assert u["n_calib"] + u["n_test"] + u["n_gap"] == len(yu) and u["n_gap"] == len(ns)
    seeds = len(u["joint"])
    assert [c["cut"] for c in u["cuts"]] == ["head", "embed", "conv3", "conv2"]
    assert u["start"] == u["cuts"][0]["start"]
    for c in u["cuts"]:
        assert len(c["replay"]) == seeds and all(0 <= a <= 1 for a in c["replay"])
        # one pre-trained network: the cuts differ only by where its int8 part ends
        assert abs(c["start"] - u["start"]) < 0.02
    # the shapes are those of the class-incremental watch network (its instructions apply)
    ci = next(r for r in _results() if r["name"] == "watch" and "scenario" not in r)
    assert [(c["cut"], c["params"], c["ram"]) for c in u["cuts"]] == \
        [(c["cut"], c["params"], c["ram"]) for c in ci["cuts"]]
    assert np.mean(u["joint"]) > max(np.mean(c["replay"]) for c in u["cuts"])


def test_lean_section_is_rendered_from_the_committed_results():
    """docs/study.md's lean-stage section is tinyol_studies.lean's rendering of
    docs/study_lean.json, before the depth section; every row was measured (3 orders)."""
    from tinyol_studies import lean as SL

    res = json.loads((ROOT / "docs" / "study_lean.json").read_text())
    doc = (ROOT / "docs" / "study.md").read_text(encoding="utf-8")
    i, j = doc.index(SL.MARK_BEGIN), doc.index(SL.MARK_END)
    assert j < doc.index(SD.MARK_BEGIN)
    assert doc[i:j + len(SL.MARK_END)] + "\n" == SL.markdown(res, 3)
    depth = {(r["name"], r.get("scenario"), c["cut"]): c["replay"] for r in _results()
             for c in r["cuts"]}
    for r in res:
        for row in r["rows"]:
            assert row["trained"] <= row["params"] and all(0 <= a <= 1 for a in row["acc"])
            # every row over 3 orders, but watch's lean variants (order 0 only, as printed)
            lean_watch = r["name"] == "watch" and row["train"] not in (None, "all")
            assert len(row["acc"]) == (1 if lean_watch else 3)
            # rows taken from the depth study are its runs, and its last layer was re-run
            key = (r["name"], r.get("scenario"), row["cut"])
            if row.get("acc_source") == "docs/study_depth.json" or (
                    r["name"] == "watch" and row["cut"] == "head"):
                assert row["acc"] == depth[key]


# --------------------------------------------------------------------------- the lean tables
def _lean_doc() -> str:
    from tinyol_studies import lean as SL

    doc = (ROOT / "docs" / "study.md").read_text(encoding="utf-8")
    return doc[doc.index(SL.MARK_BEGIN):doc.index(SL.MARK_END)]


def _lean_rows(section: str, title: str) -> dict:
    """The table under `### title`: (cut, variant) -> its cells."""
    part = section[section.index(f"### {title}\n"):]
    part = part[:part.index("\n### ", 5)] if "\n### " in part[5:] else part
    rows = {}
    for line in part.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and not set(cells[0]) <= {"-"} and cells[0] != "cut":
            rows[(cells[0], cells[1])] = cells
    return rows


def _stated(section: str) -> dict:
    """The hyper-parameters and the cost ratio the lean section states."""
    import re

    m = re.search(r"\((\d+) int8 slots, reservoir, n_new = (\d+), n_old = (\d+), lr = ([0-9.]+), "
                  r"momentum 0\)", section)
    return {"slots": int(m.group(1)), "n_new": int(m.group(2)), "n_old": int(m.group(3)),
            "lr": float(m.group(4)),
            "seeds": int(re.search(r"mean ± std over (\d+) stream orders", section).group(1))}


def _taps(n_in: int, k: int, stride: int, n_out: int) -> int:
    """Kernel taps that land inside the input for a 'same' 1-D convolution (Keras's padding:
    the extra pad goes after)."""
    pad = max((n_out - 1) * stride + k - n_in, 0) // 2
    return sum(1 for o in range(n_out) for t in range(k) if 0 <= o * stride - pad + t < n_in)


def _train_macs(layers: list[tuple], n_old: int) -> int:
    """One train step (1 + n_old samples, then the SGD step) of a chain of layers, counted by
    hand: ('dense', n_in, n_out, train) / ('conv', W_in, C_in, W_out, C_out, k, stride, train) /
    ('gap', n_in); train is 'all', 'bias' or None. Per sample the forward pass, then backward
    down to the first layer that trains: weight gradients where weights train, bias gradients
    where biases train, the input delta of every layer above the first that trains."""
    def conns(l):
        if l[0] == "dense":
            return l[1] * l[2]
        if l[0] == "gap":
            return l[1]
        _, wi, ci, wo, co, k, s, _t = l
        return _taps(wi, k, s, wo) * co * ci

    first = min(i for i, l in enumerate(layers) if l[0] != "gap" and l[-1])
    fwd = sum(conns(l) for l in layers)
    bwd, trained = 0, 0
    for i in range(len(layers) - 1, first - 1, -1):
        l = layers[i]
        if l[0] != "gap":
            outs = l[2] if l[0] == "dense" else l[3] * l[4]
            n_b = l[2] if l[0] == "dense" else l[4]
            bwd += (conns(l) if l[-1] == "all" else 0) + (outs if l[-1] else 0)
            w = l[1] * l[2] if l[0] == "dense" else l[5] * l[2] * l[4]
            trained += (w + n_b) if l[-1] == "all" else n_b if l[-1] == "bias" else 0
        if i > first:
            bwd += conns(l)
    return (1 + n_old) * (fwd + bwd) + trained


# the stage of each cut by hand (docs/study.md's networks: digits.keras, the watch network)
_DIGITS_EMBED = [("dense", 256, 32), ("dense", 32, 10)]
_WATCH_CONV3 = [("conv", 25, 16, 25, 16, 3, 1), ("gap", 400), ("dense", 16, 24), ("dense", 24, 7)]
_WATCH_CONV2 = [("conv", 50, 8, 25, 16, 3, 2)] + _WATCH_CONV3
_WATCH_EMBED = [("dense", 16, 24), ("dense", 24, 7)]


def _with(train: list, layers: list) -> list:
    return [l if l[0] == "gap" else l + (t,) for l, t in zip(layers, train)]


def test_lean_cost_columns_recomputed_from_the_layer_shapes():
    """The MACs cells: counted here by hand from the networks' layer shapes (not by the
    study's counter) for float and lean variants of digits and watch; the float stages'
    instruction cells are the depth study's QEMU measurements."""
    sec = _lean_doc()
    st = _stated(sec)
    digits, watch = _lean_rows(sec, "digits (new classes)"), _lean_rows(sec, "watch: new classes")
    cases = [(digits, ("embed", "float stage"), _with(["all", "all"], _DIGITS_EMBED)),
             (digits, ("embed", "lean: biases"), _with(["bias", "all"], _DIGITS_EMBED)),
             (watch, ("embed", "float stage"), _with(["all", "all"], _WATCH_EMBED)),
             (watch, ("conv3", "float stage"), _with(["all", None, "all", "all"], _WATCH_CONV3)),
             (watch, ("conv3", "lean: biases"), _with(["bias", None, "bias", "all"], _WATCH_CONV3)),
             (watch, ("conv2", "lean: embed weights + biases"),
              _with(["bias", "bias", None, "all", "all"], _WATCH_CONV2))]
    for table, key, layers in cases:
        assert table[key][6] == f"{_train_macs(layers, st['n_old']):,}", key
    depth = {(r["name"], c["cut"]): c["bench"]["train"] for r in _results()
             if "scenario" not in r for c in r["cuts"] if "train" in c.get("bench", {})}
    assert digits[("embed", "float stage")][7] == f"{depth[('digits', 'embed')]:,}"
    assert watch[("conv2", "float stage")][7] == f"{depth[('watch', 'conv2')]:,}"


needs_digits = pytest.mark.skipif(not (ROOT / "models/digits/manifest.json").exists(),
                                  reason="models/digits not exported")


@pytest.mark.slow   # about 40 s of twin runs on an idle core
@needs_digits
def test_lean_rows_recomputed(tmp_path):
    """A few accuracy cells of the lean tables recomputed (not re-rendered) from the
    hyper-parameters the document states, with the learner twin driven here: the digits
    stream of new classes in the stated orders (seed s permutes the pre-training samples into
    the buffer, then the stream), prefill, predict-then-learn, final accuracy on the test
    split."""
    from tinyol.data.datasets import load_source
    from tinyol.learn import learner as L
    from tinyol.model.export import export_model
    from tinyol.targets import twin as S

    sec = _lean_doc()
    st = _stated(sec)
    rows = _lean_rows(sec, "digits (new classes)")
    Xtr, ytr, _ = load_source("digits@train")
    Xte, yte, _ = load_source("digits@test")
    calib = tmp_path / "calib.npz"
    np.savez(calib, X=Xtr[ytr < 5].reshape(-1, 64), y=ytr[ytr < 5])
    for (cut, variant), train in {("head", "last layer"): None,
                                  ("embed", "lean: biases"): "bias"}.items():
        out = tmp_path / cut
        export_model(str(ROOT / "models/digits/digits.keras"), str(out),
                     split=None if cut == "head" else cut, calib=str(calib), max_classes=10,
                     replay_capacity=st["slots"], replay_bits=8, stage_train=train)
        model = S.load_model(out)
        q = [S.latents(model, S.quantize_input(X.reshape(len(X), -1), *model.input_q))
             for X in (Xtr, Xte)]
        accs = []
        for s in range(st["seeds"]):
            rng = np.random.default_rng(s)
            pre = rng.permutation(np.flatnonzero(ytr < 5))
            stream = rng.permutation(np.flatnonzero(ytr >= 5))
            lrn = S.make_learner(model, L.Settings(lr=st["lr"], n_new=st["n_new"],
                                                   n_old=st["n_old"], mode=L.MODE_REPLAY),
                                 dict(capacity=st["slots"], bits=8, policy=L.POLICY_RESERVOIR,
                                      seed=s + 1, max_new=1))
            for i in pre:
                lrn.replay_add(q[0][i], int(ytr[i]))
            for i in stream:
                lrn.predict(q[0][i])
                lrn.learn(q[0][i], int(ytr[i]))
            accs.append(np.mean([lrn.predict(x)[0] for x in q[1]] == yte))
        cell = f"{100 * np.mean(accs):.1f} ± {100 * np.std(accs):.1f}"
        assert rows[(cut, variant)][8] == cell, (cut, variant)


@pytest.mark.slow   # about 40 s of twin runs on an idle core
@needs_digits
def test_lean_l476_last_layer_row_recomputed(tmp_path):
    """The L476RG table's digits last-layer row: its slot count fits the board by the one
    memory model (one more slot does not fit); the recipe search covered the issue's grid
    (reservoir / class-balanced x 0, 2, 4, 8 idle steps), the chosen recipe is the best
    validation accuracy, and that accuracy is recomputed here on the validation split (30 % of
    the training data, seed 99, held out of prefill and stream; order 50); the accuracy cells
    are recomputed from the row's stated slots and recipe with the firmware's own idle
    rehearsal (Learner.idle, bit-identical with tol_learner_rehearse), and the first order
    again with idle rehearsal written out in this test: after each streamed sample, `extra`
    SGD steps of the head on n_old replayed samples (weight 1/n_old)."""
    import re

    from tinyol import memory
    from tinyol.boards import BOARDS
    from tinyol.data.datasets import load_source
    from tinyol.learn import learner as L
    from tinyol.model.export import export_model
    from tinyol.model.folder import read_manifest
    from tinyol.targets import twin as S

    sec = _lean_doc()
    st = _stated(sec)
    part = sec[sec.index("### The best configuration that fits the NUCLEO-L476RG"):]
    line = next(ln for ln in part.splitlines() if ln.startswith("| digits | head | last layer |"))
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    slots = int(cells[3])
    m = re.fullmatch(r"(reservoir|balanced), (\d+) idle steps, lr ([0-9.]+)", cells[5])
    policy = {"reservoir": L.POLICY_RESERVOIR, "balanced": L.POLICY_BALANCED}[m.group(1)]
    extra, lr = int(m.group(2)), float(m.group(3))

    # the validation table: the whole grid was tried, the chosen recipe is its best (first of
    # equals in the table's order)
    vt = part[part.index("\nValidation accuracy"):]
    head = next(ln for ln in vt.splitlines() if ln.startswith("| data set | cut | variant |"))
    names = [c.strip() for c in head.strip().strip("|").split("|")][3:-2]
    assert names == [f"{p} x{e}" for p in ("reservoir", "balanced") for e in (0, 2, 4, 8)]
    vline = next(ln for ln in vt.splitlines() if ln.startswith("| digits | head | last layer |"))
    vcells = [c.strip() for c in vline.strip().strip("|").split("|")][3:-2]
    vals = [float(c.strip("*")) for c in vcells]
    best = int(np.argmax(vals))
    assert vcells[best].startswith("**") and sum(c.startswith("**") for c in vcells) == 1
    assert names[best] == f"{m.group(1)} x{extra}"

    Xtr, ytr, _ = load_source("digits@train")
    Xte, yte, _ = load_source("digits@test")
    calib = tmp_path / "calib.npz"
    np.savez(calib, X=Xtr[ytr < 5].reshape(-1, 64), y=ytr[ytr < 5])
    out = tmp_path / "head"
    export_model(str(ROOT / "models/digits/digits.keras"), str(out), calib=str(calib),
                 max_classes=10, replay_capacity=slots, replay_bits=8)
    mm = memory.Model.from_manifest(read_manifest(out))
    b = BOARDS["nucleo_l476rg"]
    regions = memory.board_regions(b)
    assert memory.plan(mm, b.name, regions).fits
    if slots < 1000:   # the study tries at most 1000 slots
        mm.replay_capacity = slots + 1
        assert not memory.plan(mm, b.name, regions).fits

    model = S.load_model(out)
    q = [S.latents(model, S.quantize_input(X.reshape(len(X), -1), *model.input_q))
         for X in (Xtr, Xte)]
    val = np.random.default_rng(99).choice(len(ytr), len(ytr) * 3 // 10, replace=False)

    def one(seed, pol, ex, rate, device=True, held=None):
        """device: the rehearsal is the firmware's (settings.rehearse, Learner.idle: the twin
        of tol_learner_rehearse), else the one written out here. held: evaluate on these
        training samples, kept out of prefill and stream, instead of the test split."""
        rng = np.random.default_rng(seed)
        keep = np.ones(len(ytr), bool)
        if held is not None:
            keep[held] = False
        pre = rng.permutation(np.flatnonzero((ytr < 5) & keep))
        stream = rng.permutation(np.flatnonzero((ytr >= 5) & keep))
        lrn = S.make_learner(model, L.Settings(lr=rate, n_new=1, n_old=st["n_old"],
                                               mode=L.MODE_REPLAY, rehearse=ex if device else 0),
                             dict(capacity=slots, bits=8, policy=pol, seed=seed + 1, max_new=1))
        for i in pre:
            lrn.replay_add(q[0][i], int(ytr[i]))
        h, w = lrn.head, np.float32(1.0) / np.float32(st["n_old"])
        for i in stream:
            lrn.predict(q[0][i])
            lrn.learn(q[0][i], int(ytr[i]))
            if device:
                assert lrn.idle() == ex
                continue
            for _ in range(ex):
                h.grad_zero()
                for _ in range(st["n_old"]):
                    xr, yr = lrn.replay.get(lrn.replay.draw())
                    h.activate(yr)
                    h.grad_add_ce(xr, yr, w)
                h.step(rate, 0.0, 0.0, 0.0)
        X, y = (q[1], yte) if held is None else (q[0][held], ytr[held])
        return np.mean([lrn.predict(x)[0] for x in X] == y)

    def pm(v):
        return f"{100 * np.mean(v):.1f} ± {100 * np.std(v):.1f}"

    assert f"{100 * one(50, policy, extra, lr, held=val):.1f}" == vcells[best].strip("*")
    accs = [one(s, policy, extra, lr) for s in range(st["seeds"])]
    assert cells[9] == pm(accs)
    # idle rehearsal written out here gives the firmware's accuracy (first order)
    assert one(0, policy, extra, lr, device=False) == accs[0]
    assert cells[8] == pm([one(s, L.POLICY_RESERVOIR, 0, st["lr"]) for s in range(st["seeds"])])

"""The small frictions of issue 33 (item 6): one `model =` in tinyol.toml for every verb (older
files still work, with a hint), export names from the --out folder, simulate speaking stream's
stream flags (--shuffle --seed, --limit, --epochs; the older --order-seed and --seed kept), and
simulate's before-accuracy against an independent numpy evaluation of the exported head.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tinyol.cli import main as cli_main
from tinyol.data.datasets import load_source, sample_order
from tinyol.errors import TinyolError
from tinyol.model.export import model_name

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "models" / "digits"
KDD = ROOT / "models" / "kdd135"


def _cli(capsys, *args, expect=0) -> tuple[str, str]:
    rc = cli_main([str(a) for a in args])
    cap = capsys.readouterr()
    assert rc == expect, (args, rc, cap.out + cap.err)
    return cap.out, cap.err


# ------------------------------------------------------------------------------ tinyol.toml
def test_top_level_model_serves_every_verb(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TINYOL_CONFIG", raising=False)
    (tmp_path / "tinyol.toml").write_text(f'model = "{KDD}"\nboard = "nucleo_l432kc"\n')
    out, err = _cli(capsys, "info")                       # info --model/--board from the file
    assert out.startswith("kdd135 on nucleo_l432kc: fits") and not err
    out, _ = _cli(capsys, "simulate", "--data", "kdd135@val", "--limit", "60", "--json")
    assert json.loads(out)["samples"] == 60               # simulate's --model (model_dir)
    # a verb's own table wins over the top level
    (tmp_path / "tinyol.toml").write_text(f'model = "{KDD}"\n[info]\nmodel = "{DIGITS}"\n')
    out, _ = _cli(capsys, "info")
    assert out.startswith("digits on ")


def test_older_per_table_files_work_with_a_hint(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TINYOL_CONFIG", raising=False)
    (tmp_path / "tinyol.toml").write_text(
        f'[info]\nmodel = "{KDD}"\n[stream]\nmodel = "{KDD}"\n[build]\nmodel = "{KDD}"\n')
    out, err = _cli(capsys, "info")
    assert out.startswith("kdd135 on nucleo_l476rg")
    assert "names the model in 3 tables" in err and "top-level `model" in err
    (tmp_path / "tinyol.toml").write_text('modle = "x"\n')
    _, err = _cli(capsys, "info", expect=1)
    assert "unknown top-level setting(s) modle" in err and "Traceback" not in err


def test_init_writes_one_model_line(tmp_path, capsys):
    _cli(capsys, "init", tmp_path / "p", "--board", "nucleo_l432kc")
    import tomllib

    cfg = tomllib.loads((tmp_path / "p" / "tinyol.toml").read_text())
    assert cfg["model"] == "models/digits" and cfg["board"] == "nucleo_l432kc"
    assert not any(isinstance(v, dict) and "model" in v for v in cfg.values())


# ------------------------------------------------------------------------------ export names
def test_export_names_the_model_after_its_folder(tmp_path):
    src = Path("m.keras")
    assert model_name(None, tmp_path / "kdd135_k4", src) == "kdd135_k4"
    assert model_name(None, tmp_path / "my model!", src) == "my_model"
    assert model_name("given", tmp_path / "x", src) == "given"
    with pytest.raises(TinyolError, match="printable ASCII"):
        model_name('a"b', tmp_path / "x", src)
    with pytest.raises(TinyolError, match="1-32"):
        model_name("x" * 33, tmp_path / "x", src)


# ------------------------------------------------------------------------------ simulate flags
def _sim(capsys, *args) -> dict:
    out, _ = _cli(capsys, "simulate", "--model", DIGITS, *args, "--json")
    return json.loads(out)


def test_simulate_takes_streams_order_flags(capsys, tmp_path):
    """--shuffle --seed N == the older --order-seed N; --limit/--epochs send exactly the rows
    `tinyol stream` sends (sample_order, rows checked in the log)."""
    a = _sim(capsys, "--data", "digits:5-9@test", "--shuffle", "--seed", "4")
    b = _sim(capsys, "--data", "digits:5-9@test", "--order-seed", "4")
    assert a["prequential_accuracy"] == b["prequential_accuracy"]
    assert a["final_per_class"] == b["final_per_class"]
    log = tmp_path / "s.jsonl"
    r = _sim(capsys, "--data", "digits:5-9@test", "--shuffle", "--seed", "2", "--limit", "30",
             "--epochs", "3", "--log", log)
    rows = [json.loads(l)["index"] for l in log.read_text().splitlines()]
    assert r["samples"] == 90 and len(rows) == 90
    perm = np.random.default_rng(2).permutation(len(load_source("digits:5-9@test")[1]))[:30]
    assert rows[:30] == perm.tolist() and sorted(rows[30:60]) == sorted(perm.tolist())
    assert rows == sample_order(len(load_source("digits:5-9@test")[1]), shuffle=True, seed=2,
                                limit=30, epochs=3).tolist()
    # --seed without --shuffle keeps its older meaning (the learner's PRNG seed)
    c = _sim(capsys, "--data", "digits:5-9@test", "--seed", "9", "--replay-capacity", "20")
    d = _sim(capsys, "--data", "digits:5-9@test", "--learner-seed", "9", "--replay-capacity", "20")
    assert c["replay"]["seed"] == d["replay"]["seed"] == 9
    assert c["prequential_accuracy"] == d["prequential_accuracy"]


def test_simulate_before_accuracy_is_the_exported_head(capsys):
    """before_accuracy: the exported head (head_init.npz) on the eval set, computed here from
    TFLM's own runtime and numpy, no tinyol learner involved."""
    runtime = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    r = _sim(capsys, "--data", "digits:5-9@train", "--eval", "digits@test", "--rehearse", "0")
    m = json.loads((DIGITS / "manifest.json").read_text())
    X, y, _ = load_source("digits@test")
    sc, zp = m["input"]["scale"], m["input"]["zero_point"]
    Xq = np.clip(np.round(X / np.float32(sc)) + zp, -128, 127).astype(np.int8)
    it = runtime.Interpreter.from_bytes((DIGITS / "backbone.tflite").read_bytes())
    lat = []
    for x in Xq:
        it.set_input(x[None], 0)
        it.invoke()
        lat.append(it.get_output(0).reshape(-1).astype(np.float32))
    z = (np.array(lat) - m["latent"]["zero_point"]) * m["latent"]["scale"]
    npz = np.load(DIGITS / "head_init.npz")
    n = int(npz["n_classes"])
    pred = np.argmax(z @ npz["W"][:n].T + npz["b"][:n], axis=1)
    assert r["before_accuracy"] == pytest.approx(float(np.mean(pred == y)))
    assert 0.4 < r["before_accuracy"] < 0.55  # the exported head knows 0-4 only

"""Bad input is refused before anything is sized from it (issue: reliability II, item 5).

Each case failed before: a tracebacks, a misleading message, a multi-gigabyte allocation or a
half-written output. Each asserts the one-line error and that nothing was left behind."""
from __future__ import annotations

import json
import resource
import shutil

import numpy as np
import pytest
from conftest import ROOT
from tinyol.cli import main as cli_main
from tinyol.data.datasets import MAX_LABEL, load_source, parse_line
from tinyol.errors import TinyolError


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def limited_memory():
    """The address space capped at what the test process holds + 1 GiB: a label of 1e9 that
    sized a list by the largest label (5.8 GB before) would die with MemoryError here."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        vm = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_huge_csv_label_is_refused_without_allocating(tmp_path, limited_memory):
    p = tmp_path / "d.csv"
    p.write_text("0.5,1.5,0\n0.25,2.0,1000000000\n")
    with pytest.raises(TinyolError) as e:
        load_source(str(p))
    assert "1e+09" in str(e.value) and str(MAX_LABEL) in str(e.value)


def test_label_1e30_is_too_large_not_negative(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("0.5,1.5,1e30\n")
    with pytest.raises(TinyolError) as e:
        load_source(str(p))
    assert "negative" not in str(e.value) and "above the largest class" in str(e.value)
    with pytest.raises(TinyolError, match="negative"):
        (tmp_path / "n.csv").write_text("0.5,1.5,-3\n")
        load_source(str(tmp_path / "n.csv"))


def test_largest_label_is_accepted(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text(f"0.5,1.5,{MAX_LABEL}\n0.5,1.5,0\n")
    X, y, names = load_source(str(p))
    assert int(y.max()) == MAX_LABEL and len(names) == MAX_LABEL + 1


def test_stdin_line_label_bounds():
    assert parse_line(f"1 2 {MAX_LABEL}")[1] == MAX_LABEL
    for bad in (f"1 2 {MAX_LABEL + 1}", "1 2 1e30", "1 2 -1", "1 2 0.5"):
        with pytest.raises(TinyolError, match="label must be an integer"):
            parse_line(bad)


def test_binary_csv_is_one_line(tmp_path, capsys):
    p = tmp_path / "bin.csv"
    p.write_bytes(bytes(range(256)) * 4)
    rc = cli_main(["simulate", "--model", str(ROOT / "models/digits"), "--data", str(p)])
    assert rc == 1 and "not a text CSV file" in _error_line(capsys)


def test_over_long_csv_field_is_one_line(tmp_path, capsys):
    p = tmp_path / "long.csv"
    p.write_text('"' + "1" * 200_000 + '",0\n')
    rc = cli_main(["simulate", "--model", str(ROOT / "models/digits"), "--data", str(p)])
    assert rc == 1 and "unreadable CSV" in _error_line(capsys)


@pytest.mark.parametrize("field,value,msg", [
    ("replay_capacity", 10**9, "learner.replay_capacity = 1000000000"),
    ("replay_n_old", -1, "learner.replay_n_old = -1"),
    ("model_hash", None, "no model_hash"),
])
def test_simulate_validates_the_manifest_before_sizing(tmp_path, capsys, limited_memory,
                                                       field, value, msg):
    d = tmp_path / "m"
    shutil.copytree(ROOT / "models/digits", d)
    m = json.loads((d / "manifest.json").read_text())
    if field == "model_hash":
        del m["model_hash"]
    else:
        m["learner"][field] = value
    (d / "manifest.json").write_text(json.dumps(m))
    rc = cli_main(["simulate", "--model", str(d), "--data", "digits:5-9@test"])
    assert rc == 1 and msg in _error_line(capsys)


@pytest.mark.tf
@pytest.mark.slow
def test_corrupt_keras_is_named_and_leaves_no_out_folder(tmp_path, capsys):
    src = tmp_path / "broken.keras"
    src.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    out = tmp_path / "new" / "out"
    rc = cli_main(["export", str(src), "--out", str(out), "-q"])
    line = _error_line(capsys)
    assert rc == 1 and "not a readable Keras model file" in line and "File not found" not in line
    assert not out.exists() and not out.parent.exists()

"""The CLI's contract: every verb has --help; user errors are one line and a non-zero exit."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from conftest import ROOT
from tinyol.cli import VERBS


def tinyol(*args, env=None):
    return subprocess.run([sys.executable, "-m", "tinyol.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_verb_has_help(verb):
    r = tinyol(verb, "--help")
    assert r.returncode == 0, r.stderr
    assert "Usage:" in r.stdout and verb in r.stdout


def test_unreachable_port_is_one_clear_line():
    r = tinyol("info", "--port", "socket://127.0.0.1:1")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("error: cannot open serial port 'socket://127.0.0.1:1'")


def test_unknown_board_lists_the_choices():
    r = tinyol("build", "--board", "nucleo_f401re")
    assert r.returncode != 0 and "nucleo_l476rg" in r.stderr


def test_missing_model_dir():
    r = tinyol("build", "--board", "native", "--model", "models/nope")
    assert r.returncode == 1
    assert "models/nope has no config.h" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.skipif(shutil.which("renode") is not None, reason="Renode is installed here")
def test_renode_missing_says_so():
    r = tinyol("emulate", "--emulator", "renode", "--board", "nucleo_l476rg", "--model", "mcu/app/nomodel")
    assert r.returncode == 1
    assert "renode" in r.stderr.lower() and "Traceback" not in r.stderr


def test_settings_layering_file_env_flag(tmp_path):
    """tinyol.toml < TINYOL_<VERB>_<OPTION> < --flag, each visible in the error naming the port."""
    import os

    cfg = tmp_path / "tinyol.toml"
    cfg.write_text('[info]\nport = "socket://127.0.0.1:2"\n')
    env = dict(os.environ, TINYOL_CONFIG=str(cfg), PYTHONPATH=str(ROOT / "host"))
    assert "127.0.0.1:2'" in tinyol("info", env=env).stderr
    env["TINYOL_INFO_PORT"] = "socket://127.0.0.1:3"
    assert "127.0.0.1:3'" in tinyol("info", env=env).stderr
    assert "127.0.0.1:4'" in tinyol("info", "--port", "socket://127.0.0.1:4", env=env).stderr
    cfg.write_text('[nosuchverb]\nx = 1\n')
    r = tinyol("info", env=env)
    assert r.returncode == 1 and "unknown section(s) nosuchverb" in r.stderr


def test_bench_rerender_of_an_unreadable_last_run_is_one_line(tmp_path):
    """A last run saved by an older tinyol pickled classes that have moved since (the bench
    machinery was tinyol.studies.bench): --rerender says so in one line, no traceback."""
    import os

    saved = tmp_path / "build" / "bench" / "last_run.pkl"
    saved.parent.mkdir(parents=True)
    saved.write_bytes(b"ctinyol.studies.bench\nModelBench\n.")  # pickle protocol 0: a global
    r = subprocess.run([sys.executable, "-m", "tinyol.cli", "bench", "--rerender", "--out",
                        str(tmp_path / "b.md")], capture_output=True, text=True, cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "host")), timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "last_run.pkl: the last run's results cannot be read" in r.stderr, r.stderr
    assert "tinyol.studies" in r.stderr and not (tmp_path / "b.md").exists()

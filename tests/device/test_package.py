"""tinyol as an installed package: the wheel carries the firmware, commands work anywhere.

The slow test builds the wheel (`pip wheel .`), installs it with --no-deps into a
fresh venv whose only link to this machine's packages is a .pth to the existing
venv's site-packages (so TensorFlow is not downloaded again; that directory holds
no tinyol module: this checkout is installed in editable mode, whose hook is not
loaded from a .pth path entry), and then, in an empty temporary folder with no
checkout on any path, runs export -> build -> emulate (native and QEMU) -> stream
-> save, and `tinyol init` + build of a user project.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "host"))


def _run(argv, cwd, env, timeout=900):
    p = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, f"{argv}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout


# ------------------------------------------------------------------- fast checks
def test_paths_resolve_against_current_directory(tmp_path, monkeypatch):
    """A relative --model is the current directory's, in every verb (issue 9 item 7)."""
    from click.testing import CliRunner
    from tinyol.cli import group
    from tinyol.options import resolve_model_option
    from tinyol.paths import example_model, firmware_root

    monkeypatch.chdir(tmp_path)
    assert resolve_model_option(None, None, "models/mine") == str(tmp_path / "models" / "mine")
    assert resolve_model_option(None, None, None) == str(example_model("digits"))
    assert (firmware_root() / "mcu" / "src" / "tol_server.c").is_file()
    # build and stream agree: a model that is not here is not silently taken from the checkout
    r = CliRunner().invoke(group, ["build", "--board", "native", "--model", "models/digits"],
                           standalone_mode=False)
    assert r.exception is not None and "models/digits has no config.h" in str(r.exception)


def test_library_manifest_matches_the_release():
    from tinyol import __version__

    lib = json.loads((ROOT / "mcu" / "library.json").read_text())
    assert lib["version"] == __version__ and lib["name"] == "tinyol"
    assert "-<src/tol_server.c>" in lib["build"]["srcFilter"]


def test_init_creates_a_project(tmp_path, monkeypatch):
    from tinyol.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["init", "proj", "--board", "nucleo_l432kc"]) == 0
    d = tmp_path / "proj"
    ini = (d / "platformio.ini").read_text()
    assert "default_envs = nucleo_l432kc" in ini and "custom_model = models/digits" in ini
    src = re.search(r"^src_dir = (.+)$", ini, re.M)[1]
    assert (Path(src) / "src" / "tol_server.c").is_file()
    assert (d / "models/digits/config.h").is_file() and (d / "tinyol.toml").is_file()
    assert (d / ".pio-core/packages/tool-scons/scons.py").is_file()
    assert main(["init", "proj"]) != 0  # never overwrites a project
    (d / "platformio.ini").write_text(ini.replace("custom_model = models/digits", "custom_model = models/x"))
    assert main(["init", "--update", "proj"]) == 0  # keeps board and model, refreshes paths
    new = (d / "platformio.ini").read_text()
    assert "default_envs = nucleo_l432kc" in new and "custom_model = models/x" in new


# ------------------------------------------------------------------- the wheel, end to end
@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out, ROOT], ROOT, dict(os.environ))
    (whl,) = out.glob("tinyol-*.whl")
    return whl


@pytest.mark.slow
def test_wheel_carries_the_firmware(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    fw = "tinyol/_firmware/"
    for need in ["mcu/src/tol_server.c", "mcu/include/tinyol.h", "mcu/embed/tinyol.c", "mcu/library.json",
                 "mcu/platform/stm32l4/platform.json", "mcu/platform/native/builder/main.py",
                 "mcu/platform/common/tinyol_build.py", "mcu/renode/nucleo_l476rg.resc",
                 "mcu/boards/stm32l4/ld/nucleo_l476rg.ld", "models/digits/config.h",
                 "models/digits/digits.keras", "examples/sensor_learner/src/main.c"]:
        assert fw + need in names, need
    assert not any("/.pio/" in n or "__pycache__" in n for n in names)
    # the product, and none of the studies beside it (studies/tinyol_studies/)
    assert {"tinyol/bench/cycles.py", "tinyol/plotting.py", "tinyol/model/export.py"} <= names
    studies = sorted(p.name for p in (ROOT / "studies" / "tinyol_studies").glob("*.py"))
    assert len(studies) >= 10
    assert not [n for n in names if "studies" in n.split("/")[0]], "a study package in the wheel"
    py = [n for n in names if n.endswith(".py") and not n.startswith(fw)]
    assert not [n for n in py if n.startswith(("tinyol_studies/", "tinyol/studies/"))], py


def _wheel_venv(wheel: Path, where: Path) -> Path:
    venv = where / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], where, dict(os.environ))
    py = venv / "bin" / "python"
    # pip must install into the fresh venv whatever it believes is installed elsewhere
    # (--ignore-installed): in a full `make test` run a plain install once reported success
    # and installed nothing
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out = _run([sys.executable, "-m", "pip", "--python", py, "install", "--no-deps",
                "--ignore-installed", "--force-reinstall", wheel], where, env)
    site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], where,
                     env).strip())
    assert (site / "tinyol" / "__init__.py").is_file(), f"pip installed no tinyol into {site}:\n{out[-3000:]}"
    (site / "zz_reuse_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


@pytest.mark.slow
@pytest.mark.qemu
@pytest.mark.tf
def test_installed_wheel_end_to_end_in_an_empty_folder(wheel, tmp_path):
    venv = _wheel_venv(wheel, tmp_path)
    work = tmp_path / "empty"
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PLATFORMIO_CORE_DIR", "PYTHONPATH", "TINYOL_ROOT", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv / 'bin'}:{env['PATH']}", PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
               TF_CPP_MIN_LOG_LEVEL="2")
    tinyol = venv / "bin" / "tinyol"
    py = venv / "bin" / "python"

    where = json.loads(_run([py, "-c", "import json, sys, tinyol, tinyol.paths as p; print(json.dumps("
                             "[tinyol.__file__, str(p.firmware_root()), sys.path]))"], work, env))
    assert where[0].startswith(str(venv)) and where[1].startswith(str(venv))
    assert not any(str(ROOT / "host") in entry or entry == str(ROOT) for entry in where[2])

    # export: the shipped digits.keras, copied here like a user's own model
    keras = Path(where[1]) / "models" / "digits" / "digits.keras"
    (work / "digits.keras").write_bytes(keras.read_bytes())
    _run([tinyol, "export", "digits.keras", "--out", "models/mine", "--calib", "digits:0-4@train",
          "--classes", "5", "--max-classes", "10", "--name", "mine", "-q"], work, env)
    assert (work / "models/mine/config.h").is_file()

    # build (native), emulate, stream, save: all outputs under this folder
    out = _run([tinyol, "build", "--board", "native", "--model", "models/mine"], work, env)
    assert f"built {work}" in out
    assert (work / ".pio-core/packages/tool-scons/scons.py").is_file()
    assert (work / ".pio/tinyol-platformio.ini").is_file()

    def emulate(*args):
        p = subprocess.Popen([tinyol, "emulate", "--model", "models/mine", *args], cwd=work, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in p.stdout:
            m = re.search(r"serial port: (socket://\S+)", line)
            if m:
                return p, m[1]
        p.wait(10)
        raise AssertionError(f"emulate did not start (exit {p.returncode})")

    (work / "state").mkdir()
    p, url = emulate("--board", "native", "--state", "state")
    try:
        rep = json.loads(_run([tinyol, "stream", "--port", url, "--data", "digits:5-9@train", "--train",
                               "--limit", "60", "--model", "models/mine", "--json", "--no-progress"],
                              work, env, timeout=300))
        assert rep["samples"] == 60 and rep["accuracy"] > 0.2  # five classes it never saw, learned
        _run([tinyol, "save", "--port", url], work, env, timeout=120)
        info = json.loads(_run([tinyol, "info", "--port", url, "--json"], work, env, timeout=60))
        assert info["model"] == "mine"
    finally:
        p.terminate()
        p.wait(20)
    assert any((work / "state").iterdir())  # the native flash image, in the user's folder

    p, url = emulate("--board", "nucleo_l476rg")
    try:
        info = json.loads(_run([tinyol, "info", "--port", url, "--json"], work, env, timeout=120))
        assert info["model"] == "mine" and info["board"] == "nucleo_l476rg"
        _run([tinyol, "stream", "--port", url, "--data", "digits:5-9@train", "--train", "--limit", "20",
              "--model", "models/mine", "--no-progress"], work, env, timeout=300)
    finally:
        p.terminate()
        p.wait(20)

    # a user project made by the installed tinyol builds in its own folder
    _run([tinyol, "init", "proj", "--board", "native"], work, env)
    out = _run([tinyol, "build"], work / "proj", env)
    assert f"built {work / 'proj' / '.pio'}" in out

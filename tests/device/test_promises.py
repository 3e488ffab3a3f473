"""The verbs keep their promises under bad input (issue 25, docs/reliability.md): nothing of
the user's overwritten, exit codes that tell the truth, checks before acting, one line.

Every case runs the CLI in-process (tinyol.cli.main) and asserts on what the user sees and
on what is on disk or on the device afterwards: the files (bytes), the device's STATS.
"""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from tinyol._defs import Msg
from tinyol.cli import main
from tinyol.link.device import Device
from tinyol.targets import emulator


def run(capsys, *argv) -> tuple[int, str, str]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    assert "Traceback" not in out.err, out.err
    return code, out.out, out.err


# ---- init: never replaces a file it did not create ------------------------------------------
def test_init_keeps_the_users_readme_and_merges_gitignore(tmp_path, capsys):
    d = tmp_path / "proj"
    d.mkdir()
    (d / "README.md").write_text("# my notes\n")
    (d / ".gitignore").write_text("*.log\nbuild/\n")
    code, out, err = run(capsys, "init", d)
    assert code == 0, err
    assert (d / "README.md").read_text() == "# my notes\n"
    assert (d / ".gitignore").read_text() == "*.log\nbuild/\n.pio/\n.pio-core/\n"
    assert "kept your README.md, .gitignore (added .pio/ .pio-core/)" in out
    assert (d / "platformio.ini").is_file() and (d / "models/digits/manifest.json").is_file()


def test_init_update_refuses_a_platformio_ini_it_did_not_write(tmp_path, capsys):
    (tmp_path / "platformio.ini").write_text("[env:mine]\nplatform = ststm32\n")
    code, _, err = run(capsys, "init", "--update", tmp_path)
    assert code == 1 and "was not written by tinyol" in err
    assert (tmp_path / "platformio.ini").read_text() == "[env:mine]\nplatform = ststm32\n"


@pytest.mark.parametrize("where, expect", [
    ("file/sub", "is a file, not a folder"),
    ("/proc/tinyol-project", "inside the system folder /proc"),
    ("/sys/x/y", "inside the system folder /sys"),
])
def test_init_into_an_odd_place_is_one_line_and_creates_nothing(tmp_path, capsys, where, expect):
    (tmp_path / "file").write_text("mine")
    target = where if where.startswith("/") else tmp_path / where
    code, _, err = run(capsys, "init", target)
    assert code == 1 and expect in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


# ---- compare: a verdict only on real records ------------------------------------------------
def write_log(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_compare_of_two_empty_logs_is_not_same(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_text("")
    (tmp_path / "b.jsonl").write_text("\n")
    code, out, err = run(capsys, "compare", tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    assert code == 1 and "holds no records" in err and "same" not in out


def test_compare_nan_confidence_agrees_with_itself(tmp_path, capsys):
    recs = [{"index": i, "label": 1, "prediction": 1, "confidence": float("nan"), "loss": float("nan"),
             "learned": True, "samples_seen": i + 1} for i in range(4)]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))  # NaN literals
    code, out, err = run(capsys, "compare", tmp_path / "a.jsonl", tmp_path / "a.jsonl")
    assert code == 0 and "same" in out, out + err
    recs[2]["confidence"] = 0.5
    write_log(tmp_path / "b.jsonl", recs)
    code, out, _ = run(capsys, "compare", tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    assert code == 1 and "1 lines differ" in out


@pytest.mark.parametrize("content, expect", [
    (b"\x00\xff\xfe\x89PNG\r\n", "not text"),
    (b"null\n", "a JSON null, not an object"),
    (b"[1, 2]\n", "a JSON list, not an object"),
    (b'{"index": "seven"}\n', "index is 'seven', not a whole number"),
    (b'{"index": 1, "confidence": "high"}\n', "confidence is 'high', not a number"),
    (b'{"index": 1, "samples_seen": 2.5}\n', "samples_seen is 2.5"),
    (b'{"label": 1}\n', "no 'index' field"),
])
def test_compare_odd_logs_give_one_line(tmp_path, capsys, content, expect):
    (tmp_path / "bad.jsonl").write_bytes(content)
    write_log(tmp_path / "ok.jsonl", [{"index": 0, "prediction": 1}])
    code, out, err = run(capsys, "compare", tmp_path / "ok.jsonl", tmp_path / "bad.jsonl")
    assert code == 1 and expect in err and "line 1" in err, err
    assert len(err.strip().splitlines()) <= 2  # error + hint


def test_compare_a_folder_gives_one_line(tmp_path, capsys):
    write_log(tmp_path / "ok.jsonl", [{"index": 0}])
    code, _, err = run(capsys, "compare", tmp_path / "ok.jsonl", tmp_path)
    assert code == 1 and "is a folder, not a file" in err


# ---- info --model: a malformed model folder is one line -----------------------------------
@pytest.mark.parametrize("manifest, expect", [
    (None, "is a file, not a model folder"),
    ("[1, 2]", "not a JSON object"),
    ('{"name": "x", "model_hash": 1, "input": {"scale": 1, "zero_point": 0}, '
     '"head": {"max_classes": 3}}', "no 'learner' field"),
    ("\x00\x01", "not valid JSON"),
])
def test_info_model_on_a_malformed_manifest(tmp_path, capsys, manifest, expect):
    if manifest is None:
        target = tmp_path / "model.txt"
        target.write_text("not a folder")
    else:
        target = tmp_path / "m"
        target.mkdir()
        (target / "manifest.json").write_text(manifest)
    code, _, err = run(capsys, "info", "--model", target)
    assert code == 1 and expect in err, err


# ---- fleet: figures of this run only, --min-boards that can be met, paths first ------------
def test_fleet_min_boards_that_cannot_be_met_is_refused(tmp_path, capsys):
    code, out, err = run(capsys, "fleet", "--twins", "2", "--min-boards", "5", "--rounds", "1",
                         "--state", tmp_path / "s")
    assert code == 1 and "--min-boards 5 but the fleet has 2 board(s)" in err
    assert not (tmp_path / "s").exists() and "round" not in out


def test_fleet_resume_prints_no_figures_it_did_not_measure(tmp_path, capsys):
    state = tmp_path / "state"
    argv = ["fleet", "--twins", "2", "--rounds", "2", "--every", "10", "--state", state,
            "--eval", "digits:0-9@test"]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert "fleet        accuracy" in out  # the first run measured it
    code, out, err = run(capsys, *argv, "--resume")  # both rounds are done: nothing runs
    assert code == 0, err
    assert "resumed      after round 2" in out and "rounds       0" in out
    assert "accuracy" not in out, out


@pytest.mark.parametrize("opt, make, expect", [
    ("--state", "file", "is a file"),           # click's own check (usage error, exit 2)
    ("--log", "missing/run.jsonl", "does not exist"),
    ("--log", "dir", "is a directory"),         # click's own check
    ("--state", "/proc/fleet", "inside the system folder /proc"),
])
def test_fleet_paths_are_checked_before_any_round(tmp_path, capsys, opt, make, expect):
    (tmp_path / "file").write_text("mine")
    (tmp_path / "dir").mkdir()
    target = make if make.startswith("/") else tmp_path / make
    code, out, err = run(capsys, "fleet", "--twins", "2", "--rounds", "1", "--every", "5", opt, target)
    assert code in (1, 2) and expect in err, err
    assert "round" not in out  # nothing trained
    assert (tmp_path / "file").read_text() == "mine"


def test_builds_and_platformio_cache_stay_in_the_users_folder(tmp_path, monkeypatch):
    from tinyol.targets.firmware import BuildConfig, build_env

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PLATFORMIO_CACHE_DIR", raising=False)
    env = build_env(BuildConfig("native", "models/digits"))
    for k in ("PLATFORMIO_BUILD_DIR", "PLATFORMIO_CACHE_DIR"):
        assert env[k].startswith(str(tmp_path.resolve()) + "/"), (k, env[k])


# ---- on a device: refused samples fail the run; a push checks before it stages -----------
@pytest.fixture(scope="module")
def digits_url(firmware):
    with emulator.start_native(firmware("native", model="models/digits").program, timeout=300) as t:
        yield t.url


def fence(url) -> None:
    """Stage one slice of a head push and stop there, as a cut push leaves the device."""
    with Device.open(url) as dev:
        d = dev.info.latent_dim
        dev.link.request(Msg.SET_HEAD, struct.pack("<HHBBHf", 0, 0, 1, 1, d, 0.0) + bytes(4 * d))


@pytest.mark.parametrize("mode", ["--train", "--eval"])
def test_stream_against_a_fenced_device_fails_with_the_count(digits_url, capsys, mode):
    with Device.open(digits_url) as dev:
        dev.reset()
    fence(digits_url)
    try:
        code, out, err = run(capsys, "stream", "--port", digits_url, "--data", "digits:5-9@train",
                             "--limit", 12, mode, "--no-progress")
        assert code == 1, out + err
        assert "the device refused 12 of 12 samples (12 x ERR_BUSY)" in err
        with Device.open(digits_url) as dev:
            assert dev.stats().samples_seen == 0
    finally:
        with Device.open(digits_url) as dev:
            dev.reset()  # lifts the fence


@pytest.fixture(scope="module")
def stage_url(firmware):
    with emulator.start_native(firmware("native", model="models/digits_adaptive").program,
                               timeout=300) as t:
        yield t.url


def predict_ok(url) -> bool:
    from tinyol.link.protocol import DeviceError
    with Device.open(url) as dev:
        try:
            dev.predict(np.zeros(dev.info.input_size, np.int8))
            return True
        except DeviceError:
            return False


@pytest.mark.parametrize("edit, expect", [
    ("short", "holds a stage image of"),
    ("model", "model hash mismatch"),
])
def test_push_of_a_wrong_stage_is_refused_before_the_first_slice(stage_url, tmp_path, capsys, edit, expect):
    pulled = tmp_path / "stage.npz"
    code, _, err = run(capsys, "pull", "--port", stage_url, "--out", pulled)
    assert code == 0, err
    z = dict(np.load(pulled))
    if edit == "short":
        z["stage_image"] = z["stage_image"][:-64]
    else:
        z["model_hash"] = np.int64(int(z["model_hash"]) ^ 0x5A5A5A5A)
    bad = tmp_path / "bad.npz"
    np.savez(bad, **z)
    assert predict_ok(stage_url)
    code, _, err = run(capsys, "push", "--port", stage_url, "--in", bad)
    assert code == 1 and expect in err, err
    assert predict_ok(stage_url), "the refused push left the device fenced"
    if edit == "model":
        code, _, err = run(capsys, "push", "--port", stage_url, "--in", bad, "--force")
        assert code == 0, err


# ---- fleet --emulate leaves no temporary flash behind ---------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("outcome", ["success", "error", "ctrl-c"])
def test_fleet_emulate_leaves_nothing_in_the_temp_folder(firmware, tmp_path, monkeypatch, capsys, outcome):
    import tempfile

    from tinyol import fleet as F
    from tinyol.errors import TinyolError

    firmware("native", model="models/digits")  # built once for the session
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    started = []
    real_run = F.Fleet.run

    def fleet_run(self, **kw):
        started.append(sorted(p.name for p in tmp.iterdir()))  # the boards' flash is there now
        if outcome == "error":
            raise TinyolError("a board caught fire")
        if outcome == "ctrl-c":
            raise KeyboardInterrupt
        return real_run(self, **kw)

    monkeypatch.setattr(F.Fleet, "run", fleet_run)
    code = main(["fleet", "--emulate", "1", "--rounds", "1", "--every", "5", "--eval", "",
                 "--data", "digits:5-9@train"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code == {"success": 0, "error": 1, "ctrl-c": 130}[outcome], err
    assert started and started[0], "the fleet's boards kept their flash somewhere else"
    assert list(tmp.iterdir()) == [], f"left behind: {list(tmp.iterdir())}"

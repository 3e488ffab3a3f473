"""`tinyol save|load|pull|push` against the native target (digits model)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from tinyol.cli import main
from tinyol.link.device import Device
from tinyol.targets import emulator

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def program(firmware):
    return firmware("native", "models/digits").program


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_save_load_pull_push(program, tmp_path, capsys, root):
    state = tmp_path / "state"
    state.mkdir()
    rng = np.random.default_rng(0)
    with emulator.start_native(program, state_dir=state, timeout=120) as t:
        code, out, err = run(capsys, "load", "--port", t.url)
        assert code == 1 and "ERR_NO_RECORD" in err and "tinyol save" in err
        with Device.open(t.url) as dev:
            for _ in range(30):
                dev.sample(rng.integers(-128, 128, 64, dtype=np.int8), int(rng.integers(0, 10)))
            learned = dev.get_head()
        code, out, err = run(capsys, "save", "--port", t.url, "--json")
        assert code == 0, err
        rec = json.loads(out)
        assert rec["seq"] == 1 and rec["parts"] & 1 and rec["slots"] == 12
        assert rec["saves_left"] == 10_000 * 12 - 1
        assert rec["days_at_one_save_per_minute"] == pytest.approx(rec["saves_left"] / 1440, abs=0.1)
        code, out, err = run(capsys, "pull", "--port", t.url, "--out", str(tmp_path / "head.npz"))
        assert code == 0, err
        z = np.load(tmp_path / "head.npz")
        assert np.array_equal(z["W"], learned[0]) and np.array_equal(z["active"], learned[2])
        manifest = json.loads((root / "models/digits/manifest.json").read_text())
        assert int(z["model_hash"]) == manifest["model_hash"] and int(z["samples_seen"]) == 30
        # push the exported initial head, then load the saved state back
        code, out, err = run(capsys, "push", "--port", t.url, "--in", str(root / "models/digits/head_init.npz"))
        assert code == 0, err
        with Device.open(t.url) as dev:
            w, b, active = dev.get_head()
            init = np.load(root / "models/digits/head_init.npz")
            assert np.array_equal(w, init["W"]) and active.sum() == int(init["n_classes"])
        code, out, err = run(capsys, "load", "--port", t.url)
        assert code == 0 and "record 1" in out
        with Device.open(t.url) as dev:
            assert np.array_equal(dev.get_head()[0], learned[0])
        # errors: another model's head, a head of the wrong shape
        np.savez(tmp_path / "other.npz", W=z["W"], b=z["b"], active=z["active"], model_hash=np.int64(1))
        code, out, err = run(capsys, "push", "--port", t.url, "--in", str(tmp_path / "other.npz"))
        assert code == 1 and "model hash mismatch" in err
        np.savez(tmp_path / "shape.npz", W=np.zeros((10, 16), np.float32), b=np.zeros(10, np.float32))
        code, out, err = run(capsys, "push", "--port", t.url, "--in", str(tmp_path / "shape.npz"))
        assert code == 1 and "shape mismatch" in err

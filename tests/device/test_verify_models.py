"""Every committed example model passes `tinyol verify` (device latents == TFLM's,
bit for bit) on the native target and in QEMU (SIMD kernels on the Cortex-M4)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import ROOT
from tinyol.cli import group
from tinyol.targets import emulator

pytestmark = pytest.mark.slow

MODELS = sorted(p.name for p in (ROOT / "models").iterdir() if (p / "manifest.json").is_file())
# QEMU's b-l475e-iot01a has the L476's 96 KB SRAM1; this one needs the L4R5's RAM
TOO_BIG_FOR_QEMU = {"mobilenet_v1_vww": "needs ~150 KB of SRAM (NUCLEO-L4R5ZI); QEMU models 96 KB"}


def _verify(url: str, model: str, n: int) -> dict:
    r = CliRunner().invoke(group, ["verify", "--port", url, "--model", f"models/{model}", "--n", str(n),
                                   "--random", "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


@pytest.mark.parametrize("model", MODELS)
def test_verify_native(firmware, model, monkeypatch):
    monkeypatch.chdir(ROOT)
    res = firmware("native", model=f"models/{model}")
    with emulator.start_native(res.program, timeout=300) as t:
        out = _verify(t.url, model, 25)
    assert out["samples"] == 25 and out["mismatched_samples"] == 0


@pytest.mark.qemu
@pytest.mark.parametrize("model", MODELS)
def test_verify_qemu(firmware, model, monkeypatch):
    if model in TOO_BIG_FOR_QEMU:
        pytest.skip(TOO_BIG_FOR_QEMU[model])
    monkeypatch.chdir(ROOT)
    res = firmware("nucleo_l476rg", model=f"models/{model}")
    with emulator.start_qemu("nucleo_l476rg", res.elf, timeout=300) as t:
        out = _verify(t.url, model, 10)
    assert out["samples"] == 10 and out["mismatched_samples"] == 0

"""`tinyol verify` on the all-operator model (tests/_allops_model.py: every operator and SIMD
kernel path the exporter emits, MaxPooling1D as in the issue's user model) on the native
target, in QEMU and in the real Renode: the device's latents equal TFLM's bit for bit on each,
so an emulator that mis-executes an instruction the kernels use fails here, unless the
device's boot self-test caught it and the firmware routed around it (tol_cpu.h). One firmware
build per target; the model is exported once and cached (build/test-models/).

On Renode 1.15.3 the self-test finds SSUB8/SEL wrong (docs/renode.md), MAX_POOL_2D takes its
portable path and verify is exact; forcing the fast path back (the kernels' fault mask written
through the Monitor) makes the same verify fail: the fallback is what keeps it exact.
"""
from __future__ import annotations

import json
import subprocess

import pytest
from click.testing import CliRunner
from conftest import ROOT
from tinyol.cli import group
from tinyol.link.device import Device
from tinyol import armdsp
from tinyol.targets import emulator

pytestmark = [pytest.mark.slow, pytest.mark.tf]
SSUB8_SEL = 1 << [c.name for c in armdsp.CPU_CHECKS].index("ssub8+sel")
ALL_CHECKS = (1 << len(armdsp.CPU_CHECKS)) - 1


@pytest.fixture(scope="module")
def allops():
    from _allops_model import exported

    return exported()


def _verify(url: str, model, n: int) -> dict:
    """`tinyol verify --json`'s result; with a mismatch it has also failed (exit 1)."""
    r = CliRunner().invoke(group, ["verify", "--port", url, "--model", str(model), "--n", str(n), "--random",
                                   "--seed", "7", "--json"])
    out = json.loads(r.output[r.output.index("{"):r.output.rindex("}") + 1])
    assert (r.exit_code == 0) == (out["mismatched_samples"] == 0), r.output
    return out


def test_the_model_emits_every_operator_and_path(allops):
    ops = set(json.loads((allops / "manifest.json").read_text())["ops"])
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D", "AVERAGE_POOL_2D", "ADD", "CONCATENATION",
            "MEAN", "REDUCE_MAX", "FULLY_CONNECTED", "LEAKY_RELU", "LOGISTIC", "TANH"} <= ops
    text = (allops / "backbone.c").read_text()
    assert ".depth_mult = 2" in text or "depth_mult = 2" in text.replace(" ", " ")


def test_verify_native(firmware, allops, monkeypatch):
    monkeypatch.chdir(ROOT)
    res = firmware("native", model=str(allops))
    with emulator.start_native(res.program, timeout=300) as t:
        out = _verify(t.url, allops, 20)
        with Device.open(t.url, timeout=5) as dev:
            rep = dev.board()
    assert out["samples"] == 20 and out["mismatched_samples"] == 0
    # the host build checks its portable C helpers against the same known answers
    assert rep.cpu_faults == 0 and rep.cpu_checked != 0


@pytest.mark.qemu
def test_verify_qemu(firmware, allops, monkeypatch):
    monkeypatch.chdir(ROOT)
    res = firmware("nucleo_l476rg", model=str(allops))
    with emulator.start_qemu("nucleo_l476rg", res.elf, timeout=300) as t:
        out = _verify(t.url, allops, 10)
        with Device.open(t.url, timeout=5) as dev:
            rep = dev.board()
    assert out["samples"] == 10 and out["mismatched_samples"] == 0
    assert (rep.cpu_checked, rep.cpu_faults, rep.cpu_fallbacks) == (ALL_CHECKS, 0, 0)


@pytest.mark.renode
def test_verify_renode(firmware, allops, monkeypatch):
    from _renode_util import require_renode
    from test_cpu_instructions import renode_version

    monkeypatch.setenv("TINYOL_RENODE", require_renode())
    monkeypatch.chdir(ROOT)
    res = firmware("nucleo_l476rg", model=str(allops))
    with emulator.start_renode("nucleo_l476rg", res.elf, timeout=600) as t:
        with Device.open(t.url, timeout=10) as dev:
            rep = dev.board()
            boot = " ".join(dev.link.boot_lines)
        out = _verify(t.url, allops, 10)
        assert out["samples"] == 10 and out["mismatched_samples"] == 0, out
        if renode_version() != "1.15.3":
            assert rep.cpu_faults == 0, armdsp.cpu_verdict(rep.cpu_faults, rep.cpu_fallbacks)
            return
        # Renode 1.15.3: the self-test names SSUB8+SEL, the pooling kernel routes around it
        assert (rep.cpu_checked, rep.cpu_faults, rep.cpu_fallbacks) == (ALL_CHECKS, SSUB8_SEL, SSUB8_SEL)
        assert "cpu_faults=ssub8+sel" in boot and "cpu_fallback=ssub8+sel" in boot, boot
        assert emulator.renode_cpu_report(t, res.elf) == (SSUB8_SEL, SSUB8_SEL)
        # the fast path forced back on: MAX_POOL_2D's SSUB8+SEL gives wrong latents again
        nm = subprocess.run(["arm-none-eabi-nm", str(res.elf)], capture_output=True, text=True, check=True).stdout
        addr = next(int(ln.split()[0], 16) for ln in nm.splitlines() if ln.endswith(" tol_cpu_faults_"))
        t.monitor.execute(f"sysbus WriteDoubleWord 0x{addr:08x} 0")
        bad = _verify(t.url, allops, 10)
        assert bad["mismatched_samples"] > 0, bad

"""The Robot suite tests/renode/tinyol.robot in a real Renode, run with renode-test as a
user runs it (docs/renode.md), without the cases tagged `full` (persistence on three of
the boards, verify, learning vs `tinyol simulate`): tests/device/test_renode_real.py checks those
facts more tightly, and `make test` has a time budget.
Skipped, with the reason, when no Renode or no renode-test Python is found."""
from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from _renode_util import renode_python, renode_test_launcher, require_renode
from conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.renode]

SUITE = ROOT / "tests" / "renode" / "tinyol.robot"


def test_robot_suite_passes_in_renode(firmware, tmp_path):
    require_renode()
    runner, python = renode_test_launcher(), renode_python()
    if runner is None or python is None:
        pytest.skip("renode-test or its Python (robotframework 6.1, .tools/renode-py: scripts/setup.sh) missing")
    for board in ("nucleo_l476rg", "nucleo_l432kc", "disco_l475vg_iot01a", "nucleo_l4r5zi"):
        firmware(board, "models/digits", test_build=False)     # built once per session
    tinyol = os.path.join(os.path.dirname(sys.executable), "tinyol")
    env = dict(os.environ, RENODE_PYTHON=python, RENODE_TMPDIR=str(tmp_path / "renode-tmp"))
    r = subprocess.run([runner, str(SUITE), "--variable", f"TINYOL:{tinyol}", "--exclude", "full"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    out = tmp_path / "robot_output.xml"
    assert out.is_file(), r.stdout[-3000:] + r.stderr[-2000:]
    tests = {t.get("name"): t.find("status").get("status") for t in ET.parse(out).iter("test")}
    assert r.returncode == 0, f"{tests}\n{r.stdout[-3000:]}"
    assert len(tests) == 5 and set(tests.values()) == {"PASS"}, tests
    assert sum(name.endswith(" Boots") for name in tests) == 4

"""Finding a real Renode for the tests, and driving it through its Monitor.

Order: $TINYOL_RENODE, `renode` on PATH (a user's install from the Renode releases),
then the copy scripts/setup.sh unpacks into .tools/renode/ from ../shared/renode/.
renode-test sits next to the launcher; its Python (robotframework 6.1 ...) is
.tools/renode-py (made by setup), else $RENODE_PYTHON. Without a Renode every
real-Renode test skips and says why.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from tinyol.protocol import Frame, Msg

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / ".tools"


def renode_launcher() -> str | None:
    env = os.environ.get("TINYOL_RENODE")
    if env:
        return env if os.access(env, os.X_OK) else None
    found = shutil.which("renode")
    if found:
        return found
    local = sorted(TOOLS.glob("renode/*/renode"))
    if local and shutil.which("mono"):
        return str(local[-1])
    return None


SKIP_REASON = ("no Renode: install Renode >= 1.15 from its releases and put `renode` on PATH, "
               "or run scripts/setup.sh with ../shared/renode/ present (see docs/renode.md)")


def renode_test_launcher() -> str | None:
    launcher = renode_launcher()
    if launcher is None:
        return None
    sibling = Path(launcher).resolve().parent / "renode-test"
    if sibling.is_file():
        return str(sibling)
    return shutil.which("renode-test")


def renode_python() -> str | None:
    local = TOOLS / "renode-py" / "bin" / "python"
    if local.is_file():
        return str(local)
    return os.environ.get("RENODE_PYTHON")


@pytest.fixture(autouse=True)
def _use_found_renode(monkeypatch):
    """Every test of a module that imports this fixture runs with the found Renode."""
    launcher = renode_launcher()
    if launcher is None:
        pytest.skip(SKIP_REASON)
    monkeypatch.setenv("TINYOL_RENODE", launcher)


def wait_boot(dev_link, timeout: float = 20.0) -> str:
    """The next `tinyol boot ...` line (the Link keeps lines it has seen in boot_lines)."""
    dev_link.boot_lines.clear()
    line = dev_link.wait_boot(timeout)
    assert line is not None, "no boot line after the reset"
    return line


def send_paused(target, link, msg: int, payload: bytes = b"") -> Frame:
    """Pause the machine and put a request into its console UART (it is read on resume)."""
    target.monitor.execute("pause")
    frame = Frame(int(msg), link.next_seq(), payload)
    link.send_frame(frame)
    time.sleep(0.1)   # the socket terminal hands the bytes to the UART in its own thread
    return frame


def run_until_reply(target, link, frame: Frame, step_s: float, limit: int = 2000) -> int:
    """Run the paused machine `step_s` of virtual time at a time until `frame`'s reply
    arrives; the number of steps it took."""
    for steps in range(1, limit + 1):
        target.monitor.execute(f'emulation RunFor "{step_s:.7f}"')
        for reply in link.poll(time.monotonic() + 0.05):
            if reply.seq == frame.seq:
                assert reply.type == frame.type | 0x80, reply
                return steps
    raise AssertionError(f"no reply after {limit} steps of {step_s} s")


def random_head(dev, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows, d = dev.info.max_classes, dev.info.latent_dim
    w = rng.normal(0, 0.5, (rows, d)).astype(np.float32)
    b = rng.normal(0, 0.1, rows).astype(np.float32)
    active = np.ones(rows, bool)
    return w, b, active


def heads_equal(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b))


__all__ = ["Msg", "SKIP_REASON", "renode_launcher", "renode_test_launcher", "renode_python",
           "wait_boot", "send_paused", "run_until_reply", "random_head", "heads_equal"]

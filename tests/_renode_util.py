"""Finding a real Renode for the tests, and driving it through its Monitor.

Order: $TINYOL_RENODE, `renode` on PATH (a user's install from the Renode releases),
then the copy scripts/setup.sh unpacks into .tools/renode/ from ../shared/renode/.
renode-test sits next to the launcher; its Python (robotframework 6.1 ...) is
.tools/renode-py (made by setup), else $RENODE_PYTHON. Without a Renode every
real-Renode test skips and says why; with one that is there but cannot run ($TINYOL_RENODE
not executable, the shared tarball not unpacked, no mono, a launcher that fails to start)
every real-Renode test fails with the reason: they are the only on-target check of saving
on three of the four boards, so a broken install must not pass for an absent one.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from tinyol.boards import BOARDS
from conftest import SHARED
from tinyol.link.protocol import Frame, Msg

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / ".tools"
SHARED_RENODE = SHARED / "renode"


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


@functools.lru_cache(maxsize=1)
def renode_broken() -> str | None:
    """Why a Renode that is available to this checkout cannot run (None: fine or absent)."""
    env = os.environ.get("TINYOL_RENODE")
    if env and not os.access(env, os.X_OK):
        return f"TINYOL_RENODE={env} is not an executable"
    launcher = renode_launcher()
    if launcher is None:
        if sorted(TOOLS.glob("renode/*/renode")) and not shutil.which("mono"):
            return ".tools/renode is unpacked but `mono` is missing: apt-get install mono-runtime libmono-cil-dev"
        if list(SHARED_RENODE.glob("renode-*.tar.*")):
            return f"{SHARED_RENODE} holds Renode but .tools/renode is missing: run `make setup`"
        return None
    try:
        r = subprocess.run([launcher, "--version"], capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{launcher} --version: {e}"
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        return f"{launcher} --version exited {r.returncode}: {' / '.join(tail)}"
    return None


def require_renode() -> str:
    """The launcher; fails the test if Renode is there but broken, skips it if there is none."""
    reason = renode_broken()
    if reason:
        pytest.fail(f"Renode is available but cannot run: {reason}")
    launcher = renode_launcher()
    if launcher is None:
        pytest.skip(SKIP_REASON)
    return launcher


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
    monkeypatch.setenv("TINYOL_RENODE", require_renode())


def wait_boot(dev_link, timeout: float = 20.0) -> str:
    """The next `tinyol boot ...` line (the Link keeps lines it has seen in boot_lines)."""
    dev_link.boot_lines.clear()
    line = dev_link.wait_boot(timeout)
    assert line is not None, "no boot line after the reset"
    return line


# Renode's own synchronisation quantum. Renode 1.15 cannot `emulation RunFor` less than one
# quantum (an OverflowException ends it), and the board scripts set 10 ms: a test that steps
# virtual time by 0.1 ms starts Renode with this one (start_renode(..., quantum=FINE_QUANTUM)).
FINE_QUANTUM = 0.0001


def send_paused(target, link, msg: int, payload: bytes = b"") -> Frame:
    """Pause the machine and put a request into its console UART (it is read on resume).

    The bytes go straight into the UART's receive queue through the Monitor, one WriteChar
    each: every command returns after the UART holds its byte, so the frame is complete before
    the caller runs the machine (the socket terminal would hand them over in a thread of its
    own, at a time no test can wait for)."""
    target.monitor.execute("pause")
    frame = Frame(int(msg), link.next_seq(), payload)
    uart = BOARDS[target.board].console.lower()
    for b in frame.encode():
        target.monitor.execute(f"sysbus.{uart} WriteChar {b:#04x}")
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


__all__ = ["Msg", "SKIP_REASON", "renode_launcher", "renode_broken", "require_renode", "renode_test_launcher", "renode_python",
           "wait_boot", "FINE_QUANTUM", "send_paused", "run_until_reply", "random_head", "heads_equal"]

"""A Renode that is there but cannot run fails the real-Renode tests; only an absent one skips them."""
from __future__ import annotations

import _renode_util as R
import pytest


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    R.renode_broken.cache_clear()
    yield
    R.renode_broken.cache_clear()


def test_a_launcher_that_fails_to_start_fails_the_tests(monkeypatch, tmp_path):
    fake = tmp_path / "renode"
    fake.write_text("#!/bin/sh\necho 'Cannot open assembly Renode.exe' >&2\nexit 2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("TINYOL_RENODE", str(fake))
    assert "exited 2: Cannot open assembly Renode.exe" in R.renode_broken()
    with pytest.raises(pytest.fail.Exception, match="available but cannot run"):
        R.require_renode()


def test_a_non_executable_launcher_fails_the_tests(monkeypatch, tmp_path):
    (tmp_path / "renode").write_text("")
    monkeypatch.setenv("TINYOL_RENODE", str(tmp_path / "renode"))
    with pytest.raises(pytest.fail.Exception, match="not an executable"):
        R.require_renode()


def test_shared_tarball_without_setup_fails_and_nothing_at_all_skips(monkeypatch, tmp_path):
    monkeypatch.delenv("TINYOL_RENODE", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))              # no renode, no mono on PATH
    monkeypatch.setattr(R, "TOOLS", tmp_path / "tools")
    shared = tmp_path / "shared"
    shared.mkdir()
    monkeypatch.setattr(R, "SHARED_RENODE", shared)
    with pytest.raises(pytest.skip.Exception):
        R.require_renode()
    (shared / "renode-1.15.3-linux-mono.tar.xz").write_bytes(b"")
    R.renode_broken.cache_clear()
    with pytest.raises(pytest.fail.Exception, match="make setup"):
        R.require_renode()


def test_a_working_launcher_passes(monkeypatch, tmp_path):
    fake = tmp_path / "renode"
    fake.write_text("#!/bin/sh\necho 'Renode v1.15.3'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("TINYOL_RENODE", str(fake))
    assert R.renode_broken() is None and R.require_renode() == str(fake)

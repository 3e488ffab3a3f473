"""Versions checked where the parts meet: host <-> firmware (protocol), host <-> model (format).

The firmware side is the real protocol stack compiled for the host (tests/_stream_util.py);
an older or newer peer is made by rewriting the version byte of real frames in flight
(re-encoded with the real codec), which is exactly what such a peer would send.
"""
from __future__ import annotations

import json
import shutil

import pytest
from _stream_util import CPort, compile_device
from conftest import ROOT
from tinyol import __version__, versions
from tinyol._defs import Msg
from tinyol.errors import TinyolError
from tinyol.link.protocol import REPLY_FLAG, VERSION, Frame, Link


def _reframe(data: bytes, version: int, only_info_reply: bool = False) -> bytes:
    """Re-encode every frame in `data` with another protocol version (text lines kept)."""
    out = bytearray()
    for chunk in data.split(b"\x00")[:-1]:
        try:
            f = Frame.decode(chunk)
        except ValueError:
            out += chunk + b"\x00"
            continue
        payload = f.payload
        if only_info_reply:
            if f.type != Msg.INFO | REPLY_FLAG:
                out += chunk + b"\x00"
                continue
            payload = bytes([version]) + payload[1:]
        out += Frame(f.type, f.seq, payload, version if not only_info_reply else f.version).encode()
    return bytes(out)


class HostSpeaks(CPort):
    """The host side speaks protocol `version` (a newer/older host)."""

    version = VERSION + 1

    def write(self, data: bytes) -> int:
        return super().write(_reframe(data, self.version))


class OlderFirmware(CPort):
    """The device's INFO says protocol `version` (what an older firmware reports)."""

    version = VERSION - 1

    def read(self, n: int = 1) -> bytes:
        if self.buf and self.buf.endswith(b"\x00"):
            self.buf[:] = _reframe(bytes(self.buf), self.version, only_info_reply=True)
        return super().read(n)


@pytest.fixture(scope="module")
def lib():
    return compile_device()


def _link(lib, cls):
    assert lib.sim_setup(64 * 1024, 2048, 0xFF, 0) == 0
    lib.tol_test_init()
    return Link(cls(lib), timeout=0.2, retries=1, seed=5)


def test_matching_versions_connect(lib):
    info = _link(lib, CPort).info()
    assert info.proto_version == VERSION and info.fw_version == __version__


def test_device_refusing_our_protocol_is_explained(lib):
    with pytest.raises(TinyolError) as e:
        _link(lib, HostSpeaks).info()
    assert f"does not speak protocol v{VERSION}" in str(e.value)
    assert "flash" in e.value.hint


def test_older_firmware_is_named_at_connect(lib):
    with pytest.raises(TinyolError) as e:
        _link(lib, OlderFirmware).info()
    msg = str(e.value)
    assert f"protocol v{VERSION - 1} (firmware {__version__})" in msg and "older than this host" in msg
    assert "tinyol flash" in e.value.hint


def test_model_from_incompatible_tinyol_is_refused(tmp_path, monkeypatch):
    from tinyol.cli import main
    from tinyol.model.folder import load_manifest

    model = tmp_path / "old"
    shutil.copytree(ROOT / "models" / "digits", model)
    m = json.loads((model / "manifest.json").read_text())
    major, minor = versions.model_format(__version__)
    for exported, ok in [(f"{major}.{minor}.99", True), (f"{major}.{minor + 1}.0", False),
                         ("0.0.1" if (major, minor) != (0, 0) else "1.0.0", False)]:
        m["tinyol_version"] = exported
        (model / "manifest.json").write_text(json.dumps(m))
        if ok:
            assert load_manifest(str(model))["tinyol_version"] == exported
            continue
        with pytest.raises(TinyolError) as e:
            load_manifest(str(model))
        assert f"exported by tinyol {exported}" in str(e.value)
        monkeypatch.chdir(tmp_path)
        assert main(["build", "--board", "native", "--model", "old"]) != 0


@pytest.mark.parametrize("argv", [
    ["stream", "--model", "models/digits", "--data", "digits", "--limit", "3"],
    ["set"], ["save"], ["load"], ["reset"], ["pull", "--out", "{tmp}/head.npz"],
    ["push", "--in", "models/digits/head_init.npz"],
], ids=lambda a: a[0])
def test_every_verb_names_an_older_firmware(lib, argv, tmp_path, monkeypatch, capsys):
    """Every command that talks to a device connects through Link.info: an older firmware
    gets the explained version error, not a parse failure or a wrong answer."""
    import tinyol.link.protocol
    from tinyol.cli import main

    assert lib.sim_setup(64 * 1024, 2048, 0xFF, 0) == 0
    lib.tol_test_init()
    monkeypatch.setattr(tinyol.link.protocol, "open_serial", lambda url, **kw: OlderFirmware(lib))
    monkeypatch.chdir(ROOT)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main([*argv, "--port", "loop://", "--timeout", "0.2"]) == 1
    err = capsys.readouterr().err
    assert f"error: the device speaks protocol v{VERSION - 1} (firmware {__version__})" in err
    assert "older than this host" in err and "hint: rebuild and flash it" in err

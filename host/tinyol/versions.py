"""Versions that must agree, checked where the parts meet (docs/project.md, "Versions").

* **Protocol** (``VERSION``, generated into _defs.py from tol_proto.h; in every frame
  header and INFO byte 0): the host and the firmware speak it or the host stops at connect
  time (:func:`check_firmware`, called by ``Link.info``), saying which side is older.
  Within one protocol version any firmware and host work together.
* **Firmware** (``TOL_FW_VERSION_NUM``, INFO): the tinyol release the firmware was
  built from; shown by ``tinyol info`` and named in every version error.
* **Model** (``tinyol_version`` in an export's manifest.json, ``model_format``
  below): the release that exported it. A model exported by a release with another
  model format cannot be built or streamed: re-export it (checked by
  ``model_folder.check_format``).
"""
from __future__ import annotations

import struct

from . import __version__
from ._defs import VERSION
from .errors import TinyolError

#: Model directories this release can build and stream: exported by releases with this
#: (major, minor) — 0.x releases may change the model files in any minor release.
MODEL_FORMAT = tuple(int(v) for v in __version__.split(".")[:2])


def parse(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in version.split(".")[:3])
    except (AttributeError, ValueError):
        raise TinyolError(f"unreadable version {version!r}") from None


def model_format(version: str) -> tuple[int, int]:
    major, minor = parse(version)[:2]
    return (major, minor) if major == 0 else (major, 0)


def fw_version(num: int) -> str:
    return f"{num >> 16}.{(num >> 8) & 0xFF}.{num & 0xFF}"


def check_firmware(info_payload: bytes) -> None:
    """INFO's first bytes: protocol version u8, flags u8, max payload u16, firmware u32."""
    if len(info_payload) < 8:
        return  # Info.parse reports the short reply
    proto, fw = info_payload[0], struct.unpack_from("<I", info_payload, 4)[0]
    if proto != VERSION:
        raise protocol_mismatch(proto, fw_version(fw))


def protocol_mismatch(device_proto: int | None, device_fw: str | None = None) -> TinyolError:
    fw = f"firmware {device_fw}" if device_fw else "its firmware"
    if device_proto is None:  # the device refused our frames (ERR_VERSION): it cannot read them
        return TinyolError(
            f"the device does not speak protocol v{VERSION} of this tinyol {__version__} "
            "(it answered 'unsupported protocol version')",
            hint="rebuild and flash the firmware with this tinyol (tinyol flash --board BOARD), "
                 "or use the tinyol release it was built with")
    older = device_proto < VERSION
    return TinyolError(
        f"the device speaks protocol v{device_proto} ({fw}); this tinyol {__version__} speaks "
        f"v{VERSION}: the firmware is {'older' if older else 'newer'} than this host",
        hint=("rebuild and flash it with this tinyol: tinyol flash --board BOARD" if older else
              "upgrade the host: pip install -U tinyol (or flash firmware built by this tinyol)"))

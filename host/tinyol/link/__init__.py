"""The serial line to one device: frames and `Link` (`protocol`: COBS + CRC-32, request/reply,
the one INFO path with the version check), `Pipeline` (up to 7 requests in flight, exactly
once), `Device` (the protocol's messages as methods), `Stream` (a data set through the
pipeline, prequential accuracy) and `resume` (a run's journal, LOG and LOG.wal: `RunLog`, and
`Resume`, which completes an interrupted run exactly once). Layer 5: imports base, data,
learn, model and targets.
"""
from .._lazy import exports

_WHERE = {
    "Device": "device",
    "DeviceError": "protocol",
    "DeviceGone": "protocol",
    "DeviceReset": "protocol",
    "Frame": "protocol",
    "Info": "protocol",
    "Link": "protocol",
    "LinkTimeout": "protocol",
    "Pipeline": "pipeline",
    "Record": "stream",
    "Resume": "resume",
    "RunLog": "resume",
    "Stream": "stream",
    "Summary": "stream",
    "open_serial": "protocol",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)

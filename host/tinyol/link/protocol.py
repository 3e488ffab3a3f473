"""The host side of the serial protocol (spec: docs/protocol.md).

Pure functions for the codec (COBS, CRC-32, frames) plus :class:`Link`, a
request/reply client over any pyserial URL with retransmission. The device
side is mcu/src/tol_proto.c + tol_server.c; tests drive the two against each other.
"""
from __future__ import annotations

import os
import random
import struct
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterator

import serial

from .. import versions
from .._defs import MSG_TEXT, STATUS_TEXT, VERSION, Msg, Status
from ..errors import TinyolError

HEADER = struct.Struct("<BBHH")  # version, type, seq, length
CRC_BYTES = 4
REPLY_FLAG = 0x80
TEXT_PREFIX = b"tinyol "


def crc32(data: bytes) -> int:
    """CRC-32/IEEE (same as zlib.crc32): the frame checksum."""
    return zlib.crc32(data) & 0xFFFFFFFF


def cobs_encode(data: bytes) -> bytes:
    out = bytearray([0])
    code_at, code = 0, 1
    for b in data:
        if b == 0:
            out[code_at] = code
            code_at, code = len(out), 1
            out.append(0)
        else:
            out.append(b)
            code += 1
            if code == 0xFF:
                out[code_at] = code
                code_at, code = len(out), 1
                out.append(0)
    out[code_at] = code
    return bytes(out)


def cobs_decode(data: bytes) -> bytes:
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        code = data[i]
        i += 1
        if code == 0 or i + code - 1 > n:
            raise ValueError("bad COBS code byte")
        block = data[i : i + code - 1]
        if 0 in block:
            raise ValueError("zero inside COBS block")
        out += block
        i += code - 1
        if code != 0xFF and i < n:
            out.append(0)
    return bytes(out)


@dataclass(frozen=True)
class Frame:
    type: int
    seq: int
    payload: bytes = b""
    version: int = VERSION

    def encode(self) -> bytes:
        """Wire bytes: COBS(header | payload | crc) followed by the 0x00 delimiter."""
        raw = HEADER.pack(self.version, self.type, self.seq, len(self.payload)) + self.payload
        return cobs_encode(raw + struct.pack("<I", crc32(raw))) + b"\x00"

    @classmethod
    def decode(cls, chunk: bytes) -> "Frame":
        """Parse one delimited chunk (without its 0x00). Raises ValueError."""
        raw = cobs_decode(chunk)
        if len(raw) < HEADER.size + CRC_BYTES:
            raise ValueError("frame too short")
        (want,) = struct.unpack_from("<I", raw, len(raw) - CRC_BYTES)
        if crc32(raw[:-CRC_BYTES]) != want:
            raise ValueError("CRC mismatch")
        version, typ, seq, length = HEADER.unpack_from(raw)
        if length != len(raw) - HEADER.size - CRC_BYTES:
            raise ValueError("length field disagrees with frame size")
        return cls(typ, seq, bytes(raw[HEADER.size : HEADER.size + length]), version)


class Deframer:
    """Splits a byte stream into frames and device text lines."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.garbage = 0

    def feed(self, data: bytes) -> Iterator[Frame | str]:
        self.buf += data
        while True:
            try:
                end = self.buf.index(0)
            except ValueError:
                return
            chunk = bytes(self.buf[:end])
            del self.buf[: end + 1]
            if not chunk:
                continue
            try:
                yield Frame.decode(chunk)
            except ValueError:
                start = chunk.find(TEXT_PREFIX)
                if start >= 0:
                    yield chunk[start:].decode("ascii", "replace").strip()
                else:
                    self.garbage += 1


class DeviceError(TinyolError):
    """The device answered a request with an ERROR frame."""

    def __init__(self, status: int, request: int, detail: int = 0):
        self.status = status
        self.request = request
        self.detail = detail
        try:
            name = Status(status).name
            text = STATUS_TEXT[Status(status)]
        except ValueError:
            name, text = f"status {status}", "unknown status"
        try:
            req = Msg(request).name
        except ValueError:
            req = f"0x{request:02x}"
        super().__init__(f"device refused {req}: {name} ({text})")


class DeviceReset(TinyolError):
    """The device rebooted during a session (its boot counter or banner changed)."""


class LinkTimeout(TinyolError):
    pass


class DeviceGone(TinyolError):
    """The serial port closed or failed under us (unplugged board, emulator stopped)."""


class PortBusy(TinyolError):
    """The target serves another client (the native target says so with a `tinyol busy` line)."""


@dataclass
class Observed:
    """What came back while waiting for replies: the evidence behind a diagnosis."""
    bytes_in: int = 0
    damaged: int = 0          # chunks that failed COBS/CRC/length checks on the host
    link_errors: int = 0      # seq-0 ERROR replies: the device saw a damaged frame from us
    stale: int = 0            # valid replies to other (older or repeated) requests
    replies: int = 0          # valid replies to the request(s) waited for
    seconds: float = 0.0

    def describe(self) -> str:
        parts = [f"{self.bytes_in} bytes came back"]
        if self.damaged:
            parts.append(f"{self.damaged} damaged frames")
        if self.link_errors:
            parts.append(f"{self.link_errors} reports from the device of damaged frames it received")
        if self.stale:
            parts.append(f"{self.stale} late or repeated replies")
        return ", ".join(parts)

    @property
    def silent(self) -> bool:
        return self.bytes_in == 0


def diagnose(what: str, attempts: int, obs: Observed, url: str = "") -> tuple[str, str]:
    """(message, hint) for a request that got no usable reply: name what was observed;
    say "gone" only when nothing at all came back."""
    head = f"no reply to {what} after {attempts} attempts in {obs.seconds:.1f} s"
    if obs.silent:
        hint = "the board was unplugged or hung, or the emulator stopped"
        if url.startswith("socket://"):
            hint += "; emulators serve one client at a time: is another client connected?"
        return f"{head}: nothing came back (silence): the device is gone or hung", hint
    if obs.damaged or obs.link_errors:
        return (f"{head}: the device is alive but the link is damaging frames ({obs.describe()})",
                "a noisy or mismatched serial line (check the cable and baud rate); "
                "--retries and --timeout give it more attempts")
    return (f"{head}: the device is alive but slow or busy ({obs.describe()})",
            "raise --timeout (seconds per attempt) or --retries")


# ---- INFO -------------------------------------------------------------------------

INFO_FIXED = struct.Struct("<BBHIIIIIIIIIIHHHBB")
INFO_FLAGS = {0x01: "emulated", 0x02: "test_build", 0x04: "simd_kernels", 0x08: "has_model",
              0x10: "store_damaged",  # boot skipped a damaged record newer than the one it restored
              0x20: "cpu_fault"}      # the core failed its boot self-test (BOARD names the check)
HEAD_MODES = {0: "classifier", 1: "autoencoder"}
# what the persistent store gave at boot (INFO's tail; docs/persistence.md)
STORE_STATES = ("none", "unavailable", "empty", "loaded", "foreign", "rejected")


@dataclass
class Info:
    proto_version: int
    flags: list[str]
    max_payload: int
    fw_version: str
    model_hash: int
    boot_count: int
    cpu_hz: int
    ram_used: int
    ram_total: int
    ram2_used: int
    ram2_total: int
    flash_used: int
    flash_total: int
    input_size: int
    latent_dim: int
    max_classes: int
    head_mode: str
    replay_bits: int
    board: str
    model: str
    store: str = "none"     # persistent store at boot: STORE_STATES
    store_seq: int = 0      # sequence number of the record loaded at boot
    stage_layers: int = 0   # adaptive stage (docs/adaptive.md): 0 = the one-layer head
    stage_params: int = 0   # float32 parameters trained on the device
    stage_bytes: int = 0    # its RAM (tol_stage_bytes)
    stage_hash: int = 0     # tol_stage_hash of its layer list

    @classmethod
    def parse(cls, p: bytes) -> "Info":
        if len(p) < INFO_FIXED.size + 2:
            raise TinyolError(f"INFO reply too short ({len(p)} bytes)")
        v = INFO_FIXED.unpack_from(p)
        at = INFO_FIXED.size
        strings = []
        for _ in range(2):
            n = p[at]
            strings.append(p[at + 1 : at + 1 + n].decode("ascii", "replace"))
            at += 1 + n
        fw = v[3]
        store, store_seq = "none", 0
        if len(p) >= at + 5:
            st, store_seq = struct.unpack_from("<BI", p, at)
            store = STORE_STATES[st] if st < len(STORE_STATES) else str(st)
        stage = (0, 0, 0, 0)
        if len(p) >= at + 5 + 13:
            stage = struct.unpack_from("<BIII", p, at + 5)
        return cls(
            proto_version=v[0],
            flags=[name for bit, name in INFO_FLAGS.items() if v[1] & bit],
            max_payload=v[2],
            fw_version=f"{fw >> 16}.{(fw >> 8) & 0xFF}.{fw & 0xFF}",
            model_hash=v[4],
            boot_count=v[5],
            cpu_hz=v[6],
            ram_used=v[7],
            ram_total=v[8],
            ram2_used=v[9],
            ram2_total=v[10],
            flash_used=v[11],
            flash_total=v[12],
            input_size=v[13],
            latent_dim=v[14],
            max_classes=v[15],
            head_mode=HEAD_MODES.get(v[16], str(v[16])),
            replay_bits=v[17],
            board=strings[0],
            model=strings[1],
            stage_layers=stage[0],
            stage_params=stage[1],
            stage_bytes=stage[2],
            stage_hash=stage[3],
            store=store,
            store_seq=store_seq,
        )


def info_reply(payload: bytes) -> Info:
    """An INFO reply's payload as Info, after checking the firmware speaks our protocol
    version (before parsing: another version may lay INFO out differently)."""
    versions.check_firmware(payload)
    return Info.parse(payload)


# ---- the link -------------------------------------------------------------------------


@dataclass
class LinkStats:
    requests: int = 0
    retries: int = 0
    bytes_out: int = 0
    bytes_in: int = 0
    garbage_frames: int = 0
    device_lines: list[str] = field(default_factory=list)
    # seconds from the last copy of the latest answered request (Link.request) to its reply: the
    # link's round trip as measured, what a Pipeline paces its damage resends by before it has
    # timed one of its own (None: no reply yet)
    reply_time: float | None = None


def open_serial(url: str, baudrate: int = 115200, timeout: float = 0.05):
    """Open a pyserial URL (/dev/ttyACM0, socket://host:port, loop://) with a clear error.
    A device path is opened exclusively (pyserial's flock): a second tinyol on the same
    board is refused in one line instead of reading the first one's replies (a socket://
    target already serves one client at a time)."""
    exclusive = {"exclusive": True} if "://" not in url and os.name == "posix" else {}
    try:
        return serial.serial_for_url(url, baudrate=baudrate, timeout=timeout, **exclusive)
    except (serial.SerialException, OSError, ValueError) as e:
        if exclusive and "lock" in str(e).lower():
            raise PortBusy(f"serial port {url} is in use by another program",
                           hint="another `tinyol stream`, `tinyol monitor` or a terminal has it open: "
                                "close it and retry") from None
        raise TinyolError(
            f"cannot open serial port {url!r}: {e}",
            hint="is the device (or `tinyol emulate`) running? ports are pyserial URLs, "
            "e.g. /dev/ttyACM0 or socket://127.0.0.1:4321",
        ) from None


def read_available(port) -> tuple[bytes, Exception | None]:
    """Whatever arrived (waiting up to the port's timeout for the first byte), and the error
    if the port failed or closed meanwhile; bytes read before the error are kept."""
    data = b""
    try:
        data = port.read(1)
        if data:
            waiting = port.in_waiting
            if waiting:
                data += port.read(waiting)
    except (serial.SerialException, OSError) as e:
        return data, e
    return data, None


class Link:
    """Request/reply over a serial port with retransmission.

    Each request gets a fresh sequence number; when a reply is lost or
    corrupted the *same* frame is resent, and the device answers a repeat from
    its reply cache without executing it again (exactly-once learning).
    """

    BACKOFF = 2.0        # each further attempt waits this much longer ...
    BACKOFF_MAX = 8.0    # ... up to this multiple of `timeout`

    def __init__(self, port, *, timeout: float = 2.0, retries: int = 5, patience: float = 20.0,
                 on_line: Callable[[str], None] | None = None, seed: int | None = None,
                 url: str = ""):
        self.port = port
        self.timeout = timeout
        self.retries = retries      # attempts met by silence before giving up
        self.patience = patience    # seconds a live but damaging link may take to get a reply through
        self.url = url
        self.observed = Observed()
        self.deframer = Deframer()
        self.stats = LinkStats()
        self.on_line = on_line
        rng = random.Random(seed)
        self.seq = rng.randrange(1, 0xFFFF)  # random start: a restarted host never reuses (seq, crc)
        self.boot_lines: list[str] = []

    @classmethod
    def open(cls, url: str, **kw) -> "Link":
        return cls(open_serial(url), url=url, **kw)

    def close(self) -> None:
        self.port.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- the parts a request is made of (Link.request, and tinyol.link.pipeline's Pipeline)
    def next_seq(self) -> int:
        """A fresh sequence number for a new request."""
        self.seq = self.seq % 0xFFFF + 1  # 1..65535, never 0 (0 = link-level error)
        return self.seq

    def write(self, wire: bytes) -> None:
        """Send encoded frame bytes (counted in stats.bytes_out); a failed port: DeviceGone."""
        try:
            self.port.write(wire)
        except (serial.SerialException, OSError) as e:
            raise DeviceGone(f"the device went away: {e}",
                             hint="it was unplugged, reset into a bootloader, or the emulator "
                                  "stopped") from None
        self.stats.bytes_out += len(wire)

    def read(self, wait: float | None = None) -> bytes:
        """Whatever arrived, waiting up to `wait` s (at most 50 ms; None: the port's timeout)
        for the first byte. A port that failed or closed: PortBusy or DeviceGone (see gone)."""
        if wait is not None:
            self.port.timeout = min(0.05, max(0.001, wait))
        data, gone = read_available(self.port)
        if gone is not None:
            self.gone(gone, data)
        return data

    def receive(self, data: bytes) -> Iterator[Frame]:
        """Feed received bytes: yields each complete frame, handles device text lines (boot,
        busy, fault) on the way; counts stats.bytes_in and damaged frames (stats.garbage_frames)."""
        self.stats.bytes_in += len(data)
        for item in self.deframer.feed(data):
            if isinstance(item, str):
                self._handle_line(item)
            else:
                yield item
            self.stats.garbage_frames = self.deframer.garbage
        self.stats.garbage_frames = self.deframer.garbage

    def _handle_line(self, line: str) -> None:
        self.stats.device_lines.append(line)
        if line.startswith("tinyol busy"):
            raise PortBusy(f"port busy: {line.removeprefix('tinyol busy: ')}",
                           hint="the target serves one client at a time: close the other "
                                "client (another `tinyol stream`, a terminal) and retry")
        if line.startswith("tinyol boot"):
            self.boot_lines.append(line)
        if self.on_line:
            self.on_line(line)

    def send_frame(self, frame: Frame) -> None:
        self.write(frame.encode())

    def poll(self, deadline: float, stop_on_damage: bool = False) -> Iterator[Frame]:
        """Yield frames received until the deadline (or, with `stop_on_damage`, until a
        damaged frame arrives: the reply it was is lost, waiting longer is pointless)."""
        while time.monotonic() < deadline:
            data = self.read()
            if not data:
                continue
            self.observed.bytes_in += len(data)
            g = self.deframer.garbage
            yield from self.receive(data)
            self.observed.damaged += self.deframer.garbage - g
            if stop_on_damage and self.deframer.garbage != g:
                return

    def gone(self, err: Exception, data: bytes = b"") -> None:
        """The port failed or closed: raise PortBusy if the last words were `tinyol busy`,
        else DeviceGone."""
        for item in self.deframer.feed(data + b"\x00"):
            if isinstance(item, str):
                self._handle_line(item)  # raises PortBusy for a busy line
        raise DeviceGone(f"the device went away: {err}",
                         hint="it was unplugged, reset into a bootloader, or the emulator stopped")

    def request(self, msg: int, payload: bytes = b"", *, timeout: float | None = None) -> bytes:
        """Send one request, return the reply payload; raise DeviceError on an ERROR reply.

        The *identical* frame is resent up to `retries` times (the device answers a repeat
        from its reply cache, never executing it twice). An attempt met by silence makes
        the next wait `BACKOFF` times longer (at most `BACKOFF_MAX` x `timeout`); one met by
        a damaged frame is repeated at once, without backing off (the device is there; the
        line damages frames). Without a usable reply: LinkTimeout naming what was observed
        (silence, damage, late replies)."""
        frame = Frame(int(msg), self.next_seq(), bytes(payload))
        self.stats.requests += 1
        wait = self.timeout if timeout is None else timeout
        self.observed = obs = Observed()
        t0 = time.monotonic()
        silent = attempt = 0
        # give up after `retries` silent attempts in a row, or when a live but damaging
        # link has had `patience` seconds (silence is never cut short by patience)
        while silent <= self.retries and (silent > 0 or attempt == 0 or time.monotonic() - t0 < self.patience):
            if attempt:
                self.stats.retries += 1
            attempt += 1
            self.send_frame(frame)
            sent = time.monotonic()
            step = wait * min(self.BACKOFF ** silent, self.BACKOFF_MAX)
            heard = obs.damaged + obs.link_errors + obs.stale  # evidence the device hears us
            for reply in self.poll(time.monotonic() + step, stop_on_damage=True):
                if reply.seq == 0 and reply.type == Msg.ERROR:
                    obs.link_errors += 1
                    break  # the device saw a damaged frame (perhaps ours): resend
                if reply.seq != frame.seq:
                    obs.stale += 1
                    continue  # a stale reply
                if reply.type == frame.type and reply.payload == frame.payload:
                    raise TinyolError(
                        f"the port echoes what is sent to it: not a tinyol device ({self.url or 'port'})",
                        hint="a loopback, a terminal or another device's port? pass the board's port")
                if reply.type == Msg.ERROR:
                    status, req = reply.payload[0], reply.payload[1]
                    detail = struct.unpack_from("<H", reply.payload, 2)[0]
                    if status in (Status.ERR_CRC, Status.ERR_FRAME):
                        obs.link_errors += 1
                        break  # our frame was damaged on the way: resend it
                    raise DeviceError(status, req, detail)
                if reply.type == frame.type | REPLY_FLAG:
                    obs.replies += 1
                    self.stats.reply_time = time.monotonic() - sent
                    return reply.payload
            # silent: no sign of this exchange (a boot line or other text does not count)
            silent = silent + 1 if obs.damaged + obs.link_errors + obs.stale == heard else 0
        obs.seconds = time.monotonic() - t0
        try:
            what = f"{Msg(frame.type).name} ({MSG_TEXT[Msg(frame.type)]})"
        except ValueError:
            what = f"message 0x{frame.type:02x}"
        msg_, hint = diagnose(what, attempt, obs, self.url)
        raise LinkTimeout(msg_, hint=hint)

    def info(self, timeout: float | None = None) -> Info:
        """INFO, the one way in: a device speaking another protocol version gets the explained
        error (versions.check_firmware), whoever asks (Device, `tinyol info`, the pipeline)."""
        try:
            payload = self.request(Msg.INFO, timeout=timeout)
        except DeviceError as e:
            if e.status == Status.ERR_VERSION:
                raise versions.protocol_mismatch(None) from None
            raise
        return info_reply(payload)

    def wait_boot(self, timeout: float = 10.0) -> str | None:
        """Wait for a `tinyol boot ...` line (e.g. right after starting an emulator)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.boot_lines:
            for _ in self.poll(min(deadline, time.monotonic() + 0.1)):
                pass
        return self.boot_lines[-1] if self.boot_lines else None

"""The protocol codec: Python vs C (compiled on the host), both directions.

Oracles: zlib's CRC-32 for the checksum; a direct transcription of the COBS
definition (split on zeros, 254-byte blocks) for the byte stuffing; the other
implementation for frames.
"""
from __future__ import annotations

import ctypes
import random
import struct
import zlib

import pytest
from conftest import ROOT, compile_shared
from tinyol._defs import Msg, Status
from tinyol.link.protocol import Deframer, Frame, Info, cobs_decode, cobs_encode, crc32

MCU = ROOT / "mcu"
CORE = [MCU / "src" / f for f in ("tol_crc32.c", "tol_cobs.c", "tol_proto.c", "tol_status.c", "tol_server.c", "tol_cpu.c")]


@pytest.fixture(scope="module")
def lib():
    lib = compile_shared(CORE + [ROOT / "tests/c/hal_capture.c", ROOT / "tests/c/flash_region_fixed.c",
                          MCU / "app/nomodel/nomodel.c"],
                         [MCU / "include", MCU / "app/nomodel"], {"TOL_TEST_BUILD": 0})
    lib.tol_crc32.restype = ctypes.c_uint32
    lib.tol_crc32.argtypes = [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_size_t]
    lib.tol_cobs_encode.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t,
                                    ctypes.POINTER(ctypes.c_size_t)]
    lib.tol_cobs_decode_inplace.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
    lib.tol_test_feed.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.tol_test_take.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.tol_test_take.restype = ctypes.c_size_t
    lib.tol_status_name.restype = ctypes.c_char_p
    return lib


def cobs_reference(data: bytes) -> bytes:
    """COBS straight from its definition: each zero-terminated piece becomes
    [len+1] + piece, pieces longer than 254 split without a zero."""
    out = bytearray()
    for piece in data.split(b"\x00"):
        while len(piece) >= 254:
            out += bytes([255]) + piece[:254]
            piece = piece[254:]
        out += bytes([len(piece) + 1]) + piece
    return bytes(out)


SAMPLES = [b"", b"\x00", b"\x00\x00", b"abc", b"a\x00b", bytes(range(1, 255)), bytes(range(1, 256)),
           bytes(254 * [7]), bytes(255 * [7]), bytes(253 * [1]) + b"\x00", bytes(600 * [0]),
           bytes(random.Random(1).randrange(256) for _ in range(1000))]


@pytest.mark.parametrize("data", SAMPLES, ids=range(len(SAMPLES)))
def test_cobs_python_matches_definition_and_c(lib, data):
    enc = cobs_encode(data)
    assert 0 not in enc
    assert enc == cobs_reference(data)
    out = ctypes.create_string_buffer(len(data) + len(data) // 254 + 2)
    n = ctypes.c_size_t()
    assert lib.tol_cobs_encode(out, len(out), data, len(data), ctypes.byref(n)) == 0
    assert out.raw[: n.value] == enc
    assert cobs_decode(enc) == data
    buf = ctypes.create_string_buffer(enc, len(enc))
    assert lib.tol_cobs_decode_inplace(buf, len(enc), ctypes.byref(n)) == 0
    assert buf.raw[: n.value] == data


def test_cobs_rejects_bad_input(lib):
    n = ctypes.c_size_t()
    for bad in (b"\x05ab", b"\x02\x00", b"\x00"):
        with pytest.raises(ValueError):
            cobs_decode(bad)
        assert lib.tol_cobs_decode_inplace(ctypes.create_string_buffer(bad, len(bad)), len(bad), ctypes.byref(n)) == Status.ERR_FRAME
    small = ctypes.create_string_buffer(3)
    assert lib.tol_cobs_encode(small, 3, b"abcd", 4, ctypes.byref(n)) == Status.ERR_OVERFLOW


def test_crc32_matches_zlib(lib):
    assert lib.tol_crc32(0, b"123456789", 9) == 0xCBF43926
    rng = random.Random(2)
    for n in (0, 1, 7, 100, 1000):
        data = bytes(rng.randrange(256) for _ in range(n))
        assert lib.tol_crc32(0, data, n) == zlib.crc32(data) == crc32(data)
        half = n // 2
        assert lib.tol_crc32(lib.tol_crc32(0, data[:half], half), data[half:], n - half) == zlib.crc32(data)


def roundtrip(lib, wire: bytes) -> list:
    lib.tol_test_feed(wire, len(wire))
    out = ctypes.create_string_buffer(1 << 16)
    n = lib.tol_test_take(out, len(out))
    return list(Deframer().feed(out.raw[:n]))


def info_request(seq=5):
    return Frame(Msg.INFO, seq).encode()


def test_status_names_generated_from_one_list(lib):
    for s in Status:
        assert lib.tol_status_name(int(s)).decode() == "TOL_" + s.name


def test_c_device_answers_python_info(lib):
    lib.tol_test_init()
    items = roundtrip(lib, info_request(5))
    frames = [f for f in items if isinstance(f, Frame)]
    assert len(frames) == 1 and frames[0].type == Msg.INFO | 0x80 and frames[0].seq == 5
    info = Info.parse(frames[0].payload)
    assert info.board == "hosttest" and info.model == "none" and info.proto_version == 1
    assert info.max_payload >= 256 and info.cpu_hz == 80_000_000


def test_c_device_answers_python_board(lib):
    """BOARD (0x12): C reply parsed by tinyol.link.device.BoardReport; values from the test HAL
    (tests/c/hal_capture.c) and the fixed flash region (tests/c/flash_region_fixed.c)."""
    from tinyol.link.device import BoardReport

    lib.tol_test_init()
    reports = []
    for seq in (7, 8):
        frames = [f for f in roundtrip(lib, Frame(Msg.BOARD, seq).encode()) if isinstance(f, Frame)]
        assert len(frames) == 1 and frames[0].type == Msg.BOARD | 0x80 and frames[0].seq == seq
        assert len(frames[0].payload) == 46
        reports.append(BoardReport.parse(frames[0].payload))
    a, b = reports
    assert (a.cpu_hz, a.sysclk_hz, a.uart_baud) == (80_000_000, 80_000_000, 115_200)
    assert (a.store_start, a.store_bytes, a.flash_page_bytes, a.flash_status) == (0x080E0000, 0x20000, 2048, 0)
    assert b.cycles > a.cycles and b.cycles_epoch == a.cycles_epoch   # the counter moves between requests
    assert (a.cpu_checked, a.cpu_faults, a.cpu_fallbacks) == (0, 0, 0)   # no model: no self-test
    frames = [f for f in roundtrip(lib, Frame(Msg.BOARD, 9, b"\x00").encode()) if isinstance(f, Frame)]
    assert frames[0].type == Msg.ERROR and frames[0].payload[0] == Status.ERR_LENGTH


def test_c_device_reports_its_cpu_self_test(lib):
    """The boot self-test's verdict (tol_model_if_t.cpu) in BOARD (offset 34), INFO flag 0x10
    and the boot line, C -> Python; an older firmware's 34-byte BOARD parses with None."""
    from tinyol.link.device import BoardReport
    from tinyol.armdsp import CPU_CHECKS, cpu_checks_named, cpu_verdict

    checked, faults, fallbacks = (1 << len(CPU_CHECKS)) - 1, 0b100001, 0b1
    lib.tol_test_init_cpu(checked, faults, fallbacks)
    out = ctypes.create_string_buffer(4096)
    n = lib.tol_test_take(out, 4096)
    boot = [x for x in Deframer().feed(out.raw[:n]) if isinstance(x, str)][0]
    assert "cpu_faults=ssub8+sel,smlad" in boot and "cpu_fallback=ssub8+sel" in boot, boot
    frames = [f for f in roundtrip(lib, Frame(Msg.BOARD, 3).encode()) if isinstance(f, Frame)]
    rep = BoardReport.parse(frames[0].payload)
    assert (rep.cpu_checked, rep.cpu_faults, rep.cpu_fallbacks) == (checked, faults, fallbacks)
    assert cpu_checks_named(rep.cpu_faults) == ["ssub8+sel", "smlad"]
    line = cpu_verdict(rep.cpu_faults, rep.cpu_fallbacks)
    assert "SSUB8+SEL" in line and "portable path" in line and "SMLAD" in line and "--kernels ref" in line
    info = Info.parse([f for f in roundtrip(lib, info_request(4)) if isinstance(f, Frame)][0].payload)
    assert "cpu_fault" in info.flags
    lib.tol_test_init_cpu(checked, 0, 0)
    lib.tol_test_take(out, 4096)
    info = Info.parse([f for f in roundtrip(lib, info_request(5)) if isinstance(f, Frame)][0].payload)
    assert "cpu_fault" not in info.flags and cpu_verdict(0, 0) is None
    old = BoardReport.parse(frames[0].payload[:34])   # firmware before the self-test
    assert old.cpu_checked is None and old.cpu_faults is None and cpu_verdict(old.cpu_faults, None) is None


def test_boot_line_is_text_not_frame(lib):
    lib.tol_test_init()
    out = ctypes.create_string_buffer(4096)
    n = lib.tol_test_take(out, 4096)
    items = list(Deframer().feed(out.raw[:n]))
    assert len(items) == 1 and isinstance(items[0], str)
    assert items[0].startswith("tinyol boot board=hosttest fw=") and "model=none" in items[0]


def test_retransmission_gets_cached_reply_and_is_not_executed_twice(lib):
    lib.tol_test_init()
    req = Frame(Msg.STATS, 77).encode()
    first = [f for f in roundtrip(lib, req) if isinstance(f, Frame)]
    again = [f for f in roundtrip(lib, req) if isinstance(f, Frame)]
    assert first == again  # byte-identical reply, counters not advanced by the repeat
    ok, bad, dup = struct.unpack_from("<III", first[0].payload)
    assert (ok, dup) == (1, 0)
    fresh = [f for f in roundtrip(lib, Frame(Msg.STATS, 78).encode()) if isinstance(f, Frame)]
    ok, bad, dup = struct.unpack_from("<III", fresh[0].payload)
    assert (ok, dup) == (2, 1)


def test_every_corruption_gets_an_error_reply(lib):
    lib.tol_test_init()
    good = Frame(Msg.INFO, 9).encode()
    rng = random.Random(3)
    for i in range(200):
        wire = bytearray(good[:-1])
        pos = rng.randrange(len(wire))
        wire[pos] ^= 1 << rng.randrange(8)
        if 0 in wire:
            wire = wire.replace(b"\x00", b"\x01")
        if bytes(wire) == good[:-1]:
            continue  # the flip was undone by the zero replacement
        items = [f for f in roundtrip(lib, bytes(wire) + b"\x00") if isinstance(f, Frame)]
        assert len(items) == 1, f"no single reply for corruption at byte {pos}"
        f = items[0]
        if f.type == Msg.ERROR:
            assert f.payload[0] in (Status.ERR_FRAME, Status.ERR_CRC, Status.ERR_VERSION, Status.ERR_LENGTH)
        else:  # a flipped bit can only pass if it hit... nothing: CRC-32 catches all single-bit errors
            pytest.fail(f"corrupted frame accepted: {f}")


def test_unknown_type_wrong_length_and_oversize(lib):
    lib.tol_test_init()
    (err,) = [f for f in roundtrip(lib, Frame(0x55, 3).encode()) if isinstance(f, Frame)]
    assert err.type == Msg.ERROR and err.seq == 3 and err.payload[:2] == bytes([Status.ERR_TYPE, 0x55])
    (err,) = [f for f in roundtrip(lib, Frame(Msg.INFO, 4, b"x").encode()) if isinstance(f, Frame)]
    assert err.payload[0] == Status.ERR_LENGTH
    (err,) = [f for f in roundtrip(lib, Frame(Msg.INFO, 6, version=2).encode()) if isinstance(f, Frame)]
    assert err.payload[0] == Status.ERR_VERSION and err.seq == 6
    (err,) = [f for f in roundtrip(lib, b"\x41" * 5000 + b"\x00") if isinstance(f, Frame)]
    assert err.payload[0] == Status.ERR_OVERFLOW
    # the device still works afterwards
    (ok,) = [f for f in roundtrip(lib, info_request(10)) if isinstance(f, Frame)]
    assert ok.type == Msg.INFO | 0x80


def test_garbage_stream_never_crashes_and_device_recovers(lib):
    lib.tol_test_init()
    rng = random.Random(4)
    for _ in range(300):
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        lib.tol_test_feed(junk, len(junk))
    lib.tol_test_take(ctypes.create_string_buffer(1 << 16), 1 << 16)
    frames = [f for f in roundtrip(lib, b"\x00" + info_request(11)) if isinstance(f, Frame)]
    assert frames[-1].type == Msg.INFO | 0x80 and frames[-1].seq == 11


def test_deframer_splits_text_frames_and_garbage():
    d = Deframer()
    stream = b"tinyol boot board=x\r\n\x00" + Frame(Msg.INFO, 1, b"\x01\x02").encode() + b"\xff\xfe\x00"
    items = list(d.feed(stream[:7])) + list(d.feed(stream[7:]))
    assert items[0] == "tinyol boot board=x"
    assert items[1] == Frame(Msg.INFO, 1, b"\x01\x02")
    assert d.garbage == 1


def test_pipelined_requests_each_deduplicated(lib):
    """A host with several requests in flight may resend any of the last 8."""
    lib.tol_test_init()
    reqs = [Frame(Msg.STATS, 100 + i).encode() for i in range(8)]
    first = [[f for f in roundtrip(lib, r) if isinstance(f, Frame)][0] for r in reqs]
    for i in (0, 3, 7):
        (again,) = [f for f in roundtrip(lib, reqs[i]) if isinstance(f, Frame)]
        assert again == first[i]
    (fresh,) = [f for f in roundtrip(lib, Frame(Msg.STATS, 200).encode()) if isinstance(f, Frame)]
    ok, bad, dup = struct.unpack_from("<III", fresh.payload)
    assert (ok, dup) == (9, 3)  # 8 + 1 executed, 3 answered from the cache

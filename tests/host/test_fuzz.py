"""Fuzzing the device's protocol stack (tests/c/fuzz_app.c) on the host.

The C parser, reply cache, dispatcher and model glue (the digits model with
its learner, and the firmware without a model) are compiled with
AddressSanitizer + UndefinedBehaviorSanitizer. A seeded generator produces
well-formed requests of every type with random, boundary and hostile payloads
(NaN/Inf floats, labels past max_classes, huge lengths, bad settings), damaged
frames (bit flips, missing delimiters, retransmissions, wrong versions) and
raw garbage; the harness checks that each undamaged request gets exactly one
reply and that the device only ever sends valid frames or text lines. It runs
in `make test` with a fixed budget; the libFuzzer run (clang) is slow-marked,
and docs/streaming.md gives the command for the long run.
"""
from __future__ import annotations

import os
import random
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ROOT, STRICT
from tinyol._defs import Msg

MCU = ROOT / "mcu"
CORE = sorted((MCU / "src").glob("*.c")) + sorted((MCU / "src/kernels/ref").glob("*.c"))
BUDGET_S = float(os.environ.get("TINYOL_FUZZ_SECONDS", "6"))  # per variant (two variants)
SAN = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g", "-O1"]
VARIANTS = {
    "digits": ([MCU / "app/model.c", MCU / "app/learner_head.c", MCU / "app/wire_head.c", MCU / "embed/tinyol.c",
                MCU / "embed/tinyol_head.c", ROOT / "models/digits/backbone.c", ROOT / "models/digits/head_init.c"],
               ROOT / "models/digits"),
    "nomodel": ([MCU / "app/nomodel/nomodel.c"], MCU / "app/nomodel"),
}
MSGS = [int(m) for m in Msg]


def sources(variant):
    extra, inc = VARIANTS[variant]
    srcs = CORE + extra + [ROOT / "tests/c/hal_capture.c", ROOT / "tests/c/flash_sim.c",
                           ROOT / "tests/c/fuzz_app.c"]
    return srcs, ["-I" + str(MCU / "include"), "-I" + str(inc)]


def build_replayer(variant: str, out: Path) -> Path:
    srcs, inc = sources(variant)
    exe = out / f"fuzz_{variant}"
    subprocess.run(["gcc", *STRICT, *SAN, "-DTOL_FUZZ_MAIN", "-DTOL_TEST_BUILD=0", *inc,
                    *map(str, srcs), "-o", str(exe), "-lm"], check=True)
    return exe


# --------------------------------------------------------------------------- generator
def _floats(rng: random.Random, n: int) -> bytes:
    special = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e38, -1e38, 1e-45, 0.5, 255.0]
    vals = [rng.choice(special) if rng.random() < 0.1 else rng.uniform(-2, 2) for _ in range(n)]
    return struct.pack(f"<{n}f", *vals)


def _payload(rng: random.Random, typ: int, input_size: int = 64) -> bytes:
    r = rng.random
    if typ in (Msg.SAMPLE, Msg.PREDICT, Msg.EMBED):
        head = b"" if typ == Msg.EMBED else struct.pack("<H", rng.choice(
            [0, 1, 4, 5, 9, 10, 11, 255, 0xFFFE, 0xFFFF, rng.randrange(65536)]))
        enc = rng.choice([0, 0, 1, 1, 2, 255])
        body = (bytes(rng.randrange(256) for _ in range(input_size)) if enc != 1
                else _floats(rng, input_size))
        if r() < 0.2:  # wrong length
            body = body[: rng.randrange(len(body) + 1)] if r() < 0.5 else body + bytes(rng.randrange(1, 9))
        return head + bytes([enc]) + body
    if typ == Msg.SET:
        key = rng.choice(list(range(0, 13)) + [255])
        v = struct.pack("<f", rng.choice([float("nan"), float("inf"), -1.0, 0.0, 0.01, 0.99, 1.0, 5.0, 1e30])) \
            if r() < 0.5 else struct.pack("<I", rng.choice([0, 1, 2, 3, 8, 32, 33, 1024, 1025, 0xFFFF,
                                                            0x10000, 0xFFFFFFFF]))
        return bytes([key]) + v[: 4 if r() > 0.1 else rng.randrange(5)]
    if typ == Msg.GET:
        return bytes([rng.randrange(256)])[: 1 if r() > 0.1 else 0]
    if typ == Msg.GET_HEAD:
        return struct.pack("<HH", rng.choice([0, 1, 9, 10, 11, 0xFFFF, rng.randrange(65536)]),
                           rng.choice([0, 1, 31, 32, 33, 0xFFFF, rng.randrange(65536)]))
    if typ == Msg.BENCH:
        return struct.pack("<BH", rng.choice([0, 1, 2, 3, 4, 5, 255]),
                           rng.choice([0, 1, 2048, 2049, 0xFFFF]))
    if typ == Msg.EXIT:
        return bytes([rng.randrange(256)])
    if typ == Msg.SAVE:  # persistence: optional options byte (bit 0: without the replay buffer)
        return rng.choice([b"", b"\x00", b"\x01", bytes([rng.randrange(256)]), b"\x00\x00"])
    if typ == Msg.LOAD:
        return rng.choice([b"", b"", b"\x00"])
    if typ == Msg.SET_HEAD:
        row, off, n = rng.randrange(12), rng.choice([0, 8, 31, 32]), rng.choice([0, 1, 8, 32, 70])
        return struct.pack("<HHH", row, off, n) + _floats(rng, n + 1)[: rng.choice([4 * n + 4, 4 * n])]
    n = rng.choice([0, 0, 1, 4, rng.randrange(300), rng.randrange(5000)])
    return bytes(rng.randrange(256) for _ in range(n))


def gen_input(rng: random.Random) -> bytes:
    if rng.random() < 0.15:  # raw: garbage with zeros and stray frames
        parts = []
        for _ in range(rng.randrange(1, 6)):
            k = rng.random()
            if k < 0.4:
                parts.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))))
            elif k < 0.7:
                from tinyol.link.protocol import Frame
                typ = rng.choice(MSGS)
                w = bytearray(Frame(typ, rng.randrange(65536), _payload(rng, typ)).encode())
                for _ in range(rng.randrange(3)):
                    w[rng.randrange(len(w))] = rng.randrange(256)
                parts.append(bytes(w))
            else:
                parts.append(b"\x00" * rng.randrange(1, 4))
        return b"\x01" + b"".join(parts)
    out = bytearray(b"\x00")
    for _ in range(rng.randrange(1, 40)):
        typ = rng.choice(MSGS + [Msg.SAMPLE] * 6 + [Msg.SET] * 3 + [Msg.SAVE, Msg.LOAD] * 2
                         + [rng.randrange(256)])
        p = _payload(rng, typ)
        ctl = 0 if rng.random() < 0.7 else rng.randrange(256)
        seq = rng.randrange(1, 20) if rng.random() < 0.5 else rng.randrange(65536)
        out += struct.pack("<BHHB", typ & 0xFF, seq, len(p), ctl) + p
    return bytes(out)


def write_corpus(path: Path, rng: random.Random, n: int) -> None:
    with open(path, "wb") as f:
        for _ in range(n):
            data = gen_input(rng)
            f.write(struct.pack("<I", len(data)) + data)


@pytest.fixture(scope="module")
def replayers(tmp_path_factory):
    out = tmp_path_factory.mktemp("fuzz")
    return {v: build_replayer(v, out) for v in VARIANTS}, out


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_seeded_fuzz_no_crash(replayers, variant):
    exes, out = replayers
    rng = random.Random(20260701)
    deadline = time.monotonic() + BUDGET_S
    total = batch = 0
    while time.monotonic() < deadline:
        corpus = out / f"{variant}_{batch}.bin"
        write_corpus(corpus, rng, 300)
        r = subprocess.run([str(exes[variant]), str(corpus)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (f"crash in batch {batch} (seed 20260701), input file {corpus}:\n"
                                   + r.stderr[-3000:])
        assert "runtime error" not in r.stderr, r.stderr[-3000:]
        total += int(r.stdout.split()[-1])
        batch += 1
    assert total >= 300
    print(f"{variant}: {total} inputs in {BUDGET_S:g} s, no sanitizer report, every reply well-formed")


@pytest.mark.slow
def test_libfuzzer_short_run(tmp_path):
    clang = shutil.which("clang")
    if not clang:
        pytest.skip("clang not installed (apt-get install clang libclang-rt-14-dev)")
    srcs, inc = sources("digits")
    exe = tmp_path / "fuzz_digits_lf"
    r = subprocess.run([clang, *STRICT, "-fsanitize=fuzzer,address,undefined",
                        "-fno-sanitize-recover=all", "-g", "-O1", "-DTOL_TEST_BUILD=0", *inc,
                        *map(str, srcs), "-o", str(exe), "-lm"], capture_output=True, text=True)
    if r.returncode != 0 and "fuzzer" in r.stderr:
        pytest.skip("libFuzzer runtime missing: " + r.stderr[-300:])
    assert r.returncode == 0, r.stderr[-3000:]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rng = random.Random(1)
    for i in range(50):
        (corpus / f"seed{i}").write_bytes(gen_input(rng))
    r = subprocess.run([str(exe), str(corpus), "-seed=1", "-max_total_time=15", "-max_len=4096",
                        "-print_final_stats=1"], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "stat::number_of_executed_units" in r.stderr

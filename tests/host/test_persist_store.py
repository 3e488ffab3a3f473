"""tol_store.c on a simulated L4 flash: records, slots, wear counts, and power cuts
at every single erase/program step of a save (clean and torn)."""
from __future__ import annotations

import random

import pytest
from _persist_util import CUT, STATUS, build_store_sim
from conftest import ROOT, compile_arm_objects

PAGE = 2048
HEADER = 40


@pytest.fixture(scope="module")
def sim():
    return build_store_sim()


def payload(n, seed):
    return random.Random(seed).randbytes(n)


def test_empty_store_has_no_record(sim):
    sim.setup()
    assert sim.boot()[0] == STATUS["ERR_NO_RECORD"]
    sim.setup(fill=0x00)  # QEMU/Renode-style flash that reads 0: still no record, never garbage
    assert sim.boot()[0] == STATUS["ERR_NO_RECORD"]


@pytest.mark.parametrize("n,chunk", [(0, 13), (1, 1), (7, 13), (8, 8), (9, 4), (1000, 13), (8152, 4096)])
def test_save_then_boot_roundtrip(sim, n, chunk):
    sim.setup()
    data = payload(n, n)
    assert sim.save(data, chunk=chunk)[0] == STATUS["OK"]
    rc, got, seq, _ = sim.boot()
    assert rc == STATUS["OK"] and got == data and seq == 1


def test_slots_alternate_and_newest_wins(sim):
    sim.setup()
    datas = [payload(500 + 37 * i, i) for i in range(5)]
    for i, d in enumerate(datas):
        assert sim.save(d)[0] == STATUS["OK"]
        rc, got, seq, _ = sim.boot()
        assert (rc, got, seq) == (STATUS["OK"], d, i + 1)
    mem = sim.snapshot()[:sim.bytes]
    half = len(mem) // 2
    assert sim.capacity()[1] == 2
    # slot 0 got saves 1, 3, 5; slot 1 got 2, 4: the older record is still intact in the other slot
    assert mem[HEADER:HEADER + len(datas[4])] == datas[4]
    assert mem[half + HEADER:half + HEADER + len(datas[3])] == datas[3]


def test_other_models_record_is_not_loaded(sim):
    sim.setup()
    assert sim.save(b"abc" * 10, model_hash=0xAAAA)[0] == STATUS["OK"]
    assert sim.boot(model_hash=0xBBBB)[0] == STATUS["ERR_MODEL"]
    # a save of the new model keeps the other model's record until it is the oldest
    assert sim.save(b"new", model_hash=0xBBBB)[0] == STATUS["OK"]
    assert sim.boot(model_hash=0xBBBB)[1] == b"new"
    assert sim.boot(model_hash=0xAAAA)[1] == b"abc" * 10
    assert sim.save(b"newer", model_hash=0xBBBB)[0] == STATUS["OK"]
    assert sim.boot(model_hash=0xBBBB)[1] == b"newer"
    assert sim.boot(model_hash=0xAAAA)[0] == STATUS["ERR_MODEL"]


def test_payload_larger_than_a_slot_is_refused(sim):
    sim.setup(region_bytes=16 * 1024)
    cap, slots = sim.capacity()
    assert (cap, slots) == (8 * 1024 - HEADER, 2)
    assert sim.save(payload(cap + 1, 1))[0] == STATUS["ERR_OVERFLOW"]
    assert sim.save(payload(cap, 1))[0] == STATUS["OK"]
    assert sim.boot()[1] == payload(cap, 1)


def test_corrupted_payload_or_header_is_invalid(sim):
    sim.setup()
    a, b = payload(300, 1), payload(300, 2)
    sim.save(a)
    sim.save(b)
    img = bytearray(sim.snapshot())
    half = sim.bytes // 2
    img[half + HEADER + 100] ^= 0x01  # one bit in the newest record's payload
    sim.restore(bytes(img))
    assert sim.boot()[1] == a
    img[half + HEADER + 100] ^= 0x01
    img[half + 16] ^= 0x80  # the seq in its header
    sim.restore(bytes(img))
    assert sim.boot()[1] == a


def test_wear_counts_and_erases_per_save(sim):
    sim.setup(region_bytes=32 * 1024)
    n = 8182  # 40 + 8182 bytes -> 5 pages of 2 KB
    steps = []
    for i in range(6):
        rc, s = sim.save(payload(n, i))
        assert rc == STATUS["OK"]
        steps.append(s)
    pages = -(-(HEADER + n) // PAGE)
    dwords = -(-(HEADER + n) // 8)
    # every save erases the pages it needs, even on a slot's first use where they read 0xFF
    # (erased-ness is never inferred from 0xFF: a double-word programmed with 0xFF is not erased)
    assert steps == [pages + dwords] * 6
    assert sim.boot()[3] == 6 * pages  # the region's page erases, carried from record to record


def test_round_robin_spreads_wear_over_the_region(sim):
    """Slots sized for the largest record: a 16 KB region holds 8 slots of one 2 KB page; saves
    rotate through all of them, so each page is erased once per 8 saves, not once per 2."""
    sim.setup(region_bytes=16 * 1024, max_record=HEADER + 2000)
    assert sim.capacity() == (2048 - HEADER, 8)
    slots, steps = [], []
    for i in range(20):
        data = payload(1500 + i, i)
        rc, s = sim.save(data)
        assert rc == STATUS["OK"]
        rc, got, seq, erases = sim.boot()
        assert (rc, got, seq) == (STATUS["OK"], data, i + 1)
        slots.append(sim.slot)
        steps.append(s)
    assert slots == [i % 8 for i in range(20)]
    assert erases == 20  # one page per save, the first lap included
    # the seven older records are still intact (any of them would do after a torn save)
    sim.setup(region_bytes=16 * 1024, max_record=HEADER + 2000)
    assert sim.save(payload(3000, 1))[0] == STATUS["ERR_OVERFLOW"]  # larger than announced: refused


def _prepare(sim, n, slots=2):
    """Saves so every slot holds a record, the last two being old, prev; returns (image, prev, new)."""
    if slots == 2:
        sim.setup(region_bytes=32 * 1024)
    else:
        sim.setup(region_bytes=64 * 1024, max_record=HEADER + n + 16)
        assert sim.capacity()[1] == slots
        for i in range(slots - 2):
            assert sim.save(payload(n - 100 + i, 100 + i))[0] == STATUS["OK"]
    old, prev, new = payload(n, 10), payload(n + 5, 11), payload(n + 3, 12)
    assert sim.save(old)[0] == STATUS["OK"]
    assert sim.save(prev)[0] == STATUS["OK"]
    return sim.snapshot(), prev, new


@pytest.mark.parametrize("slots", [2, 6])
@pytest.mark.parametrize("torn", [False, True], ids=["clean", "torn"])
def test_power_cut_at_every_step_of_a_save(sim, torn, slots):
    n = 8182 - 16  # digits-sized record (~8.2 KB: head + replay buffer)
    image, prev, new = _prepare(sim, n, slots)
    rc, total = sim.save(new)
    assert rc == STATUS["OK"] and sim.boot()[1] == new
    assert total > 1000
    outcomes = {"prev": 0, "new": 0}
    for k in range(total):
        sim.restore(image)
        rc, _ = sim.save(new, cut_at=k, torn=torn, seed=k + 1)
        assert rc == CUT, f"step {k} did not cut"
        status, got, seq, _ = sim.boot()
        assert status == STATUS["OK"], f"cut at step {k}: no record loads ({status})"
        if got == prev:
            outcomes["prev"] += 1
            assert seq == slots
        else:
            assert got == new, f"cut at step {k}: garbage loaded"
            outcomes["new"] += 1
        # the store recovers: the next save succeeds and is the newest
        after = payload(777, k)
        assert sim.save(after)[0] == STATUS["OK"], f"save after a cut at step {k} failed"
        assert sim.boot()[1] == after
    # the commit double-word is the last step: cut anywhere before it, the previous state loads
    assert outcomes == {"prev": total, "new": 0}


def test_power_cut_during_the_first_save_never_gives_garbage(sim):
    data = payload(3000, 5)
    sim.setup()
    _, total = sim.save(data)
    for k in range(total):
        for torn in (False, True):
            sim.setup()
            assert sim.save(data, cut_at=k, torn=torn, seed=k + 7)[0] == CUT
            assert sim.boot()[0] == STATUS["ERR_NO_RECORD"]


def test_repeated_cuts_then_success(sim):
    """Several consecutive interrupted saves (each at a random step) keep the last good state."""
    rnd = random.Random(3)
    image, prev, new = _prepare(sim, 2000)
    sim.restore(image)
    _, total = sim.save(new)
    for trial in range(40):
        sim.restore(image)
        for _ in range(rnd.randint(1, 4)):
            k = rnd.randrange(total)
            assert sim.save(payload(2000 + 3, trial), cut_at=k, torn=True, seed=rnd.randrange(1, 1 << 31))[0] == CUT
            assert sim.boot()[1] == prev
        assert sim.save(new)[0] == STATUS["OK"]
        assert sim.boot()[1] == new


def test_programming_a_written_double_word_is_refused(sim):
    """The simulator enforces the L4 rule the store relies on (a test of the oracle)."""
    sim.setup()
    assert sim.save(b"x" * 64)[0] == STATUS["OK"]
    assert sim.lib.sim_prog_errors() == 0
    img = sim.snapshot()
    # pretend the store forgot to erase: an image where slot 1 looks blank to the scan but is not
    # (can't reach tol_flash_program directly through the store), so call the HAL entry point
    import ctypes as C
    sim.lib.tol_flash_program.argtypes = [C.c_uint32, C.c_char_p, C.c_size_t]
    assert sim.lib.tol_flash_program(0x08080000, b"\x01" * 8, 8) == STATUS["ERR_FLASH"]
    assert sim.lib.sim_prog_errors() == 1 and sim.snapshot() == img
    # a double-word programmed with 0xFF reads erased but is not: programming it again is refused
    far = 0x08080000 + 16 * 1024 - 8
    assert sim.lib.tol_flash_program(far, b"\xff" * 8, 8) == STATUS["OK"]
    assert sim.snapshot()[:sim.bytes] == img[:sim.bytes], "0xFF programmed reads like erased"
    assert sim.snapshot()[sim.bytes + (far - 0x08080000) // 8] == 1, "... but is programmed"
    assert sim.lib.tol_flash_program(far, b"\x5a" * 8, 8) == STATUS["ERR_FLASH"]
    assert sim.lib.sim_prog_errors() == 2
    # all zeros is the one value silicon lets a programmed double-word take (RM: PROGERR ... "except
    # if the data to write is 0x0000 0000")
    assert sim.lib.tol_flash_program(far, b"\0" * 8, 8) == STATUS["OK"]


def test_a_torn_double_word_reads_with_an_ecc_error(sim):
    """Cut while the commit double-word programs (torn mode): reading it is an ECC error, and the
    boot scan takes that slot as invalid (the previous record), never a fault."""
    sim.setup()
    old, new = payload(300, 1), payload(300, 2)
    assert sim.save(old)[0] == STATUS["OK"]
    img = sim.snapshot()
    rc, total = sim.save(new)
    assert rc == STATUS["OK"]
    sim.restore(img)
    assert sim.save(new, cut_at=total - 1, torn=True, seed=7)[0] == -1   # the commit is the last step
    import ctypes as C
    sim.lib.sim_ecc_errors.restype = C.c_long
    rc, got, seq, _ = sim.boot()
    assert (rc, got, seq) == (STATUS["OK"], old, 1)
    assert sim.lib.sim_ecc_errors() >= 1, "the scan read the torn commit double-word"


def test_store_compiles_for_cortex_m4():
    compile_arm_objects([ROOT / "mcu/src/tol_store.c"], [ROOT / "mcu/include"])


def test_flash_driver_compiles_for_cortex_m4():
    compile_arm_objects([ROOT / "mcu/boards/stm32l4/flash_stm32l4.c"],
                        [ROOT / "mcu/include", ROOT / "mcu/boards/stm32l4"])


def test_native_flash_compiles_strict(tmp_path):
    import subprocess

    from conftest import STRICT
    subprocess.run(["gcc", *STRICT, "-D_DEFAULT_SOURCE", f"-I{ROOT / 'mcu/include'}",
                    f"-I{ROOT / 'mcu/boards/native'}", "-c", str(ROOT / "mcu/boards/native/flash_native.c"),
                    "-o", str(tmp_path / "f.o")], check=True)

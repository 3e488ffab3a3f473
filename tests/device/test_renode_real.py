"""The firmware in a real Renode (>= 1.15; see docs/renode.md and tests/_renode_util.py).

Every board: boots, answers INFO over the socket terminal, learns, SAVEs, and after a
machine reset restores the learned head bit for bit (same predictions); LOAD works; then
`tinyol doctor` passes on it (one boot for both).
NUCLEO-L476RG in full: `tinyol verify` bit-exact against TFLM; a learning stream with
the predictions of the reference learner (`tinyol simulate`); a power cut (machine
reset at a chosen instruction) at many points of a SAVE leaves the previous or the new
record, never garbage. `tinyol emulate --emulator renode </dev/null` keeps serving.
The Robot suite tests/renode/tinyol.robot runs as a user runs it (renode-test, docs/renode.md),
without the cases tagged `full` (persistence on three of the boards, verify, learning vs
`tinyol simulate`): the tests above check those facts more tightly. (It lives here, in a file of
many tests, so that pytest-xdist, which starts files with the most tests first, does not leave it
alone at the end of `make test`.)
Skipped, with the reason, when no Renode (or no renode-test Python) is found.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from _renode_util import (FINE_QUANTUM, Msg, _use_found_renode, heads_equal, random_head,  # noqa: F401
                          renode_python, renode_test_launcher, run_until_reply, send_paused, wait_boot)
from _stream_util import reference_run
from click.testing import CliRunner
from conftest import ROOT
from tinyol.boards import BOARDS
from tinyol.cli import group
from tinyol.data.datasets import load_source
from tinyol.link.device import Device
from tinyol.link.stream import stream
from tinyol.targets import emulator

pytestmark = [pytest.mark.slow, pytest.mark.renode]

MODEL = "models/digits"
MANIFEST = json.loads((ROOT / MODEL / "manifest.json").read_text())
FULL_BOARD = "nucleo_l476rg"
MIPS = 100            # Renode's default PerformanceInMips of the Cortex-M (checked below)
FLASH_END = 0x08000000 + BOARDS[FULL_BOARD].flash_bytes
# flash.py's test-only windows past the end of flash (its *_OFFSET constants; not on silicon)
PROGRAM_END = FLASH_END + 0x3F0   # reads: CPU instructions when the last double-word program ended
TEAR = FLASH_END + 0x3F4          # writes: tear the double-word at this store offset
NMI_COUNT = FLASH_END + 0x3F8     # reads: NMIs raised by torn double-words so far


@pytest.fixture(scope="module")
def digits():
    X, y, _ = load_source("digits:5-9@train")
    perm = np.random.default_rng(11).permutation(len(y))
    return X[perm], y[perm]


def _renode(firmware, board, timeout=300, quantum=None):
    fw = firmware(board, MODEL, test_build=False)
    return emulator.start_renode(board, fw.elf, timeout=timeout, quantum=quantum)


def _probe(dev, X) -> list[tuple[int, float]]:
    """Predictions (class, confidence) on probe inputs: no learning."""
    from tinyol.model.folder import quantize
    q = [quantize(x.ravel(), float(MANIFEST["input"]["scale"]), int(MANIFEST["input"]["zero_point"]))
         for x in X]
    return [(r.prediction, r.value) for r in (dev.predict(x) for x in q)]


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_boot_info_save_reset_restore(firmware, digits, board):
    X, y = digits
    with _renode(firmware, board) as t:
        with Device.open(t.url, timeout=5) as dev:
            info = dev.info
            assert (info.board, info.model, info.store) == (board, "digits", "empty")
            assert "emulated" not in info.flags and info.cpu_hz == 80_000_000   # Renode's DWT counts
            assert info.flash_total == BOARDS[board].flash_bytes
            s, recs = stream(dev, X[:40], y[:40], MANIFEST, mode="train", window=4, timeout=5.0)
            assert s.samples == 40 and all(r.learned for r in recs)
            saved = dev.save()
            assert saved.seq == 1 and saved.parts & 1          # the replay buffer is in the record
            head, probe = dev.get_head(), _probe(dev, X[100:120])
            t.monitor.execute("machine Reset")
            line = wait_boot(dev.link)
            assert line.startswith(f"tinyol boot board={board} ") and "store=loaded" in line, line
            dev2 = Device(dev.link)
            assert dev2.store_status() == ("loaded", 1)
            assert heads_equal(dev2.get_head(), head)
            assert _probe(dev2, X[100:120]) == probe
            assert dev2.stats().samples_seen == 40
            loaded = dev2.load()
            assert (loaded.seq, loaded.n_active, loaded.samples_seen) == (1, int(head[2].sum()), 40)
        _doctor_passes(t.url, board)   # the socket is free again


def _doctor_passes(url, board):
    """`tinyol doctor` on the same Renode board (its broken-build cases: tests/device/test_doctor.py)."""
    from test_cpu_instructions import renode_version
    from tinyol.commands.doctor import run_checks

    checks, facts = run_checks(url, clock_seconds=0.5)
    st = {c.name: c.status for c in checks}
    assert "FAIL" not in st.values(), checks
    assert st["clock tree"] == st["console baud"] == st["flash geometry"] == st["save/load"] == "ok"
    rep = facts["board_report"]
    assert rep["sysclk_hz"] == 80_000_000 and abs(rep["uart_baud"] - 115200) < 115200 * 0.01
    assert rep["flash_page_bytes"] == BOARDS[board].page_bytes
    # Renode 1.15.3 sets SSUB8's GE flags wrongly (docs/renode.md): named, and routed around
    detail = next(c.detail for c in checks if c.name == "core self-test")
    if renode_version() == "1.15.3":
        assert st["core self-test"] == "ok" and "SSUB8+SEL" in detail and "portable path" in detail, detail


def test_verify_and_learning_equal_their_oracles(firmware, digits, monkeypatch):
    """`tinyol verify`: the backbone's latents equal TFLM's bit for bit; then a learning
    stream gives the predictions of the reference learner (`tinyol simulate`'s code)."""
    monkeypatch.chdir(ROOT)
    X, y = digits[0][:200], digits[1][:200]
    ref = reference_run(str(ROOT / MODEL), X, y)
    with _renode(firmware, FULL_BOARD) as t:
        r = CliRunner().invoke(group, ["verify", "--port", t.url, "--model", MODEL, "--n", "40", "--json"],
                               catch_exceptions=False)
        assert r.exit_code == 0, r.output
        out = json.loads(r.output)
        assert out["samples"] == 40 and out["mismatched_samples"] == 0
        with Device.open(t.url, timeout=5) as dev:
            s, recs = stream(dev, X, y, MANIFEST, mode="train", window=4, timeout=5.0)
            st = dev.stats()
    recs = sorted(recs, key=lambda r: r.samples_seen)
    preds = np.array([r.prediction for r in recs])
    assert s.samples == len(y) and np.array_equal(preds, ref["predictions"])
    np.testing.assert_allclose([r.confidence for r in recs], ref["confidence"], rtol=1e-3, atol=1e-4)
    assert st.class_counts == ref["learner"].class_count.tolist()
    assert st.replay_fill == ref["learner"].replay.fill


def _executed(mon) -> int:
    return int(mon.execute("sysbus.cpu ExecutedInstructions"), 16)


def _cut(t, dev, instructions: int):
    """Send SAVE to the paused machine, run exactly `instructions` instructions of it, then
    cut the power (machine reset) and boot again. Returns (instructions run, boot line)."""
    mon = t.monitor
    send_paused(t, dev.link, Msg.SAVE)
    mon.execute("sysbus.cpu PerformanceInMips 1")          # 1 µs of virtual time = 1 instruction
    before = _executed(mon)
    # RunFor: whole 100-instruction quanta, stopping short (with flash.py serving the store a
    # quantum can overshoot by one), then single steps to the exact count
    coarse = max(0, instructions - 300) // 100 * 100
    if coarse:
        mon.execute(f'emulation RunFor "{coarse / 1e6:.4f}"')
    rest = instructions - (_executed(mon) - before)
    if rest > 0:                                           # the remainder one by one
        mon.execute("sysbus.cpu ExecutionMode SingleStep")
        mon.execute(f"sysbus.cpu Step {rest}")
    ran = _executed(mon) - before
    mon.execute("machine Reset")
    mon.execute(f"sysbus.cpu PerformanceInMips {MIPS}")
    mon.execute("sysbus.cpu ExecutionMode Continuous")
    mon.execute("start")
    return ran, wait_boot(dev.link, timeout=90)   # the boot reads the store through flash.py


class _Sweep:
    """Power cuts during SAVE, each checked against what was stored before and what the
    device held when the SAVE arrived (a fresh random head per round)."""

    def __init__(self, t, dev, rng, exported):
        self.t, self.dev, self.rng, self.exported = t, dev, rng, exported
        self.seq, self.head = dev.stats().persist.seq, dev.get_head()   # newest record now
        self.log: list[tuple[int, str]] = []
        self.moved = True    # the newest record changed slot since the last settle

    def settle(self):
        """A complete save first: the cut save then starts from the same kind of slot."""
        self.head = random_head(self.dev, self.rng)
        self.dev.set_head(*self.head)
        self.seq = self.dev.save().seq
        self.moved = False

    def probe_commit(self) -> int:
        """A settled save run whole from the paused machine; flash.py's test window tells at
        which of its instructions the last double-word program (the commit) ended."""
        if self.moved:
            self.settle()
        mon = self.t.monitor
        frame = send_paused(self.t, self.dev.link, Msg.SAVE)
        before = _executed(mon)
        run_until_reply(self.t, self.dev.link, frame, 0.0001)
        end = int(mon.execute(f"sysbus ReadDoubleWord {PROGRAM_END:#x}"), 16)
        mon.execute("start")
        self.seq += 1
        self.head = self.dev.get_head()
        self.moved = True
        return (end - before) & 0xFFFFFFFF

    def cut_settled(self, n: int) -> str:
        """cut(n) with the save aimed at the slot the last settle left as the target: a cut that
        kept the old record left the target where it was (its torn contents are erased first
        by the next save), so only a new record (or a late save) needs another settle."""
        if self.moved:
            self.settle()
        return self.cut(n)

    def cut(self, n: int) -> str:
        dev = self.dev
        new_head = random_head(dev, self.rng)
        dev.set_head(*new_head)
        ran, line = _cut(self.t, dev, n)
        # RunFor may run one more; fewer only when the save finished and the idle firmware
        # sleeps (WFI: no instructions until the next interrupt) - then it must be the new record
        slept = ran < n
        assert ran == n or (ran - n == 1 and n % 100 == 0) or slept, (ran, n)
        dev = self.dev = Device(dev.link)
        state, seq = dev.store_status()
        head = dev.get_head()
        assert state == "loaded", f"cut at {ran}: {line}"
        assert not heads_equal(head, self.exported), f"cut at {ran}: the exported head came back"
        if seq == self.seq:
            assert heads_equal(head, self.head), f"cut at {ran}: old record {seq} restored wrongly"
            outcome = "old"
        else:
            assert seq == self.seq + 1, f"cut at {ran}: record {seq} after {self.seq}"
            assert heads_equal(head, new_head), f"cut at {ran}: new record {seq} restored wrongly"
            self.seq, self.head = seq, head
            outcome = "new"
        assert not slept or outcome == "new", f"cut at {ran} < {n}: the CPU idled before the save ended"
        # Renode keeps bytes its UART had not delivered across the reset: a SAVE cut before
        # the firmware read it runs after the boot (and saves the restored state)
        p = dev.stats().persist
        if p.saves:
            assert n < 5000 and p.seq == self.seq + 1, (n, p)
            self.seq = p.seq
            outcome = "late"
        self.moved = self.moved or outcome != "old"
        self.log.append((ran, outcome))
        return outcome


def test_power_cut_during_save_keeps_old_or_new_record(firmware, digits):
    """The power is cut (machine reset) at instruction N after a SAVE request arrives:
    over the whole save in tenths (~13,000 instructions), then at every single instruction
    around the commit (the end of its double-word's program, as flash.py's test window saw it
    in a whole save; it matched the bisection to the first N that keeps the new record). Boot must restore the previous record or the new one, bit for bit,
    never garbage or the exported head."""
    X, y = digits
    # every store and load of the store region runs flash.py (IronPython): saves are slower
    with (_renode(firmware, FULL_BOARD, timeout=1200, quantum=FINE_QUANTUM) as t,
          Device.open(t.url, timeout=5) as dev):
        mon = t.monitor
        assert int(mon.execute("sysbus.cpu PerformanceInMips"), 16) == MIPS
        exported = dev.get_head()
        stream(dev, X[:30], y[:30], MANIFEST, mode="train", window=4, timeout=5.0)

        # length of one save, in instructions: run it in 10,000-instruction steps
        frame = send_paused(t, dev.link, Msg.SAVE)
        before = _executed(mon)
        run_until_reply(t, dev.link, frame, 0.0001)
        length = _executed(mon) - before
        mon.execute("start")
        assert dev.store_status()[0] == "empty" and length > 20_000
        sweep = _Sweep(t, dev, np.random.default_rng(5), exported)

        # 1. coarse: 0 (before anything), then evenly over the save and a little past its end
        outcomes = [sweep.cut(int(length * k / 10) // 100 * 100) for k in range(0, 12)]
        assert outcomes[-1] == "new", sweep.log
        assert outcomes.count("old") >= 5 and outcomes.count("new") >= 2, sweep.log
        assert "old" not in outcomes[outcomes.index("new"):], sweep.log     # one switch point
        coarse = list(sweep.log)

        # 2. fine: flash.py's test window names the instruction at which a settled save's
        # commit double-word ended programming; cut at every instruction around it
        first_new = next(n for n, o in coarse if o == "new")
        commit = sweep.probe_commit()
        assert first_new - length // 10 - 100 < commit <= first_new, (commit, coarse)
        fine = [(n, sweep.cut_settled(n)) for n in range(commit - 5, commit + 3)]
        # the commit's instruction count can move by a few between rounds (flash.py's busy
        # times), so only: cuts on both sides of it, all of them valid (a probe that named
        # the wrong instruction leaves them all on one side)
        assert {o for _, o in fine} == {"old", "new"}, fine
        print("power cuts", coarse, "save length", length, "commit at", commit, "fine", fine)

        # cuts inside the commit's BSY window tore it: those boots read a double ECC error, and
        # the firmware's NMI handler took it (ECCD cleared) instead of faulting
        nmis = int(mon.execute(f"sysbus ReadDoubleWord {NMI_COUNT:#x}"), 16)
        eccr = int(mon.execute("sysbus ReadDoubleWord 0x40022018"), 16)
        print("NMIs from torn double-words", nmis, "ECCR", hex(eccr))
        assert nmis > 0 and not eccr & (1 << 31), (nmis, hex(eccr))

        # after all that the store still takes a normal save
        assert sweep.dev.save().seq == sweep.seq + 1


def test_store_refuses_bus_master_writes_and_survives_a_torn_commit(firmware):
    """A debugger-style write into the store (the monitor's sysbus access) meets the same rules as
    the CPU's: without FLASH_CR.PG it is a PGSERR and nothing lands; a byte write is SIZERR. A torn
    commit double-word boots to the previous record through the NMI handler."""
    with _renode(firmware, FULL_BOARD) as t, Device.open(t.url, timeout=5) as dev:
        assert dev.store_status()[0] == "empty"
        mon = t.monitor
        store = FLASH_END - BOARDS[FULL_BOARD].flash_bytes // 8

        def rd(addr):
            return int(mon.execute(f"sysbus ReadDoubleWord {addr:#x}"), 16)

        assert rd(store) == 0xFFFFFFFF and rd(0x40022010) == 0
        mon.execute(f"sysbus WriteDoubleWord {store:#x} 0x12345678")
        assert rd(store) == 0xFFFFFFFF and rd(0x40022010) == 1 << 7        # PGSERR
        mon.execute("sysbus WriteDoubleWord 0x40022010 0xFFFF")
        mon.execute(f"sysbus WriteByte {store + 8:#x} 0x12")
        assert rd(store + 8) == 0xFFFFFFFF and rd(0x40022010) & (1 << 6)   # SIZERR
        mon.execute("sysbus WriteDoubleWord 0x40022010 0xFFFF")
        assert dev.save().seq == 1, "the firmware saves through the same model"
        assert rd(store) == 0x534C4F54, "the commit double-word: magic TOLS"

        # finding 3 on the firmware in Renode: tear the newest record's commit double-word (as a
        # cut while it programs does; flash.py's test-only TEAR window), reset: the boot reads a
        # double ECC error, the NMI handler takes it, and the previous record is loaded
        r2 = dev.save()
        slot_bytes = dev.stats().persist.pages_per_slot * BOARDS[FULL_BOARD].page_bytes
        commit2 = store + r2.slot * slot_bytes
        assert r2.seq == 2 and rd(commit2) == 0x534C4F54
        nmis = rd(NMI_COUNT)
        mon.execute(f"sysbus WriteDoubleWord {TEAR:#x} {commit2 - store:#x}")
        mon.execute("machine Reset")
        line = wait_boot(dev.link, timeout=90)
        assert "store=loaded damaged=1" in line, line       # the fall-back is reported
        dev2 = Device(dev.link)
        assert dev2.store_status() == ("loaded", 1) and "store_damaged" in dev2.info.flags
        assert rd(NMI_COUNT) > nmis, "the boot read the torn double-word: NMI"
        assert not rd(0x40022018) & (1 << 31), "the firmware's NMI handler cleared ECCR.ECCD"


def test_emulate_keeps_serving_without_a_terminal(firmware, tmp_path):
    """`tinyol emulate --emulator renode </dev/null` (a script, CI): serves until stopped."""
    firmware(FULL_BOARD, MODEL, test_build=False)        # built, so emulate only checks it
    env = dict(os.environ)
    tinyol = os.path.join(os.path.dirname(sys.executable), "tinyol")
    proc = subprocess.Popen([tinyol, "emulate", "--emulator", "renode",
                             "--board", FULL_BOARD, "--model", MODEL],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=ROOT, env=env, start_new_session=True,
                            # SIGINT as a terminal gives it (a suite run from a background shell
                            # inherits it ignored)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        url = None
        deadline = time.monotonic() + 180
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"emulate ended early (code {proc.poll()})"
            if "serial port:" in line:
                url = line.split("serial port:")[1].strip()
        assert url
        time.sleep(3)                                         # the old bug: exit at stdin EOF
        assert proc.poll() is None
        with Device.open(url, timeout=5) as dev:
            assert dev.info.board == FULL_BOARD
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
        assert "stopping" in rest
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_start_up_errors_name_renode(tmp_path):
    """A file Renode cannot load: one error that names Renode and quotes it; nothing left running."""
    bogus = tmp_path / "firmware.elf"
    bogus.write_bytes(b"not an ELF file")
    from tinyol.errors import TinyolError
    with pytest.raises(TinyolError) as e:
        emulator.start_renode(FULL_BOARD, bogus, timeout=120)
    msg = str(e.value)
    assert msg.startswith("Renode failed at `start-up`") and "LoadELF" in msg, msg
    assert "QEMU" not in msg and "\n" not in msg


SUITE = ROOT / "tests" / "renode" / "tinyol.robot"


def test_robot_suite_passes_in_renode(firmware, tmp_path):
    runner, python = renode_test_launcher(), renode_python()
    if runner is None or python is None:
        pytest.skip("renode-test or its Python (robotframework 6.1, .tools/renode-py: scripts/setup.sh) missing")
    for board in BOARDS:
        firmware(board, MODEL, test_build=False)     # built once per session
    tinyol = os.path.join(os.path.dirname(sys.executable), "tinyol")
    env = dict(os.environ, RENODE_PYTHON=python, RENODE_TMPDIR=str(tmp_path / "renode-tmp"))
    r = subprocess.run([runner, str(SUITE), "--variable", f"TINYOL:{tinyol}", "--exclude", "full"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    out = tmp_path / "robot_output.xml"
    assert out.is_file(), r.stdout[-3000:] + r.stderr[-2000:]
    tests = {t.get("name"): t.find("status").get("status") for t in ET.parse(out).iter("test")}
    assert r.returncode == 0, f"{tests}\n{r.stdout[-3000:]}"
    assert len(tests) == 5 and set(tests.values()) == {"PASS"}, tests
    assert sum(name.endswith(" Boots") for name in tests) == 4

"""tinyol.link.resume on its own: the run's journal (RunLog: LOG and LOG.wal), and Resume
completing a run that was killed with samples in flight, against the real firmware.

The device is the firmware's protocol stack and digits model compiled for the host
(tests/_stream_util.CPort); its state lives on across the host's "processes" as a native
target's does. A kill -9 is made in the port: from a chosen write on, every byte the host
writes or reads raises (the host is gone, nothing after it runs, not even a closing STATS),
and the replies of the last requests before it never reach the host (the device learned
those samples, the log does not say so). Oracles: the frames the host really wrote (decoded
with the protocol codec), the device's own STATS (counters, class counts) and the labels.
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from _stream_util import CPort, compile_device
from tinyol._defs import Msg
from tinyol.data.datasets import load_source
from tinyol.errors import TinyolError
from tinyol.link.device import Device
from tinyol.link.protocol import Frame, Link
from tinyol.link.resume import WAL_SUFFIX, Journal, Resume, RunLog
from tinyol.link.stream import Stream
from tinyol.model.folder import input_q, load_manifest

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models/digits"
N = 130


class Killed(BaseException):
    """The host process died (kill -9): nothing of it runs after this."""


class Host(CPort):
    """The wire to the in-process device as one host process sees it. `mute`: indices of
    write() calls whose reply the host never receives (the device ran them); `die_at`: the
    write() from which the process is dead."""

    def __init__(self, lib, *, mute=(), die_at: int | None = None):
        super().__init__(lib)
        self.mute, self.die_at = set(mute), die_at

    def _alive(self):
        if self.die_at is not None and self.writes >= self.die_at:
            raise Killed

    def write(self, data: bytes) -> int:
        self._alive()
        if self.writes in self.mute:
            self.drop_reads.add(self.outputs)
        return super().write(data)

    def read(self, n: int = 1) -> bytes:
        self._alive()
        return super().read(n)

    def samples_written(self) -> list[int]:
        """Seqs of the SAMPLE frames the device received, in order, each once."""
        seqs = []
        for data in self.wire_log:
            for chunk in data.split(b"\x00")[:-1]:
                f = Frame.decode(chunk)
                if f.type == Msg.SAMPLE and f.seq not in seqs:
                    seqs.append(f.seq)
        return seqs


@pytest.fixture(scope="module")
def lib():
    return compile_device()


@pytest.fixture(scope="module")
def rows():
    X, y, _ = load_source("digits:5-9@train")
    order = np.random.default_rng(7).permutation(len(y))[:N]
    return [(int(i), X[i], int(y[i])) for i in order]


@pytest.fixture
def device(lib):
    """A fresh device (erased flash, exported head), as a native target just started."""
    assert lib.sim_setup(64 * 1024, 2048, 0xFF, 0) == 0
    lib.tol_test_init()
    return lib


SETTINGS = {"data": "digits:5-9@train", "limit": N, "shuffle": True, "seed": 7, "label_column": None,
            "model": str(MODEL), "encoding": "int8", "window": 7, "layout": None, "epochs": 1}


def killed_run(lib, rows, log, port: Host) -> Host:
    """One `tinyol stream --train --log LOG` process on `port`, killed by it."""
    manifest = load_manifest(MODEL)
    with RunLog.create(log, SETTINGS, train=True) as journal, pytest.raises(Killed):
        dev = Device(Link(port, timeout=0.2, seed=3))
        Stream(dev, manifest, window=7, timeout=0.05).run(iter(rows), journal=journal)
    return port


def resumed_run(lib, rows, log) -> tuple[Resume, Host]:
    """`tinyol stream --resume LOG` as the command does it, in a new process (a new port)."""
    manifest = load_manifest(MODEL)
    res = Resume(log)
    port = Host(lib)
    link = Link(port, timeout=0.2, seed=4)
    rest = res.settle(link, list(rows), input_q(manifest), window=7, timeout=0.05)
    with Device(link) as dev, res.run_log() as journal:
        res.check(dev)
        Stream(dev, manifest, window=7, timeout=0.05).run(iter(rest), journal=journal)
    return res, port


_SEEDS = itertools.count(100)


def stats(lib):
    """The device's STATS, asked by a client of its own (a seq of its own: one Link seed
    per client, as two host processes draw theirs)."""
    with Device(Link(CPort(lib), timeout=0.2, seed=next(_SEEDS))) as dev:
        return dev.stats()


def assert_exactly_once(lib, rows, log):
    st = stats(lib)
    labels = [lab for _, _, lab in rows]
    assert st.samples_seen == N, f"the device learned {st.samples_seen} samples for {N} rows"
    assert st.class_counts == np.bincount(labels, minlength=10).tolist()
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["index"] for r in recs] == [i for i, _, _ in rows]
    assert sorted(r["samples_seen"] for r in recs) == list(range(1, N + 1))


def test_a_clean_session_journals_each_frame_it_wrote(device, rows, tmp_path):
    """RunLog on its own: a WAL line per SAMPLE frame, with the seq the wire really carried,
    in send order; an end whose frames_ok is the device's (a STATS after it counts two more:
    the closing STATS itself and the INFO a new Device opens with); LOG's records are the replies, in the rows' order."""
    log = tmp_path / "run.jsonl"
    port = Host(device)
    with RunLog.create(log, SETTINGS, train=True) as journal:
        dev = Device(Link(port, timeout=0.2, seed=3))
        s = Stream(dev, load_manifest(MODEL), window=7, timeout=0.05).run(iter(rows[:20]),
                                                                          journal=journal)
    assert s.samples == 20
    j = Journal.read(log)
    assert [seq for _, seq in j.sent] == port.samples_written()
    assert [row for row, _ in j.sent] == [row for row, _ in j.done] == [i for i, _, _ in rows[:20]]
    assert [seen for _, seen in j.done] == list(range(1, 21))
    assert j.pending == [] and j.checkpoint == (2, 0)  # INFO and the opening STATS ran before
    assert j.end is not None and stats(device).frames_ok == j.end[0] + 2
    assert j.session["boot_count"] == dev.info.boot_count and j.session["base_seen"] == 0


def test_a_killed_run_is_completed_exactly_once(device, rows, tmp_path):
    """Killed with samples in flight whose replies never came back: the device learned
    them (the frames it received say so), the log does not. Resume settles them from the
    reply cache and streams the rest: every sample learned once."""
    log = tmp_path / "run.jsonl"
    port = killed_run(device, rows, log, Host(device, mute=range(40, 100), die_at=44))
    learned_at_kill = len(port.samples_written())
    logged = len(Journal.read(log).done)
    assert learned_at_kill - logged >= 3, (learned_at_kill, logged)  # the cache is needed
    res, _ = resumed_run(device, rows, log)
    assert len(res.resumed.completions) == learned_at_kill - logged
    assert not res.repaired
    assert_exactly_once(device, rows, log)


def test_early_info_checks_do_not_refuse_the_resume(device, rows, tmp_path):
    """Issue 34: a run on a noisy link made INFO checks (a timeout each) early on, then was
    killed with learned samples in flight. Those checks ran long before the samples in
    flight and took no slot of the reply cache they need: the resume goes ahead and every
    sample is learned once. (It was refused when every check of the session counted as
    executed after the oldest sample in flight: "15 requests executed after the oldest".)"""
    log = tmp_path / "run.jsonl"
    stalls = [b + i for b in range(4, 150, 15) for i in range(7)]  # all 7 in flight muted: a timeout
    port = killed_run(device, rows, log, Host(device, mute=stalls + [177, 178, 179], die_at=180))
    j = Journal.read(log)
    assert j.checks == 10 and j.end is None
    oldest = len(j.done)
    assert max(j.check_sent) < oldest - 8, (j.check_sent, oldest)  # all of them long before it
    assert len(port.samples_written()) - oldest >= 3  # learned in flight: the cache is needed
    resumed_run(device, rows, log)
    assert_exactly_once(device, rows, log)


def test_a_request_the_run_did_not_send_refuses_before_anything_is_resent(device, rows, tmp_path):
    """Another client between the kill and the resume (one STATS here) may have pushed a
    reply out of the cache: refused, the device untouched, the files as they were."""
    log = tmp_path / "run.jsonl"
    killed_run(device, rows, log, Host(device, mute=range(40, 100), die_at=44))
    before = stats(device)  # INFO + STATS: two requests the run did not send
    wal = (tmp_path / ("run.jsonl" + WAL_SUFFIX)).read_bytes()
    text = log.read_bytes()
    port = Host(device)
    with pytest.raises(TinyolError, match=r"executed 2 request\(s\) the run did not send"):
        Resume(log).settle(Link(port, timeout=0.2, seed=4), list(rows), input_q(load_manifest(MODEL)))
    assert port.samples_written() == []
    after = stats(device)
    assert (after.samples_seen, after.class_counts) == (before.samples_seen, before.class_counts)
    assert log.read_bytes() == text and (tmp_path / ("run.jsonl" + WAL_SUFFIX)).read_bytes() == wal

"""`tinyol stream --resume` against the native target: the log, its WAL and the device's
counters are reconciled before anything is resent (issue 25).

Oracles: the device's own STATS (samples_seen, per-class counts) and the source's labels.
An interrupted run is made deterministically: Ctrl-C (KeyboardInterrupt from the row source
after N rows, as the terminal would deliver it), then the log loses its last lines or has its
last line cut, as a kill -9 leaves it; `tinyol pull` or `tinyol reset` happen in between.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from tinyol.cli import main
from tinyol.data.datasets import load_source
from tinyol.link.device import Device
from tinyol.link.stream import Stream
from tinyol.targets import emulator

SOURCE = "digits:5-9@train"
SEED = 3


@pytest.fixture(scope="module")
def url(firmware):
    with emulator.start_native(firmware("native", model="models/digits").program, timeout=300) as t:
        yield t.url


@pytest.fixture
def fresh(url):
    """The device's learner back at its exported state; returns its STATS."""
    with Device.open(url) as dev:
        dev.reset()
        st = dev.stats()
    assert st.samples_seen == 0
    return st


def stats(url):
    with Device.open(url) as dev:
        return dev.stats()


def run(capsys, *argv) -> tuple[int, str, str]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:  # an interrupted stream exits 130 through sys.exit
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def interrupt_after(monkeypatch, after: int):
    """Ctrl-C once the stream has handed `after` new rows to the pipeline."""
    real = Stream._requests

    def requests(self, rows):
        for n, req in enumerate(real(self, rows)):
            if n == after:
                raise KeyboardInterrupt
            yield req

    monkeypatch.setattr(Stream, "_requests", requests)


def interrupted_run(monkeypatch, capsys, url, log, *, after: int, limit: int, epochs: int = 1):
    """`tinyol stream --log LOG` stopped by Ctrl-C once `after` rows were handed over."""
    with monkeypatch.context() as m:
        interrupt_after(m, after)
        code, out, err = run(capsys, "stream", "--port", url, "--data", SOURCE, "--shuffle", "--seed",
                             SEED, "--limit", limit, "--epochs", epochs, "--log", log, "--no-progress")
    assert code == 130, err
    return records(log)


def records(log):
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def drop_last_lines(log, n):
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:-n]))


def order(limit, epochs=1):
    _, y, _ = load_source(SOURCE)
    base = np.random.default_rng(SEED).permutation(len(y))[:limit]
    rows = [base] + [base[np.random.default_rng(SEED + e).permutation(len(base))] for e in range(1, epochs)]
    return np.concatenate(rows), y


def assert_exactly_once(url, log, limit, epochs=1):
    rows, y = order(limit, epochs)
    st = stats(url)
    n = len(rows)
    assert st.samples_seen == n, f"the device learned {st.samples_seen} samples for {n} rows"
    assert st.class_counts == np.bincount(y[rows], minlength=10).tolist()
    recs = records(log)
    assert [r["index"] for r in recs] == rows.tolist()
    assert sorted(r["samples_seen"] for r in recs) == list(range(1, n + 1))


def test_a_log_a_few_lines_short_is_completed_exactly_once(url, fresh, monkeypatch, capsys, tmp_path):
    log = tmp_path / "run.jsonl"
    assert len(interrupted_run(monkeypatch, capsys, url, log, after=40, limit=60)) == 40
    drop_last_lines(log, 3)  # learned, their replies still in the device's cache
    code, out, err = run(capsys, "stream", "--port", url, "--resume", log, "--no-progress")
    assert code == 0, err
    assert_exactly_once(url, log, 60)


def test_pull_between_kill_and_resume_is_refused_before_anything_is_resent(
        url, fresh, monkeypatch, capsys, tmp_path):
    log = tmp_path / "run.jsonl"
    interrupted_run(monkeypatch, capsys, url, log, after=40, limit=60)
    drop_last_lines(log, 3)
    code, _, err = run(capsys, "pull", "--port", url, "--out", tmp_path / "head.npz")
    assert code == 0, err
    before = stats(url)
    assert before.samples_seen == 40
    text = log.read_text()
    code, out, err = run(capsys, "stream", "--port", url, "--resume", log, "--no-progress")
    assert code == 1
    assert "3 of the 3 samples in flight were learned" in err and "nothing was sent" in err, err
    assert "Traceback" not in err
    after = stats(url)
    assert after.samples_seen == 40 and after.class_counts == before.class_counts
    assert log.read_text() == text  # the user's files are left as they were


def test_a_log_short_by_more_than_the_cache_is_refused(url, fresh, monkeypatch, capsys, tmp_path):
    log = tmp_path / "run.jsonl"
    interrupted_run(monkeypatch, capsys, url, log, after=40, limit=60)
    drop_last_lines(log, 10)  # 10 learned samples: the device keeps the replies of its last 8
    code, _, err = run(capsys, "stream", "--port", url, "--resume", log, "--no-progress")
    assert code == 1 and "10 of the 10 samples in flight were learned" in err, err
    assert stats(url).samples_seen == 40


def test_a_cut_last_line_is_removed_not_appended_to(url, fresh, monkeypatch, capsys, tmp_path):
    log = tmp_path / "run.jsonl"
    interrupted_run(monkeypatch, capsys, url, log, after=30, limit=45)
    raw = log.read_bytes()
    log.write_bytes(raw[:-20])  # the kill cut the last record
    code, out, err = run(capsys, "stream", "--port", url, "--resume", log, "--no-progress")
    assert code == 0, err
    assert "its last line was cut" in out
    assert_exactly_once(url, log, 45)  # every line parses: records() reads each as JSON
    code, out, err = run(capsys, "compare", log, log)
    assert code == 0 and "same" in out, out + err


def test_resume_after_tinyol_reset_names_the_reset(url, fresh, monkeypatch, capsys, tmp_path):
    log = tmp_path / "run.jsonl"
    interrupted_run(monkeypatch, capsys, url, log, after=20, limit=40)
    code, _, err = run(capsys, "reset", "--port", url)
    assert code == 0, err
    code, _, err = run(capsys, "stream", "--port", url, "--resume", log, "--no-progress")
    assert code != 0 and "was reset since the interrupted run" in err, err
    assert stats(url).samples_seen == 0  # nothing was taught before the refusal


def test_resume_works_with_epochs(url, fresh, monkeypatch, capsys, tmp_path):
    log = tmp_path / "run.jsonl"
    interrupted_run(monkeypatch, capsys, url, log, after=35, limit=25, epochs=2)  # in epoch 2
    drop_last_lines(log, 2)
    code, out, err = run(capsys, "stream", "--port", url, "--resume", log, "--no-progress")
    assert code == 0, err
    assert_exactly_once(url, log, 25, epochs=2)


def test_two_resumes_in_a_row_stay_exact(url, fresh, monkeypatch, capsys, tmp_path):
    """The second resume reconciles against the checkpoint the first one wrote."""
    log = tmp_path / "run.jsonl"
    interrupted_run(monkeypatch, capsys, url, log, after=20, limit=50)
    drop_last_lines(log, 2)
    with monkeypatch.context() as m:  # the resumed run is interrupted too, 10 new rows on
        interrupt_after(m, 10)
        code, _, err = run(capsys, "stream", "--port", url, "--resume", log, "--no-progress")
    assert code == 130, err
    assert len(records(log)) == 30
    drop_last_lines(log, 4)
    code, _, err = run(capsys, "stream", "--port", url, "--resume", log, "--no-progress")
    assert code == 0, err
    assert_exactly_once(url, log, 50)


# ---- reconcile's decision table, without a device -------------------------------------------
def journal(n_logged, n_sent, *, checkpoint=(100, 0), end=None, checks=0, base=0):
    """A run whose first n_logged samples are in the log (learned as base+1..), n_sent sent."""
    from tinyol.link.resume import Journal
    sent = [(i, 1000 + i) for i in range(n_sent)]
    done = [(i, base + i + 1) for i in range(n_logged)]
    return Journal({"base_seen": base}, sent, done, checkpoint, end, 0, 0, checks)


def stats_now(samples_seen, frames_ok):
    from tinyol.link.device import Stats
    return Stats(frames_ok, 0, 0, 0, 0, samples_seen=samples_seen)


def test_reconcile_decision_table():
    from tinyol.errors import TinyolError
    from tinyol.link.protocol import DeviceReset
    from tinyol.link.resume import reconcile

    # killed with 4 in flight, 2 of them learned; the device ran nothing else (+1: this STATS)
    assert reconcile(journal(40, 44), stats_now(42, 100 + 42 + 1)) == 2
    # none of those in flight learned: safe whatever ran since (no cache needed)
    assert reconcile(journal(40, 44), stats_now(40, 100 + 999)) == 0
    # one request more than the run's: another client (e.g. tinyol pull) took cache slots
    with pytest.raises(TinyolError, match=r"executed 1 request\(s\) the run did not send"):
        reconcile(journal(40, 44), stats_now(42, 100 + 42 + 2))
    # ... unless the run wrote it down itself (an INFO check after a timeout)
    assert reconcile(journal(40, 44, checks=1), stats_now(42, 100 + 42 + 1 + 1)) == 2
    # more learned than were in flight
    with pytest.raises(TinyolError, match="something else trained it"):
        reconcile(journal(40, 44), stats_now(45, 100 + 45 + 1))
    # the learner went back: a reset, named as one
    with pytest.raises(DeviceReset, match="was reset since the interrupted run"):
        reconcile(journal(40, 44), stats_now(12, 100 + 60))
    # a clean end (its closing STATS), then 3 lines lost from the log: still in the cache
    assert reconcile(journal(37, 40, end=(100 + 40 + 1, 40)), stats_now(40, 100 + 40 + 1 + 1)) == 3
    # ... 7 lines lost: the oldest has 6 + the closing STATS + this STATS after it: gone
    with pytest.raises(TinyolError, match="executed after the oldest"):
        reconcile(journal(33, 40, end=(100 + 40 + 1, 40)), stats_now(40, 100 + 40 + 1 + 1))
    # an older WAL without a checkpoint: cannot prove anything, refuse when it matters
    with pytest.raises(TinyolError, match="no checkpoint"):
        reconcile(journal(40, 44, checkpoint=None), stats_now(42, 143))
    # the log and its WAL disagree on a row
    j = journal(5, 6)
    j.done[2] = (99, 3)
    with pytest.raises(TinyolError, match="record 3 is row 99"):
        reconcile(j, stats_now(5, 106))

"""`tinyol fleet`: boards learn locally, Flower aggregates their heads, the host pushes back.

Oracles: FedAvg / FedMedian recomputed here in float64 numpy from the heads the host
really pulled; a fleet of numpy learners (tinyol.learn.learner, the firmware's twin) stepped
round by round with that numpy FedAvg, independent of tinyol.fleet; for restarts, an
identical fleet that never stopped. Native targets are the devices.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import ROOT

flwr = pytest.importorskip("flwr", reason="Flower is not installed (pip install 'tinyol[fleet]')")

from _fleet_util import learn_round, reference_then_host_dies  # noqa: E402
from tinyol import fleet as F  # noqa: E402
from tinyol.cli import main  # noqa: E402
from tinyol.errors import TinyolError  # noqa: E402
from tinyol.targets import emulator  # noqa: E402
from tinyol.targets.twin import learner_settings, load_model, make_learner  # noqa: E402

MODEL = str(ROOT / "models/digits")


# --------------------------------------------------------------------------- numpy oracles
def np_fedavg(heads, weights):
    """FedAvg in float64: sum_i n_i * theta_i / sum_i n_i, the mask active where any weight is."""
    n = np.asarray(weights, np.float64)
    w = np.tensordot(n, np.stack([h.w for h in heads]).astype(np.float64), 1) / n.sum()
    b = np.tensordot(n, np.stack([h.b for h in heads]).astype(np.float64), 1) / n.sum()
    a = np.tensordot(n, np.stack([h.active for h in heads]).astype(np.float64), 1) / n.sum()
    return w, b, a > 0


def oracle_fleet(model, shards, k, rounds, use_q=True):
    """Numpy learners, each on its own stream, averaged (numpy FedAvg) every k samples."""
    s, r = learner_settings(model)
    lrns = [make_learner(model, s, r) for _ in shards]
    glob = []
    for rnd in range(1, rounds + 1):
        weights = learn_round(lrns, shards, rnd, k)
        heads = [F.Head(lr.head.w, lr.head.b, lr.head.active) for lr in lrns]
        w, b, a = np_fedavg(heads, weights)
        glob.append((w, b, a))
        for lrn in lrns:
            lrn.head.load(w.astype(np.float32), b.astype(np.float32), a)
            lrn.pending = []
    return glob, lrns


def synthetic_shards(model, n, per, seed=0, classes=None):
    """int8 latents and labels (twins learn from latents; no backbone needed)."""
    rng = np.random.default_rng(seed)
    D = model.W.shape[1]
    out = []
    for i in range(n):
        cls = classes[i] if classes else list(range(10))
        y = rng.choice(cls, per)
        centres = np.random.default_rng(99).integers(-128, 100, (10, D))
        Q = np.clip(centres[y] + rng.integers(-20, 21, (per, D)), -128, 127).astype(np.int8)
        out.append(F.Shard(None, y.astype(np.int64), Q, sorted(set(cls))))
    return out


def initial_head(model):
    return F.Head(model.W, model.b, np.arange(len(model.b)) < model.n_init)


# --------------------------------------------------------------------------- fast: aggregation, split
def test_flower_fedavg_equals_numpy_fedavg():
    rng = np.random.default_rng(3)
    heads = [F.Head(rng.normal(size=(10, 32)).astype(np.float32), rng.normal(size=10).astype(np.float32),
                    rng.random(10) < 0.5) for _ in range(5)]
    weights = [7, 0, 20, 3, 11]
    strat = F.make_strategy("fedavg", heads[0])
    got = F.aggregate(strat, 1, [(f"b{i}", h.to_ndarrays(), n, {}) for i, (h, n) in enumerate(zip(heads, weights))], [])
    w, b, a = np_fedavg(heads, weights)
    np.testing.assert_allclose(got.w, w, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got.b, b, rtol=1e-6, atol=1e-6)
    assert np.array_equal(got.active, a)
    # a board with weight 0 is no part of it: same result without it
    again = F.aggregate(strat, 1, [(f"b{i}", heads[i].to_ndarrays(), weights[i], {}) for i in (0, 2, 3, 4)], [])
    np.testing.assert_allclose(again.w, got.w, rtol=1e-6, atol=1e-7)
    # FedMedian: the element-wise median
    med = F.aggregate(F.make_strategy("fedmedian", heads[0]), 1,
                      [(f"b{i}", h.to_ndarrays(), 1, {}) for i, h in enumerate(heads)], [])
    np.testing.assert_allclose(med.w, np.median(np.stack([h.w for h in heads]), 0), rtol=1e-6)
    # strict: a failure means no aggregate; nothing learned: no aggregate either
    strict = F.make_strategy("fedavg", heads[0], accept_failures=False)
    assert F.aggregate(strict, 1, [("b0", heads[0].to_ndarrays(), 3, {})], [RuntimeError("gone")]) is None
    assert F.aggregate(strat, 1, [("b0", heads[0].to_ndarrays(), 0, {})], []) is None


def test_non_iid_split():
    y = np.repeat(np.arange(5, 10), 40)
    parts = F.split_non_iid(y, 4, "classes:2", seed=1)
    allidx = np.concatenate(parts)
    assert sorted(allidx.tolist()) == list(range(len(y)))  # every sample once
    for p in parts:
        assert len(set(y[p].tolist())) <= 3 and len(p) > 0
    assert len(set(y[parts[0]].tolist())) == 2
    iid = F.split_non_iid(y, 4, "iid", seed=1)
    assert sorted(np.concatenate(iid).tolist()) == list(range(len(y)))
    assert all(len(set(y[p].tolist())) == 5 for p in iid)
    with pytest.raises(TinyolError):
        F.split_non_iid(y, 4, "classes:9")


def test_twin_fleet_equals_numpy_oracle():
    """The host loop over numpy twins (Flower's FedAvg) = numpy learners + numpy FedAvg."""
    model = load_model(MODEL)
    shards = synthetic_shards(model, 4, 30, classes=[[5, 6], [6, 7], [7, 8], [8, 9]])
    k = 8
    members = [F.Member(F.make_twin(model, f"board{i}"), s) for i, s in enumerate(shards)]
    fleet = F.Fleet(members, initial_head(model), F.FleetConfig(k=k, use_latents=True, eval_every=0))
    heads = []
    fleet.on_event = lambda kind, d: heads.append(fleet.global_head) if kind == "aggregated" else None
    log = fleet.run()
    fleet.close()
    rounds = len(log)
    assert rounds == 4  # 30 samples, 8 a round
    glob, lrns = oracle_fleet(model, shards, k, rounds)
    for got, (w, b, a) in zip(heads, glob):
        np.testing.assert_allclose(got.w, w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got.b, b, rtol=1e-5, atol=1e-6)
        assert np.array_equal(got.active, a)
    assert [r["weights"] for r in log][-1] == {f"board{i}": 6 for i in range(4)}
    # replay buffers stayed on their boards: each holds only its own classes (+ nothing pushed)
    for m, s in zip(members, shards):
        buf = m.board.lrn.replay
        labels = {buf.get(i)[1] for i in range(buf.fill)}
        assert labels <= set(s.classes) and buf.fill == min(30, buf.capacity)


class GoneTwin(F.TwinBoard):
    """A twin whose link dies in round 2 after 3 samples and never comes back."""

    def __init__(self, *a, fleet_ref, **kw):
        super().__init__(*a, **kw)
        self.fleet_ref, self.gone = fleet_ref, False

    def connect(self):
        if self.gone:
            raise TinyolError("cannot open serial port")

    def learn(self, rows):
        if self.fleet_ref[0].round + 1 == 2:
            rows = list(rows)[:3]
            super().learn(rows)
            self.gone = True
            raise TinyolError("the device went away")
        return super().learn(rows)


def test_board_that_never_returns_does_not_hold_the_fleet_up():
    model = load_model(MODEL)
    shards = synthetic_shards(model, 3, 24, classes=[[5, 6], [7, 8], [9, 5]])
    ref = [None]
    boards = [F.make_twin(model, "board0"), GoneTwin("board1", F.make_twin(model, "").lrn, fleet_ref=ref),
              F.make_twin(model, "board2")]
    events = []
    fleet = F.Fleet([F.Member(b, s) for b, s in zip(boards, shards)], initial_head(model),
                    F.FleetConfig(k=8, use_latents=True, eval_every=0, max_absent=2),
                    on_event=lambda kind, d: events.append((kind, d.get("board"))))
    ref[0] = fleet
    log = fleet.run()
    fleet.close()
    # board0/board2 finish their 24 samples in 3 rounds; the fleet waits for board1 while it
    # is absent fewer than max_absent rounds in a row (rounds 3 and 4), then stops
    assert len(log) == 4
    assert log[0]["aggregated_from"] == ["board0", "board1", "board2"]
    assert log[1]["aggregated_from"] == ["board0", "board2"] and log[1]["boards"]["board1"]["status"] == "dropped"
    assert "board1" not in log[2]["boards"] and log[2]["aggregated_from"] == ["board0", "board2"]
    assert not log[3]["aggregated"] and log[3]["weights"] == {"board0": 0, "board2": 0}
    assert events.count(("absent", "board1")) == 2 and ("dropped", "board1") in events


@pytest.mark.parametrize("strategy", ["fedadam", "fedavgm"])
def test_host_restart_keeps_the_strategys_state(tmp_path, strategy):
    """Server optimizers keep moments between rounds; a resumed host must carry them on.
    Twins stand for boards that kept running while the host restarted."""
    model = load_model(MODEL)
    shards = synthetic_shards(model, 3, 24, classes=[[5, 6], [7, 8], [9, 5]])

    def fleet_of(boards, state, on_event=None):
        return F.Fleet([F.Member(b, s) for b, s in zip(boards, shards)], initial_head(model),
                       F.FleetConfig(k=6, strategy=strategy, use_latents=True, eval_every=0),
                       state_dir=state, on_event=on_event)

    ref, boards = reference_then_host_dies(fleet_of, model, tmp_path)
    again = fleet_of(boards, tmp_path / "run")
    log = again.run(resume=True)
    again.close()
    assert len(log) == 4
    assert np.array_equal(again.global_head.w, ref.global_head.w)
    assert np.array_equal(again.global_head.b, ref.global_head.b)
    for b, m in zip(boards, ref.members):
        assert np.array_equal(b.lrn.head.w, m.board.lrn.head.w)


def test_resume_refuses_another_strategy(tmp_path):
    model = load_model(MODEL)
    shards = synthetic_shards(model, 2, 6)
    f = F.Fleet([F.Member(F.make_twin(model, f"board{i}"), s) for i, s in enumerate(shards)], initial_head(model),
                F.FleetConfig(k=6, use_latents=True, eval_every=0), state_dir=tmp_path)
    f.run()
    f.close()
    g = F.Fleet([F.Member(F.make_twin(model, f"board{i}"), s) for i, s in enumerate(shards)], initial_head(model),
                F.FleetConfig(k=6, strategy="fedmedian", use_latents=True, eval_every=0), state_dir=tmp_path)
    with pytest.raises(TinyolError, match="ran strategy fedavg"):
        g.run(resume=True)
    g.close()


def test_cli_needs_one_kind_of_board(capsys):
    assert main(["fleet"]) == 1
    assert "choose the boards" in capsys.readouterr().err
    assert main(["fleet", "--twins", "2", "--resume"]) == 1
    assert "--state" in capsys.readouterr().err


# --------------------------------------------------------------------------- native targets
@pytest.fixture(scope="module")
def program(firmware):
    return firmware("native", "models/digits").program


@pytest.fixture(scope="module")
def digits_shards():
    """Digits 5-9 split non-IID over 3 boards, with TFLM latents for the numpy oracle."""
    return F.load_shards("digits:5-9@train", 3, "classes:2", 0, latents_of=F.latents_fn(MODEL))


class Targets:
    """Native targets on fixed ports with their own flash (state dirs); restartable."""

    def __init__(self, program, n, root):
        self.program, self.root = program, root
        self.ports = [emulator.free_port() for _ in range(n)]
        self.t = [None] * n
        for i in range(n):
            self.start(i)

    def start(self, i):
        d = self.root / f"b{i}"
        d.mkdir(parents=True, exist_ok=True)
        self.t[i] = emulator.start_native(self.program, port=self.ports[i], state_dir=d, timeout=300)

    def kill(self, i):
        """Gone at once, mid-request (SIGTERM: `timeout` passes it on to the firmware process)."""
        p = self.t[i].proc
        if p.poll() is None:
            p.terminate()
            p.wait()

    def revive(self, i):
        if not self.t[i].alive():
            self.start(i)

    @property
    def urls(self):
        return [f"socket://127.0.0.1:{p}" for p in self.ports]

    def stop(self):
        for t in self.t:
            t.stop()


class HostDied(BaseException):
    """The host process dies (not an error any board could cause)."""


class Recording(F.DeviceBoard):
    """A DeviceBoard that also keeps every head it pulled (what the real PULL returned)."""
    die_before_push = None

    def __init__(self, *a, pulls, fleet_ref, **kw):
        super().__init__(*a, **kw)
        self.pulls, self.fleet_ref = pulls, fleet_ref

    def pull(self):
        head, n = super().pull()
        self.pulls.append((self.fleet_ref[0].round + 1, self.name, head))
        return head, n

    def push(self, head):
        if self.name == "board1" and self.fleet_ref[0].round == Recording.die_before_push:
            raise HostDied()  # the host dies before it sends board1 the aggregate
        return super().push(head)


def device_fleet(urls, shards, *, k, rounds=None, state_dir=None, save=False, pulls=None, hook=None,
                 revive=None, limit=None):
    manifest = json.loads((ROOT / "models/digits/manifest.json").read_text())
    ref = [None]
    boards = [Recording(f"board{i}", u, manifest, pulls=pulls if pulls is not None else [], fleet_ref=ref,
                        model_dir=MODEL) for i, u in enumerate(urls)]
    sh = [F.Shard(s.X[:limit], s.y[:limit], s.Q[:limit], s.classes) for s in shards]
    members = [F.Member(b, s) for b, s in zip(boards, sh)]
    fleet = F.Fleet(members, initial_head(load_model(MODEL)),
                    F.FleetConfig(k=k, rounds=rounds, save=save, eval_every=0), state_dir=state_dir,
                    hook=hook, revive=(lambda m: revive(members.index(m))) if revive else None)
    ref[0] = fleet
    return fleet, sh


@pytest.mark.slow
def test_devices_fleet_equals_numpy_twins(program, digits_shards, tmp_path):
    """Two native boards through Flower's FedAvg = two numpy learners + numpy FedAvg;
    every round's aggregate = numpy FedAvg of the heads really pulled; the boards hold it."""
    ts = Targets(program, 2, tmp_path)
    pulls = []
    try:
        fleet, sh = device_fleet(ts.urls, digits_shards[:2], k=15, pulls=pulls, limit=45)
        aggs = []
        fleet.on_event = lambda kind, d: aggs.append((fleet.round, fleet.global_head)) if kind == "aggregated" else None
        log = fleet.run()
        held = [m.board.dev.get_head() for m in fleet.members]
        fleet.close()
    finally:
        ts.stop()
    assert len(log) == 3
    for rnd, head in aggs:
        got = [(n, h) for r, n, h in pulls if r == rnd]
        names = sorted(n for n, _ in got)
        assert names == ["board0", "board1"]
        weights = [log[rnd - 1]["weights"][n] for n in names]
        assert weights == [15, 15]
        w, b, a = np_fedavg([h for _, h in sorted(got, key=lambda x: x[0])], weights)
        np.testing.assert_allclose(head.w, w, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(head.b, b, rtol=1e-6, atol=1e-7)
        assert np.array_equal(head.active, a)
    for w, b, a in held:  # the PUSH put the aggregate on every board, bit for bit
        assert np.array_equal(w, aggs[-1][1].w) and np.array_equal(b, aggs[-1][1].b)
    glob, _ = oracle_fleet(load_model(MODEL), sh, 15, 3)
    for (_, head), (w, b, a) in zip(aggs, glob):
        np.testing.assert_allclose(head.w, w, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(head.b, b, rtol=1e-5, atol=1e-5)
        assert np.array_equal(head.active, a)


@pytest.mark.slow
def test_device_vanishes_mid_round_and_rejoins(program, digits_shards, tmp_path):
    ts = Targets(program, 3, tmp_path)
    pulls, events = [], []
    k = 10
    ref = [None]

    def hook(board, rows):
        for i, row in enumerate(rows):
            if board.name == "board1" and ref[0].round + 1 == 2 and i == 5:
                ts.kill(1)  # unplugged mid-round, after 5 of its 10 samples were sent
            yield row
    try:
        fleet, sh = device_fleet(ts.urls, digits_shards, k=k, rounds=4, pulls=pulls, hook=hook,
                                 revive=ts.revive, limit=60)
        ref[0] = fleet
        aggs = {}

        def on_event(kind, d):
            events.append((kind, d.get("board"), fleet.round))
            if kind == "aggregated":
                aggs[fleet.round] = fleet.global_head
        fleet.on_event = on_event
        log = fleet.run()
        held = [m.board.dev.get_head() for m in fleet.members]
        seen = [m.board.samples_seen() - m.base for m in fleet.members]
        fleet.close()
    finally:
        ts.stop()
    r2 = log[1]
    assert r2["boards"]["board1"]["status"] == "dropped"
    assert r2["aggregated_from"] == ["board0", "board2"] and set(r2["weights"]) == {"board0", "board2"}
    assert ("dropped", "board1", 1) in events
    assert not [p for p in pulls if p[0] == 2 and p[1] == "board1"]  # no head of it in round 2
    for rnd, head in aggs.items():  # every aggregate = numpy FedAvg of complete pulls only
        got = sorted([(n, h) for r, n, h in pulls if r == rnd], key=lambda x: x[0])
        assert [n for n, _ in got] == log[rnd - 1]["aggregated_from"]
        w, b, a = np_fedavg([h for _, h in got], [log[rnd - 1]["weights"][n] for n, _ in got])
        np.testing.assert_allclose(head.w, w, rtol=1e-6, atol=1e-7)
        assert np.array_equal(head.active, a)
    # it rejoined in round 3 (restarted, nothing saved): the aggregate was pushed to it first,
    # and it carried on from where the fleet's aggregate had its samples (never twice)
    assert log[2]["boards"]["board1"]["status"] == "ok" and log[2]["weights"]["board1"] == k
    assert log[2]["boards"]["board1"]["bytes_push"] > 0
    assert seen == [40, 30, 40]  # board1: 10 (round 1) + 10 + 10 after rejoining, from 0 on a fresh boot
    for w, b, a in held:
        assert np.array_equal(w, aggs[4].w)


def _run_to_end(urls, shards, state, **kw):
    fleet, _ = device_fleet(urls, shards, k=12, state_dir=state, save=True, limit=36, **kw)
    return fleet


@pytest.fixture(scope="module")
def uninterrupted(program, digits_shards, tmp_path_factory):
    root = tmp_path_factory.mktemp("ref")
    ts = Targets(program, 2, root)
    try:
        fleet = _run_to_end(ts.urls, digits_shards[:2], root / "host")
        fleet.run()
        out = (fleet.global_head, [m.board.dev.get_head() for m in fleet.members],
               [m.board.dev.stats().samples_seen for m in fleet.members])
        fleet.close()
    finally:
        ts.stop()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("when", ["mid-learning", "mid-learning-boards-die", "before-push", "mid-push"])
def test_host_restart_loses_nothing(program, digits_shards, uninterrupted, tmp_path, when):
    """The host dies in round 2; a new host resumes from --state; the fleet ends exactly where
    one that never stopped ends (same aggregate, same heads, every sample learned once)."""
    ts = Targets(program, 2, tmp_path)
    ref = [None]

    def hook(board, rows):
        for i, row in enumerate(rows):
            if when.startswith("mid") and board.name == "board0" and ref[0].round + 1 == 2 and i == 7:
                raise HostDied()
            yield row

    def on_event(kind, d):
        if when == "before-push" and kind == "aggregated" and ref[0].round == 2:
            raise HostDied()
    Recording.die_before_push = 2 if when == "mid-push" else None
    try:
        fleet = _run_to_end(ts.urls, digits_shards[:2], tmp_path / "host", hook=hook)
        ref[0] = fleet
        fleet.on_event = on_event
        with pytest.raises(HostDied):
            fleet.run()
        fleet.close()
        Recording.die_before_push = None
        if when == "mid-learning-boards-die":  # they go with the host: back from their SAVE
            for i in range(2):
                ts.kill(i)
                ts.start(i)
        fleet = _run_to_end(ts.urls, digits_shards[:2], tmp_path / "host")
        log = fleet.run(resume=True)
        held = [m.board.dev.get_head() for m in fleet.members]
        seen = [m.board.dev.stats().samples_seen for m in fleet.members]
        fleet.close()
    finally:
        Recording.die_before_push = None
        ts.stop()
    glob, heads, seen_ref = uninterrupted
    assert len(log) == 3
    assert np.array_equal(fleet.global_head.w, glob.w) and np.array_equal(fleet.global_head.b, glob.b)
    for (w, b, a), (w0, b0, a0) in zip(held, heads):
        assert np.array_equal(w, w0) and np.array_equal(b, b0) and np.array_equal(a, a0)
    assert seen == seen_ref  # every sample learned once (a board back from its SAVE re-learns the rest)


# --------------------------------------------------------------------------- the CLI
@pytest.mark.slow
def test_cli_emulate(tmp_path):
    log, plot = tmp_path / "fleet.jsonl", tmp_path / "fleet.png"
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["fleet", "--emulate", "2", "--model", MODEL, "--every", "10", "--rounds", "2", "--json",
                   "--log", str(log), "--plot", str(plot), "--eval", "digits:0-9@test", "--state",
                   str(tmp_path / "st")])
    assert rc == 0
    out = json.loads(buf.getvalue())
    assert out["rounds"] == 2 and set(out["board_accuracy"]) == {"board0", "board1"}
    assert 0 < out["fleet_accuracy"] <= 1
    rec = [json.loads(x) for x in log.read_text().splitlines()]
    assert [r["round"] for r in rec] == [1, 2] and all(r["aggregated"] for r in rec)
    head_payload = 10 * (12 + 32 * 4)  # GET_HEAD replies: 10 rows of 32 floats + a 12-byte header
    assert all(r["bytes"]["pull"] > 2 * head_payload for r in rec)
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "st" / "fleet_state.json").is_file()


# --------------------------------------------------------------------------- Flower's simulation engine
@pytest.mark.slow
def test_flower_simulation_engine_equals_numpy_oracle():
    pytest.importorskip("ray", reason="Flower's simulation engine needs flwr[simulation] (Ray)")
    model = load_model(MODEL)
    shards = synthetic_shards(model, 4, 16, seed=5, classes=[[5, 6], [6, 7], [7, 8], [8, 9]])
    ev = synthetic_shards(model, 1, 200, seed=6)[0]
    cfg = F.FleetConfig(k=8, use_latents=True)
    log = F.run_flower_simulation(MODEL, shards, ev, cfg, num_cpus=1)
    glob, _ = oracle_fleet(model, shards, 8, 2)
    assert len(log) == 2
    for rec, (w, b, a) in zip(log, glob):
        want = F.head_accuracy(F.Head(w.astype(np.float32), b.astype(np.float32), a), ev.Q, ev.y, model.latent_q)
        assert rec["fleet_accuracy"] == pytest.approx(want, abs=1e-9)
        assert sorted(rec["boards"]) == [f"twin{i}" for i in range(4)]
        assert all(b["weight"] == 8 for b in rec["boards"].values())

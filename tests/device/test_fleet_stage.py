"""`tinyol fleet` with an adaptive stage: every layer's W and b (and the active rows)
travel as Flower NDArrays, PULLed with GET_STAGE and PUSHed with SET_STAGE.

Oracles: Flower's own weighted mean (``flwr.server.strategy.aggregate.aggregate_inplace``,
what FedAvg runs) and a float64 numpy weighted mean, both computed here from what the
boards really gave the host; a fleet of numpy stage twins (tinyol.learn.stage) stepped round by
round in this file, independent of tinyol.fleet; native-target boards running the
firmware (their GET_STAGE after the round; their pulls against the twins'); for a
restart, an identical fleet that never stopped.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import ROOT

flwr = pytest.importorskip("flwr", reason="Flower is not installed (pip install 'tinyol[fleet]')")

from _fleet_util import learn_round, reference_then_host_dies  # noqa: E402
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters  # noqa: E402
from flwr.server.strategy.aggregate import aggregate_inplace  # noqa: E402
from tinyol import fleet as F  # noqa: E402
from tinyol.errors import TinyolError  # noqa: E402
from tinyol.learn import stage as S  # noqa: E402
from tinyol.targets import emulator  # noqa: E402
from tinyol.targets.twin import learner_settings, load_model, make_learner  # noqa: E402

MODEL = str(ROOT / "models/digits_adaptive")
HEAD_MODEL = str(ROOT / "models/digits")


# --------------------------------------------------------------------------- oracles
def stage_arrays(lrn) -> list[np.ndarray]:
    """A stage twin's parameters read straight off the twin (layer_params), then its flags."""
    out = []
    for i, layer in enumerate(lrn.layers):
        if layer.n_params:
            w, b = lrn.layer_params(i)
            out += [w.copy(), b.copy()]
    return out + [lrn.active.astype(np.float32)]


def flower_mean(arrays_by_board, weights):
    """Flower's FedAvg arithmetic (aggregate_inplace), on copies, boards in the given order."""
    res = [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([a.copy() for a in arrs]), n, {}))
           for arrs, n in zip(arrays_by_board, weights)]
    return aggregate_inplace(res)


def np_mean(arrays_by_board, weights):
    """float64 weighted mean, the mask active where any weighted board had it."""
    n = np.asarray(weights, np.float64)
    out = [np.tensordot(n, np.stack([a[j] for a in arrays_by_board]).astype(np.float64), 1) / n.sum()
           for j in range(len(arrays_by_board[0]))]
    return out[:-1], out[-1] > 0


def flat(arrays) -> np.ndarray:
    return np.concatenate([np.asarray(a, np.float32).ravel() for a in arrays[:-1]])


def oracle_fleet(model, shards, k, rounds):
    """Numpy stage twins, each on its own stream, Flower's weighted mean every k samples;
    the mean is loaded as SET_STAGE's commit does (params, flags; momentum and queue cleared)."""
    s, r = learner_settings(model)
    lrns = [make_learner(model, s, r) for _ in shards]
    glob = []
    for rnd in range(1, rounds + 1):
        weights = learn_round(lrns, shards, rnd, k)
        agg = flower_mean([stage_arrays(lrn) for lrn in lrns], weights)
        params, active = flat(agg), agg[-1] > 0
        glob.append((params, active))
        for lrn in lrns:
            lrn.params, lrn.active = params.copy(), active.copy()
            lrn.mom[:] = 0
            lrn.pending = []
    return glob, lrns


def synthetic_shards(model, n, per, seed=0, classes=None):
    """int8 latents at the cut (256 values for digits_adaptive) and labels."""
    rng = np.random.default_rng(seed)
    D = model.stage[0][0].in_size
    centres = np.random.default_rng(99).integers(-128, 60, (10, D))
    out = []
    for i in range(n):
        cls = classes[i] if classes else list(range(10))
        y = rng.choice(cls, per)
        Q = np.clip(centres[y] + rng.integers(-30, 31, (per, D)), -128, 127).astype(np.int8)
        out.append(F.Shard(None, y.astype(np.int64), Q, sorted(set(cls))))
    return out


class RecTwin(F.TwinBoard):
    """A twin that keeps every stage it gave the host."""

    def __init__(self, name, lrn, pulls, fleet_ref):
        super().__init__(name, lrn)
        self.pulls, self.fleet_ref = pulls, fleet_ref

    def pull(self):
        st, n = super().pull()
        self.pulls.append((self.fleet_ref[0].round + 1, self.name, st))
        return st, n


# --------------------------------------------------------------------------- fast
def _odd_stage():
    """A stage of every parameter layout: conv, depthwise conv, GAP, dense."""
    return [S.Layer(S.CONV, 4, 4, 2, 4, 4, 3, S.ACT_RELU, 3, 3, 1, 1, 1, 1),
            S.Layer(S.DWCONV, 4, 4, 3, 2, 2, 6, S.ACT_RELU6, 2, 2, 2, 2, 0, 0),
            S.Layer(S.GAP, 2, 2, 6, 1, 1, 6),
            S.Layer(S.DENSE, 1, 1, 6, 1, 1, 5)]


def test_stage_params_are_the_devices_image():
    """NDArrays <-> image <-> the twin: per layer the twin's own W and b views, the image is
    GET_STAGE's layout (float32 LE parameters, then one flag byte per class)."""
    layers = _odd_stage()
    assert S.chain_ok(layers)
    rng = np.random.default_rng(1)
    P = S.n_params(layers)
    lrn = S.Stage(S.StageConfig(layers=layers, init_params=rng.normal(size=P).astype(np.float32),
                                init_classes=3))
    st, nbytes = F.TwinBoard("t", lrn).pull()
    assert nbytes == 4 * P + 5 == len(lrn.image())
    arrays = st.to_ndarrays()
    assert [a.shape for a in arrays] == [(3, 3, 3, 2), (3,), (2, 2, 6), (6,), (6, 5)[::-1], (5,), (5,)]
    want = stage_arrays(lrn)
    assert all(np.array_equal(a.ravel(), w.ravel()) for a, w in zip(arrays, want))
    assert st.image() == lrn.image()
    raw = np.frombuffer(lrn.image(), "<f4", P)
    assert np.array_equal(raw, lrn.params) and lrn.image()[4 * P:] == bytes([1, 1, 1, 0, 0])
    back = st.like(arrays)
    assert np.array_equal(back.params, lrn.params) and np.array_equal(back.active, lrn.active)
    # SET_STAGE's commit on the twin: params and flags replaced, momentum/queue cleared
    new = F.StageParams(layers, rng.normal(size=P), [1, 0, 1, 1, 0])
    lrn.mom[:] = 1
    F.TwinBoard("t", lrn).push(new)
    assert lrn.image() == new.image() and not lrn.mom.any()
    with pytest.raises(TinyolError, match="do not fit"):
        st.like(arrays[:-2] + arrays[-1:])
    bad = bytearray(new.image())
    bad[-1] = 2  # a flag that is not 0/1: refused, nothing changed
    with pytest.raises(S.LearnerError):
        lrn.load_image(bytes(bad))
    bad = bytearray(new.image())
    bad[0:4] = np.float32(np.nan).tobytes()
    with pytest.raises(S.LearnerError):
        lrn.load_image(bytes(bad))
    assert lrn.image() == new.image()


def test_twin_stage_fleet_aggregates_with_flower():
    """Every round's aggregate = Flower's weighted mean of the stages the twins really gave
    (bit for bit) ~ a float64 numpy mean; the whole fleet = stage twins + Flower's mean
    stepped here without tinyol.fleet."""
    model = load_model(MODEL)
    shards = synthetic_shards(model, 4, 20, classes=[[5, 6], [6, 7], [7, 8], [8, 9]])
    k, pulls, ref = 8, [], [None]
    members = [F.Member(RecTwin(f"board{i}", F.make_twin(model, "").lrn, pulls, ref), s)
               for i, s in enumerate(shards)]
    initial = F.initial_params(model)
    assert isinstance(initial, F.StageParams) and initial.shape.stage_hash == S.stage_hash(model.stage[0])
    fleet = F.Fleet(members, initial, F.FleetConfig(k=k, use_latents=True, eval_every=0))
    ref[0] = fleet
    aggs = []
    fleet.on_event = lambda kind, d: aggs.append(fleet.global_head) if kind == "aggregated" else None
    log = fleet.run()
    fleet.close()
    assert len(log) == 3 and [r["weights"] for r in log][-1] == {f"board{i}": 4 for i in range(4)}
    for rnd, agg in enumerate(aggs, 1):
        got = sorted([(n, st) for r, n, st in pulls if r == rnd], key=lambda x: x[0])
        assert [n for n, _ in got] == [f"board{i}" for i in range(4)]
        weights = [log[rnd - 1]["weights"][n] for n, _ in got]
        arrays = [st.to_ndarrays() for _, st in got]
        want = flower_mean(arrays, weights)
        assert np.array_equal(agg.params, flat(want)) and np.array_equal(agg.active, want[-1] > 0)
        mean, active = np_mean(arrays, weights)
        np.testing.assert_allclose(agg.params, np.concatenate([m.ravel() for m in mean]), rtol=1e-6, atol=1e-7)
        assert np.array_equal(agg.active, active)
    # every class a board met is active in the aggregate; every layer moved, not just the last
    assert aggs[-1].active.tolist() == [True] * 10
    first = model.stage[0][0].n_params
    assert not np.array_equal(aggs[-1].params[:first], initial.params[:first])
    glob, lrns = oracle_fleet(model, shards, k, 3)
    for agg, (params, active) in zip(aggs, glob):
        assert np.array_equal(agg.params, params) and np.array_equal(agg.active, active)
    for m, lrn in zip(members, lrns):  # each board ends holding the last aggregate, as the oracle's
        assert m.board.lrn.image() == lrn.image()


def test_fleet_refuses_boards_of_another_shape():
    """One line naming every board whose head/stage is not the fleet's stage."""
    model = load_model(MODEL)
    other = [S.Layer(S.DENSE, 1, 1, 256, 1, 1, 16, S.ACT_RELU), S.Layer(S.DENSE, 1, 1, 16, 1, 1, 10)]
    odd = F.TwinBoard("board2", S.Stage(S.StageConfig(layers=other, init_classes=5)))
    boards = [F.make_twin(model, "board0"), F.make_twin(load_model(HEAD_MODEL), "board1"), odd,
              F.make_twin(model, "board3")]
    shards = synthetic_shards(model, 4, 4)
    fleet = F.Fleet([F.Member(b, s) for b, s in zip(boards, shards)], F.initial_params(model),
                    F.FleetConfig(k=4, use_latents=True, eval_every=0))
    with pytest.raises(TinyolError) as e:
        fleet.run()
    fleet.close()
    msg = str(e.value)
    want = f"0x{S.stage_hash(model.stage[0]):08x}"
    assert msg.startswith(f"2 of 4 boards do not fit the fleet's adaptive stage {want}")
    assert "board1 has one-layer head W[10, 32]" in msg
    assert f"board2 has adaptive stage 0x{S.stage_hash(other):08x} (2 layers, 4282 parameters" in msg
    assert "board0" not in msg and "board3" not in msg and e.value.hint


def test_host_restart_resumes_a_stage_fleet(tmp_path):
    """The host dies after round 2's aggregate (before any push); a new host resumes from
    the checkpoint (the stage aggregate, FedAdam's moments) and ends where a fleet that
    never stopped ends, bit for bit. Twins stand for boards that kept running."""
    model = load_model(MODEL)
    shards = synthetic_shards(model, 3, 18, classes=[[5, 6], [7, 8], [9, 5]])

    def fleet_of(boards, state, on_event=None, m=model):
        return F.Fleet([F.Member(b, s) for b, s in zip(boards, shards)], F.initial_params(m),
                       F.FleetConfig(k=6, strategy="fedadam", use_latents=True, eval_every=0),
                       state_dir=state, on_event=on_event)

    ref, boards = reference_then_host_dies(fleet_of, model, tmp_path)
    state = json.loads((tmp_path / "run" / F.STATE_FILE).read_text())
    assert state["round"] == 2 and state["pending_push"] == ["board0", "board1", "board2"]
    assert "stage_params" in np.load(tmp_path / "run" / state["head_file"]).files
    # a fleet of the one-layer model cannot take this checkpoint over
    wrong = fleet_of([F.make_twin(load_model(HEAD_MODEL), f"board{i}") for i in range(3)], tmp_path / "run",
                     m=load_model(HEAD_MODEL))
    with pytest.raises(TinyolError, match="aggregated an adaptive stage"):
        wrong.run(resume=True)
    wrong.close()
    again = fleet_of(boards, tmp_path / "run")
    log = again.run(resume=True)
    again.close()
    assert len(log) == 3
    assert np.array_equal(again.global_head.params, ref.global_head.params)
    assert np.array_equal(again.global_head.active, ref.global_head.active)
    for b, m in zip(boards, ref.members):
        assert b.lrn.image() == m.board.lrn.image() and b.lrn.samples_seen == m.board.lrn.samples_seen == 18


# --------------------------------------------------------------------------- native targets
class RecDevice(F.DeviceBoard):
    """A DeviceBoard that keeps every stage it pulled (what GET_STAGE really returned)."""

    def __init__(self, *a, pulls, fleet_ref, **kw):
        super().__init__(*a, **kw)
        self.pulls, self.fleet_ref = pulls, fleet_ref

    def pull(self):
        st, n = super().pull()
        self.pulls.append((self.fleet_ref[0].round + 1, self.name, st, n))
        return st, n


@pytest.mark.slow
def test_native_stage_fleet(firmware, tmp_path):
    """Three native boards running the stage firmware, two rounds of FedAvg: each aggregate
    is Flower's weighted mean of the stages GET_STAGE returned; after the round every board's
    GET_STAGE is the pushed aggregate bit for bit; the boards' pulls are the numpy twins'
    pulls bit for bit (so the device fleet is the twin fleet); a fleet expecting another
    stage refuses the boards by name."""
    program = firmware("native", "models/digits_adaptive").program
    shards = F.load_shards("digits:5-9@train", 3, "classes:2", 0, latents_of=F.latents_fn(MODEL))
    shards = [F.Shard(s.X[:20], s.y[:20], s.Q[:20], s.classes) for s in shards]
    manifest = json.loads((ROOT / "models/digits_adaptive/manifest.json").read_text())
    model = load_model(MODEL)
    ports = [emulator.free_port() for _ in range(3)]
    targets = []
    pulls, ref = [], [None]
    try:
        for i, p in enumerate(ports):
            (tmp_path / f"b{i}").mkdir()
            targets.append(emulator.start_native(program, port=p, state_dir=tmp_path / f"b{i}", timeout=300))
        urls = [f"socket://127.0.0.1:{p}" for p in ports]
        boards = [RecDevice(f"board{i}", u, manifest, model_dir=MODEL, pulls=pulls, fleet_ref=ref)
                  for i, u in enumerate(urls)]
        fleet = F.Fleet([F.Member(b, s) for b, s in zip(boards, shards)], F.initial_params(model),
                        F.FleetConfig(k=10, eval_every=0))
        ref[0] = fleet
        aggs = []
        fleet.on_event = lambda kind, d: aggs.append(fleet.global_head) if kind == "aggregated" else None
        log = fleet.run()
        held = [m.board.dev.get_stage() for m in fleet.members]
        fleet.close()
        # a fleet whose model has another stage: every board refused, by name
        other = [S.Layer(S.DENSE, 1, 1, 256, 1, 1, 16, S.ACT_RELU), S.Layer(S.DENSE, 1, 1, 16, 1, 1, 10)]
        wrong = F.Fleet([F.Member(F.DeviceBoard(f"board{i}", u, manifest, model_dir=MODEL), s)
                         for i, (u, s) in enumerate(zip(urls, shards))],
                        F.StageParams(other, np.zeros(S.n_params(other)), np.arange(10) < 5),
                        F.FleetConfig(k=10, eval_every=0))
        with pytest.raises(TinyolError) as e:
            wrong.run()
        wrong.close()
    finally:
        for t in targets:
            t.stop()
    want = f"adaptive stage 0x{S.stage_hash(model.stage[0]):08x} (2 layers, 8554 parameters"
    assert all(f"board{i} has {want}" in str(e.value) for i in range(3))
    assert len(log) == 2 and len(aggs) == 2
    for rnd, agg in enumerate(aggs, 1):
        got = sorted([(n, st) for r, n, st, _ in pulls if r == rnd], key=lambda x: x[0])
        assert [n for n, _ in got] == ["board0", "board1", "board2"]
        weights = [log[rnd - 1]["weights"][n] for n, _ in got]
        assert weights == [10, 10, 10]
        arrays = [st.to_ndarrays() for _, st in got]
        want_agg = flower_mean(arrays, weights)
        assert np.array_equal(agg.params, flat(want_agg)) and np.array_equal(agg.active, want_agg[-1] > 0)
        mean, active = np_mean(arrays, weights)
        np.testing.assert_allclose(agg.params, np.concatenate([m.ravel() for m in mean]), rtol=1e-6, atol=1e-7)
        assert np.array_equal(agg.active, active)
    for image in held:  # SET_STAGE put the last aggregate on every board, bit for bit
        assert image == aggs[-1].image()
    image_bytes = 4 * 8554 + 10
    for rec in log:  # the wire: GET_STAGE/SET_STAGE frames around the 34,226-byte image
        for b in rec["boards"].values():
            assert image_bytes < b["bytes_pull"] < 1.2 * image_bytes
    assert all(3 * image_bytes < rec["bytes"]["push"] < 3 * 1.2 * image_bytes for rec in log)
    # the same fleet of numpy twins (TFLM latents) gives the same stages, bit for bit
    tpulls, tref = [], [None]
    twins = [RecTwin(f"board{i}", F.make_twin(model, "").lrn, tpulls, tref) for i in range(3)]
    tf = F.Fleet([F.Member(b, s) for b, s in zip(twins, shards)], F.initial_params(model),
                 F.FleetConfig(k=10, eval_every=0, use_latents=True))
    tref[0] = tf
    tf.run()
    tf.close()
    dev = {(r, n): st.image() for r, n, st, _ in pulls}
    assert len(tpulls) == len(dev) == 6
    for r, n, st in tpulls:
        assert st.image() == dev[(r, n)], (r, n)
    assert tf.global_head.image() == aggs[-1].image()


def test_server_learning_rate(capsys):
    """--server-lr sets FedAdam's eta: a first FedAdam step is eta x (a bias correction) x
    sign(mean - start) per parameter, so eta 0.01 moves every parameter a tenth of eta 0.1."""
    from tinyol.cli import main
    model = load_model(MODEL)
    x0 = F.initial_params(model)
    rng = np.random.default_rng(4)
    stages = [F.StageParams(x0.layers, x0.params + rng.normal(0, 0.05, x0.params.size), x0.active)
              for _ in range(3)]
    res = [(f"b{i}", st.to_ndarrays(), 5 + i, {}) for i, st in enumerate(stages)]
    steps = {}
    for lr in (None, 0.01):
        strat = F.make_strategy("fedadam", x0, server_lr=lr)
        assert strat.eta == (0.1 if lr is None else lr)
        steps[lr] = F.aggregate(strat, 1, res, [], template=x0).params - x0.params
    assert np.abs(steps[None]).max() > 0.05
    np.testing.assert_allclose(steps[0.01] * 10, steps[None], rtol=1e-4, atol=1e-6)
    assert main(["fleet", "--twins", "2", "--model", MODEL, "--strategy", "fedavg", "--server-lr", "0.1"]) == 1
    assert "fedavg has no server learning rate" in capsys.readouterr().err


class HostDied(BaseException):
    """The host process dies (not an error any board could cause)."""


def _stage_device_fleet(urls, shards, state, hook=None):
    manifest = json.loads((ROOT / "models/digits_adaptive/manifest.json").read_text())
    boards = [F.DeviceBoard(f"board{i}", u, manifest, model_dir=MODEL) for i, u in enumerate(urls)]
    return F.Fleet([F.Member(b, s) for b, s in zip(boards, shards)], F.initial_params(load_model(MODEL)),
                   F.FleetConfig(k=10, save=True, eval_every=0), state_dir=state, hook=hook)


@pytest.mark.slow
def test_native_stage_fleet_survives_host_and_board_restarts(firmware, tmp_path):
    """The host dies in round 2 while board0 is learning, both boards die with it and boot
    from their SAVE (the STG1 record: stage, replay buffer, PRNG, counters); a new host
    resumes from --state: every board ends holding the stage a fleet that never stopped
    ends with, bit for bit, each sample learned once."""
    program = firmware("native", "models/digits_adaptive").program
    shards = F.load_shards("digits:5-9@train", 2, "classes:2", 1)
    shards = [F.Shard(s.X[:30], s.y[:30], None, s.classes) for s in shards]

    def run(root, die):
        ports = [emulator.free_port() for _ in range(2)]
        dirs = [root / f"b{i}" for i in range(2)]
        for d in dirs:
            d.mkdir(parents=True)
        start = lambda i: emulator.start_native(program, port=ports[i], state_dir=dirs[i], timeout=300)  # noqa: E731
        targets = [start(i) for i in range(2)]
        urls = [f"socket://127.0.0.1:{p}" for p in ports]
        ref = [None]

        def hook(board, rows):
            for i, row in enumerate(rows):
                if die and board.name == "board0" and ref[0].round + 1 == 2 and i == 7:
                    raise HostDied()
                yield row
        try:
            fleet = ref[0] = _stage_device_fleet(urls, shards, root / "host", hook)
            if die:
                with pytest.raises(HostDied):
                    fleet.run()
                fleet.close()
                for i in range(2):  # the boards go with the host: back from their SAVE
                    targets[i].stop()
                    targets[i] = start(i)
                fleet = _stage_device_fleet(urls, shards, root / "host")
                log = fleet.run(resume=True)
            else:
                log = fleet.run()
            out = (fleet.global_head.image(), [m.board.dev.get_stage() for m in fleet.members],
                   [m.board.dev.stats().samples_seen for m in fleet.members], log)
            fleet.close()
        finally:
            for t in targets:
                t.stop()
        return out

    glob, held, seen, log = run(tmp_path / "ref", False)
    glob2, held2, seen2, log2 = run(tmp_path / "run", True)
    assert len(log) == len(log2) == 3 and all(r["aggregated"] for r in log2)
    assert held == [glob] * 2 and seen == [30, 30]
    assert glob2 == glob and held2 == held and seen2 == seen


class CutPush(F.DeviceBoard):
    """A DeviceBoard whose first PUSH is cut after `cut` SET_STAGE slices (the link dies)."""

    def __init__(self, *a, cut, **kw):
        super().__init__(*a, **kw)
        self.cut, self.pulled = cut, []

    def pull(self):
        st, n = super().pull()
        self.pulled.append(st)
        return st, n

    def push(self, params):
        if self.cut is None:
            return super().push(params)
        import struct

        from tinyol._defs import Msg
        dev, image, self.cut = self._d(), params.image(), None
        per = dev.info.max_payload - 4
        for off in range(0, 40 * per, per):  # 40 of 135 slices, then the link is gone
            dev.link.request(Msg.SET_STAGE, struct.pack("<I", off) + image[off:off + per])
        self.close()
        raise TinyolError(f"{self.name}: the link died mid-push")


@pytest.mark.slow
def test_native_stage_push_cut_half_way(firmware, tmp_path):
    """SET_STAGE is stage-then-commit: a push cut after 40 of 135 slices leaves the board's
    own stage live and whole (GET_STAGE = what it last gave the host); the fleet drops it,
    pushes again when it rejoins, and ends bit for bit where the twin fleet ends."""
    program = firmware("native", "models/digits_adaptive").program
    shards = F.load_shards("digits:5-9@train", 2, "classes:2", 2, latents_of=F.latents_fn(MODEL))
    shards = [F.Shard(s.X[:20], s.y[:20], s.Q[:20], s.classes) for s in shards]
    manifest = json.loads((ROOT / "models/digits_adaptive/manifest.json").read_text())
    model = load_model(MODEL)
    ports = [emulator.free_port() for _ in range(2)]
    targets, events, after_cut = [], [], []
    try:
        for i, p in enumerate(ports):
            (tmp_path / f"b{i}").mkdir()
            targets.append(emulator.start_native(program, port=p, state_dir=tmp_path / f"b{i}", timeout=300))
        urls = [f"socket://127.0.0.1:{p}" for p in ports]
        boards = [CutPush(f"board{i}", u, manifest, model_dir=MODEL, cut=(40 if i == 1 else None))
                  for i, u in enumerate(urls)]

        def on_event(kind, d):
            events.append((kind, d.get("board"), d.get("phase")))
            if kind == "dropped":  # look at the board right after the cut, on a new link
                from tinyol.link.device import Device
                with Device.open(urls[1], timeout=2.0) as dev:
                    after_cut.append(dev.get_stage())
        fleet = F.Fleet([F.Member(b, s) for b, s in zip(boards, shards)], F.initial_params(model),
                        F.FleetConfig(k=10, eval_every=0), on_event=on_event)
        log = fleet.run()
        held = [m.board.dev.get_stage() for m in fleet.members]
        fleet.close()
    finally:
        for t in targets:
            t.stop()
    assert ("dropped", "board1", "push") in events
    assert after_cut == [boards[1].pulled[0].image()]  # its own round-1 stage, untouched
    assert log[1]["boards"]["board1"]["bytes_push"] > 4 * 8554  # pushed again when it rejoined
    twins = [F.make_twin(model, f"board{i}") for i in range(2)]
    tf = F.Fleet([F.Member(b, s) for b, s in zip(twins, shards)], F.initial_params(model),
                 F.FleetConfig(k=10, eval_every=0, use_latents=True))
    tf.run()
    tf.close()
    assert fleet.global_head.image() == tf.global_head.image()
    assert held == [tf.global_head.image()] * 2

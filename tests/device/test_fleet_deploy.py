"""A fleet over Flower's deployment engine, all on loopback: a real SuperLink (TLS, SuperNode
authentication, SQLite database), three real SuperNodes, each running tinyol's ClientApp on a
native board, tinyol's ServerApp started by `flwr run`.

Oracles: Flower's own FedAvg applied afresh to the parameters the ServerApp received (bit for
bit), a float64 numpy FedAvg (to 1e-6), the boards themselves (GET_HEAD after the run), and
Flower's SuperLink refusing what it must refuse. The tests run in order and share one fleet:
later ones resume the fleet the earlier ones left in its checkpoint.
"""
from __future__ import annotations

import json
import time

import numpy as np
import pytest
from conftest import ROOT

flwr = pytest.importorskip("flwr", reason="Flower is not installed (pip install 'tinyol[fleet]')")

from tinyol import fleet as F  # noqa: E402
from tinyol.errors import TinyolError  # noqa: E402
from tinyol.fleet import deploy as D  # noqa: E402
from tinyol.link.device import Device  # noqa: E402
from tinyol.targets import emulator  # noqa: E402
from tinyol.targets.twin import load_model  # noqa: E402

MODEL = str(ROOT / "models/digits")
D_STATE = "deploy_state.json"
NAMES = ["board0", "board1", "board2"]
K = 10


class Fleet:
    """The loopback deployment: certificates, boards, SuperLink, SuperNodes; every child is
    stopped by the fixture's finalizer."""

    def __init__(self, root, program):
        self.root, self.program = root, program
        D.make_certs(root / "certs", nodes=NAMES + ["intruder"])
        self.tls = D.Tls.from_dir(root / "certs")
        self.port = emulator.free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = D.flwr_env(root / "home", self.address, self.tls)
        self.board_ports = [emulator.free_port() for _ in NAMES]
        self.targets = [None] * len(NAMES)
        self.nodes: list = [None] * len(NAMES)
        self.others: list = []
        self.link = None
        self.app = D.write_app(root / "app")
        self.state, self.log = root / "fleet", root / "fleet.jsonl"

    # -- processes
    def start_board(self, i):
        d = self.root / "flash" / NAMES[i]
        d.mkdir(parents=True, exist_ok=True)
        self.targets[i] = emulator.start_native(self.program, port=self.board_ports[i], state_dir=d, timeout=900)

    def unplug(self, i):
        p = self.targets[i].proc
        if p.poll() is None:
            p.terminate()
            p.wait()

    def start_link(self):
        self.link = D.start_superlink(self.root / "link", self.port, self.tls, host="127.0.0.1", env=self.env)
        return D.register_keys(self.address, self.tls, [self.root / "certs" / f"{n}.pub" for n in NAMES], self.env)

    def start_node(self, i, superlink=None, **kw):
        nc = {"name": NAMES[i], "port": f"socket://127.0.0.1:{self.board_ports[i]}", "model": MODEL,
              "data": "digits:5-9@train", "split": "classes:2", "parts": 3, "part": i,
              "state": str(self.root / "gateway")}
        self.nodes[i] = D.start_supernode(superlink or self.address, NAMES[i], nc, emulator.free_port(),
                                          self.root / "gateway" / f"{NAMES[i]}.log", tls=D.Tls(self.tls.ca),
                                          key=self.root / "certs" / f"{NAMES[i]}.key", env=self.env, **kw)
        return self.nodes[i]

    def run(self, rounds, **rc):
        start = self.log.stat().st_size if self.log.is_file() else 0
        cfg = {"model": MODEL, "every": K, "rounds": rounds, "state": str(self.state), "log": str(self.log),
               "wait": 3, "record-pulls": True, "round-timeout": 240.0, "eval": "", **rc}
        D.start_run(self.app, self.env, cfg, self.root / "flwr-run.log")
        return D.follow(self.log, self.link, lambda rec: None, start=start, timeout=900)

    def stop(self):
        D.stop_all(self.nodes + self.others)
        if self.link is not None:
            self.link.stop()
        for t in self.targets:
            if t is not None:
                t.stop()


@pytest.fixture(scope="module")
def fleet(firmware, tmp_path_factory):
    f = Fleet(tmp_path_factory.mktemp("deploy"), firmware("native", "models/digits").program)
    try:
        for i in range(len(NAMES)):
            f.start_board(i)
        f.start_link()
        for i in range(len(NAMES)):
            f.start_node(i)
        for n in f.nodes:
            D.node_started(n)
        yield f
    finally:
        f.stop()


# --------------------------------------------------------------------------- fast: credentials, app, CLI
def test_certs_chain_and_keys_are_what_flower_takes(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import Encoding, load_ssh_private_key
    from flwr.cli.supernode.register import try_load_public_key
    from flwr.supercore.primitives.asymmetric import public_key_to_bytes
    D.make_certs(tmp_path, hosts=["fleet.example.org", "10.0.0.7"], nodes=["gw1-board0"])
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.pem").read_bytes())
    srv = x509.load_pem_x509_certificate((tmp_path / "superlink.pem").read_bytes())
    srv.verify_directly_issued_by(ca)  # raises if the CA did not sign it
    san = srv.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["fleet.example.org"]
    assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == ["10.0.0.7"]
    key = load_ssh_private_key((tmp_path / "gw1-board0.key").read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp384r1"
    # the .pub is the key Flower registers: the same public key as the private one
    assert try_load_public_key(tmp_path / "gw1-board0.pub") == public_key_to_bytes(key.public_key())
    assert (tmp_path / "gw1-board0.key").stat().st_mode & 0o077 == 0
    # a second call adds a node under the same CA
    D.make_certs(tmp_path, hosts=[], nodes=["gw2-board0"])
    assert (tmp_path / "ca.pem").read_bytes() == ca.public_bytes(Encoding.PEM)
    with pytest.raises(TinyolError):
        D.make_certs(tmp_path, nodes=["../evil"])


def test_app_folder_passes_flowers_own_validation(tmp_path):
    from flwr.cli.config_utils import load_and_validate
    D.write_app(tmp_path)
    config, warnings = load_and_validate(tmp_path / "pyproject.toml")
    assert config["tool"]["flwr"]["app"]["components"] == {"serverapp": "tinyol.fleet.app:server_app",
                                                            "clientapp": "tinyol.fleet.app:client_app"}
    assert warnings == []
    assert D.config_args({"port": "socket://127.0.0.1:5", "part": 2, "strict": False}) == \
        'port="socket://127.0.0.1:5" part=2 strict=false'


def test_gateway_cli_refuses_what_it_cannot_do(tmp_path, capsys):
    from tinyol.cli import main
    assert main(["gateway", "--superlink", "127.0.0.1:9092", "--twins", "2", "--state", str(tmp_path)]) == 1
    assert "--ca" in capsys.readouterr().err
    assert main(["gateway", "--superlink", "127.0.0.1:9092", "--twins", "2", "--state", str(tmp_path),
                 "--ca", str(tmp_path / "ca.pem"), "--key", str(tmp_path / "a.key")]) == 1
    assert "2 boards need 2 keys" in capsys.readouterr().err
    assert main(["gateway", "--superlink", "nowhere", "--twins", "1", "--state", str(tmp_path)]) == 1
    assert "HOST:PORT" in capsys.readouterr().err
    assert main(["superlink", "--state", str(tmp_path), "--certs", str(tmp_path / "none")]) == 1
    assert "tinyol certs" in capsys.readouterr().err


def test_gateway_keeps_its_dealt_shard_until_the_source_changes(tmp_path):
    """A ClientApp is a new process per message: the gateway deals its data once and keeps
    the shard in the node's state; what it returns is what load_shards deals, and a source
    file that changes is dealt again."""
    from tinyol.fleet.app import _gateway_shard
    src, state = tmp_path / "stream.npz", tmp_path / "gw"
    rng = np.random.default_rng(0)
    np.savez(src, X=rng.random((30, 64), dtype=np.float32), y=np.arange(30) % 3)
    want = F.load_shards(str(src), 2, "classes:1", 0)[1]
    for _ in range(2):  # dealt, then read back
        got = _gateway_shard(str(src), 2, 1, "classes:1", 0, MODEL, str(state), False)
        assert np.array_equal(got.X, want.X) and np.array_equal(got.y, want.y) and got.classes == want.classes
    assert len(list(state.glob("shard-*.npz"))) == 1
    np.savez(src, X=rng.random((30, 64), dtype=np.float32), y=(np.arange(30) + 1) % 3)  # new data
    want = F.load_shards(str(src), 2, "classes:1", 0)[1]
    got = _gateway_shard(str(src), 2, 1, "classes:1", 0, MODEL, str(state), False)
    assert np.array_equal(got.X, want.X) and np.array_equal(got.y, want.y)


def test_serverapp_waits_out_a_busy_superlink(monkeypatch):
    """A SuperLink too busy for a TLS handshake (httpx.ConnectTimeout: nothing was sent) is
    asked again, with growing pauses, for any call; a call that timed out after it was sent
    is repeated only if it reads, never a push that may have arrived (no message twice)."""
    import httpx

    from tinyol.fleet import app as A
    waits = []
    monkeypatch.setattr(A.time, "sleep", waits.append)
    fleet = A.DeployedFleet.__new__(A.DeployedFleet)  # only its SuperLink calls
    calls = []

    def flaky(errors, result):
        def fn(*args):
            calls.append(args)
            if errors:
                raise errors.pop(0)
            return result
        return fn
    handshake = httpx.ConnectTimeout("_ssl.c:989: The handshake operation timed out")
    assert fleet._grid(flaky([handshake, handshake, handshake], [1, 2]), "x") == [1, 2]
    assert len(calls) == 4 and waits == [1.0, 2.0, 4.0]
    calls.clear()
    assert fleet._grid(flaky([httpx.ReadTimeout("slow")], ["reply"]), "ids") == ["reply"]  # a read: again
    assert len(calls) == 2
    calls.clear()
    with pytest.raises(httpx.ReadTimeout):  # a push that may have arrived: not again
        fleet._grid(flaky([httpx.ReadTimeout("slow")], ["id"]), "msgs", reads=False)
    assert len(calls) == 1
    monkeypatch.setattr(A, "GRID_PATIENCE", 0.0)
    with pytest.raises(httpx.ConnectTimeout):  # and not for ever
        fleet._grid(flaky([handshake], None))


def test_serverapp_keeps_at_most_in_flight_messages_out(monkeypatch):
    """in-flight N: the ServerApp pushes a round's messages N at a time, the next one as a
    reply comes in, and still pairs every reply with its node (a fake Grid that answers one
    pushed message per pull and counts what is out)."""
    from types import SimpleNamespace

    from tinyol.fleet import app as A
    monkeypatch.setattr(A.time, "sleep", lambda s: None)

    class Grid:
        def __init__(self):
            self.out, self.most, self.n = [], 0, 0

        def push_messages(self, msgs):
            ids = [f"m{m}" for m in msgs]
            self.out += ids
            self.most = max(self.most, len(self.out))
            return ids

        def pull_messages(self, ids):
            if not self.out:
                return []
            mid = self.out.pop(0)
            return [SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=mid), node=mid)]
    for window, most in ((2, 2), (0, 7)):
        fleet = A.DeployedFleet.__new__(A.DeployedFleet)
        fleet.grid, fleet.rc = Grid(), {"round-timeout": 60.0, "in-flight": window}
        got = fleet.exchange([10 + i for i in range(7)], list(range(7)))
        assert sorted((n, r.node) for n, r in got) == [(10 + i, f"m{i}") for i in range(7)]
        assert fleet.grid.most == most


def test_relay_counts_bytes_and_cuts_the_link():
    """The relay the scale bench counts bytes with and the network-cut test cuts: an echo
    server behind it; a cut silences the open connection and refuses new ones until restored."""
    import socket
    import threading

    from tinyol_studies.deploy_bench import Relays
    srv = socket.create_server(("127.0.0.1", 0))

    def echo():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=c: [c.sendall(d) for d in iter(lambda: c.recv(4096), b"")],
                             daemon=True).start()
    threading.Thread(target=echo, daemon=True).start()
    relay = Relays(2, srv.getsockname()[1])
    try:
        a = socket.create_connection(("127.0.0.1", relay.ports[1]), timeout=10)
        a.sendall(b"x" * 1000)
        got = b""
        while len(got) < 1000:
            got += a.recv(4096)
        assert got == b"x" * 1000
        assert relay.snapshot() == ([0, 1000], [0, 1000])
        relay.cut(1)
        a.settimeout(0.5)
        a.sendall(b"lost")
        with pytest.raises(socket.timeout):              # the open connection went silent ...
            a.recv(4096)
        with pytest.raises(ConnectionRefusedError):      # ... and a new one is refused
            socket.create_connection(("127.0.0.1", relay.ports[1]), timeout=10)
        relay.restore(1)
        c = socket.create_connection(("127.0.0.1", relay.ports[1]), timeout=10)
        c.sendall(b"back")
        assert c.recv(4096) == b"back"
        assert relay.snapshot() == ([0, 1004], [0, 1004])
        for s_ in (a, c):
            s_.close()
    finally:
        relay.stop()
        srv.close()


@pytest.mark.slow
def test_clientapp_saves_and_measures_its_board(firmware, tmp_path, monkeypatch):
    """tinyol superlink --save / --eval-every, on the gateway's side: tinyol's ClientApp,
    called in this process as Flower calls it, on a native board. The board's own head is
    measured on the gateway's copy of the eval set (the firmware streams it) and agrees with
    the numpy twin on the pulled head; SAVE makes the learned head survive a power cycle."""
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict

    from flwr.supercore.task_identity import TaskIdentity

    from tinyol.fleet import app as A
    for k, v in {"_task_id": 1, "_run_id": 1, "_node_id": 7}.items():  # as flwr-clientapp sets them
        monkeypatch.setattr(TaskIdentity, k, v)
    program, flash = firmware("native", "models/digits").program, tmp_path / "flash"
    flash.mkdir()
    port = emulator.free_port()
    target = emulator.start_native(program, port=port, state_dir=flash, timeout=600)
    try:
        model = load_model(MODEL)
        init = F.initial_params(model)
        ctx = Context(run_id=1, node_id=7, node_config={"name": "board0", "port": f"socket://127.0.0.1:{port}",
                                                          "model": MODEL, "state": str(tmp_path / "gw")},
                      state=RecordDict(), run_config={})
        msg = Message(RecordDict({"params": ArrayRecord(init.to_ndarrays()),
                                  "config": ConfigRecord({"version": 0, "k": K, "round": 1, "save": 1,
                                                          "eval": "digits@test"})}),
                      dst_node_id=7, message_type="train")
        reply = A._train(msg, ctx)
        met = dict(reply.content["metrics"])
        pulled = F.Head.from_ndarrays(reply.content["params"].to_numpy_ndarrays())
        assert met["saved"] == 1 and met["num-examples"] == K and not np.array_equal(pulled.w, init.w)
        ev = F.load_shards("digits@test", 1, "iid", 0, latents_of=F.latents_fn(MODEL))[0]
        assert met["accuracy"] == pytest.approx(F.params_accuracy(model, pulled, ev.Q, ev.y), abs=1e-12)
        target.stop()                          # power cycle: the board boots from its SAVE
        target = emulator.start_native(program, port=port, state_dir=flash, timeout=600)
        dev = Device.open(f"socket://127.0.0.1:{port}", timeout=2.0)
        try:
            w, b, a = dev.get_head()
            assert np.array_equal(w, pulled.w) and np.array_equal(b, pulled.b) and np.array_equal(a, pulled.active)
            assert dev.stats().samples_seen == K
        finally:
            dev.close()
    finally:
        target.stop()


# --------------------------------------------------------------------------- loopback deployment
def pulled(state, rnd):
    """The parameters each board's reply carried in round rnd, as the ServerApp received them."""
    z = np.load(state / f"pulls_r{rnd}.npz")
    return {name: [z[f"{name}__{i}"] for i in range(3)] for name in sorted({k.split("__")[0] for k in z.files})}


def flower_fedavg(arrays_by_name, weights):
    """Flower's FedAvg, fresh, on the received parameters (in board-name order)."""
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import FedAvg
    res = [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays_by_name[n]), weights[n], {}))
           for n in sorted(arrays_by_name)]
    params, _ = FedAvg().aggregate_fit(1, res, [])
    return parameters_to_ndarrays(params)


def np_fedavg(arrs, weights):
    n = np.asarray(weights, np.float64)
    return [np.tensordot(n, np.stack([a[j] for a in arrs]).astype(np.float64), 1) / n.sum() for j in range(3)]


@pytest.mark.slow
def test_three_gateways_learn_over_tls(fleet):
    recs = fleet.run(rounds=2)
    rounds = [r for r in recs if "boards" in r]
    assert [r["round"] for r in rounds] == [1, 2] and recs[-1]["event"] == "done"
    assert recs[-1]["pushed_to"] == NAMES
    shapes = [(10, 32), (10,), (10,)]  # W, b, active: what left each gateway, nothing else
    for r in rounds:
        assert r["aggregated_from"] == NAMES and r["weights"] == {n: K for n in NAMES}
        pulls = pulled(fleet.state, r["round"])
        assert sorted(pulls) == NAMES
        assert all([a.shape for a in arrs] == shapes for arrs in pulls.values())
        agg, _ = F.read_params(fleet.state / f"deploy_params_r{r['round']}.npz",
                               F.Head(np.zeros((10, 32), np.float32), np.zeros(10, np.float32), np.zeros(10, bool)))
        want = flower_fedavg(pulls, r["weights"])  # bit for bit: Flower's strategy on what was pulled
        assert np.array_equal(agg.w, want[0]) and np.array_equal(agg.b, want[1])
        assert np.array_equal(agg.active, want[2] > 0)
        w, b, a = np_fedavg([pulls[n] for n in NAMES], [K] * 3)
        np.testing.assert_allclose(agg.w, w, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(agg.b, b, rtol=1e-6, atol=1e-7)
        # the round-1 aggregate was pushed to the boards in round 2 (their heads were not it)
        if r["round"] == 2:
            assert all(b_["pushed"] == 1 and b_["bytes_push"] > 0 for b_ in r["boards"].values())
    # after the run every board holds the last aggregate, bit for bit, and learned 2 x K samples
    last, _ = F.read_params(fleet.state / "deploy_params_r2.npz", agg)
    for port in fleet.board_ports:
        dev = Device.open(f"socket://127.0.0.1:{port}", timeout=2.0)
        try:
            w, b, a = dev.get_head()
            assert np.array_equal(w, last.w) and np.array_equal(b, last.b) and np.array_equal(a, last.active)
            assert dev.stats().samples_seen == 2 * K
        finally:
            dev.close()


@pytest.mark.slow
def test_unregistered_or_untrusting_node_is_refused(fleet):
    intruder = D.start_supernode(fleet.address, "intruder", {"name": "intruder", "twin": 1}, emulator.free_port(),
                                 fleet.root / "intruder.log", tls=D.Tls(fleet.tls.ca),
                                 key=fleet.root / "certs" / "intruder.key", env=fleet.env)
    fleet.others.append(intruder)
    with pytest.raises(TinyolError, match="exited"):
        D.node_started(intruder)
    assert "No SuperNode found with the given public key" in fleet.link.text()
    # a SuperNode that does not use TLS gets nowhere either (its key is even registered)
    plain = D.start_supernode(fleet.address, "plain", {"name": "plain", "twin": 1}, emulator.free_port(),
                              fleet.root / "plain.log", tls=D.Tls(), key=fleet.root / "certs" / "board0.key",
                              env=fleet.env, max_retries=1)
    fleet.others.append(plain)
    with pytest.raises(TinyolError, match="exited"):
        D.node_started(plain)


@pytest.mark.slow
def test_board_unplugged_then_superlink_restarted_then_rejoins(fleet):
    """Round 3: board2's board is gone (its node reports failure, the others aggregate).
    Then the SuperLink restarts from its database and the fleet resumes from tinyol's
    checkpoint; board2, plugged in again (it rebooted, nothing saved), rejoins in round 4:
    it gets the aggregate and carries on from the fleet's position."""
    fleet.unplug(2)
    recs = fleet.run(rounds=3)
    assert recs[0] == {"event": "resumed", "round": 2, "version": 2}
    r3 = next(r for r in recs if r.get("round") == 3 and "boards" in r)
    assert r3["aggregated_from"] == ["board0", "board1"] and r3["boards"]["board2"]["status"] == "dropped"
    pulls = pulled(fleet.state, 3)
    assert sorted(pulls) == ["board0", "board1"]
    agg3, _ = F.read_params(fleet.state / "deploy_params_r3.npz", F.initial_params(load_model(MODEL)))
    want = flower_fedavg(pulls, r3["weights"])
    assert np.array_equal(agg3.w, want[0]) and np.array_equal(agg3.b, want[1])

    fleet.link.stop()                       # the SuperLink goes down ...
    assert set(fleet.start_link().values()) == {"registered before"}  # ... and comes back with its database
    fleet.start_board(2)                    # board2 plugged in again: a fresh boot
    recs = fleet.run(rounds=4)
    assert recs[0] == {"event": "resumed", "round": 3, "version": 3}
    r4 = next(r for r in recs if r.get("round") == 4 and "boards" in r)
    assert r4["aggregated_from"] == NAMES and r4["weights"] == {n: K for n in NAMES}
    b2 = r4["boards"]["board2"]
    assert b2["pushed"] == 1 and b2["position"] == 3 * K  # its stream went on from 2K, never repeated
    assert r4["boards"]["board0"]["position"] == 4 * K
    pulls = pulled(fleet.state, 4)
    agg4, _ = F.read_params(fleet.state / "deploy_params_r4.npz", agg3)
    want = flower_fedavg(pulls, r4["weights"])
    assert np.array_equal(agg4.w, want[0]) and np.array_equal(agg4.b, want[1])
    dev = Device.open(f"socket://127.0.0.1:{fleet.board_ports[2]}", timeout=2.0)
    try:
        assert dev.stats().samples_seen == K  # since its reboot: round 4 only
        w, b, _ = dev.get_head()
        assert np.array_equal(w, agg4.w)
    finally:
        dev.close()
    assert json.loads((fleet.root / "gateway" / "board2.json").read_text())["pos"] == 3 * K


@pytest.mark.slow
def test_gateway_killed_mid_round_then_rejoins(fleet):
    """board1's gateway (its SuperNode) is stopped while its round-5 message is in hand:
    the round closes with the others; started again with the same key it rejoins in round 6,
    and the board counted every sample of its stream once."""
    start = fleet.log.stat().st_size
    cfg = {"model": MODEL, "every": K, "rounds": 5, "state": str(fleet.state), "log": str(fleet.log), "wait": 3,
           "record-pulls": True, "round-timeout": 150.0, "eval": ""}
    node = fleet.nodes[1]
    since = node.log.stat().st_size
    D.start_run(fleet.app, fleet.env, cfg, fleet.root / "flwr-run.log")
    node.wait_for(r"Receiving: train message", 600, since=since)
    node.stop()                                           # the gateway goes down mid-round
    recs = D.follow(fleet.log, fleet.link, lambda rec: None, start=start, timeout=900)
    r5 = next(r for r in recs if r.get("round") == 5 and "boards" in r)
    assert r5["aggregated_from"] == ["board0", "board2"] and r5["boards"]["board1"]["status"] == "dropped"
    assert sorted(r5["boards"]) == NAMES  # its failure is board1's, whoever wrote the error reply
    D.node_started(fleet.start_node(1))                   # back, same key: the same node
    recs = fleet.run(rounds=6)
    r6 = next(r for r in recs if r.get("round") == 6 and "boards" in r)
    assert r6["aggregated_from"] == NAMES
    pos = r6["boards"]["board1"]["position"]
    assert 5 * K <= pos <= 6 * K, r6["boards"]["board1"]
    dev = Device.open(f"socket://127.0.0.1:{fleet.board_ports[1]}", timeout=2.0)
    try:  # board1 never rebooted: it counted exactly the samples its stream advanced by
        assert dev.stats().samples_seen == pos
    finally:
        dev.close()


@pytest.mark.slow
def test_gateway_sigkilled_and_link_cut_mid_round(fleet):
    """One round, both while their train message is in hand: board1's gateway is killed
    with SIGKILL (no goodbye to the SuperLink), and board2's link to the SuperLink is cut (a
    TCP relay on loopback: its connections go silent, new ones are refused). The SuperLink
    marks both offline once their heartbeats stop (Flower: 2 x 30 s), writes their error
    replies, and the round closes with board0 alone, long before the round timeout. Then
    board1's gateway starts again with its key and board2's link comes back (its SuperNode
    reconnects by itself): the next round has all three, and no board learned a sample
    twice or skipped one."""
    import signal

    from tinyol_studies.deploy_bench import Relays
    if not (fleet.state / D_STATE).is_file():
        fleet.run(rounds=1)  # run alone: one ordinary round first
    r0 = json.loads((fleet.state / D_STATE).read_text())["round"]
    before = [json.loads(x) for x in fleet.log.read_text().splitlines()]
    p0 = {n: b["position"] for n, b in next(r for r in before if r.get("round") == r0 and "boards" in r)["boards"].items()}
    relay = Relays(1, fleet.port)
    try:
        D.stop_all([fleet.nodes[2]])                      # board2's gateway now dials through the relay
        node2 = fleet.start_node(2, superlink=f"127.0.0.1:{relay.ports[0]}")
        D.node_started(node2)
        start = fleet.log.stat().st_size
        timeout = 400.0
        cfg = {"model": MODEL, "every": K, "rounds": r0 + 1, "state": str(fleet.state), "log": str(fleet.log),
               "wait": 3, "record-pulls": True, "round-timeout": timeout, "eval": ""}
        node1 = fleet.nodes[1]
        since = [node1.log.stat().st_size, node2.log.stat().st_size]
        D.start_run(fleet.app, fleet.env, cfg, fleet.root / "flwr-run.log")
        node1.wait_for(r"Receiving: train message", 600, since=since[0])
        node2.wait_for(r"Received successfully", 600, since=since[1])  # the message is at the gateway
        node1.signal(signal.SIGKILL)                      # SuperNode, SuperExec and ClientApp: gone
        relay.cut(0)                                      # board2's gateway keeps running, alone
        recs = D.follow(fleet.log, fleet.link, lambda rec: None, start=start, timeout=900)
        r1 = next(r for r in recs if r.get("round") == r0 + 1 and "boards" in r)
        assert r1["aggregated_from"] == ["board0"], r1["boards"]
        assert r1["boards"]["board1"]["status"] == r1["boards"]["board2"]["status"] == "dropped"
        assert "heartbeat" in r1["boards"]["board1"]["error"] and "heartbeat" in r1["boards"]["board2"]["error"]
        assert r1["seconds"] < timeout / 2                # closed by Flower's heartbeats, not the timeout
        assert node1.proc.wait(10) == -signal.SIGKILL and node2.alive()
        gw2 = fleet.root / "gateway" / "board2.json"
        deadline = time.monotonic() + 300      # board2's ClientApp finishes the round on its gateway, cut off
        while json.loads(gw2.read_text())["pos"] != p0["board2"] + K:
            assert time.monotonic() < deadline, gw2.read_text()
            time.sleep(0.2)                    # polling the gateway's state file

        relay.restore(0)                                  # the link is back: board2's SuperNode reconnects
        D.node_started(fleet.start_node(1))               # board1's gateway restarted, same key
        recs = fleet.run(rounds=r0 + 2)
        r2 = next(r for r in recs if r.get("round") == r0 + 2 and "boards" in r)
        assert r2["aggregated_from"] == NAMES and r2["boards"]["board0"]["position"] == p0["board0"] + 2 * K
        b1, b2 = r2["boards"]["board1"], r2["boards"]["board2"]
        # board2 learned the cut round (its reply was lost): it gets that round's aggregate and goes on
        assert b2["pushed"] == 1 and b2["position"] == p0["board2"] + 2 * K
        # board1 was killed before or while it learned: it goes on from what its counter says
        assert p0["board1"] + K <= b1["position"] <= p0["board1"] + 2 * K, b1
        for i, b in ((1, b1), (2, b2)):
            base = json.loads((fleet.root / "gateway" / f"{NAMES[i]}.json").read_text())["base"]
            dev = Device.open(f"socket://127.0.0.1:{fleet.board_ports[i]}", timeout=2.0)
            try:  # a board counted exactly the samples its stream advanced by: none twice, none skipped
                assert dev.stats().samples_seen - base == b["position"], (i, b, base)
            finally:
                dev.close()
    finally:
        relay.stop()

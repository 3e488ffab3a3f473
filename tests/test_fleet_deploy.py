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

import numpy as np
import pytest
from conftest import ROOT

flwr = pytest.importorskip("flwr", reason="Flower is not installed (pip install 'tinyol[fleet]')")

from tinyol import fleet as F  # noqa: E402
from tinyol.errors import TinyolError  # noqa: E402
from tinyol.fleet import deploy as D  # noqa: E402
from tinyol.link.device import Device  # noqa: E402
from tinyol.targets import emulator  # noqa: E402
from tinyol.targets.simulation import load_model  # noqa: E402

MODEL = str(ROOT / "models/digits")
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

    def start_node(self, i, **kw):
        nc = {"name": NAMES[i], "port": f"socket://127.0.0.1:{self.board_ports[i]}", "model": MODEL,
              "data": "digits:5-9@train", "split": "classes:2", "parts": 3, "part": i,
              "state": str(self.root / "gateway")}
        self.nodes[i] = D.start_supernode(self.address, NAMES[i], nc, emulator.free_port(),
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

"""A fleet no outsider can join or poison (issue 34), tried against Flower's own SuperLink and
SuperNodes on loopback: an outsider holding only ca.pem (what every gateway has) and a
registered gateway whose ClientApp answers what a hostile one would.

Oracles: Flower's SuperLink (its Control API registering a key, its Fleet API refusing an
unknown one), Flower's own FedAvg applied afresh to the honest boards' replies (bit for bit),
and check_reply's refusals tried on replies written by hand.
"""
from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from conftest import ROOT

flwr = pytest.importorskip("flwr", reason="Flower is not installed (pip install 'tinyol[fleet]')")

from tinyol import fleet as F  # noqa: E402
from tinyol.errors import TinyolError  # noqa: E402
from tinyol.fleet import deploy as D  # noqa: E402
from tinyol.fleet.flower import check_reply  # noqa: E402
from tinyol.targets import emulator  # noqa: E402
from tinyol.targets.twin import load_model  # noqa: E402

MODEL = str(ROOT / "models/digits")
K = 10


def _template():
    return F.initial_params(load_model(MODEL))


# --------------------------------------------------------------------------- fast: what a reply may be
@pytest.mark.parametrize("change, said", [
    (lambda a, n: ([a[0] * np.nan, a[1], a[2]], n), "not finite"),
    (lambda a, n: ([a[0].astype(np.float64) * 1e39, a[1], a[2]], n), "beyond float32"),
    (lambda a, n: ([a[0], a[1], a[2]], 10 ** 6), "claims 1000000 samples"),
    (lambda a, n: ([a[0], a[1], a[2]], -1), "claims -1 samples"),
    (lambda a, n: ([a[0], a[1], a[2]], True), "not an integer"),
    (lambda a, n: ([a[0][:3], a[1], a[2]], n), r"shape \[3, 32\]"),
    (lambda a, n: (a[:2], n), "2 arrays"),
    (lambda a, n: ([a[0], a[1], a[2] * 0.5], n), "active mask"),
    (lambda a, n: ([a[0].astype(str), a[1], a[2]], n), "not numbers"),
])
def test_check_reply_refuses_what_no_honest_board_sends(change, said):
    t = _template()
    arrays, n = change(t.to_ndarrays(), K)
    with pytest.raises(TinyolError, match=said):
        check_reply(arrays, n, {"board": "board0"}, t, K)


def test_check_reply_takes_an_honest_reply_and_refuses_bad_metrics():
    t = _template()
    a = t.to_ndarrays()
    a[0] = a[0] + 0.25
    out, n, met = check_reply([x.astype(np.float64) for x in a], np.int64(K), {"board": "b-1", "accuracy": 0.5}, t, K)
    assert n == K and all(o.dtype == np.float32 for o in out) and np.array_equal(out[0], a[0])
    for met, said in (({"accuracy": float("nan")}, "metric accuracy"), ({"accuracy": 3.0}, r"not in \[0, 1\]"),
                      ({"board": "x" * 65}, "board name"), ({"board": "../b"}, "board name")):
        with pytest.raises(TinyolError, match=said):
            check_reply(t.to_ndarrays(), K, met, t, K)


def test_certs_never_replace_a_key_without_force(tmp_path):
    from tinyol.cli import main
    d = tmp_path / "c"
    assert main(["certs", str(d), "--nodes", "2"]) == 0
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    for argv in (["certs", str(d), "--node", "board1"], ["certs", str(d), "--host", "fleet.example.org"],
                 ["certs", str(d), "--node", "new", "--node", "board0"]):
        assert main(argv) == 1
        assert {p.name: p.read_bytes() for p in d.iterdir()} == before  # nothing written, not even 'new'
    assert main(["certs", str(d), "--node", "board2"]) == 0          # a new name, the same CA and SuperLink cert
    assert all((d / f).read_bytes() == before[f] for f in before)
    assert main(["certs", str(d), "--node", "board1", "--force"]) == 0
    assert (d / "board1.key").read_bytes() != before["board1.key"] and (d / "board1.key").stat().st_mode & 0o077 == 0


def test_insecure_excludes_tls_options(tmp_path, capsys):
    from tinyol.cli import main
    D.make_certs(tmp_path / "c", nodes=["board0"])
    assert main(["superlink", "--insecure", "--certs", str(tmp_path / "c"), "--state", str(tmp_path / "s")]) == 1
    assert "--insecure and --certs exclude each other" in capsys.readouterr().err
    assert main(["gateway", "--superlink", "127.0.0.1:9092", "--insecure", "--ca", str(tmp_path / "c/ca.pem"),
                 "--twins", "1", "--state", str(tmp_path / "g")]) == 1
    assert "--insecure and --ca exclude each other" in capsys.readouterr().err
    assert main(["gateway", "--superlink", "127.0.0.1:9092", "--insecure", "--key", str(tmp_path / "c/board0.key"),
                 "--twins", "1", "--state", str(tmp_path / "g")]) == 1
    assert "--insecure and --key exclude each other" in capsys.readouterr().err
    assert main(["superlink", "--certs", str(tmp_path / "c"), "--state", str(tmp_path / "s"),
                 "--listen", "0.0.0.0:9500", "--control", "127.0.0.1:9500"]) == 1
    assert "one address" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


# --------------------------------------------------------------------------- Flower's own SuperLink and SuperNodes
HOSTILE = textwrap.dedent('''
    # A hostile gateway's ClientApp: tinyol's, with its replies changed as the file
    # $TINYOL_TEST_HOSTILE says (one mode per round). Loaded in this gateway's processes only.
    import os, sys
    _mode = os.environ.get("TINYOL_TEST_HOSTILE")
    if _mode and any("clientapp" in a for a in sys.argv[:2]):
        import numpy as np
        from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
        import tinyol.fleet.app as A
        _orig = A._train

        def _hostile(msg, context):
            rep = _orig(msg, context)
            rnd = int(msg.content["config"]["round"])
            modes = open(_mode).read().split()
            mode = modes[min(rnd, len(modes)) - 1]
            arrays = rep.content["params"].to_numpy_ndarrays()
            met = dict(rep.content["metrics"])
            if mode == "nan":
                arrays[0] = arrays[0] * np.nan
            elif mode == "many":
                met["num-examples"] = 10 ** 6
                arrays[0] = np.full_like(arrays[0], 100.0)
            elif mode == "shape":
                arrays[0] = arrays[0][:3]
            elif mode == "impostor":
                met["board"] = "honest0"
                arrays[0] = np.full_like(arrays[0], 100.0)
            elif mode == "empty":
                return Message(RecordDict({}), reply_to=msg)
            return Message(RecordDict({"params": ArrayRecord(arrays), "metrics": ConfigRecord(met)}), reply_to=msg)
        A._train = _hostile
''')
MODES = ["nan", "many", "shape", "impostor", "empty"]
HONEST = ["honest0", "honest1"]


def _flower_fedavg(arrays_by_name, weights):
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import FedAvg
    res = [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays_by_name[n]), weights[n], {}))
           for n in sorted(arrays_by_name)]
    params, _ = FedAvg().aggregate_fit(1, res, [])
    return parameters_to_ndarrays(params)


@pytest.mark.slow
def test_outsider_cannot_join_and_hostile_replies_fail_only_their_node(tmp_path):
    import httpx
    certs = tmp_path / "certs"
    D.make_certs(certs, nodes=HONEST + ["hostile"])
    outsider = tmp_path / "outsider"  # its own key pair; of the fleet's files only ca.pem
    D.make_certs(outsider, nodes=["outsider"])
    tls = D.Tls.from_dir(certs)
    cport, gport = emulator.free_port(), emulator.free_port()
    control, public = f"127.0.0.1:{cport}", f"127.0.0.1:{gport}"
    env = D.flwr_env(tmp_path / "home", control, tls)
    hostile_dir = tmp_path / "hostile-site"
    hostile_dir.mkdir()
    (hostile_dir / "sitecustomize.py").write_text(HOSTILE)
    (tmp_path / "modes").write_text(" ".join(MODES))
    kids = []
    try:
        link = D.start_superlink(tmp_path / "link", cport, tls, env=env)
        kids.append(link)
        gate = D.start_gate(tmp_path / "link", "127.0.0.1", gport, control, tls, env=env)
        kids.append(gate)
        D.register_keys(control, tls, [certs / f"{n}.pub" for n in HONEST + ["hostile"]], env)

        # the outsider, through the address gateways use: no registering, no Control API at all ...
        with pytest.raises(TinyolError, match="refused the key"):
            D.register_keys(public, D.Tls(certs / "ca.pem"), [outsider / "outsider.pub"], env)
        r = httpx.post(f"https://{public}/v1/control/list-runs", verify=str(certs / "ca.pem"), content=b"")
        assert r.status_code == 403
        # ... (the operator's loopback Control API answers the same request: the gate refused it, not TLS)
        assert httpx.post(f"https://{control}/v1/control/list-runs", verify=str(certs / "ca.pem"),
                          content=b"").status_code != 403
        node = D.start_supernode(public, "outsider", {"name": "outsider", "twin": 1}, emulator.free_port(),
                                 tmp_path / "outsider.log", tls=D.Tls(certs / "ca.pem"),
                                 key=outsider / "outsider.key", env=env, max_retries=1)
        kids.append(node)
        with pytest.raises(TinyolError, match="exited"):
            D.node_started(node)
        assert "No SuperNode found with the given public key" in link.text()

        # two honest twins and a hostile one, all registered, all through the gate
        for i, name in enumerate(HONEST + ["hostile"]):
            nc = {"name": name, "twin": 1, "model": MODEL, "data": "digits:5-9@train", "split": "iid",
                  "parts": 3, "part": i, "state": str(tmp_path / "gw")}
            extra = {"PYTHONPATH": str(hostile_dir), "TINYOL_TEST_HOSTILE": str(tmp_path / "modes")} \
                if name == "hostile" else {}
            kids.append(D.start_supernode(public, name, nc, emulator.free_port(), tmp_path / f"{name}.log",
                                          tls=D.Tls(certs / "ca.pem"), key=certs / f"{name}.key",
                                          env={**env, **extra}))
            D.node_started(kids[-1])
        app = D.write_app(tmp_path / "app")
        log, state = tmp_path / "fleet.jsonl", tmp_path / "fleet"
        D.start_run(app, env, {"model": MODEL, "every": K, "rounds": len(MODES), "state": str(state),
                               "log": str(log), "wait": 3, "record-pulls": True, "round-timeout": 300.0,
                               "eval": ""}, tmp_path / "flwr-run.log")
        recs = D.follow(log, link, lambda rec: None, timeout=1200)
    finally:
        D.stop_all(kids)
    rounds = [r for r in recs if "boards" in r]
    assert [r["round"] for r in rounds] == list(range(1, len(MODES) + 1))
    template = _template()
    for r, mode in zip(rounds, MODES):
        assert r["aggregated_from"] == HONEST, (mode, r["boards"])
        assert r["weights"] == {n: K for n in HONEST}
        bad = [b for n, b in r["boards"].items() if n not in HONEST]
        assert len(bad) == 1 and bad[0]["status"] == "dropped" and "bad reply" in bad[0]["error"], (mode, r["boards"])
        assert r["boards"]["honest0"]["status"] == "ok"
        z = np.load(state / f"pulls_r{r['round']}.npz")
        pulls = {n: [z[f"{n}__{i}"] for i in range(3)] for n in HONEST}
        assert sorted({k.split("__")[0] for k in z.files}) == HONEST  # nothing of the hostile node's
        agg, _ = F.read_params(state / f"deploy_params_r{r['round']}.npz", template)
        want = _flower_fedavg(pulls, r["weights"])
        assert np.array_equal(agg.w, want[0]) and np.array_equal(agg.b, want[1]) and np.isfinite(agg.w).all()
        assert np.abs(agg.w).max() < 50  # the 100.0 poison never reached it
    done = recs[-1]
    assert done["event"] == "done" and set(HONEST) <= set(done["pushed_to"])
    assert json.loads((state / "deploy_state.json").read_text())["round"] == len(MODES)

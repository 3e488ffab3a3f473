"""Scale run of a fleet over Flower's deployment engine (docs/fleet.md, "Measured").

    PYTHONPATH=studies .venv/bin/python -m tinyol_studies.deploy_bench --nodes 50 --rounds 2 --every 5 [--ray] [--database]

N SuperNodes, each a numpy twin of the board (the firmware's learner, bit-exact), on this
machine, against one SuperLink with TLS and SuperNode authentication; every SuperNode
talks to the SuperLink through its own byte-counting TCP relay, so the wire bytes per
node (TLS records: HTTP, protobuf, the node's polling) are measured, not estimated.
The same fleet (same shards, strategy, k) then runs in the one-host loop
(tinyol.fleet.Fleet) and, with --ray, in Flower's simulation engine; the aggregates'
accuracies must agree across the three (the same learners, the same FedAvg).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import threading
import time
from pathlib import Path

import numpy as np


class Relays:
    """One TCP relay per node in a background asyncio loop: bytes up (node -> SuperLink)
    and down, per node. :meth:`cut` is a network cut between node i and the SuperLink:
    what its open connections carry is lost from then on (they go silent, as when packets
    are dropped: the peers' timeouts notice) and new connections are refused until
    :meth:`restore` listens on the same port again. (A relay that closed connections
    instead would break TLS mid-record, which Flower's SuperNode treats as a TLS fault it
    does not retry.)"""

    def __init__(self, n: int, target_port: int):
        self.up, self.down = [0] * n, [0] * n
        self.ports: list[int] = []
        self.conns: list[set] = [set() for _ in range(n)]  # per node: the live connections' flags
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def pipe(reader, writer, i, up, conn):
            try:
                while data := await reader.read(65536):
                    if conn["cut"]:
                        continue  # lost on the way
                    if up:
                        self.up[i] += len(data)
                    else:
                        self.down[i] += len(data)
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                writer.close()

        def handler(i):
            async def h(reader, writer):
                try:
                    r2, w2 = await asyncio.open_connection("127.0.0.1", target_port)
                except OSError:
                    writer.close()
                    return
                conn = {"cut": False, "writers": (writer, w2)}
                self.conns[i].add(id(conn))
                self._conn[id(conn)] = conn
                try:
                    await asyncio.gather(pipe(reader, w2, i, True, conn), pipe(r2, writer, i, False, conn))
                finally:
                    self.conns[i].discard(id(conn))
                    self._conn.pop(id(conn), None)
            return h

        self.servers: list = []
        self._conn: dict[int, dict] = {}
        self._handler = handler

        async def start():
            for i in range(n):
                srv = await asyncio.start_server(handler(i), "127.0.0.1", 0)
                self.servers.append(srv)
                self.ports.append(srv.sockets[0].getsockname()[1])
            ready.set()

        def run():
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(start())
            self.loop.run_forever()
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        ready.wait()

    def snapshot(self) -> tuple[list[int], list[int]]:
        return list(self.up), list(self.down)

    def cut(self, i: int) -> None:
        """Cut node i off: stop listening; its open connections go silent for good."""
        async def do():
            self.servers[i].close()
            for c in list(self.conns[i]):
                self._conn[c]["cut"] = True
        asyncio.run_coroutine_threadsafe(do(), self.loop).result(10)

    def restore(self, i: int) -> None:
        """Node i's link is back: listen on its port again."""
        async def do():
            self.servers[i] = await asyncio.start_server(self._handler(i), "127.0.0.1", self.ports[i])
        asyncio.run_coroutine_threadsafe(do(), self.loop).result(10)

    def stop(self):
        """Close every connection and listener, then end the loop's thread."""
        async def down():
            for srv in self.servers:
                srv.close()
            for c in list(self._conn.values()):
                for w in c["writers"]:
                    w.transport.abort()
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self.thread.is_alive():
            asyncio.run_coroutine_threadsafe(down(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


def deployed(n: int, rounds: int, k: int, data: str, split: str, model: str, root: Path, insecure: bool,
             batch: int = 10, database: bool = False, in_flight: int = 0) -> dict:
    """`database`: the SuperLink keeps its state in SQLite (as `tinyol superlink` does,
    to survive a restart) instead of Flower's in-memory state."""
    from tinyol.data.datasets import load_source
    from tinyol.errors import TinyolError
    from tinyol.targets.emulator import free_port
    from tinyol.fleet import deploy as D
    from tinyol.fleet.app import _cached_latents
    names = [f"board{i}" for i in range(n)]
    # the gateway's latent cache, computed once before the nodes start (every node of a real
    # gateway would compute it once, on its first message; 50 at once measure TFLM, not a round)
    _cached_latents(model, str(root / "gateway"))(load_source(data)[0])
    D.make_certs(root / "certs", nodes=[] if insecure else names)
    tls = D.Tls() if insecure else D.Tls.from_dir(root / "certs")
    port = free_port()
    env = D.flwr_env(root / "home", f"127.0.0.1:{port}", tls)
    t0 = time.monotonic()
    link = D.start_superlink(root / "link", port, tls, host="127.0.0.1", auth=not insecure, env=env,
                             database=database)
    t_link = time.monotonic() - t0
    relays, nodes = Relays(n, port), []
    out: dict = {"nodes": n, "tls": not insecure, "state": "sqlite" if database else "in-memory",
                 "in_flight": in_flight}
    try:
        if not insecure:
            D.register_keys(f"127.0.0.1:{port}", tls, [root / "certs" / f"{x}.pub" for x in names], env)
        def start(i):
            x = names[i]
            nc = {"name": x, "twin": 1, "model": model, "data": data, "split": split, "parts": n, "part": i,
                  "state": str(root / "gateway")}
            return D.start_supernode(f"127.0.0.1:{relays.ports[i]}", x, nc, free_port(),
                                     root / "gateway" / f"{x}.log", tls=D.Tls(tls.ca),
                                     key=None if insecure else root / "certs" / f"{x}.key", env=env)
        for lo in range(0, n, batch):  # in batches: 2n Python start-ups at once time out on a small machine
            group = list(range(lo, min(n, lo + batch)))
            nodes += [start(i) for i in group]
            for i in group:
                for attempt in range(3):
                    try:
                        D.node_started(nodes[i], timeout=1800)
                        break
                    except TinyolError:
                        # its Runtime API port, free a moment ago, was taken meanwhile (a busy machine)
                        if attempt == 2 or "address already in use" not in nodes[i].text():
                            raise
                        D.stop_all([nodes[i]])
                        nodes[i] = start(i)
        t_nodes = time.monotonic() - t0
        snaps = [relays.snapshot()]
        app = D.write_app(root / "app")
        rc = {"model": model, "every": k, "rounds": rounds, "state": str(root / "fleet"),
              "log": str(root / "fleet.jsonl"), "wait": n, "round-timeout": 3600.0, "eval": "digits@test", "in-flight": in_flight}
        D.start_run(app, env, rc, root / "flwr-run.log")
        recs, loads = [], []

        def on(rec):
            if "boards" in rec:
                recs.append(rec)
                snaps.append(relays.snapshot())
                loads.append(os.getloadavg()[0])
                print(f"round {rec['round']}: {len(rec['aggregated_from'])}/{n} aggregated, "
                      f"{rec['seconds']:.1f} s, load average {loads[-1]:.1f}", flush=True)
        D.follow(root / "fleet.jsonl", link, on, timeout=7200)
        per = []
        for r, load, (a, b) in zip(recs, loads, zip(snaps, snaps[1:])):
            up = [b[0][i] - a[0][i] for i in range(n)]
            down = [b[1][i] - a[1][i] for i in range(n)]
            per.append({"round": r["round"], "seconds": r["seconds"], "aggregated_from": len(r["aggregated_from"]),
                        "load_average": load,
                        "fleet_accuracy": r.get("fleet_accuracy"),
                        "payload_down_per_node": r["bytes"]["down"] / n, "payload_up_per_node": r["bytes"]["up"] / n,
                        "wire_up_per_node": float(np.mean(up)), "wire_down_per_node": float(np.mean(down))})
        out.update(superlink_start_s=t_link, nodes_up_s=t_nodes, rounds=per)
    finally:
        D.stop_all(nodes)
        link.stop()
        relays.stop()
    return out


def host_loop(n, rounds, k, data, split, model) -> dict:
    from tinyol.targets.twin import load_model
    from tinyol.fleet.members import make_twin
    from tinyol.fleet.data import latents_fn, load_shards
    from tinyol.fleet.loop import Fleet, FleetConfig, Member
    from tinyol.fleet.params import initial_params
    from tinyol.fleet.simulation import params_accuracy
    m = load_model(model)
    shards = load_shards(data, n, split, 0, latents_of=latents_fn(model))
    ev = load_shards("digits@test", 1, "iid", 0, latents_of=latents_fn(model))[0]
    members = [Member(make_twin(m, f"board{i}"), s) for i, s in enumerate(shards)]
    fleet = Fleet(members, initial_params(m), FleetConfig(k=k, rounds=rounds, use_latents=True, eval_every=0))
    per, t = [], [time.monotonic()]

    def on(kind, d):
        if kind == "round":
            t.append(time.monotonic())
            per.append({"round": d["round"], "seconds": t[-1] - t[-2],
                        "fleet_accuracy": params_accuracy(m, fleet.global_head, ev.Q, ev.y),
                        "payload_per_node": (d["bytes"]["pull"] + d["bytes"]["push"]) / n})
    fleet.on_event = on
    fleet.run()
    fleet.close()
    return {"rounds": per}


def ray(n, rounds, k, data, split, model) -> dict:
    from tinyol.fleet.data import latents_fn, load_shards
    from tinyol.fleet.loop import FleetConfig
    from tinyol.fleet.simulation import run_flower_simulation
    shards = load_shards(data, n, split, 0, latents_of=latents_fn(model))
    ev = load_shards("digits@test", 1, "iid", 0, latents_of=latents_fn(model))[0]
    t0 = time.monotonic()
    log = run_flower_simulation(model, shards, ev, FleetConfig(k=k, rounds=rounds, use_latents=True), num_cpus=2)
    return {"seconds": time.monotonic() - t0, "rounds": [{"round": r["round"],
                                                          "fleet_accuracy": r.get("fleet_accuracy")} for r in log]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--data", default="digits:5-9@train")
    ap.add_argument("--split", default="iid")
    ap.add_argument("--model", default=None)
    ap.add_argument("--insecure", action="store_true")
    ap.add_argument("--database", action="store_true",
                    help="the SuperLink's state in SQLite (as tinyol superlink) instead of in memory")
    ap.add_argument("--batch", type=int, default=10, help="SuperNodes started at a time")
    ap.add_argument("--in-flight", type=int, default=0,
                    help="at most N messages out at a time (N ClientApp processes at once; 0: all)")
    ap.add_argument("--root", default=None, help="keep every file and log here (default: a temporary folder)")
    ap.add_argument("--ray", action="store_true", help="also run Flower's simulation engine (slow)")
    ap.add_argument("--json", default=None, help="write the results here")
    a = ap.parse_args(argv)
    from tinyol.fleet.deploy import exit_on_sigterm
    exit_on_sigterm()  # a stopped benchmark stops its SuperLink and SuperNodes
    from tinyol.paths import example_model
    model = str(Path(a.model).resolve()) if a.model else str(example_model("digits"))
    res = {"config": vars(a)}
    t0 = time.monotonic()
    res["host_loop"] = host_loop(a.nodes, a.rounds, a.every, a.data, a.split, model)
    res["host_loop"]["seconds"] = time.monotonic() - t0
    print(json.dumps(res["host_loop"]), flush=True)
    with tempfile.TemporaryDirectory(prefix="tinyol-deploy-bench-") as d:
        root = Path(a.root).resolve() if a.root else Path(d)
        root.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        res["deployment"] = deployed(a.nodes, a.rounds, a.every, a.data, a.split, model, root, a.insecure,
                                     batch=a.batch, database=a.database, in_flight=a.in_flight)
        res["deployment"]["seconds"] = time.monotonic() - t0
    print(json.dumps(res["deployment"]), flush=True)
    if a.ray:
        res["ray"] = ray(a.nodes, a.rounds, a.every, a.data, a.split, model)
        print(json.dumps(res["ray"]), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

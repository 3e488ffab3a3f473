"""Scale run of a fleet over Flower's deployment engine (docs/fleet.md, "Measured").

    PYTHONPATH=host .venv/bin/python -m tinyol.fleet.deploy_bench --nodes 50 --rounds 2 --every 5 [--ray]

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
import tempfile
import threading
import time
from pathlib import Path

import numpy as np


class Relays:
    """One TCP relay per node in a background asyncio loop: bytes up (node -> SuperLink)
    and down, per node."""

    def __init__(self, n: int, target_port: int):
        self.up, self.down = [0] * n, [0] * n
        self.ports: list[int] = []
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def pipe(reader, writer, i, up):
            try:
                while data := await reader.read(65536):
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
                await asyncio.gather(pipe(reader, w2, i, True), pipe(r2, writer, i, False))
            return h

        async def start():
            for i in range(n):
                srv = await asyncio.start_server(handler(i), "127.0.0.1", 0)
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

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)


def deployed(n: int, rounds: int, k: int, data: str, split: str, model: str, root: Path, insecure: bool,
             batch: int = 10) -> dict:
    from ..targets.emulator import free_port
    from . import deploy as D
    names = [f"board{i}" for i in range(n)]
    D.make_certs(root / "certs", nodes=[] if insecure else names)
    tls = D.Tls() if insecure else D.Tls.from_dir(root / "certs")
    port = free_port()
    env = D.flwr_env(root / "home", f"127.0.0.1:{port}", tls)
    t0 = time.monotonic()
    link = D.start_superlink(root / "link", port, tls, host="127.0.0.1", auth=not insecure, env=env)
    t_link = time.monotonic() - t0
    relays, nodes = Relays(n, port), []
    out: dict = {"nodes": n, "tls": not insecure}
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
                D.node_started(nodes[i], timeout=1800)
        t_nodes = time.monotonic() - t0
        snaps = [relays.snapshot()]
        app = D.write_app(root / "app")
        rc = {"model": model, "every": k, "rounds": rounds, "state": str(root / "fleet"),
              "log": str(root / "fleet.jsonl"), "wait": n, "round-timeout": 3600.0, "eval": "digits@test"}
        D.start_run(app, env, rc, root / "flwr-run.log")
        recs = []

        def on(rec):
            if "boards" in rec:
                recs.append(rec)
                snaps.append(relays.snapshot())
        D.follow(root / "fleet.jsonl", link, on, timeout=7200)
        per = []
        for r, (a, b) in zip(recs, zip(snaps, snaps[1:])):
            up = [b[0][i] - a[0][i] for i in range(n)]
            down = [b[1][i] - a[1][i] for i in range(n)]
            per.append({"round": r["round"], "seconds": r["seconds"], "aggregated_from": len(r["aggregated_from"]),
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
    from ..targets.simulation import load_model
    from .boards import make_twin
    from .data import latents_fn, load_shards
    from .loop import Fleet, FleetConfig, Member
    from .params import initial_params
    from .simulation import params_accuracy
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
    from .data import latents_fn, load_shards
    from .loop import FleetConfig
    from .simulation import run_flower_simulation
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
    ap.add_argument("--ray", action="store_true", help="also run Flower's simulation engine (slow)")
    ap.add_argument("--json", default=None, help="write the results here")
    a = ap.parse_args(argv)
    from .deploy import exit_on_sigterm
    exit_on_sigterm()  # a stopped benchmark stops its SuperLink and SuperNodes
    from ..paths import example_model
    model = str(Path(a.model).resolve()) if a.model else str(example_model("digits"))
    res = {"config": vars(a)}
    t0 = time.monotonic()
    res["host_loop"] = host_loop(a.nodes, a.rounds, a.every, a.data, a.split, model)
    res["host_loop"]["seconds"] = time.monotonic() - t0
    print(json.dumps(res["host_loop"]), flush=True)
    with tempfile.TemporaryDirectory(prefix="tinyol-deploy-bench-") as d:
        t0 = time.monotonic()
        res["deployment"] = deployed(a.nodes, a.rounds, a.every, a.data, a.split, model, Path(d), a.insecure)
        res["deployment"]["seconds"] = time.monotonic() - t0
    print(json.dumps(res["deployment"]), flush=True)
    if a.ray:
        res["ray"] = ray(a.nodes, a.rounds, a.every, a.data, a.split, model)
        print(json.dumps(res["ray"]), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

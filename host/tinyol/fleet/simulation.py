"""The fleet in Flower's simulation engine (Ray): hundreds of numpy-twin boards, the same round.

Part of tinyol.fleet (docs/fleet.md; the round is described in tinyol/fleet/__init__.py)."""
from __future__ import annotations

import pickle
from typing import Callable

import numpy as np

from ..learn.learner import dequantize
from ..targets.twin import evaluate, load_model
from .members import make_twin
from .data import Shard
from .flower import board_client, make_strategy, require_flower
from .loop import FleetConfig
from .params import Head, StageParams, initial_params

# Lazy on purpose: Flower (flwr, the optional extra tinyol[fleet]) and matplotlib are imported
# where they are used; both take seconds to load and a twin fleet without plots needs neither.


def head_accuracy(head: Head, Q: np.ndarray, y: np.ndarray, latent_q: tuple[float, int]) -> float:
    """Accuracy of a head on int8 latents (as the board predicts: inactive rows never win)."""
    z = dequantize(Q, *latent_q) @ head.w.T + head.b
    z[:, ~head.active] = -np.inf
    return float(np.mean(np.argmax(z, axis=1) == y))


def params_accuracy(model, params: "Head | StageParams", Q: np.ndarray, y: np.ndarray) -> float:
    """Accuracy of an aggregate on int8 latents, as a board holding it predicts (a head:
    vectorised; a stage: the numpy twin of the firmware's stage with the image loaded)."""
    if isinstance(params, Head):
        return head_accuracy(params, Q, y, model.latent_q)
    twin = make_twin(model, "eval")
    twin.push(params)
    return float(np.mean(evaluate(twin.lrn, Q) == np.asarray(y)))


def run_flower_simulation(model_dir: str, shards: list[Shard], eval_shard: Shard, cfg: FleetConfig, *,
                          learn_mode: str | None = None, num_cpus: int = 2,
                          on_event: Callable[[str, dict], None] | None = None,
                          prefills: list[Shard | None] | None = None,
                          ray_address: str | None = None) -> list[dict]:
    """The same rounds in Flower's simulation engine (Ray): one numpy twin per virtual board.

    Each virtual board keeps its learner (head, replay buffer, PRNG, stream position)
    in its node's ``context.state`` between rounds, as a real board keeps its RAM.
    Returns per-round records shaped like :class:`Fleet`'s log."""
    require_flower()

    from flwr.client import ClientApp
    from flwr.common import ConfigRecord, ndarrays_to_parameters
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.simulation import run_simulation

    model = load_model(model_dir)
    initial = initial_params(model)
    rounds = cfg.rounds or max(1, max(-(-len(s) // cfg.k) for s in shards))
    n = len(shards)
    log: list[dict] = [{"round": r, "boards": {}, "aggregated": cfg.strategy != "none"} for r in range(1, rounds + 1)]
    on_event = on_event or (lambda kind, d: None)

    def client_fn(context):
        pid = int(context.node_config["partition-id"])
        if "tinyol" in context.state:
            board = pickle.loads(context.state["tinyol"]["board"])
        else:
            board = make_twin(model, f"twin{pid}", learn_mode=learn_mode)
            if prefills is not None and prefills[pid] is not None:
                board.prefill(prefills[pid])

        def keep(client):  # the board's RAM survives to the next round
            context.state["tinyol"] = ConfigRecord({"board": pickle.dumps(client.board)})
        return board_client(board, shards[pid], use_latents=True, eval_shard=eval_shard,
                            after_fit=keep, cid=board.name, template=initial).to_client()

    def fit_config(r: int) -> dict:
        return {"target": r * cfg.k, "start": (r - 1) * cfg.k, "push": int(cfg.strategy != "none" and r > 1),
                "round": r, "evaluate": int(bool(cfg.eval_every) and (r % cfg.eval_every == 0 or r == rounds))}

    def fit_metrics(results):
        r = fit_metrics.round = getattr(fit_metrics, "round", 0) + 1
        for num, m in results:
            log[r - 1]["boards"][str(m["board"])] = {"status": "ok", "weight": num, **m}
        return {}

    def evaluate_fn(r, arrays, config):
        if r == 0:
            return None
        acc = params_accuracy(model, initial.like(arrays), eval_shard.Q, eval_shard.y)
        log[r - 1]["fleet_accuracy"] = acc
        on_event("round", log[r - 1])
        return 1.0 - acc, {"accuracy": acc}

    def server_fn(context):
        name = "fedavg" if cfg.strategy == "none" else cfg.strategy
        strat = make_strategy(name, initial, min_boards=n, server_lr=cfg.server_lr)
        kw = dict(min_fit_clients=n, min_evaluate_clients=n, min_available_clients=n, fraction_evaluate=0.0,
                  on_fit_config_fn=fit_config, fit_metrics_aggregation_fn=fit_metrics,
                  initial_parameters=ndarrays_to_parameters(initial.to_ndarrays()))
        if cfg.strategy != "none":
            kw["evaluate_fn"] = evaluate_fn
        for k, v in kw.items():
            setattr(strat, k, v)
        return ServerAppComponents(strategy=strat, config=ServerConfig(num_rounds=rounds))

    # Flower hands init_args to ray.init: a local Ray with num_cpus, or a running cluster's address
    init_args = {"address": ray_address} if ray_address else {"num_cpus": num_cpus}
    run_simulation(ServerApp(server_fn=server_fn), ClientApp(client_fn=client_fn), num_supernodes=n,
                   backend_config={"client_resources": {"num_cpus": 1},
                                   "init_args": {**init_args, "include_dashboard": False}})
    return log



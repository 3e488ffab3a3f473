"""Flower's side of a round: a board as a Flower client and proxy, the strategies tinyol offers
(:func:`make_strategy`), aggregation and :func:`close_round` (shared by the one-host loop and the
deployment engine, tinyol.fleet.app), checkpoints of the aggregate.

Part of tinyol.fleet (docs/fleet.md; the round is described in tinyol/fleet/__init__.py)."""
from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import TinyolError
from .members import Board
from .data import Shard
from .params import Head, StageParams

# Lazy on purpose: Flower (flwr, the optional extra tinyol[fleet]) and matplotlib are imported
# where they are used; both take seconds to load and a twin fleet without plots needs neither.


def require_flower():
    """Import flwr or explain how to install it."""
    try:
        import flwr
    except ImportError:
        raise TinyolError("Flower (flwr) is not installed",
                          hint="pip install 'tinyol[fleet]' (make setup installs it)") from None
    return flwr


STRATEGIES = ("fedavg", "fedavgm", "fedmedian", "fedtrimmedavg", "fedprox", "fedadam",
              "fedyogi", "fedadagrad", "none")


_CLASSES: dict = {}


def board_client(board: "Board", shard: "Shard", **kw):
    """A Flower NumPyClient around `board` (the class is built on first use: flwr is optional)."""
    if "client" not in _CLASSES:
        _CLASSES["client"] = _make_client_class()
    return _CLASSES["client"](board, shard, **kw)


def _make_client_class():
    require_flower()
    from flwr.client import NumPyClient

    class _BoardClient(NumPyClient):
        """A Flower client around one board and its stream.

        ``fit(parameters, config)``: PUSH `parameters` unless config says the board already
        holds them (``push`` = 0), learn the stream up to ``config["target"]``, PULL the
        head (or stage). ``num_examples`` = samples of this round the head holds (the
        FedAvg weight). ``template``: what the parameters are (a Head by default, or the
        fleet's StageParams), to decode the NDArrays the strategy sends.
        """

        def __init__(self, board: Board, shard: Shard, *, base: int = 0, use_latents: bool = False,
                     hook: Callable | None = None, eval_shard: Shard | None = None,
                     after_fit: Callable | None = None, cid: str | None = None, template=None):
            self.board, self.shard, self.base = board, shard, base
            self.template = template
            self.after_fit, self.cid = after_fit, cid
            self.eval_shard = eval_shard
            self.use_latents = use_latents
            self.hook = hook
            self.last: dict = {}

        def position(self) -> int:
            return self.board.samples_seen() - self.base

        def _decode(self, arrays):
            return Head.from_ndarrays(arrays) if self.template is None else self.template.like(arrays)

        def get_parameters(self, config):
            return self.board.pull()[0].to_ndarrays()

        def fit(self, parameters, config):
            t0 = time.monotonic()
            bytes_push = 0
            if parameters and int(config.get("push", 1)):
                bytes_push = self.board.push(self._decode(parameters))
            start = int(config.get("start", self.position()))
            pos = self.position()
            target = min(int(config["target"]), len(self.shard))
            data = self.shard.Q if self.use_latents else self.shard.X
            rows = ((i, data[i], int(self.shard.y[i])) for i in range(pos, target))
            if self.hook is not None:
                rows = self.hook(self.board, rows)
            learned = self.board.learn(rows)
            seen = self.board.samples_seen()
            if pos < target and seen - self.base != target:  # every sample exactly once, or no result
                raise TinyolError(f"{self.board.name}: its sample counter says position {seen - self.base}, "
                                  f"expected {target} after learning from {pos}")
            head, bytes_pull = self.board.pull()
            n = max(0, target - start)
            self.last = {"learned": learned.samples, "correct": learned.correct,
                         "bytes_stream": learned.bytes_stream, "bytes_pull": bytes_pull,
                         "bytes_push": bytes_push, "position": max(pos, target),
                         "samples_seen": seen, "seconds": time.monotonic() - t0}
            if self.eval_shard is not None and int(config.get("evaluate", 0)):
                self.last["accuracy"] = float(self.board.evaluate(self.eval_shard))
            if self.cid is not None:
                self.last["board"] = self.cid
            if self.after_fit is not None:
                self.after_fit(self)
            return head.to_ndarrays(), n, dict(self.last)

        def evaluate(self, parameters, config):
            if parameters and int(config.get("push", 1)):
                self.board.push(self._decode(parameters))
            if self.eval_shard is None:
                return math.nan, 0, {}
            acc = float(self.board.evaluate(self.eval_shard))
            return 1.0 - acc, len(self.eval_shard), {"accuracy": acc}

    return _BoardClient


def _proxy_class():
    if "proxy" in _CLASSES:
        return _CLASSES["proxy"]
    require_flower()
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.client_proxy import ClientProxy

    class _BoardProxy(ClientProxy):
        """The server's view of a BoardClient in this process (Flower's ClientProxy)."""

        def __init__(self, cid: str, client):
            super().__init__(cid)
            self.client = client

        def get_properties(self, ins, timeout, group_id):
            raise NotImplementedError

        def get_parameters(self, ins, timeout, group_id):
            raise NotImplementedError

        def fit(self, ins, timeout, group_id):
            arrays, n, metrics = self.client.fit(parameters_to_ndarrays(ins.parameters)
                                                 if ins.parameters.tensors else [], ins.config)
            return FitRes(Status(Code.OK, "ok"), ndarrays_to_parameters(arrays), n, metrics)

        def evaluate(self, ins, timeout, group_id):
            raise NotImplementedError

        def reconnect(self, ins, timeout, group_id):
            raise NotImplementedError

    _CLASSES["proxy"] = _BoardProxy
    return _BoardProxy


SERVER_LR = {"fedadam": "eta", "fedyogi": "eta", "fedadagrad": "eta", "fedavgm": "server_learning_rate"}


def check_server_lr(name: str, server_lr: float | None) -> None:
    """A server learning rate only for strategies that have one, and only a positive one."""
    if server_lr is None:
        return
    if name not in SERVER_LR:
        raise TinyolError(f"strategy {name} has no server learning rate",
                          hint="--server-lr goes with " + ", ".join(SERVER_LR))
    if not (math.isfinite(server_lr) and server_lr > 0):
        raise TinyolError(f"--server-lr {server_lr} must be a positive number")


def make_strategy(name: str, initial: "Head | StageParams", *, min_boards: int = 1, accept_failures: bool = True,
                  server_lr: float | None = None):
    """A Flower strategy by name, seeded with the initial head or stage (FedOpt needs it).
    `server_lr`: the server optimizer's learning rate (FedAdam/FedYogi/FedAdagrad ``eta``,
    FedAvgM ``server_learning_rate``); None keeps Flower's default."""
    check_server_lr(name, server_lr)
    if name == "none":
        return None
    require_flower()
    from flwr.common import ndarrays_to_parameters
    from flwr.server import strategy as S
    classes = {"fedavg": S.FedAvg, "fedavgm": S.FedAvgM, "fedmedian": S.FedMedian,
               "fedtrimmedavg": S.FedTrimmedAvg, "fedprox": S.FedProx, "fedadam": S.FedAdam,
               "fedyogi": S.FedYogi, "fedadagrad": S.FedAdagrad}
    if name not in classes:
        raise TinyolError(f"unknown strategy {name!r}", hint="one of: " + ", ".join(STRATEGIES))
    kw = dict(min_fit_clients=min_boards, min_evaluate_clients=min_boards, min_available_clients=min_boards,
              fraction_evaluate=0.0, accept_failures=accept_failures,
              fit_metrics_aggregation_fn=lambda results: {},
              initial_parameters=ndarrays_to_parameters(initial.to_ndarrays()))
    if name == "fedprox":
        kw["proximal_mu"] = 0.0  # the board's learner has no proximal term; aggregation is FedAvg's
    if name == "fedavgm":
        kw["server_momentum"] = 0.9  # Flower's default 0 would make it FedAvg
    if server_lr is not None:
        kw[SERVER_LR[name]] = float(server_lr)
    return classes[name](**kw)


def aggregate(strategy, server_round: int, results: list[tuple[str, list[np.ndarray], int, dict]],
              failures: list[BaseException], template=None) -> "Head | StageParams | None":
    """Run the strategy's aggregate_fit over (cid, arrays, num_examples, metrics) results
    (in cid order, so the sums run in a fixed order); None when it declines. `template`
    (a Head by default, or a StageParams) says what the arrays are."""
    require_flower()
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    Proxy = _proxy_class()
    res = [(Proxy(cid, None), FitRes(Status(Code.OK, "ok"), ndarrays_to_parameters(a), n, m))
           for cid, a, n, m in sorted(results, key=lambda r: r[0])]
    if not res or sum(r[1].num_examples for r in res) == 0:
        return None
    params, _ = strategy.aggregate_fit(server_round, res, list(failures))
    if params is None:
        return None
    arrays = parameters_to_ndarrays(params)
    return Head.from_ndarrays(arrays) if template is None else template.like(arrays)


def write_params(path: Path, g: "Head | StageParams") -> None:
    """An aggregate on disk (npz, written atomically): W, b, active, or a stage's flat
    parameters, active and layer-list hash."""
    path = Path(path)
    tmp = path.with_name(path.stem + ".tmp.npz")
    if isinstance(g, StageParams):
        np.savez(tmp, stage_params=g.params, active=g.active, stage_hash=np.int64(g.shape.stage_hash))
    else:
        np.savez(tmp, W=g.w, b=g.b, active=g.active)
    os.replace(tmp, path)


def read_params(path: Path, template: "Head | StageParams") -> tuple["Head | StageParams | None", str]:
    """The inverse of write_params; None (and what was saved) when it does not fit `template`."""
    z = np.load(path)
    if "stage_params" in z.files:
        saved = f"an adaptive stage 0x{int(z['stage_hash']):08x}"
        if isinstance(template, StageParams) and int(z["stage_hash"]) == template.shape.stage_hash:
            return StageParams(template.layers, z["stage_params"], z["active"]), saved
        return None, saved
    saved = f"a one-layer head W{list(z['W'].shape)}"
    head = Head(z["W"], z["b"], z["active"].astype(bool))
    if not isinstance(template, Head) or head.w.shape != template.w.shape:
        return None, saved
    return head, saved


NAME_RX = r"[A-Za-z0-9_.-]{1,64}"


def check_reply(arrays, n, metrics: dict, template: "Head | StageParams", k: int) -> tuple[list[np.ndarray], int, dict]:
    """What a board's reply must be before it may reach a strategy (the deployment engine's
    replies come from gateways the SuperLink only authenticates): exactly the arrays of
    `template` (count, shapes, a float dtype), every value finite in float32, the active
    mask 0/1, a sample count between 0 and the `k` samples the round asked for, numeric
    metrics finite (an accuracy in [0, 1]) and a board name of at most 64 plain characters.
    Returns the arrays as float32, the count and the metrics; a bad reply: TinyolError
    saying what is wrong (the failure of that board, never of the round)."""
    import re
    want = [a.shape for a in template.to_ndarrays()]
    if not isinstance(arrays, (list, tuple)) or len(arrays) != len(want):
        raise TinyolError(f"{len(arrays) if isinstance(arrays, (list, tuple)) else 'no'} arrays, "
                          f"the fleet's parameters are {len(want)}")
    out = []
    for i, (a, shp) in enumerate(zip(arrays, want)):
        a = np.asarray(a)
        if a.shape != shp:
            raise TinyolError(f"array {i} has shape {list(a.shape)}, the fleet's is {list(shp)}")
        if a.dtype.kind not in "fiu":
            raise TinyolError(f"array {i} is {a.dtype}, not numbers")
        with np.errstate(over="ignore", invalid="ignore"):
            f = a.astype(np.float32)
        if not np.isfinite(f).all():
            raise TinyolError(f"array {i} holds {int((~np.isfinite(f)).sum())} values that are not finite "
                              "(NaN, inf, or beyond float32)")
        out.append(f)
    if not np.isin(out[-1], (0.0, 1.0)).all():
        raise TinyolError("the active mask holds values other than 0 and 1")
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TinyolError(f"sample count {n!r} is not an integer")
    if not 0 <= int(n) <= int(k):
        raise TinyolError(f"it claims {int(n)} samples; the round asked for at most {int(k)}")
    met = dict(metrics)
    for key, v in met.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise TinyolError(f"metric {key} = {v}")
    acc = met.get("accuracy")
    if acc is not None and not (isinstance(acc, (int, float)) and 0.0 <= float(acc) <= 1.0):
        raise TinyolError(f"accuracy {acc!r} is not in [0, 1]")
    name = met.get("board")
    if name is not None and not (isinstance(name, str) and re.fullmatch(NAME_RX, name)):
        raise TinyolError(f"board name {str(name)[:40]!r}: at most 64 letters, digits, '_', '.', '-'")
    return out, int(n), met


def ok_row(n: int, metrics: dict) -> dict:
    """A round's log row for a board whose fit returned (both transports)."""
    return {"status": "ok", "weight": n, **metrics}


def dropped_row(error) -> dict:
    """A round's log row for a board whose fit failed: the first line of why."""
    return {"status": "dropped", "error": (str(error).splitlines() or [""])[0]}


def close_round(strategy, r: int, results: list[tuple[str, list[np.ndarray], int, dict]],
                failures: list, rows: dict, *, min_boards: int = 1, template=None):
    """Close round r from what came back, whatever carried it (this host's threads, or
    Flower's deployment engine, tinyol.fleet.app): the strategy aggregates the boards that
    finished (if at least `min_boards` did), failures are Flower failures. Returns the
    aggregate (None: nothing to push) and the round's log record."""
    new = None
    if strategy is not None and len(results) >= min_boards:
        new = aggregate(strategy, r, results, failures, template=template)
    record = {"round": r, "boards": rows, "aggregated": new is not None,
              "aggregated_from": sorted(name for name, *_ in results) if new is not None else [],
              "weights": {name: n for name, _, n, _ in results}}
    return new, record


def strategy_state(strategy) -> bytes:
    """The strategy's own state (server momentum, Adam moments), pickled for a checkpoint."""
    import pickle
    return pickle.dumps({k: v for k, v in vars(strategy).items() if not callable(v)})


def restore_strategy(strategy, state: "bytes | dict") -> None:
    """Put a checkpoint's strategy state back (the inverse of strategy_state)."""
    import pickle
    vars(strategy).update(pickle.loads(state) if isinstance(state, bytes) else state)



"""The tinyol Flower App: a fleet over Flower's deployment engine (docs/fleet.md).

`tinyol fleet` drives every board from one host. Here the boards sit on gateways:
each gateway runs one Flower SuperNode per board (`tinyol gateway`), a SuperLink
aggregates (`tinyol superlink`), and this module is the app Flower runs on them:

- ``client_app`` (a Flower ``ClientApp``, one per board, on its gateway): the node's
  settings (``--node-config``) name its board (``port``: a pyserial URL, or ``twin``: a
  numpy twin) and its local data (``data`` / ``split`` / ``part`` of ``parts``). A
  ``train`` message carries the global head (or stage) and ``k``; the board does what
  a board does in a `tinyol fleet` round — the very same
  :func:`tinyol.fleet.board_client` ``fit``: PUSH the aggregate if the board does not
  hold it, learn its next k samples through the exactly-once stream, PULL — and the
  reply carries the pulled parameters, the sample count and the metrics. Samples and
  the replay buffer never leave the gateway.
- ``server_app`` (a Flower ``ServerApp``, run by the SuperLink): every round it sends
  the aggregate to every connected node, waits for their replies (a node that fails or
  does not answer in ``round-timeout`` is a Flower failure), and closes the round with
  :func:`tinyol.fleet.close_round`, the same code the one-host fleet runs: Flower's
  strategy (``--strategy``, ``--server-lr``, ``--min-boards``, ``--strict``), then the
  checkpoint (``state``), the JSON log (``log``) and the aggregate's accuracy on
  ``eval`` (the numpy twin of the firmware, bit-exact with it).

Where a board is in its stream is read from the board (``samples_seen`` minus a base
the gateway keeps in ``state``), as in the one-host fleet, so a gateway restart never
makes a board learn a sample twice.
"""
from __future__ import annotations

import json
import os
import pickle
import time
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from ..errors import TinyolError
from .members import DeviceBoard, make_twin
from .data import Shard, latents_fn, load_shards
from .flower import (
    board_client,
    check_reply,
    close_round,
    dropped_row,
    make_strategy,
    ok_row,
    read_params,
    restore_strategy,
    strategy_state,
    write_params,
)
from .loop import jsonable
from .params import initial_params
from .simulation import params_accuracy

STATE_FILE = "deploy_state.json"
PUSH_BATCH = 8  # messages per push to the SuperLink (50 at once outlived Flower's push session here)
GRID_PATIENCE = 300.0  # seconds the ServerApp keeps trying a SuperLink that does not answer

# The run config the ServerApp reads (tinyol superlink passes every one of them).
RUN_DEFAULTS = {
    "model": "models/digits",
    "every": 20,            # samples each board learns per round
    "rounds": 3,
    "strategy": "fedavg",
    "server-lr": 0.0,       # 0: Flower's default
    "min-boards": 1,
    "strict": False,
    "eval": "digits@test",  # '' to skip
    "state": "",            # checkpoint directory ('' : none)
    "log": "",              # one JSON record per round ('' : none)
    "wait": 1,              # nodes to wait for before round 1
    "wait-timeout": 600.0,
    "round-timeout": 300.0,
    "record-pulls": False,  # keep every reply's parameters in state/pulls_r<N>.npz (tests, audits)
    "save": False,          # every board SAVEs its learned state after the PULL (before the next PUSH)
    "eval-every": 1,        # every N rounds (and the last) each gateway measures its board's own head on `eval`
    "in-flight": 0,         # at most N messages out at a time (0: all at once)
}


def _model_dir(path: str) -> str:
    return str(Path(path).expanduser())


# --------------------------------------------------------------------------- the client (a gateway's board)
class _GatewayBoard:
    """What a gateway remembers about its board between messages: the base of its stream
    position, the position and the version of the aggregate it holds (a file in the node's
    ``state`` directory, so a gateway restart loses nothing)."""

    def __init__(self, context: Context):
        nc = dict(context.node_config)
        self.nc = nc
        self.name = str(nc.get("name", f"node{context.node_id}"))
        state = str(nc.get("state", ""))
        self.file = Path(state) / f"{self.name}.json" if state else None
        self.mem = context.state

    def load(self) -> dict:
        if self.file is not None and self.file.is_file():
            return json.loads(self.file.read_text())
        if "gateway" in self.mem:
            return json.loads(str(self.mem["gateway"]["json"]))
        return {}

    def store(self, d: dict) -> None:
        self.mem["gateway"] = ConfigRecord({"json": json.dumps(d)})
        if self.file is not None:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.file.with_suffix(".tmp")
            tmp.write_text(json.dumps(d))
            tmp.replace(self.file)


def _node_shard(nc: dict, model_dir: str, use_latents: bool) -> Shard:
    """This node's local data: part `part` of `parts` of `data` dealt by `split` (as
    `tinyol fleet` deals it), or a whole file/source when `parts` is 1."""
    parts, part = int(nc.get("parts", 1)), int(nc.get("part", 0))
    if not 0 <= part < parts:
        raise TinyolError(f"node config part={part} is not one of 0..{parts - 1}")
    return _gateway_shard(str(nc.get("data", "digits:5-9@train")), parts, part, str(nc.get("split", "iid")),
                          int(nc.get("seed", 0)), model_dir, str(nc.get("state", "")), use_latents)


def _gateway_shard(data: str, parts: int, part: int, split: str, seed: int, model_dir: str, state: str,
                   use_latents: bool) -> Shard:
    """Part `part` of `data`, kept in the node's state directory after the first message: a
    ClientApp is a new process for every message, and loading a source (the digits import
    scikit-learn) cost more than the round's work. A source file whose bytes change is
    dealt again; stdin is never cached."""
    import hashlib

    from ..data.datasets import split_spec
    latents_of = _cached_latents(model_dir, state) if use_latents else None
    if not state or data == "-":
        return load_shards(data, parts, split, seed, latents_of=latents_of)[part]
    src = Path(split_spec(data)[0])
    stamp = hashlib.sha1(src.read_bytes()).hexdigest() if src.is_file() else ""
    backbone = hashlib.sha1((Path(model_dir) / "backbone.tflite").read_bytes()).hexdigest() if use_latents else ""
    key = hashlib.sha1(json.dumps([data, parts, part, split, seed, stamp, backbone]).encode()).hexdigest()[:16]
    path = Path(state) / f"shard-{key}.npz"
    if path.is_file():
        z = np.load(path)
        return Shard(z["X"], z["y"], z["Q"] if use_latents else None, [int(c) for c in z["classes"]])
    sh = load_shards(data, parts, split, seed, latents_of=latents_of)[part]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + f".{os.getpid()}.tmp.npz")
    np.savez(tmp, X=sh.X, y=sh.y, Q=sh.Q if sh.Q is not None else np.zeros(0, np.int8),
             classes=np.asarray(sh.classes, np.int64))
    os.replace(tmp, path)
    return sh


def _cached_latents(model_dir: str, state: str):
    """Twins learn from latents: TFLM's backbone on the node's data, once per gateway (a
    ClientApp is a new process for every message), kept in the node's state directory."""
    import hashlib
    f = latents_fn(model_dir)
    if not state:
        return f

    def cached(X):
        key = hashlib.sha1(np.ascontiguousarray(X).tobytes() + str(Path(model_dir).resolve()).encode()
                           + (Path(model_dir) / "backbone.tflite").read_bytes()).hexdigest()[:16]
        path = Path(state) / f"latents-{key}.npy"
        if path.is_file():
            return np.load(path)
        Q = f(X)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.stem + f".{os.getpid()}.tmp.npy")
        np.save(tmp, Q)
        os.replace(tmp, path)
        return Q
    return cached


def _open_board(nc: dict, model_dir: str, context: Context):
    """The node's board: a device at `port`, or a numpy twin kept in the node's state."""
    from ..targets.twin import load_model
    name = str(nc.get("name", f"node{context.node_id}"))
    learn = str(nc.get("learn", "")) or None
    if "port" in nc:
        from ..model.folder import load_manifest
        board = DeviceBoard(name, str(nc["port"]), load_manifest(model_dir), learn_mode=learn,
                              model_dir=model_dir, window=int(nc.get("window", 4)),
                              timeout=float(nc.get("timeout", 1.0)))
        board.connect()
        return board
    if "twin" in context.state:
        return pickle.loads(context.state["twin"]["board"])
    return make_twin(load_model(model_dir), name, learn_mode=learn)


def _train(msg: Message, context: Context) -> Message:
    nc = dict(context.node_config)
    cfg = msg.content["config"]
    model_dir = _model_dir(str(nc.get("model", context.run_config.get("model", RUN_DEFAULTS["model"]))))
    gw = _GatewayBoard(context)
    board = _open_board(nc, model_dir, context)
    try:
        twin = not isinstance(board, DeviceBoard)
        shard = _node_shard(nc, model_dir, use_latents=twin)
        from ..targets.twin import load_model
        template = initial_params(load_model(model_dir))
        if board.shape() != template.shape:
            raise TinyolError(f"{gw.name} has {board.shape()}, the fleet's model {template.shape}")
        st = gw.load()
        seen, boot = board.samples_seen(), board.boot()
        if not st:  # first contact: its stream starts here; it holds the exported parameters
            st = {"base": seen, "pos": 0, "seen": seen, "boot": boot, "holds": 0}
            prefill = str(nc.get("prefill", ""))
            if prefill:
                board.prefill(_prefill_shard(prefill, int(nc.get("prefill-n", 100)), int(nc.get("seed", 0)),
                                             model_dir, twin))
        elif seen < st["seen"]:  # reset without SAVE: carry on from the fleet's position
            st["base"], st["holds"] = seen - st["pos"], None
        elif seen == st["seen"] and boot != st["boot"]:
            st["holds"] = None
        elif seen > st["seen"]:  # it learned past the last reply (the gateway died mid-round)
            st["holds"] = int(cfg["version"])
        version = int(cfg["version"])
        ev = str(cfg.get("eval", ""))  # this round, the board's own head is measured on the gateway's copy
        eval_shard = None
        if ev:
            eval_shard = _gateway_shard(ev, 1, 0, "iid", 0, model_dir, str(nc.get("state", "")), twin)
        client = board_client(board, shard, base=st["base"], use_latents=twin, template=template,
                                cid=gw.name, eval_shard=eval_shard)
        pos = client.position()
        k = int(cfg["k"])
        params = msg.content["params"].to_numpy_ndarrays() if "params" in msg.content else []
        push = int(bool(params) and st.get("holds") != version)
        arrays, n, metrics = client.fit(params, {"target": pos + k, "start": pos, "push": push,
                                                 "evaluate": int(bool(ev))})
        if int(cfg.get("save", 0)):  # what it learned survives a reset (the PUSH of the next round comes later)
            board.save()
            metrics["saved"] = 1
        st.update(pos=int(metrics["position"]), seen=int(metrics["samples_seen"]), boot=board.boot(),
                  holds=None)
        gw.store(st)
        if twin:
            context.state["twin"] = ConfigRecord({"board": pickle.dumps(board)})
        metrics = {**metrics, "num-examples": int(n), "pushed": push}
        return Message(RecordDict({"params": ArrayRecord(arrays),
                                   "metrics": ConfigRecord({k_: _scalar(v) for k_, v in metrics.items()})}),
                       reply_to=msg)
    finally:
        board.close()


def _push_only(msg: Message, context: Context) -> Message:
    """The last aggregate onto the board (an ``evaluate`` message: nothing is learned)."""
    nc = dict(context.node_config)
    cfg = msg.content["config"]
    model_dir = _model_dir(str(nc.get("model", context.run_config.get("model", RUN_DEFAULTS["model"]))))
    gw = _GatewayBoard(context)
    board = _open_board(nc, model_dir, context)
    try:
        from ..targets.twin import load_model
        template = initial_params(load_model(model_dir))
        st = gw.load()
        version = int(cfg["version"])
        pushed = 0
        if st and st.get("holds") != version:
            pushed = board.push(template.like(msg.content["params"].to_numpy_ndarrays()))
            st["holds"] = version
            gw.store(st)
        if not isinstance(board, DeviceBoard):
            context.state["twin"] = ConfigRecord({"board": pickle.dumps(board)})
        return Message(RecordDict({"metrics": ConfigRecord({"board": gw.name, "bytes_push": int(pushed)})}),
                       reply_to=msg)
    finally:
        board.close()


def _prefill_shard(source: str, n: int, seed: int, model_dir: str, twin: bool) -> Shard:
    from ..data.datasets import load_source
    X, y, _ = load_source(source)
    pick = np.random.default_rng(seed + 1).choice(len(y), min(n, len(y)), replace=False)
    Q = latents_fn(model_dir)(X[pick]) if twin else None
    return Shard(X[pick], y[pick], Q)


def _scalar(v):
    if isinstance(v, (np.generic,)):
        v = v.item()
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float, str)):
        return v
    return str(v)


client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    return _train(msg, context)


@client_app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return _push_only(msg, context)


# --------------------------------------------------------------------------- the server (the SuperLink's app)
class DeployedFleet:
    """The ServerApp's side of the fleet: rounds over Flower's Grid, closed by
    tinyol.fleet.close_round, checkpointed in `state` (a restarted SuperLink resumes)."""

    def __init__(self, grid: Grid, rc: dict, on_record=None):
        from ..targets.twin import load_model
        self.grid, self.rc = grid, rc
        self.model = load_model(_model_dir(str(rc["model"])))
        self.template = initial_params(self.model)
        self.glob, self.version, self.round = self.template, 0, 0
        lr = float(rc["server-lr"]) or None
        self.strategy = make_strategy(str(rc["strategy"]), self.template, min_boards=int(rc["min-boards"]),
                                        accept_failures=not bool(rc["strict"]), server_lr=lr)
        self.state = Path(str(rc["state"])) if rc["state"] else None
        self.log_path = Path(str(rc["log"])) if rc["log"] else None
        self.on_record = on_record or (lambda rec: None)
        self.eval = None
        if rc["eval"]:
            self.eval = load_shards(str(rc["eval"]), 1, "iid", 0,
                                      latents_of=latents_fn(_model_dir(str(rc["model"]))))[0]
        self.names: dict[int, str] = {}   # node id -> board name (from its replies)
        self.waited = False

    # -- checkpoint: the aggregate, the strategy's state, the round
    def checkpoint(self) -> None:
        if self.state is None:
            return
        self.state.mkdir(parents=True, exist_ok=True)
        head = self.state / f"deploy_params_r{self.version}.npz"
        if not head.exists():
            write_params(head, self.glob)
        strat = self.state / f"deploy_strategy_r{self.version}.pkl"
        if self.strategy is not None and not strat.exists():
            strat.with_suffix(".tmp").write_bytes(strategy_state(self.strategy))
            strat.with_suffix(".tmp").replace(strat)
        d = {"round": self.round, "version": self.version, "params_file": head.name,
             "strategy": str(self.rc["strategy"]), "strategy_file": strat.name if self.strategy else None,
             "names": {str(k): v for k, v in self.names.items()}}
        tmp = self.state / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(d))
        tmp.replace(self.state / STATE_FILE)
        if not self.rc["record-pulls"]:  # keep every version's aggregate only for audits
            for old in list(self.state.glob("deploy_params_r*.npz")) + list(self.state.glob("deploy_strategy_r*.pkl")):
                if old.name not in (head.name, strat.name):
                    old.unlink(missing_ok=True)

    def resume(self) -> bool:
        p = self.state / STATE_FILE if self.state else None
        if p is None or not p.is_file():
            return False
        d = json.loads(p.read_text())
        if d["strategy"] != str(self.rc["strategy"]):
            raise TinyolError(f"the fleet in {self.state} ran strategy {d['strategy']}, not {self.rc['strategy']}")
        glob, saved = read_params(self.state / d["params_file"], self.template)
        if glob is None:
            raise TinyolError(f"the fleet in {self.state} aggregated {saved}, this model has {self.template.shape}")
        self.glob, self.version, self.round = glob, int(d["version"]), int(d["round"])
        self.names = {int(k): v for k, v in d.get("names", {}).items()}  # node ids stay with registered keys
        if self.strategy is not None and d.get("strategy_file"):
            restore_strategy(self.strategy, (self.state / d["strategy_file"]).read_bytes())
        return True

    def write(self, rec: dict) -> None:
        if self.log_path is not None:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(rec, default=jsonable) + "\n")
        self.on_record(rec)

    def wait_for_nodes(self) -> list[int]:
        want, t_end = int(self.rc["wait"]), time.monotonic() + float(self.rc["wait-timeout"])
        while True:
            nodes = sorted(self._grid(self.grid.get_node_ids))
            if len(nodes) >= want or time.monotonic() > t_end:
                return nodes
            time.sleep(0.5)  # polling the SuperLink for nodes, not a synchronisation in a test

    def _grid(self, fn, *args, reads: bool = True):
        """A call to the SuperLink through Flower's Grid, tried again while the SuperLink is
        too busy to answer (a loaded machine: the TLS handshake times out). A call whose
        connection never opened sent nothing, so it is always safe to repeat; one that timed
        out later is repeated only if it reads (pulling replies, listing nodes), never a push
        that may have arrived."""
        import httpx
        t_end = time.monotonic() + GRID_PATIENCE
        wait = 1.0
        while True:
            try:
                return fn(*args)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.TransportError) as e:
                sent = not isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout))
                if (sent and not reads) or time.monotonic() + wait > t_end:
                    raise
                time.sleep(wait)  # backing off from a busy SuperLink
                wait = min(2 * wait, 30.0)

    def _messages(self, nodes, mtype: str, **cfg) -> list[Message]:
        arrays = self.glob.to_ndarrays()
        out = []
        for n in nodes:
            content = RecordDict({"params": ArrayRecord(arrays),
                                  "config": ConfigRecord({"version": self.version, **cfg})})
            out.append(Message(content, dst_node_id=n, message_type=mtype))
        return out

    def exchange(self, nodes: list[int], msgs: list[Message]) -> list[tuple[int, Message]]:
        """Push the messages, pull the replies until every node answered or the round
        timeout passed (Flower's send_and_receive, with each reply paired with the node the
        message went to: an error the SuperLink writes for a node that went away comes from
        the SuperLink, not from the node). ``in-flight`` N > 0: at most N messages out at a
        time, the next pushed as a reply comes in (many SuperNodes sharing one small
        machine: each message starts a ClientApp process there)."""
        window = int(self.rc.get("in-flight", 0)) or len(msgs)
        queue = list(zip(nodes, msgs))
        to: dict[str, int] = {}
        pending: set[str] = set()
        out = []
        t_end = time.monotonic() + float(self.rc["round-timeout"])
        while (pending or queue) and time.monotonic() < t_end:
            room = window - len(pending)
            while queue and room > 0:  # one push session per batch: a session can expire
                batch, queue = queue[:min(room, PUSH_BATCH)], queue[min(room, PUSH_BATCH):]
                ids = list(self._grid(self.grid.push_messages, [m for _, m in batch], reads=False))
                to.update(zip(ids, [n for n, _ in batch]))
                pending.update(ids)
                room -= len(batch)
            for rep in self._grid(self.grid.pull_messages, list(pending)):
                mid = rep.metadata.reply_to_message_id
                if mid in pending:
                    pending.discard(mid)
                    out.append((to[mid], rep))
            if pending and not (queue and len(pending) < window):
                time.sleep(1.0)  # polling the SuperLink, as send_and_receive does
        return out

    def run_round(self) -> dict:
        r = self.round + 1
        nodes = self.wait_for_nodes() if r == 1 or not self.waited else sorted(self._grid(self.grid.get_node_ids))
        self.waited = True
        t0 = time.monotonic()
        every = int(self.rc["eval-every"])
        ev = str(self.rc["eval"]) if every and (r % every == 0 or r == int(self.rc["rounds"])) else ""
        msgs = self._messages(nodes, "train", k=int(self.rc["every"]), round=r, save=int(bool(self.rc["save"])),
                              eval=ev)
        down = sum(m.content["params"].count_bytes() for m in msgs)
        replies = self.exchange(nodes, msgs)
        results, failures, rows, pulls = [], [], {}, {}
        answered = set()
        claimed: set[str] = set()
        for node, rep in sorted(replies, key=lambda nr: nr[0]):
            if node in answered:
                continue  # one reply per node and round
            answered.add(node)
            name = self.names.get(node, f"node{node}")
            if rep.has_error():
                failures.append(TinyolError(f"{name}: {rep.error.reason}"))
                rows[name] = dropped_row(rep.error.reason)
                continue
            try:
                arrays, n, met = self._reply(node, rep, claimed)
            except Exception as e:  # noqa: BLE001 - whatever a reply is, it is that node's failure
                why = f"bad reply: {e}" if isinstance(e, TinyolError) else f"bad reply: {type(e).__name__}: {e}"
                failures.append(TinyolError(f"{name}: {why}"))
                rows[name] = dropped_row(why)
                continue
            name = self.names[node] = str(met.get("board", name))
            claimed.add(name)
            met["bytes_up"] = rep.content["params"].count_bytes()
            results.append((name, arrays, n, met))
            rows[name] = ok_row(n, met)
            pulls[name] = arrays
        for node in nodes:
            if node not in answered:
                name = self.names.get(node, f"node{node}")
                failures.append(TinyolError(f"{name}: no reply in {self.rc['round-timeout']} s"))
                rows[name] = dropped_row("no reply within the round timeout")
        new, rec = close_round(self.strategy, r, results, failures, rows,
                                 min_boards=int(self.rc["min-boards"]), template=self.template)
        if self.rc["record-pulls"] and self.state is not None:
            self.state.mkdir(parents=True, exist_ok=True)
            np.savez(self.state / f"pulls_r{r}.npz",
                     **{f"{name}__{i}": a for name, arrs in pulls.items() for i, a in enumerate(arrs)})
        self.round = r
        if new is not None:
            self.glob, self.version = new, r
        self.checkpoint()  # the aggregate is on disk before any node gets it
        rec["seconds"] = time.monotonic() - t0
        rec["nodes"] = len(nodes)
        rec["bytes"] = {"down": down, "up": sum(b.get("bytes_up", 0) for b in rows.values()),
                        "pull": sum(b.get("bytes_pull", 0) for b in rows.values()),
                        "push": sum(b.get("bytes_push", 0) for b in rows.values()),
                        "stream": sum(b.get("bytes_stream", 0) for b in rows.values())}
        if self.eval is not None and new is not None:
            rec["fleet_accuracy"] = params_accuracy(self.model, self.glob, self.eval.Q, self.eval.y)
        self.write(rec)
        return rec

    def _reply(self, node: int, rep: Message, claimed: set[str]) -> tuple[list[np.ndarray], int, dict]:
        """A train reply's parameters, sample count and metrics, checked (check_reply: the
        fleet's shapes, finite values, at most the round's k samples); the board name it
        gives must not be one another node answers to (a node cannot speak for a board)."""
        if "params" not in rep.content.array_records or "metrics" not in rep.content.config_records:
            raise TinyolError("no params or no metrics in it")
        met = dict(rep.content["metrics"])
        if "num-examples" not in met:
            raise TinyolError("no num-examples in its metrics")
        n = met.pop("num-examples")
        arrays, n, met = check_reply(rep.content["params"].to_numpy_ndarrays(), n, met, self.template,
                                     int(self.rc["every"]))
        name = met.get("board", self.names.get(node, f"node{node}"))
        taken = {v for k, v in self.names.items() if k != node}
        if name in taken or name in claimed:
            raise TinyolError(f"it answers as {name}, a name another node answers to")
        return arrays, n, met

    def push_last(self) -> list[str]:
        """Send the last aggregate to every node (nothing learned); the nodes that took it."""
        nodes = sorted(self._grid(self.grid.get_node_ids))
        replies = self.exchange(nodes, self._messages(nodes, "evaluate"))
        return sorted(self.names.get(n, f"node{n}") for n, r in replies if not r.has_error())  # names it knows

    def run(self) -> None:
        if self.resume():
            self.write({"event": "resumed", "round": self.round, "version": self.version})
        else:
            self.checkpoint()
        while self.round < int(self.rc["rounds"]):
            self.run_round()
        pushed = self.push_last()
        self.write({"event": "done", "round": self.round, "version": self.version, "pushed_to": pushed})


server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    rc = {**RUN_DEFAULTS, **dict(context.run_config)}
    fleet = None
    try:
        fleet = DeployedFleet(grid, rc, on_record=lambda rec: print("tinyol:", json.dumps(rec, default=jsonable),
                                                                    flush=True))
        fleet.run()
    except Exception as e:  # noqa: BLE001 - told to whoever follows the log, then Flower's own report
        if rc.get("log"):
            with open(str(rc["log"]), "a") as f:
                f.write(json.dumps({"event": "failed", "error": f"{type(e).__name__}: {e}"}) + "\n")
        raise

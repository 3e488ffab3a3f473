"""Fleets: many boards learn together, Flower aggregates (docs/fleet.md). Layer 6: imports
everything below it. Modules: `params` (what travels), `data` (shards),
`members` (device or twin boards), `flower` (strategies, one round's close), `loop` (the one-host fleet), `simulation`
(Flower's simulation engine), `app` + `deploy` (Flower's deployment engine: SuperLink,
SuperNodes). The fleet study and the deployment bench are in studies/tinyol_studies/
(`fleet`, `deploy_bench`).

One host process drives N boards concurrently. A round is:

1. every board learns the next ``k`` samples of its own stream (`stream`'s
   exactly-once pipeline, :class:`tinyol.link.stream.Stream`, one per board; the replay
   buffer stays on the board);
2. the host PULLs every head (GET_HEAD), or every adaptive stage (GET_STAGE) when the
   model was exported with an earlier ``--split`` (docs/adaptive.md);
3. a Flower strategy (``flwr.server.strategy.FedAvg`` and friends) aggregates them,
   weighted by the samples each board learned in the round;
4. the host writes a checkpoint (the aggregate, every board's stream position), asks the
   boards to SAVE if told to, and PUSHes the aggregate back (SET_HEAD / SET_STAGE).

What travels is a :class:`Head` (W, b, active) or a :class:`StageParams` (every layer's W
and b, active): both are Flower NDArrays; every board of a fleet must have the same shape
(:class:`Shape`), checked when it connects.

A board is wrapped in a Flower client (:class:`BoardClient`, a ``NumPyClient``); the
host talks to it through a :class:`BoardProxy` (a Flower ``ClientProxy``), the server's
view of a client. The same client wraps a real board, an emulated one or the numpy
twin (:class:`TwinBoard`, tinyol.learn.learner), so the experiment also runs in Flower's
simulation engine (:func:`run_flower_simulation`) with hundreds of virtual boards, and
over Flower's deployment engine (tinyol.fleet.app: a SuperNode per board on its gateway,
a SuperLink aggregates). Two transports, one round: a board's part is
``BoardClient.fit``, the server's part :func:`close_round` (Flower's strategy).

Faults. A board that fails during a round (the link dies, it resets, a PULL is cut
off) is dropped from that round: its result is a failure, never part of the
aggregate, so no aggregate is built from a partial PULL. At the start of every later
round the host reconnects; a board that answers rejoins. Where a board is in its
stream is read from the board itself (its ``samples_seen`` counter minus a base kept
in the checkpoint), so a sample is learned once, whatever died when. A board that
lost its RAM state (reset) carries on from what it stored (SAVE) or from the
aggregate; a board ahead of the checkpoint (the host died mid-round) keeps its head.
"""
from .._lazy import exports

_WHERE = {
    "Board": "members",
    "DeviceBoard": "members",
    "Fleet": "loop",
    "FleetConfig": "loop",
    "Head": "params",
    "Learned": "members",
    "Member": "loop",
    "SERVER_LR": "flower",
    "STATE_FILE": "loop",
    "STRATEGIES": "flower",
    "Shape": "params",
    "ShapeMismatch": "loop",
    "Shard": "data",
    "StageParams": "params",
    "TwinBoard": "members",
    "aggregate": "flower",
    "board_client": "flower",
    "check_server_lr": "flower",
    "close_round": "flower",
    "dropped_row": "flower",
    "head_accuracy": "simulation",
    "initial_params": "params",
    "jsonable": "loop",
    "latents_fn": "data",
    "load_shards": "data",
    "make_certs": "deploy",
    "make_strategy": "flower",
    "make_twin": "members",
    "ok_row": "flower",
    "params_accuracy": "simulation",
    "plot_fleet": "loop",
    "read_params": "flower",
    "require_flower": "flower",
    "restore_strategy": "flower",
    "run_flower_simulation": "simulation",
    "split_non_iid": "data",
    "strategy_state": "flower",
    "write_params": "flower",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)

"""Fleets: many boards learn together, Flower aggregates their heads (docs/fleet.md).

One host process drives N boards concurrently. A round is:

1. every board learns the next ``k`` samples of its own stream (`stream`'s
   exactly-once pipeline, :class:`tinyol.stream.Stream`, one per board; the replay
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
twin (:class:`TwinBoard`, tinyol.learner), so the experiment also runs in Flower's
simulation engine (:func:`run_flower_simulation`) with hundreds of virtual boards, and
over Flower's deployment engine (tinyol.fleet_app: a SuperNode per board on its gateway,
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
from __future__ import annotations

import concurrent.futures as cf
import json
import math
import os
import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from .datasets import load_source
from .device import Device
from .errors import TinyolError
from .learner import MODES, LearnerError, dequantize
from .model_folder import check_device_model, input_q, quantize
from .simulation import evaluate, latents, learner_settings, load_model, make_learner
from .stage import CONV, DENSE, DWCONV, TRAIN_ALL, TRAIN_BIAS, stage_hash, trained_part
from .stream import Stream

# Lazy on purpose: Flower (flwr, the optional extra tinyol[fleet]) and matplotlib are imported
# where they are used; both take seconds to load and a twin fleet without plots needs neither.

STRATEGIES = ("fedavg", "fedavgm", "fedmedian", "fedtrimmedavg", "fedprox", "fedadam",
              "fedyogi", "fedadagrad", "none")
STATE_FILE = "fleet_state.json"


def require_flower():
    """Import flwr or explain how to install it."""
    try:
        import flwr
    except ImportError:
        raise TinyolError("Flower (flwr) is not installed",
                          hint="pip install 'tinyol[fleet]' (make setup installs it)") from None
    return flwr


# --------------------------------------------------------------------------- head <-> parameters
@dataclass
class Head:
    """A classifier head: W [rows, D], b [rows], active [rows]."""
    w: np.ndarray
    b: np.ndarray
    active: np.ndarray

    def to_ndarrays(self) -> list[np.ndarray]:
        """Flower's parameters: W, b and the active mask as 0/1 float32."""
        return [np.asarray(self.w, np.float32), np.asarray(self.b, np.float32),
                np.asarray(self.active, np.float32)]

    @classmethod
    def from_ndarrays(cls, arrays: list[np.ndarray]) -> "Head":
        """The inverse; an aggregated mask (a weighted mean of 0/1) is active where > 0."""
        w, b, a = arrays
        return cls(np.asarray(w, np.float32), np.asarray(b, np.float32), np.asarray(a) > 0)

    def like(self, arrays: list[np.ndarray]) -> "Head":
        """Parameters of this kind from Flower NDArrays (what a client receives)."""
        return Head.from_ndarrays(arrays)

    @property
    def nbytes(self) -> int:
        """The head's payload: float32 W and b, one byte per row for `active`."""
        return self.w.size * 4 + self.b.size * 4 + self.active.size

    @property
    def shape(self) -> "Shape":
        rows, dim = self.w.shape
        return Shape("head", rows=int(rows), dim=int(dim), params=int(self.w.size + self.b.size))


@dataclass(frozen=True)
class Shape:
    """What a board's learned parameters look like; every board of a fleet has the same."""
    kind: str            # "head" or "stage"
    rows: int            # classes of the last layer
    dim: int             # latent size at the cut
    params: int          # float32 parameters
    layers: int = 1
    stage_hash: int = 0  # tol_stage_hash of the layer list (stages)

    def __str__(self) -> str:
        if self.kind == "stage":
            return (f"adaptive stage 0x{self.stage_hash:08x} ({self.layers} layers, {self.params} "
                    f"parameters, latent {self.dim}, {self.rows} classes)")
        return f"one-layer head W[{self.rows}, {self.dim}]"


def _layer_shapes(layer) -> list[tuple[int, ...]]:
    """Flower arrays of one stage layer: what of it trains (the lean stage): W in tol_stage.h's
    layout, then b; b alone for a layer that trains its biases; none for a frozen layer or
    one without parameters."""
    if layer.kind in (DENSE, CONV, DWCONV) and layer.train == TRAIN_BIAS:
        return [(layer.out_c,)]
    if layer.train != TRAIN_ALL:
        return []
    if layer.kind == DENSE:
        w = (layer.out_c, layer.in_size)
    elif layer.kind == CONV:
        w = (layer.out_c, layer.kh, layer.kw, layer.in_c)
    elif layer.kind == DWCONV:
        w = (layer.kh, layer.kw, layer.out_c)
    else:
        return []
    return [w, (layer.out_c,)]


@dataclass
class StageParams:
    """An adaptive stage's trained parameters (docs/adaptive.md): the flat float32 vector in
    the device's order (layer after layer, W then b, only what trains) and the last layer's
    active rows."""
    layers: list
    params: np.ndarray
    active: np.ndarray

    def __post_init__(self):
        self.params = np.asarray(self.params, np.float32).reshape(-1)
        self.active = np.asarray(self.active).astype(bool).reshape(-1)
        n = sum(l.n_train for l in self.layers)
        if self.params.size != n or self.active.size != self.layers[-1].out_c:
            raise TinyolError(f"stage parameters do not fit the stage: {self.params.size} parameters and "
                              f"{self.active.size} flags for {n} and {self.layers[-1].out_c}")

    def to_ndarrays(self) -> list[np.ndarray]:
        """Flower's parameters: W and b of every layer (tol_stage.h layouts), then the
        active mask as 0/1 float32, as for a head."""
        out, off = [], 0
        for l in self.layers:
            for shp in _layer_shapes(l):
                n = int(np.prod(shp))
                out.append(self.params[off:off + n].reshape(shp).copy())
                off += n
        out.append(self.active.astype(np.float32))
        return out

    def like(self, arrays: list[np.ndarray]) -> "StageParams":
        """The inverse of to_ndarrays for this stage; an aggregated mask is active where > 0."""
        want = [s for l in self.layers for s in _layer_shapes(l)] + [(len(self.active),)]
        got = [tuple(np.shape(a)) for a in arrays]
        if got != want:
            raise TinyolError(f"stage parameters of shapes {got} do not fit {self.shape} ({want})")
        flat = [np.asarray(a, np.float32).reshape(-1) for a in arrays[:-1]]
        return StageParams(self.layers, np.concatenate(flat) if flat else np.zeros(0, np.float32),
                           np.asarray(arrays[-1]) > 0)

    def image(self) -> bytes:
        """The GET_STAGE / SET_STAGE image: every parameter as float32 LE, then the flags."""
        return self.params.astype("<f4").tobytes() + self.active.astype(np.uint8).tobytes()

    @classmethod
    def from_image(cls, layers: list, image: bytes) -> "StageParams":
        n = sum(l.n_train for l in layers)
        rows = layers[-1].out_c
        if len(image) != 4 * n + rows:
            raise TinyolError(f"a stage image of {len(image)} bytes does not fit a stage of {n} parameters "
                              f"and {rows} classes ({4 * n + rows} bytes)")
        return cls(layers, np.frombuffer(image, "<f4", n).astype(np.float32),
                   np.frombuffer(image, np.uint8, rows, 4 * n) > 0)

    @property
    def nbytes(self) -> int:
        """The stage image's bytes: 4 per parameter, one per class flag."""
        return 4 * self.params.size + self.active.size

    @property
    def shape(self) -> Shape:
        return Shape("stage", rows=int(self.active.size), dim=int(self.layers[0].in_size),
                     params=int(self.params.size), layers=len(self.layers),
                     stage_hash=stage_hash(self.layers))


def initial_params(model) -> "Head | StageParams":
    """What a fleet of `model` (tinyol.simulation.Model) starts from: its exported head, or
    its exported adaptive stage (first n_init classes active)."""
    if model.stage is not None:
        layers, params = model.stage
        p = trained_part(layers, np.array(params, np.float32).reshape(-1))
        last, k = layers[-1], model.n_init
        off = p.size - last.n_params  # the firmware zeroes the rows not active at export (tol_stage_reset)
        p[off + k * last.in_size:off + last.n_weights] = 0
        p[off + last.n_weights + k:] = 0
        return StageParams(layers, p, np.arange(last.out_c) < k)
    return Head(model.W, model.b, np.arange(len(model.b)) < model.n_init)


# --------------------------------------------------------------------------- data
@dataclass
class Shard:
    """One board's stream: raw inputs X (for boards), int8 latents Q (for twins), labels y."""
    X: np.ndarray | None
    y: np.ndarray
    Q: np.ndarray | None = None
    classes: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.y)


def split_non_iid(y: np.ndarray, n_boards: int, spec: str = "iid", seed: int = 0) -> list[np.ndarray]:
    """Indices of each board's stream.

    ``iid``: a shuffled, even split. ``classes:C``: board i sees only C classes (the
    classes are dealt round-robin, every class to at least one board; a class shared
    by several boards is split evenly between them). Each stream is shuffled."""
    rng = np.random.default_rng(seed)
    y = np.asarray(y)
    if n_boards < 1:
        raise TinyolError("a fleet needs at least one board")
    if spec == "iid":
        return list(np.array_split(rng.permutation(len(y)), n_boards))
    if not spec.startswith("classes:"):
        raise TinyolError(f"unknown split {spec!r}", hint="iid or classes:C (each board sees C classes)")
    try:
        c = int(spec.split(":", 1)[1])
    except ValueError:
        raise TinyolError(f"split {spec!r}: C must be an integer") from None
    labels = sorted(set(int(v) for v in y))
    if not 1 <= c <= len(labels):
        raise TinyolError(f"split {spec!r}: C must be 1..{len(labels)} (the stream has {len(labels)} classes)")
    owners: dict[int, list[int]] = {k: [] for k in labels}
    for i in range(n_boards):
        for j in range(c):
            owners[labels[(i * c + j) % len(labels)]].append(i)
    for k in labels:  # more classes than board slots: the leftovers go round-robin too
        if not owners[k]:
            owners[k].append(labels.index(k) % n_boards)
    parts: list[list[int]] = [[] for _ in range(n_boards)]
    for k, who in owners.items():
        idx = rng.permutation(np.flatnonzero(y == k))
        for board, chunk in zip(who, np.array_split(idx, len(who))):
            parts[board].extend(chunk.tolist())
    return [rng.permutation(np.asarray(p, np.int64)) for p in parts]


def load_shards(data: str, n: int, split: str, seed: int, *, latents_of=None) -> list[Shard]:
    """Load a source and deal it out to n boards (split_non_iid); Q = latents_of(X) if given."""
    X, y, _ = load_source(data)
    Q = latents_of(X) if latents_of is not None else None
    parts = split_non_iid(y, n, split, seed)
    return [Shard(X[p], y[p], None if Q is None else Q[p], sorted(set(int(v) for v in y[p]))) for p in parts]


def latents_fn(model_dir: str):
    """X -> the board's int8 latents (TFLM's runtime on the backbone; inputs quantized as the host does)."""
    model = load_model(model_dir)

    def f(X):
        return latents(model, np.stack([quantize(x, *model.input_q) for x in X.reshape(len(X), -1)]))
    return f


# --------------------------------------------------------------------------- boards
@dataclass
class Learned:
    """What a board did in one fit: samples learned, prequential hits, wire bytes."""
    samples: int = 0
    correct: int = 0
    bytes_stream: int = 0


class Board:
    """What the fleet needs from a board (a device or a numpy twin)."""
    name: str
    kind: str = "board"

    def connect(self) -> None: ...
    def close(self) -> None: ...
    def samples_seen(self) -> int: raise NotImplementedError
    def boot(self) -> int: return 0
    def learn(self, rows: Iterable[tuple[int, object, int]]) -> Learned: raise NotImplementedError
    def shape(self) -> Shape: raise NotImplementedError
    def pull(self) -> tuple["Head | StageParams", int]: raise NotImplementedError
    def push(self, params: "Head | StageParams") -> int: raise NotImplementedError
    def save(self) -> None: ...
    def evaluate(self, shard: Shard) -> float: raise NotImplementedError
    def prefill(self, shard: Shard) -> None: raise NotImplementedError


class DeviceBoard(Board):
    """A tinyol device (board, QEMU, Renode or native target) at a pyserial URL."""
    kind = "device"

    def __init__(self, name: str, url: str, manifest: dict, *, window: int = 4, timeout: float = 1.0,
                 learn_mode: str | None = None, model_dir: str = "the model", stage: list | None = None):
        self.name, self.url, self.manifest = name, url, manifest
        self.window, self.timeout, self.learn_mode, self.model_dir = window, timeout, learn_mode, model_dir
        # the adaptive stage's layer list (decodes GET_STAGE images): given, or the model's
        self.stage = stage if stage is not None else _model_stage(model_dir)
        self.dev = None

    def connect(self) -> None:
        self.close()
        dev = Device.open(self.url, timeout=max(self.timeout, 1.0))
        try:
            check_device_model(dev.info, self.manifest, self.model_dir)
            if self.learn_mode is not None:
                dev.set("mode", MODES[self.learn_mode])
        except BaseException:
            dev.close()
            raise
        self.dev = dev

    def close(self) -> None:
        if self.dev is not None:
            try:
                self.dev.close()
            except Exception:  # noqa: BLE001 - closing a dead port
                pass
            self.dev = None

    def _d(self):
        if self.dev is None:
            raise TinyolError(f"{self.name}: not connected")
        return self.dev

    def samples_seen(self) -> int:
        return self._d().stats().samples_seen

    def boot(self) -> int:
        return self._d().info.boot_count

    def learn(self, rows) -> Learned:
        dev = self._d()
        st = Stream(dev, self.manifest, mode="train", window=self.window, timeout=self.timeout,
                    model_dir=self.model_dir)
        s = st.run(rows)
        if s.interrupted:
            raise KeyboardInterrupt
        if s.rejected:
            raise TinyolError(f"{self.name}: the device rejected samples: {s.rejected}")
        return Learned(s.samples, s.correct, s.bytes_out + s.bytes_in)

    def _bytes(self) -> int:
        st = self._d().link.stats
        return st.bytes_out + st.bytes_in

    def shape(self) -> Shape:
        """From INFO: the stage block, or the head's rows and latent size."""
        i = self._d().info
        if i.stage_layers:
            return Shape("stage", rows=int(i.max_classes), dim=int(i.latent_dim), params=int(i.stage_params),
                         layers=int(i.stage_layers), stage_hash=int(i.stage_hash))
        return Shape("head", rows=int(i.max_classes), dim=int(i.latent_dim),
                     params=int(i.max_classes) * (int(i.latent_dim) + 1))

    def pull(self) -> tuple["Head | StageParams", int]:
        b0 = self._bytes()
        dev = self._d()
        if dev.info.stage_layers:  # GET_STAGE: the whole stage image
            if self.stage is None:
                raise TinyolError(f"{self.name} trains an adaptive stage but {self.model_dir} has none",
                                  hint="pass the model directory its firmware was built from")
            return StageParams.from_image(self.stage, dev.get_stage()), self._bytes() - b0
        w, b, active = dev.get_head()
        return Head(w, b, active), self._bytes() - b0

    def push(self, params: "Head | StageParams") -> int:
        b0 = self._bytes()
        if isinstance(params, StageParams):  # SET_STAGE: staged, committed by the last slice
            self._d().set_stage(params.image())
        else:
            self._d().set_head(params.w, params.b, params.active)
        return self._bytes() - b0

    def save(self) -> None:
        self._d().save()

    def prefill(self, shard: Shard) -> None:
        """REPLAY_ADD every sample: fill the board's replay buffer without training."""
        q = input_q(self.manifest)
        dev = self._d()
        for x, label in zip(shard.X, shard.y):
            dev.replay_add(quantize(np.ravel(x), *q), int(label))

    def evaluate(self, shard: Shard) -> float:
        st = Stream(self._d(), self.manifest, mode="eval", window=self.window, timeout=self.timeout,
                    model_dir=self.model_dir)
        s = st.run((i, shard.X[i], int(shard.y[i])) for i in range(len(shard)))
        return s.accuracy


class TwinBoard(Board):
    """The numpy twin of a board (tinyol.learner): learns from int8 latents."""
    kind = "twin"

    def __init__(self, name: str, learner):
        self.name, self.lrn = name, learner

    def samples_seen(self) -> int:
        return self.lrn.samples_seen

    def learn(self, rows) -> Learned:
        out = Learned()
        for _, q, label in rows:
            pred, _ = self.lrn.predict(q)
            try:
                self.lrn.learn(q, int(label))
            except LearnerError as e:
                raise TinyolError(f"{self.name}: the learner rejected a sample ({e.status})") from None
            out.samples += 1
            out.correct += int(pred == label)
        return out

    @property
    def is_stage(self) -> bool:
        return not hasattr(self.lrn, "head")

    def shape(self) -> Shape:
        if self.is_stage:
            return StageParams(self.lrn.layers, self.lrn.params, self.lrn.active).shape
        return Head(self.lrn.head.w, self.lrn.head.b, self.lrn.head.active).shape

    def pull(self) -> tuple["Head | StageParams", int]:
        if self.is_stage:  # the twin's GET_STAGE image
            st = StageParams.from_image(self.lrn.layers, self.lrn.image())
            return st, st.nbytes
        h = self.lrn.head
        head = Head(h.w.copy(), h.b.copy(), h.active.copy())
        return head, head.nbytes

    def push(self, params: "Head | StageParams") -> int:
        if self.is_stage:  # SET_STAGE's commit on the twin
            if not isinstance(params, StageParams):
                raise TinyolError(f"{self.name} trains an adaptive stage; it cannot take a one-layer head")
            try:
                self.lrn.load_image(params.image())
            except LearnerError as e:
                raise TinyolError(f"{self.name}: the stage image was refused ({e.status})") from None
            return params.nbytes
        self.lrn.head.load(params.w, params.b, params.active)
        self.lrn.pending = []
        return params.nbytes

    def prefill(self, shard: Shard) -> None:
        for q, label in zip(shard.Q, shard.y):
            self.lrn.replay_add(q, int(label))

    def evaluate(self, shard: Shard) -> float:
        return float(np.mean(evaluate(self.lrn, shard.Q) == shard.y))


def _model_stage(model_dir) -> list | None:
    """The adaptive stage's layer list of an export directory (None: a one-layer head)."""
    try:
        if not (Path(model_dir) / "stage_init.npz").is_file():
            return None
    except (TypeError, OSError):
        return None
    return load_model(model_dir).stage[0]


def make_twin(model, name: str, *, learn_mode: str | None = None, **over):
    """A TwinBoard with the learner the firmware of `model` would run (its manifest's settings;
    `over`: learner_settings overrides, e.g. replay_capacity=200)."""
    settings, replay = learner_settings(model, mode=learn_mode, **over)
    return TwinBoard(name, make_learner(model, settings, replay))


# --------------------------------------------------------------------------- Flower client/proxy
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


def ok_row(n: int, metrics: dict) -> dict:
    """A round's log row for a board whose fit returned (both transports)."""
    return {"status": "ok", "weight": n, **metrics}


def dropped_row(error) -> dict:
    """A round's log row for a board whose fit failed: the first line of why."""
    return {"status": "dropped", "error": (str(error).splitlines() or [""])[0]}


def close_round(strategy, r: int, results: list[tuple[str, list[np.ndarray], int, dict]],
                failures: list, rows: dict, *, min_boards: int = 1, template=None):
    """Close round r from what came back, whatever carried it (this host's threads, or
    Flower's deployment engine, tinyol.fleet_app): the strategy aggregates the boards that
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


# --------------------------------------------------------------------------- the fleet loop
class ShapeMismatch(TinyolError):
    """A board whose head or stage is not the fleet's (another export, another stage)."""

    def __init__(self, message: str, hint: str | None = None, shape: Shape | None = None):
        super().__init__(message, hint)
        self.shape = shape


@dataclass
class Member:
    """A board in the fleet and what the host knows about it."""
    board: Board
    shard: Shard
    base: int = 0            # samples_seen when its stream started (position = seen - base)
    pos: int = 0             # stream position at the last completed round
    seen: int = 0            # its samples_seen then
    boot: int | None = None  # boot counter the host last saw
    holds: int | None = None  # version of the global head the board holds (None: unknown)
    alive: bool = False
    client: object = None
    accuracy: float | None = None
    prefill: Shard | None = None  # put into its replay buffer (REPLAY_ADD) when the fleet starts
    absent: int = 0          # rounds in a row it could not be reached


@dataclass
class FleetConfig:
    k: int = 20                     # samples each board learns per round
    rounds: int | None = None       # None: until every stream is exhausted
    strategy: str = "fedavg"
    min_boards: int = 1
    accept_failures: bool = True    # False: a round with any failed board pushes nothing
    save: bool = False              # SAVE on every board before the PUSH
    eval_every: int = 1             # evaluate per-board and fleet accuracy every N rounds (0: at the end)
    use_latents: bool = False       # twins learn from latents
    max_absent: int = 3             # a board unreachable this many rounds in a row no longer holds the fleet up
    server_lr: float | None = None  # the server optimizer's learning rate (make_strategy); None: Flower's


class Fleet:
    """Round-based federated streaming over boards (see the module docstring)."""

    def __init__(self, members: list[Member], initial: "Head | StageParams", cfg: FleetConfig, *,
                 eval_shard: Shard | None = None, state_dir: Path | None = None,
                 on_event: Callable[[str, dict], None] | None = None,
                 revive: Callable[[Member], None] | None = None, hook: Callable | None = None):
        self.members, self.cfg = members, cfg
        self.global_head, self.version = initial, 0   # the aggregate: a Head or a StageParams
        self.template = initial
        self.eval_shard = eval_shard
        self.state_dir = Path(state_dir) if state_dir else None
        self.on_event = on_event or (lambda kind, d: None)
        self.revive = revive
        self.strategy = make_strategy(cfg.strategy, initial, min_boards=cfg.min_boards,
                                      accept_failures=cfg.accept_failures, server_lr=cfg.server_lr)
        for m in members:
            m.client = board_client(m.board, m.shard, base=m.base, use_latents=cfg.use_latents, hook=hook,
                                    template=initial)
        self.round = 0
        self.pending_push: list[str] = []   # boards still to receive the current aggregate
        self.log: list[dict] = []
        self._pool = cf.ThreadPoolExecutor(max_workers=max(1, len(members)))

    # -- state on disk (the host may die at any point)
    def _state_path(self) -> Path | None:
        return self.state_dir / STATE_FILE if self.state_dir else None

    def checkpoint(self) -> None:
        """Write the fleet's state: the aggregate (a file per version), the strategy's own
        state (server momentum, Adam moments), then the JSON that names them (atomic)."""
        p = self._state_path()
        if p is None:
            return
        p.parent.mkdir(parents=True, exist_ok=True)
        head = self.state_dir / f"global_head_r{self.version}.npz"
        if not head.exists():
            write_params(head, self.global_head)
        strat = self.state_dir / f"strategy_r{self.version}.pkl"
        if self.strategy is not None and not strat.exists():
            tmp = strat.with_suffix(".tmp")
            tmp.write_bytes(strategy_state(self.strategy))
            os.replace(tmp, strat)
        state = {"round": self.round, "version": self.version, "pending_push": self.pending_push,
                 "head_file": head.name, "strategy_file": strat.name if self.strategy is not None else None,
                 "strategy": self.cfg.strategy, "k": self.cfg.k,
                 "members": {m.board.name: {"base": m.base, "pos": m.pos, "seen": m.seen, "boot": m.boot,
                                            "holds": m.holds} for m in self.members},
                 "log": self.log}
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, default=_jsonable))
        os.replace(tmp, p)
        for old in list(self.state_dir.glob("global_head_r*.npz")) + list(self.state_dir.glob("strategy_r*.pkl")):
            if old.name not in (head.name, strat.name):
                old.unlink(missing_ok=True)

    def resume(self) -> bool:
        """Load the checkpoint if there is one; True when resumed."""
        p = self._state_path()
        if p is None or not p.is_file():
            return False
        try:
            state = json.loads(p.read_text())
            head, saved = read_params(self.state_dir / state["head_file"], self.template)
            strat = pickle.loads((self.state_dir / state["strategy_file"]).read_bytes()) \
                if state.get("strategy_file") else None
        except (OSError, ValueError, KeyError, pickle.UnpicklingError) as e:
            raise TinyolError(f"cannot resume from {self.state_dir}: {e}",
                              hint="start a new fleet (a new --state directory, or leave out --resume)") from None
        if head is None:
            raise TinyolError(f"the fleet in {self.state_dir} aggregated {saved}, this fleet's model has "
                              f"{self.template.shape}", hint="resume with the model it ran, or start a new "
                              "--state directory")
        if state.get("strategy") != self.cfg.strategy:
            raise TinyolError(f"the fleet in {self.state_dir} ran strategy {state.get('strategy')}, not "
                              f"{self.cfg.strategy}", hint=f"resume with --strategy {state.get('strategy')}")
        self.global_head = head
        if strat is not None and self.strategy is not None:
            restore_strategy(self.strategy, strat)
        self.round, self.version = int(state["round"]), int(state["version"])
        self.pending_push = list(state.get("pending_push", []))
        self.log = list(state.get("log", []))
        known = state["members"]
        for m in self.members:
            s = known.get(m.board.name)
            if s is None:
                raise TinyolError(f"{m.board.name} is not in the fleet state {p}",
                                  hint="resume with the same boards, or start a new --state directory")
            m.base, m.pos, m.seen, m.boot, m.holds = s["base"], s["pos"], s["seen"], s["boot"], s["holds"]
            m.client.base = m.base
        self.on_event("resume", {"round": self.round, "pending_push": self.pending_push})
        return True

    # -- membership
    def _attach(self, m: Member, first: bool) -> None:
        """(Re)connect a board and work out where it is (module docstring, Faults)."""
        m.board.connect()
        shape = m.board.shape()
        if shape != self.template.shape:
            raise ShapeMismatch(f"{m.board.name} has {shape}, the fleet's model {self.template.shape}",
                                hint="every board of a fleet runs firmware of the same export "
                                     "(tinyol flash --model DIR)", shape=shape)
        seen, boot = m.board.samples_seen(), m.board.boot()
        if first:
            m.base, m.pos, m.seen, m.boot, m.holds = seen, 0, seen, boot, 0
        else:
            if seen < m.seen:
                # it lost state since the last round the host completed; what it learned then
                # is in the aggregate: carry on from there (never re-learn a sample)
                m.base = seen - m.pos
                m.holds = None
            elif seen == m.seen:
                if boot != m.boot:
                    m.holds = None   # restored a record saved before the PUSH (or rebooted idle)
            else:
                # ahead of the checkpoint: it learned part of the next round on the head it
                # held then; keep that head (it is what the round would have produced)
                m.holds = self.version
            m.boot = boot
        m.client.base = m.base
        m.alive, m.absent = True, 0

    def attach_all(self, first: bool) -> None:
        """Connect every board that is not connected (all of them at the start)."""
        def one(m):
            try:
                if self.revive is not None and not first:
                    self.revive(m)
                self._attach(m, first)
                if first and m.prefill is not None and len(m.prefill):
                    m.board.prefill(m.prefill)
                return None
            except (TinyolError, OSError) as e:
                m.alive = False
                m.absent += 1
                m.board.close()
                return e
        todo = [m for m in self.members if not m.alive]
        errors = [(m, err) for m, err in zip(todo, self._pool.map(one, todo)) if err is not None]
        if first and errors:
            odd = [(m, e) for m, e in errors if isinstance(e, ShapeMismatch)]
            if odd:  # name every board that does not fit, not just the first
                raise TinyolError(f"{len(odd)} of {len(self.members)} boards do not fit the fleet's "
                                  f"{self.template.shape}: " + "; ".join(
                                      f"{m.board.name} has {e.shape}" for m, e in odd),
                                  hint=odd[0][1].hint)
            m, err = errors[0]
            raise TinyolError(f"{m.board.name}: {err}", hint=getattr(err, "hint", None))
        for m, err in errors:
            self.on_event("absent", {"board": m.board.name, "error": str(err)})

    # -- one round
    def _fit(self, m: Member, target: int):
        push = int(self.strategy is not None and m.holds != self.version)
        params = self.global_head.to_ndarrays() if push else []
        cfg = {"target": target, "start": m.pos, "push": push, "round": self.round + 1}
        arrays, n, metrics = m.client.fit(params, cfg)
        return arrays, n, metrics

    def _targets(self) -> dict[str, int]:
        return {m.board.name: min(len(m.shard), m.pos + self.cfg.k) for m in self.members}

    def done(self) -> bool:
        if self.cfg.rounds is not None and self.round >= self.cfg.rounds:
            return True
        return all(m.pos >= len(m.shard) or m.absent >= self.cfg.max_absent for m in self.members)

    def run_round(self) -> dict:
        r = self.round + 1
        self.attach_all(first=False)  # boards dropped earlier rejoin if they answer
        if self.pending_push:
            self._push(self.pending_push)
        targets = self._targets()
        live = [m for m in self.members if m.alive]
        futs = {self._pool.submit(self._fit, m, targets[m.board.name]): m for m in live}
        results, failures, rows = [], [], {}
        for f in cf.as_completed(futs):
            m = futs[f]
            try:
                arrays, n, metrics = f.result()
            except KeyboardInterrupt:
                raise
            except Exception as e:  # noqa: BLE001 - any fault drops the board from the round
                m.alive = False
                m.board.close()
                failures.append(e)
                rows[m.board.name] = dropped_row(e)
                self.on_event("dropped", {"round": r, "board": m.board.name, "error": str(e)})
                continue
            results.append((m.board.name, arrays, n, metrics))
            rows[m.board.name] = ok_row(n, metrics)
        ok = {name for name, *_ in results}
        for m in self.members:
            if m.board.name in ok:
                met = rows[m.board.name]
                m.pos, m.seen = met["position"], met["samples_seen"]
                m.holds = None  # it holds its own local head now
        new, record = close_round(self.strategy, r, results, failures, rows, min_boards=self.cfg.min_boards,
                                  template=self.template)
        # per-board accuracy of the local heads, before they are overwritten
        last = (self.cfg.rounds is not None and r >= self.cfg.rounds) or \
            all(m.pos >= len(m.shard) or m.absent >= self.cfg.max_absent for m in self.members)
        evaluate = bool(self.cfg.eval_every) and (r % self.cfg.eval_every == 0 or last)
        if self.eval_shard is not None and evaluate:
            self._eval_local(rows)
        self.round = r
        if new is not None:
            self.global_head, self.version = new, r
            self.pending_push = sorted(m.board.name for m in self.members if m.alive)
        else:
            self.pending_push = []
        self.log.append(record)
        self.checkpoint()                       # the aggregate is on disk before any PUSH
        self.on_event("aggregated", record)
        if self.cfg.save:
            self._save([m for m in self.members if m.alive])
        pushed = self._push(self.pending_push) if self.pending_push else {}
        record["pushed_to"] = sorted(pushed)
        if self.eval_shard is not None and evaluate:
            record["fleet_accuracy"] = self._eval_fleet()
        ok_rows = [b for b in rows.values() if b.get("status") == "ok"]
        record["bytes"] = {"stream": sum(b["bytes_stream"] for b in ok_rows),
                           "pull": sum(b["bytes_pull"] for b in ok_rows),
                           "push": sum(b["bytes_push"] for b in ok_rows) + sum(pushed.values())}
        self.checkpoint()
        self.on_event("round", record)
        return record

    def _save(self, members: list[Member]) -> None:
        def one(m):
            m.board.save()
        for m, f in [(m, self._pool.submit(one, m)) for m in members]:
            try:
                f.result()
            except Exception as e:  # noqa: BLE001
                self._drop(m, e, "save")

    def _drop(self, m: Member, e: BaseException, phase: str) -> None:
        m.alive = False
        m.board.close()
        self.on_event("dropped", {"round": self.round, "board": m.board.name, "phase": phase,
                                  "error": str(e)})

    def _push(self, names: list[str]) -> dict[str, int]:
        """PUSH the aggregate to the named live boards; the checkpoint tracks who has it."""
        by = {m.board.name: m for m in self.members}
        todo = [by[n] for n in names if n in by and by[n].alive]
        out = {}

        def one(m):
            return m.board.push(self.global_head)
        for m, f in [(m, self._pool.submit(one, m)) for m in todo]:
            try:
                out[m.board.name] = f.result()
                m.holds = self.version
                self.pending_push = [n for n in self.pending_push if n != m.board.name]
                self.checkpoint()
                self.on_event("pushed", {"round": self.round, "board": m.board.name})
            except KeyboardInterrupt:
                raise
            except Exception as e:  # noqa: BLE001
                self._drop(m, e, "push")
        self.pending_push = []  # a board that missed it gets it at its next fit (holds != version)
        return out

    def _eval_local(self, rows: dict) -> None:
        live = [m for m in self.members if m.alive and rows.get(m.board.name, {}).get("status") == "ok"]
        for m, f in [(m, self._pool.submit(m.board.evaluate, self.eval_shard)) for m in live]:
            try:
                m.accuracy = float(f.result())
                rows[m.board.name]["accuracy"] = m.accuracy
            except Exception as e:  # noqa: BLE001
                self._drop(m, e, "evaluate")

    def _eval_fleet(self) -> float | None:
        """The aggregate's accuracy on the eval set, measured on a board that holds it."""
        for m in self.members:
            if m.alive and m.holds == self.version and self.strategy is not None:
                try:
                    return float(m.board.evaluate(self.eval_shard))
                except Exception as e:  # noqa: BLE001
                    self._drop(m, e, "evaluate")
        return None

    def run(self, *, resume: bool = False) -> list[dict]:
        resumed = resume and self.resume()
        self.attach_all(first=not resumed)
        if not resumed:
            self.checkpoint()
        while not self.done():
            self.run_round()
        return self.log

    def close(self) -> None:
        self._pool.shutdown(wait=True)  # a board's fit in flight finishes (or fails) first
        for m in self.members:
            m.board.close()


def _jsonable(v):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return str(v)


# --------------------------------------------------------------------------- Flower's simulation engine
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


# --------------------------------------------------------------------------- plot
def plot_fleet(log: list[dict], path: str | Path, title: str = "fleet") -> None:
    """Accuracy per board (thin lines) and of the fleet's aggregate (thick) per round."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    names = sorted({n for r in log for n in r["boards"]})
    for n in names:
        pts = [(r["round"], r["boards"][n]["accuracy"]) for r in log
               if r["boards"].get(n, {}).get("accuracy") is not None]
        if pts:
            ax.plot(*zip(*pts), lw=1, alpha=0.6, marker=".", label=n if len(names) <= 8 else None)
    pts = [(r["round"], r["fleet_accuracy"]) for r in log if r.get("fleet_accuracy") is not None]
    if pts:
        ax.plot(*zip(*pts), lw=3, color="black", marker="o", label="fleet (aggregate)")
    ax.set_xlabel("round")
    ax.set_ylabel("accuracy on the eval set")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

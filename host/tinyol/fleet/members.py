"""The boards of a fleet: a real or emulated device (:class:`DeviceBoard`) or the numpy twin
(:class:`TwinBoard`), each learning k samples and handing back what it learned.

Part of tinyol.fleet (docs/fleet.md; the round is described in tinyol/fleet/__init__.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from ..errors import TinyolError
from ..learn.learner import MODES, LearnerError
from ..link.device import Device
from ..link.stream import Stream
from ..model.folder import check_device_model, input_q, quantize
from ..targets.twin import evaluate, learner_settings, load_model, make_learner
from .data import Shard
from .params import Head, Shape, StageParams


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
    """The numpy twin of a board (tinyol.learn.learner): learns from int8 latents."""
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



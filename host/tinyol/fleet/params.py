"""What travels in a fleet: a head or an adaptive stage as Flower NDArrays (:class:`Head`,
:class:`StageParams`), their :class:`Shape`, the initial parameters of a model.

Part of tinyol.fleet (docs/fleet.md; the round is described in tinyol/fleet/__init__.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import TinyolError
from ..learn.stage import CONV, DENSE, DWCONV, TRAIN_ALL, TRAIN_BIAS, stage_hash, trained_part


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
    """What a fleet of `model` (tinyol.targets.twin.Model) starts from: its exported head, or
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



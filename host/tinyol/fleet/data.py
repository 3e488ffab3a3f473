"""A fleet's data: one :class:`Shard` per board, split IID or non-IID from one source.

Part of tinyol.fleet (docs/fleet.md; the round is described in tinyol/fleet/__init__.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..data.datasets import load_source
from ..errors import TinyolError
from ..model.folder import quantize
from ..targets.twin import latents, load_model


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



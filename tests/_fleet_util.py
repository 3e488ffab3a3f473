"""Shared steps of the fleet host-restart tests (tests/device/test_fleet.py, tests/device/test_fleet_stage.py)."""
from __future__ import annotations

import pytest
from tinyol import fleet as F


class HostDies(BaseException):
    """Raised from the event hook: the host process ends there."""


def reference_then_host_dies(fleet_of, model, tmp_path, n: int = 3, round_: int = 2):
    """Run a fleet of n twins that never stops (tmp_path/ref), then a second fleet of n fresh
    twins (tmp_path/run) whose host dies right after round `round_`'s aggregate.
    Returns (the finished reference fleet, the second fleet's boards, which keep their state)."""
    ref = fleet_of([F.make_twin(model, f"board{i}") for i in range(n)], tmp_path / "ref")
    ref.run()
    ref.close()

    def die(kind, d):
        if kind == "aggregated" and d["round"] == round_:
            raise HostDies()
    boards = [F.make_twin(model, f"board{i}") for i in range(n)]
    first = fleet_of(boards, tmp_path / "run", die)
    with pytest.raises(HostDies):
        first.run()
    first.close()
    return ref, boards


def learn_round(lrns, shards, rnd: int, k: int) -> list[int]:
    """Round rnd (from 1) of the oracle fleets: every numpy learner learns its shard's next k
    samples; returns how many each learned (Flower's num_examples)."""
    weights = []
    for lrn, sh in zip(lrns, shards):
        lo, hi = min(len(sh), (rnd - 1) * k), min(len(sh), rnd * k)
        for j in range(lo, hi):
            lrn.learn(sh.Q[j], int(sh.y[j]))
        weights.append(hi - lo)
    return weights

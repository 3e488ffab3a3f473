"""The one-host fleet loop (:class:`Fleet`): connect, learn k samples, pull, aggregate, push,
checkpoint; faults drop a board from a round, never from the fleet; the round log's plot.

Part of tinyol.fleet (docs/fleet.md; the round is described in tinyol/fleet/__init__.py)."""
from __future__ import annotations

import concurrent.futures as cf
import json
import math
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import TinyolError
from .members import Board
from .data import Shard
from .flower import (
    board_client,
    close_round,
    dropped_row,
    make_strategy,
    ok_row,
    read_params,
    restore_strategy,
    strategy_state,
    write_params,
)
from .params import Head, Shape, StageParams

# Lazy on purpose: Flower (flwr, the optional extra tinyol[fleet]) and matplotlib are imported
# where they are used; both take seconds to load and a twin fleet without plots needs neither.


STATE_FILE = "fleet_state.json"


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
        tmp.write_text(json.dumps(state, default=jsonable))
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


def jsonable(v):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return str(v)


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

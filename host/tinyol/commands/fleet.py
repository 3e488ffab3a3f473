"""`tinyol fleet`: many boards learn together; Flower aggregates their heads (or adaptive stages).

Boards: --port URL (repeat it: real boards or running emulators), --emulate N
(N native targets, or QEMU with --emulator qemu, started and owned by this
command), --twins N (N numpy twins in this process) or --simulation N (N numpy
twins in Flower's simulation engine, Ray). The engine is tinyol.fleet;
docs/fleet.md describes it and the study.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import click
import numpy as np

from .. import fleet as F
from ..checks import TIMEOUT, U32_MAX, Number, output_dir, output_file
from ..data.datasets import load_source
from ..errors import TinyolError
from ..fleet.data import Shard
from ..link.stream import DEFAULT_WINDOW, DEVICE_CACHE
from ..model.folder import load_manifest
from ..boards import BOARDS
from ..options import emit_json, json_option, kernels_option, model_option, resolve_port
from ..targets import emulator as E
from ..targets.firmware import BuildConfig, build
from ..targets.twin import load_model


DEFAULT_QEMU_BOARD = "nucleo_l476rg"


class EmulatedPool:
    """N emulated boards on fixed ports, each with its own flash (state dir); a board
    that died is started again on the same port (like a board power-cycled)."""

    def __init__(self, n: int, model: str, *, emulator: str = "native", board: str | None = None,
                 kernels: str | None = None, state_dir: Path | None = None, timeout: float = 3600.0):
        native = emulator == "native"
        # native imitates `board` by name only (None: it answers "native"); QEMU runs its firmware
        board = board or (None if native else DEFAULT_QEMU_BOARD)
        self.E, self.native, self.board, self.timeout = E, native, board, timeout
        self.fw = build(BuildConfig("native" if native else board, model, kernels, not native))
        self.kernels = kernels or ("ref" if native else "simd")
        # without --state the boards' flash lives in a temporary folder, removed by stop()
        self.tmp = None if state_dir else Path(tempfile.mkdtemp(prefix="tinyol-fleet-"))
        root = Path(state_dir) if state_dir else self.tmp
        self.dirs = [root / "boards" / f"board{i}" for i in range(n)]
        self.ports = [E.free_port() for _ in range(n)]
        self.targets = [None] * n
        try:
            for i in range(n):
                self.start(i)
        except BaseException:
            self.stop()
            raise

    def start(self, i: int):
        d = self.dirs[i]
        d.mkdir(parents=True, exist_ok=True)
        if self.native:
            t = self.E.start_native(self.fw.program, port=self.ports[i], state_dir=d, board=self.board,
                                    timeout=self.timeout)
        else:
            t = self.E.start_qemu(self.board, self.fw.elf, port=self.ports[i], timeout=self.timeout)
        self.targets[i] = t
        return t

    def describe(self) -> str:
        """Which firmware image the pool booted, on what."""
        image = self.fw.program if self.native else self.fw.elf
        if self.native:
            what = f"native process{'es' if len(self.dirs) > 1 else ''}{f' imitating {self.board}' if self.board else ''}"
        else:
            what = f"QEMU {E.QEMU_MACHINE} machine{'s' if len(self.dirs) > 1 else ''} running {self.board} firmware"
        return f"{len(self.dirs)} {what}: {E.shown_path(image)} ({self.kernels} kernels)"

    @property
    def urls(self) -> list[str]:
        return [f"socket://127.0.0.1:{p}" for p in self.ports]

    def revive(self, i: int) -> bool:
        t = self.targets[i]
        if t is not None and t.alive():
            return False
        self.start(i)
        return True

    def kill(self, i: int) -> None:
        t = self.targets[i]
        if t is not None and t.proc is not None and t.proc.poll() is None:
            t.proc.terminate()  # `timeout` passes SIGTERM on to the target
            t.proc.wait()

    def stop(self) -> None:
        for t in self.targets:
            if t is not None:
                t.stop()
        if self.tmp is not None:
            import shutil
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


@click.command("fleet")
@click.option("--port", "-p", "ports", multiple=True, metavar="URL",
              help="A board's serial port (pyserial URL); repeat for every board.")
@click.option("--emulate", type=click.IntRange(1, 64), default=None, metavar="N",
              help="Start N emulated boards (native targets by default) and drive them.")
@click.option("--emulator", type=click.Choice(["native", "qemu"]), default="native", show_default=True,
              help="What --emulate starts (QEMU cannot SAVE: its flash is read-only).")
@click.option("--board", "-b", type=click.Choice(sorted(BOARDS)), default=None,
              help=f"--emulate: the board whose firmware QEMU runs (default {DEFAULT_QEMU_BOARD}), "
                   "or that the native targets imitate by name.")
@kernels_option()
@click.option("--twins", type=click.IntRange(1, 10000), default=None, metavar="N",
              help="N numpy twins of the board in this process (no hardware).")
@click.option("--simulation", type=click.IntRange(1, 100000), default=None, metavar="N",
              help="N numpy twins in Flower's simulation engine (Ray).")
@click.option("--ray-address", default=None, metavar="ADDR",
              help="--simulation: run on this Ray cluster (e.g. auto, after `ray start`) instead of a local Ray.")
@model_option()
@click.option("--data", "-d", default="digits:5-9@train", show_default=True, metavar="SOURCE",
              help="The stream the boards share out (tinyol stream's sources).")
@click.option("--eval", "eval_spec", default="digits@test", show_default=True, metavar="SOURCE",
              help="Held-out set for per-board and fleet accuracy ('' to skip).")
@click.option("--split", default="classes:2", show_default=True,
              help="iid, or classes:C (each board sees only C classes: non-IID).")
@click.option("--prefill", default=None, metavar="SOURCE",
              help="Put samples of this source into every board's replay buffer first (REPLAY_ADD), "
                   "e.g. digits:0-4@train: the classes the backbone was trained on.")
@click.option("--prefill-n", type=click.IntRange(1), default=100, show_default=True,
              help="Samples of --prefill per board (a different random draw for each).")
@click.option("--every", "-k", "k", type=click.IntRange(1), default=20, show_default=True,
              help="Samples each board learns per round (aggregate every k samples).")
@click.option("--rounds", type=click.IntRange(1), default=None, help="Stop after R rounds (default: "
              "until every stream is used up).")
@click.option("--strategy", type=click.Choice(["fedavg", "fedavgm", "fedmedian", "fedtrimmedavg", "fedprox",
                                               "fedadam", "fedyogi", "fedadagrad", "none"]),
              default="fedavg", show_default=True,
              help="Flower strategy that aggregates the heads (none: local learning only).")
@click.option("--server-lr", type=Number(0.0, min_open=True), default=None, metavar="ETA",
              help="Server learning rate of fedadam/fedyogi/fedadagrad (eta, Flower's default 0.1) or "
                   "fedavgm (default 1.0); an adaptive stage wants a smaller one (docs/fleet.md).")
@click.option("--learn", "learn_mode", type=click.Choice(["sgd", "replay"]), default=None,
              help="The boards' learning mode (default: the firmware's, replay if it has a buffer).")
@click.option("--min-boards", type=click.IntRange(1), default=1, show_default=True,
              help="Aggregate only when at least this many boards finished the round.")
@click.option("--strict", is_flag=True, help="A round where any board failed pushes nothing.")
@click.option("--save", is_flag=True, help="SAVE on every board before the PUSH (survives resets).")
@click.option("--state", "state_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep the fleet's checkpoint (and emulated boards' flash) here.")
@click.option("--resume", is_flag=True, help="Carry on from the checkpoint in --state.")
@click.option("--eval-every", type=click.IntRange(0), default=1, show_default=True,
              help="Measure accuracy every N rounds (0: never).")
@click.option("--seed", type=click.IntRange(0, U32_MAX), default=0, show_default=True, help="Seed of the split and shuffles.")
@click.option("--log", type=click.Path(dir_okay=False), default=None, help="One JSON record per round (jsonl).")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="PNG: accuracy per board and of the fleet per round.")
@click.option("--window", type=click.IntRange(1, DEVICE_CACHE), default=DEFAULT_WINDOW, show_default=True,
              help="Requests in flight per board.")
@click.option("--timeout", type=TIMEOUT, default=1.0, show_default=True, help="Seconds before a resend.")
@json_option
def cmd(ports, emulate, emulator, board, kernels, twins, simulation, ray_address, model, data, eval_spec, split, prefill, prefill_n, k, rounds, strategy,
        server_lr, learn_mode, min_boards, strict, save, state_dir, resume, eval_every, seed, log, plot, window,
        timeout, as_json):
    """Drive a fleet of boards: each learns from its own stream; every round the
    host PULLs every head, a Flower strategy aggregates them and the host PUSHes
    the result back.

    \b
    Examples:
      tinyol fleet --emulate 4 --split classes:2 --every 20 --plot fleet.png
      tinyol fleet --port /dev/ttyACM0 --port /dev/ttyACM1 --save --state run/
      tinyol fleet --simulation 200 --split classes:1 --every 5
    """
    F.require_flower()
    chosen = [x for x in (bool(ports), emulate, twins, simulation) if x]
    if len(chosen) != 1:
        raise TinyolError("choose the boards: --port URL (repeated), --emulate N, --twins N or --simulation N",
                          hint="exactly one of them")
    if save and emulate and emulator == "qemu":
        raise TinyolError("--save needs a flash the board can write; QEMU's is read-only",
                          hint="use --emulator native (its flash is a file in --state)")
    if (board or kernels) and not emulate:
        raise TinyolError("--board and --kernels choose the firmware --emulate starts",
                          hint="add --emulate N, or leave them out")
    if board and emulate and emulator == "qemu" and not BOARDS[board].emulated:
        raise TinyolError(f"{board} cannot run in QEMU (its console UART is not on QEMU's {E.QEMU_MACHINE})",
                          hint="boards QEMU runs: " + ", ".join(b for b in sorted(BOARDS) if BOARDS[b].emulated))
    if resume and state_dir is None:
        raise TinyolError("--resume needs --state DIR (where the checkpoint is)")
    n = len(ports) or emulate or twins or simulation
    if min_boards > n and strategy != "none":
        raise TinyolError(f"--min-boards {min_boards} but the fleet has {n} board(s): no round could "
                          "ever be aggregated", hint=f"use --min-boards {n} or fewer, or more boards")
    # every path the fleet will write, checked before any board learns anything
    if state_dir is not None:
        output_dir(state_dir, "--state")
    for path, what in ((log, "--log"), (plot, "--plot")):
        if path:
            output_file(path, what)
    echo = (lambda *a, **kw: None) if as_json else click.echo
    travels = "stage" if (Path(model) / "stage_init.npz").is_file() else "head"
    manifest = load_manifest(model)
    if manifest["head"]["mode"] not in ("classifier", 0):
        raise TinyolError(f"{model} has an {manifest['head']['mode']} head; fleets average classifier heads",
                          hint="an anomaly threshold is per board (docs/fleet.md)")
    cfg = F.FleetConfig(k=k, rounds=rounds, strategy=strategy, min_boards=min_boards,
                        accept_failures=not strict, save=save, eval_every=eval_every,
                        use_latents=bool(twins or simulation), server_lr=server_lr)
    F.check_server_lr(strategy, server_lr)  # refused before any board starts
    latents_of = F.latents_fn(model) if (twins or simulation) else None
    shards = F.load_shards(data, n, split, seed, latents_of=latents_of)
    eval_shard = None
    if eval_spec:
        ev = F.load_shards(eval_spec, 1, "iid", seed, latents_of=latents_of)[0]
        eval_shard = ev
    prefills = [None] * n
    if prefill:
        Xp, yp, _ = load_source(prefill)
        Qp = latents_of(Xp) if latents_of is not None else None
        rng = np.random.default_rng(seed + 1)
        for i in range(n):
            pick = rng.choice(len(yp), min(prefill_n, len(yp)), replace=False)
            prefills[i] = Shard(Xp[pick], yp[pick], None if Qp is None else Qp[pick])
    for i, s in enumerate(shards):
        if len(s) == 0:
            raise TinyolError(f"board {i} gets no samples from {data} with --split {split}",
                              hint="use fewer boards or more classes per board")
    logf = open(log, "a" if resume else "w", buffering=1) if log else None
    resumed_after = [0]  # rounds a --resume found done: their figures are not this run's

    def on_event(kind: str, d: dict) -> None:
        if kind == "round":
            if logf:
                logf.write(json.dumps(d, default=F.jsonable) + "\n")
            echo(_round_line(d, travels))
            if n <= 8:
                for name, b in sorted(d["boards"].items()):
                    echo("    " + _board_line(name, b, travels))
        elif kind == "dropped":
            echo(f"  {d['board']} dropped ({d.get('phase', 'fit')}): {d['error'].splitlines()[0]}")
        elif kind == "absent":
            echo(f"  {d['board']} still absent: {d['error'].splitlines()[0]}")
        elif kind == "resume":
            resumed_after[0] = d["round"]
            echo(f"resuming after round {d['round']}" + (f"; pushing to {', '.join(d['pending_push'])}"
                                                        if d["pending_push"] else ""))

    echo(f"fleet of {n} {'devices' if ports or emulate else 'twins'}: {data} split {split}, "
         f"{k} samples per board per round, strategy {strategy}")
    for i, s in enumerate(shards):
        if n <= 16:
            echo(f"  board{i}: {len(s)} samples, classes {s.classes}")
    pool = None
    try:
        if simulation:
            records = F.run_flower_simulation(model, shards, eval_shard, cfg, learn_mode=learn_mode,
                                              on_event=on_event, prefills=prefills, ray_address=ray_address)
        else:
            m = load_model(model)
            initial = F.initial_params(m)  # the exported head, or adaptive stage
            if twins:
                boards = [F.make_twin(m, f"board{i}", learn_mode=learn_mode) for i in range(n)]
            else:
                if emulate:
                    pool = EmulatedPool(n, model, emulator=emulator, board=board, kernels=kernels,
                                        state_dir=state_dir)
                    echo(f"booted {pool.describe()}")
                    urls = pool.urls
                else:
                    urls = [resolve_port(u) for u in ports]
                boards = [F.DeviceBoard(f"board{i}", u, manifest, window=window, timeout=timeout,
                                        learn_mode=learn_mode, model_dir=model) for i, u in enumerate(urls)]
            members = [F.Member(b, s, prefill=p) for b, s, p in zip(boards, shards, prefills)]
            revive = (lambda mem: pool.revive(members.index(mem))) if pool else None
            fleet = F.Fleet(members, initial, cfg, eval_shard=eval_shard, state_dir=state_dir,
                            on_event=on_event, revive=revive)
            try:
                records = fleet.run(resume=resume)
            finally:
                fleet.close()
    finally:
        if pool is not None:
            pool.stop()
        if logf:
            logf.close()
    if plot and records:
        F.plot_fleet(records, plot, title=f"fleet of {n}: {data}, {split}, every {k}, {strategy}")
    records = [r for r in records if r["round"] > resumed_after[0]]  # measured in this run only
    summary = _summary(records)
    starved = [r["round"] for r in records if not r.get("aggregated", True)
               and len(r.get("aggregated_from") or [b for b in r["boards"].values() if b.get("status") == "ok"])
               < min_boards]
    unmet = (f"{len(starved)} of {len(records)} rounds had fewer than --min-boards {min_boards} boards "
             "finished: nothing aggregated in them") if starved and strategy != "none" else None
    if as_json:
        emit_json(summary)
        if unmet and len(starved) == len(records):
            raise TinyolError(unmet)
        return
    if resumed_after[0]:
        echo(f"resumed      after round {resumed_after[0]}; the figures below are of the "
             f"{summary['rounds']} round(s) run now")
    echo(f"rounds       {summary['rounds']}")
    if summary["fleet_accuracy"] is not None:
        echo(f"fleet        accuracy {summary['fleet_accuracy']:.4f} (the aggregate, on {eval_spec})")
    for name, acc in summary["board_accuracy"].items():
        echo(f"  {name:<8}  {acc:.4f} (its own {travels} before the last push)")
    echo(f"bytes        {summary['bytes_per_round']['pull']:.0f} pulled + {summary['bytes_per_round']['push']:.0f} "
         f"pushed per round (the {travels}s), {summary['bytes_per_round']['stream']:.0f} streamed")
    if plot:
        echo(f"plot         {plot}")
    if log:
        echo(f"log          {log}")
    if unmet:
        if len(starved) == len(records):
            raise TinyolError(unmet, hint="fewer --min-boards, or find out why boards drop (the lines above)")
        echo(f"warning      {unmet}")


def _round_line(d: dict, kind: str = "head") -> str:
    boards = d["boards"]
    ok = [b for b in boards.values() if b.get("status") == "ok"]
    accs = [b["accuracy"] for b in ok if b.get("accuracy") is not None]
    learned = sum(int(b.get("learned", 0)) for b in ok)
    parts = [f"round {d['round']:>3}: {len(ok)}/{len(boards)} boards", f"{learned} samples learned"]
    if accs:
        parts.append(f"board acc {min(accs):.3f}-{max(accs):.3f}")
    if d.get("fleet_accuracy") is not None:
        parts.append(f"fleet acc {d['fleet_accuracy']:.3f}")
    if not d.get("aggregated", True):
        parts.append("not aggregated")
    b = d.get("bytes")
    if b:
        parts.append(f"{b['pull'] + b['push']} {kind} bytes")
    dropped = [n for n, b in boards.items() if b.get("status") != "ok"]
    if dropped:
        parts.append("dropped " + ",".join(dropped))
    return ", ".join(parts)


def _board_line(name: str, b: dict, kind: str = "head") -> str:
    if b.get("status") != "ok":
        return f"{name}: dropped ({b.get('error', '')})"
    parts = [f"{name}: +{b.get('learned', 0)} samples -> position {b.get('position')}"]
    if b.get("learned"):
        parts.append(f"prequential {b['correct'] / b['learned']:.2f}")
    if b.get("accuracy") is not None:
        parts.append(f"own {kind} {b['accuracy']:.3f}")
    parts.append(f"pull {b.get('bytes_pull', 0)} B")
    return ", ".join(parts)


def _summary(records: list[dict]) -> dict:
    last_acc = {}
    for r in records:
        for name, b in r["boards"].items():
            if b.get("accuracy") is not None:
                last_acc[name] = b["accuracy"]
    fleet_acc = next((r["fleet_accuracy"] for r in reversed(records) if r.get("fleet_accuracy") is not None), None)
    per = [r["bytes"] for r in records if r.get("bytes")]
    mean = {k: (float(np.mean([p[k] for p in per])) if per else 0.0) for k in ("pull", "push", "stream")}
    return {"rounds": len(records), "fleet_accuracy": fleet_acc,
            "board_accuracy": dict(sorted(last_acc.items(), key=lambda kv: int(kv[0].lstrip("boardtwin") or 0))),
            "bytes_per_round": mean, "records": records}

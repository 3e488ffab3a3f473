"""`tinyol info`: ask a device for its INFO record."""
from __future__ import annotations

import dataclasses

import click

from .. import memory
from ..boards import get_board
from ..checks import TIMEOUT
from ..errors import TinyolError
from ..link.protocol import Link
from ..model.folder import load_manifest
from ..options import emit_json, json_option, port_option, resolve_port


def _kb(n: int) -> str:
    return f"{n / 1024:.1f} KB"


def memory_plan(model_dir: str, board: str) -> dict:
    """The firmware's memory for `model_dir` on `board` (tinyol.memory, the model `tinyol export`
    checks and the build places the learner with)."""
    b = get_board(board)
    m = load_manifest(model_dir)
    try:
        model = memory.Model.from_manifest(m)
        name = str(m["name"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        what = f"no {e.args[0]!r} field" if isinstance(e, KeyError) else f"a field of the wrong kind ({e})"
        raise TinyolError(f"{model_dir}/manifest.json: {what}",
                          hint="re-export the model (`tinyol export`); manifest.json is written by it, "
                               "not by hand") from None
    plan = memory.plan(model, b.name, memory.board_regions(b), flash_bytes=b.flash_bytes)
    stage = m.get("stage") or {}
    return {"model": name, "board": board, "fits": plan.fits,
            "stage_train": stage.get("train_spec", "all" if stage else None),
            "stage_train_auto": "selection" in stage,
            "learner_region": memory.REGION_TITLES[plan.learner_region],
            "learner_bytes": plan.model.learner(), "learner_parts": plan.model.parts(),
            "regions": {r.title: {"used": r.used, "size": r.size, "items": r.items}
                        for r in plan.regions},
            "flash_estimate": plan.flash_needed, "flash_room": plan.flash_room,
            "lines": plan.lines(), "advice": None if plan.fits else plan.advice()}


@click.command("info")
@port_option(required=False)
@click.option("--model", "-m", "model_dir", default=None, metavar="DIR",
              help="Without a device: print the memory this model needs on --board.")
@click.option("--board", "-b", default=None, metavar="BOARD",
              help="With --model: the board (default: the one it was exported for).")
@json_option
@click.option("--timeout", type=TIMEOUT, default=2.0, show_default=True, help="Seconds per attempt.")
def cmd(port, model_dir, board, as_json, timeout):
    """Print the board, firmware, model, memory use and boot counter of a device; or, with
    --model (no device needed), the memory the model's firmware reserves on a board.

    \b
    Examples:
      tinyol info --port socket://127.0.0.1:4321 --json
      tinyol info --model models/digits --board nucleo_l432kc
    """
    src = click.get_current_context().get_parameter_source("model_dir")
    if port is not None and src == click.core.ParameterSource.DEFAULT_MAP:
        model_dir = None  # tinyol.toml's model: with a device, ask the device
    if model_dir is not None:
        board = board or load_manifest(model_dir).get("board") or "nucleo_l476rg"
        plan = memory_plan(model_dir, board)
        if as_json:
            emit_json(plan)
            return
        click.echo(f"{plan['model']} on {board}: "
                   + ("fits" if plan["fits"] else "does NOT fit") + " (host/tinyol/memory.py)")
        if plan["stage_train"] is not None:
            click.echo(f"  adaptive stage trains: {plan['stage_train']}"
                       + (" (chosen by --stage-train auto at export)" if plan["stage_train_auto"] else ""))
        for line in plan["lines"]:
            click.echo(f"  {line}")
        if plan["advice"]:
            click.echo(f"hint: {plan['advice']}")
        return
    if port is None:
        raise TinyolError("give --port URL (a device) or --model DIR (its memory, no device)")
    with Link.open(resolve_port(port), timeout=timeout) as link:
        info = link.info()
    if as_json:
        emit_json(dataclasses.asdict(info))
        return
    rows = [
        ("board", info.board),
        ("firmware", f"{info.fw_version} (protocol {info.proto_version})"),
        ("flags", ", ".join(info.flags) or "-"),
        ("model", f"{info.model} (hash 0x{info.model_hash:08x})"),
        ("input / latent", f"{info.input_size} int8 / {info.latent_dim}"),
        ("head", f"autoencoder: reconstructs its {info.max_classes} inputs; a score above mean + k "
                 "std of the scores seen is an anomaly" if info.head_mode == "autoencoder"
         else f"{info.head_mode}, up to {info.max_classes} classes"),
        *([("adaptive stage", f"{info.stage_layers} layers, {info.stage_params} parameters, "
                              f"{_kb(info.stage_bytes)} RAM")] if info.stage_layers else []),
        ("replay storage", "- (an autoencoder learns each sample as it comes)"
         if info.head_mode == "autoencoder" else f"{info.replay_bits} bit" if info.replay_bits else "-"),
        ("cpu clock", f"{info.cpu_hz / 1e6:.0f} MHz"),
        ("RAM", f"{_kb(info.ram_used)} of {_kb(info.ram_total)} (+ SRAM2 {_kb(info.ram2_used)} of {_kb(info.ram2_total)})"
         if info.ram_total else "n/a (host process)"),
        ("flash", f"{_kb(info.flash_used)} of {_kb(info.flash_total)}" if info.flash_total else "n/a (host process)"),
        ("boot count", str(info.boot_count)),
        ("stored state", info.store + (f" (record {info.store_seq})" if info.store_seq else "")
         + ("; a newer record is damaged (a save cut at its commit, or changed flash): this is an "
            "older state than the last save" if "store_damaged" in info.flags else "")),
        ("max payload", f"{info.max_payload} bytes"),
    ]
    for k, v in rows:
        click.echo(f"{k:>15}: {v}")

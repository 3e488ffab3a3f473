"""`tinyol info`: ask a device for its INFO record."""
from __future__ import annotations

import dataclasses

import click

from ..options import emit_json, json_option, port_option, resolve_port
from ..protocol import Link


def _kb(n: int) -> str:
    return f"{n / 1024:.1f} KB"


@click.command("info")
@port_option()
@json_option
@click.option("--timeout", type=float, default=2.0, show_default=True, help="Seconds per attempt.")
def cmd(port, as_json, timeout):
    """Print the board, firmware, model, memory use and boot counter of a device.

    \b
    Example:
      tinyol info --port socket://127.0.0.1:4321 --json
    """
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
        ("head", f"{info.head_mode}, up to {info.max_classes} classes"),
        *([("adaptive stage", f"{info.stage_layers} layers, {info.stage_params} parameters, "
                              f"{_kb(info.stage_bytes)} RAM")] if info.stage_layers else []),
        ("replay storage", f"{info.replay_bits} bit" if info.replay_bits else "-"),
        ("cpu clock", f"{info.cpu_hz / 1e6:.0f} MHz"),
        ("RAM", f"{_kb(info.ram_used)} of {_kb(info.ram_total)} (+ SRAM2 {_kb(info.ram2_used)} of {_kb(info.ram2_total)})"
         if info.ram_total else "n/a (host process)"),
        ("flash", f"{_kb(info.flash_used)} of {_kb(info.flash_total)}" if info.flash_total else "n/a (host process)"),
        ("boot count", str(info.boot_count)),
        ("stored state", info.store + (f" (record {info.store_seq})" if info.store_seq else "")),
        ("max payload", f"{info.max_payload} bytes"),
    ]
    for k, v in rows:
        click.echo(f"{k:>15}: {v}")

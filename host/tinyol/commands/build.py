"""`tinyol build`: build the firmware for a board, offline."""
from __future__ import annotations

import click

from ..options import app_options, board_option, kernels_option, model_option
from ..targets.firmware import BuildConfig, build


@click.command("build")
@board_option()
@model_option()
@kernels_option()
@click.option("--test-build", is_flag=True, help="Semihosting exit and the EXIT message (QEMU tests).")
@app_options
@click.option("--store-bytes", type=click.IntRange(1), default=None, metavar="BYTES",
              help="Flash reserved for saved states (TOL_STORE_BYTES; default the last 1/8 of "
                   "flash): larger slots keep a larger replay buffer in every save "
                   "(docs/persistence.md).")
@click.pass_context
def cmd(ctx, board, model, kernels, test_build, app, stride, store_bytes):
    """Build the firmware for BOARD with PlatformIO, offline.

    \b
    Example:
      tinyol build --board nucleo_l476rg
      tinyol build --board native --model models/anomaly
      tinyol build --board disco_l475vg_iot01a --model models/imu --app imu
    """
    verbose = ctx.find_root().obj.get("verbose", False)
    res = build(BuildConfig(board, model, kernels, test_build, app, stride, store_bytes), verbose=verbose,
                echo=click.echo)
    target = res.program if board == "native" else res.elf
    click.echo(f"built {target}")

"""`tinyol flash`: build and upload the firmware to a board."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import click

from ..boards import BOARDS
from ..errors import TinyolError
from ..options import board_option, kernels_option, model_option
from ..paths import mcu_dir, platform_dir
from ..targets.firmware import BuildConfig, build

PROTOCOLS = ("stlink", "openocd", "pyocd", "mbed")


def _upload_module():
    sys.path.insert(0, str(mcu_dir() / "platform" / "common"))
    import tinyol_upload  # not a package module: it lives in the firmware's platform folder

    return tinyol_upload


def upload_argv(board: str, method: str, bin_path: Path, elf_path: Path, port: str | None) -> list[str]:
    """The exact command that flashes the image (the same function the PlatformIO builder uses)."""
    manifest = json.loads((platform_dir("stm32l4") / "boards" / f"{board}.json").read_text())
    try:
        return _upload_module().upload_command(method, board, str(bin_path), str(elf_path), port,
                                               manifest["upload"]["openocd_target"],
                                               manifest["upload"]["pyocd_target"])
    except ValueError as e:
        raise TinyolError(str(e)) from None


@click.command("flash")
@board_option(allow_native=False)
@model_option()
@click.option("--method", type=click.Choice(PROTOCOLS), default=None,
              help="Upload method (default per board: stlink; mbed = copy to the Nucleo USB drive).")
@click.option("--port", "-p", default=None,
              help="Probe serial number (stlink/openocd/pyocd) or mount point of the USB drive (mbed).")
@click.option("--dry-run", is_flag=True, help="Build, then print the upload command instead of running it.")
@kernels_option()
@click.pass_context
def cmd(ctx, board, model, method, port, dry_run, kernels):
    """Build the firmware and upload it to a connected board.

    \b
    Examples:
      tinyol flash --board nucleo_l476rg                 # st-flash over the ST-Link
      tinyol flash --board nucleo_l432kc --method mbed   # copy to the NODE_L432KC drive
      tinyol flash --board nucleo_l476rg --dry-run       # show the command only
    """
    method = method or BOARDS[board].upload_protocol
    verbose = ctx.find_root().obj.get("verbose", False)
    tool = upload_argv(board, method, Path("firmware.bin"), Path("firmware.elf"), port)[0]
    if not dry_run and not shutil.which(tool):  # checked before the build, not after it
        raise TinyolError(f"upload tool {tool!r} not found",
                          hint="install it (Debian: apt-get install stlink-tools | openocd; pip install pyocd) "
                               "or choose another --method")
    res = build(BuildConfig(board, model, kernels), verbose=verbose, echo=click.echo)
    argv = upload_argv(board, method, res.bin, res.elf, port)
    click.echo(" ".join(argv))
    if dry_run:
        return
    rc = subprocess.call(argv)
    if rc != 0:
        raise TinyolError(f"upload failed ({argv[0]} exited with {rc})",
                          hint="is the board connected and powered? try --method mbed")
    click.echo(f"flashed {board}; its serial port: tinyol info --port auto")

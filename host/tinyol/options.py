"""Option groups shared by several verbs (one definition, one help text)."""
from __future__ import annotations

import json as _json

import click
from serial.tools import list_ports

from .boards import BOARDS, NATIVE
from .errors import TinyolError
from .paths import example_model, user_path

BOARD_NAMES = [*BOARDS, NATIVE]


def board_option(default: str | None = "nucleo_l476rg", allow_native: bool = True):
    choices = BOARD_NAMES if allow_native else list(BOARDS)
    return click.option("--board", "-b", type=click.Choice(choices), default=default, show_default=True,
                        help="Target board (PlatformIO environment).")


def port_option(required: bool = True):
    return click.option("--port", "-p", required=required, metavar="URL",
                        help="Serial port as a pyserial URL: /dev/ttyACM0, socket://127.0.0.1:4321, "
                             "or `auto` (first ST-Link virtual COM port).")


def resolve_model_option(ctx, param, value):
    """--model: a path relative to the current directory; unset = the shipped digits example."""
    return str(example_model("digits") if value is None else user_path(value))


def model_option():
    return click.option("--model", "-m", default=None, metavar="DIR", callback=resolve_model_option,
                        help="Model directory written by `tinyol export`, relative to the current "
                             "directory.  [default: the digits example shipped with tinyol]")


def kernels_option():
    """--kernels (`tinyol build`, `emulate`, `fleet`): which int8 kernels the firmware is built with."""
    return click.option("--kernels", type=click.Choice(["simd", "ref"]), default=None,
                        help="int8 kernel implementation (default: simd on boards, ref on native); "
                             "ref is the plain reference C, to narrow down a backbone that is not "
                             "bit-exact (docs/kernels.md).")


json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def emit_json(obj) -> None:
    click.echo(_json.dumps(obj, indent=2, sort_keys=True, default=str))


def resolve_port(url: str) -> str:
    """`auto` -> the first ST-Link VCP found by USB VID/PID, else the URL unchanged."""
    if url != "auto":
        return url

    ids = {b.usb_vid_pid for b in BOARDS.values()} | {(0x0483, 0x374E), (0x0483, 0x3752), (0x0483, 0x3753)}
    for p in sorted(list_ports.comports(), key=lambda p: p.device):
        if (p.vid, p.pid) in ids:
            return p.device
    raise TinyolError("no ST-Link virtual COM port found (USB VID 0483)",
                      hint="plug the board in, or pass --port /dev/ttyACM0 explicitly")


def app_options(f):
    """--app and --stride (`tinyol build`, `tinyol emulate`): which firmware to build."""
    f = click.option("--stride", type=click.IntRange(1, 65535), default=None, metavar="ROWS",
                     help="--app imu: rows between window starts (default: half a window).")(f)
    return click.option("--app", type=click.Choice(["tinyol", "imu"]), default="tinyol",
                        show_default=True,
                        help="tinyol: the host streams samples (protocol firmware); imu: the "
                             "board's own IMU feeds the learner (docs/sensor.md).")(f)

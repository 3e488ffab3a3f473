"""Renode: find the emulator and build the command line that boots a board's firmware.

The platform files live in ``mcu/renode/`` (see docs/renode.md): one ``<board>.resc``
per board loads our STM32L4 platform, the firmware ELF (``$elf``) and puts the
console UART on a raw TCP socket (``$port``). The host then talks to the firmware
through the pyserial URL ``socket://127.0.0.1:<port>``, like with QEMU.

Renode is on no package registry; ``require_renode`` says where to get it.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from .boards import get_board
from .errors import TinyolError
from .paths import renode_dir

RENODE_EXECUTABLE = "renode"
RENODE_MIN_VERSION = "1.15"

# mcu/renode/ of this installation (a checkout, or tinyol/_firmware/ in a wheel; see paths.py).
RENODE_DIR = renode_dir()

_INSTALL_HINT = (
    f"install Renode >= {RENODE_MIN_VERSION}: it is not on PyPI, Debian or npm; take the "
    "Linux package (.deb/.rpm) or the portable tarball from the Renode project's "
    "releases (github.com/renode/renode/releases), then put `renode` on PATH "
    "or pass its path explicitly"
)


def find_renode(explicit: str | os.PathLike | None = None) -> str | None:
    """Path of the Renode launcher: `explicit` if it is an executable file, else
    `renode` from PATH; None when there is none."""
    if explicit is not None:
        path = Path(explicit)
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
        return None
    return shutil.which(RENODE_EXECUTABLE)


def require_renode(explicit: str | os.PathLike | None = None) -> str:
    """Like `find_renode`, but raise a TinyolError that says what to install."""
    found = find_renode(explicit)
    if found is not None:
        return found
    if explicit is not None:
        raise TinyolError(f"Renode not found at {explicit} (not an executable file)", hint=_INSTALL_HINT)
    raise TinyolError("Renode (`renode`) is not on PATH", hint=_INSTALL_HINT)


def resc_path(board: str, renode_dir: str | os.PathLike | None = None) -> Path:
    """The board's Renode script, e.g. mcu/renode/nucleo_l476rg.resc."""
    get_board(board)  # unknown board -> TinyolError listing the known ones
    path = Path(renode_dir if renode_dir is not None else RENODE_DIR) / f"{board}.resc"
    if not path.is_file():
        raise TinyolError(
            f"no Renode script for {board} at {path}",
            hint="reinstall tinyol: its Renode platform files (mcu/renode/) are missing",
        )
    return path.resolve()


def monitor_path(path: str | os.PathLike) -> str:
    """A file argument for Renode's Monitor: `@` + the absolute path, spaces escaped."""
    text = str(Path(path).resolve())
    return "@" + text.replace("\\", "/").replace(" ", "\\ ")


def renode_command(
    board: str,
    elf: str | os.PathLike,
    port: int,
    *,
    renode: str | None = None,
    renode_dir: str | os.PathLike | None = None,
    start: bool = True,
    hide_log: bool = True,
) -> list[str]:
    """Command line that boots `elf` on `board` in Renode, headless, with the console
    UART served raw (no telnet negotiation) on TCP `port` of 127.0.0.1.

    Each Monitor command is its own ``-e`` argument:
    ``renode --disable-xwt --console --hide-log -e 'set elf @/abs/fw.elf' -e 'set port N'
    -e 'include @/abs/mcu/renode/<board>.resc' -e start``.
    `renode`: the launcher; None looks it up on PATH (TinyolError with an install hint
    when missing). `start=False` leaves the machine paused (e.g. to attach a debugger).
    `hide_log=False` keeps Renode's log on stdout (whoever runs it must then drain it).
    """
    if renode is None:
        renode = require_renode()
    script = resc_path(board, renode_dir)
    elf_path = Path(elf)
    if not elf_path.is_file():
        raise TinyolError(
            f"firmware not found: {elf_path}", hint=f"build it first: tinyol build --board {board}"
        )
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise TinyolError(f"invalid TCP port {port!r}", hint="use a port number in 1..65535")
    cmd = [renode, "--disable-xwt", "--console"]
    if hide_log:
        cmd.append("--hide-log")
    cmd += [
        "-e", f"set elf {monitor_path(elf_path)}",
        "-e", f"set port {port}",
        "-e", f"include {monitor_path(script)}",
    ]
    if start:
        cmd += ["-e", "start"]
    return cmd


def serial_url(port: int) -> str:
    """The pyserial URL of the console served by `renode_command(..., port)`."""
    return f"socket://127.0.0.1:{port}"

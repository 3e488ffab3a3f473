"""Renode: find the emulator and build the command line that boots a board's firmware.

The platform files live in ``mcu/renode/`` (see docs/renode.md): one ``<board>.resc``
per board loads our STM32L4 platform, the firmware ELF (``$elf``) and puts the
console UART on a raw TCP socket (``$port``). The host then talks to the firmware
through the pyserial URL ``socket://127.0.0.1:<port>``, like with QEMU.

Renode is on no package registry; ``require_renode`` says where to get it.
``start_renode`` (in tinyol.targets.emulator) runs it with its Monitor on a pipe that tinyol
holds open, so it keeps serving whether or not stdin is a terminal; :class:`Monitor`
sends Monitor commands over that pipe (pause, reset, ``emulation RunFor``, ...).
"""
from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path

from ..boards import get_board
from ..errors import TinyolError
from ..paths import monitor_path, renode_dir

RENODE_EXECUTABLE = "renode"
RENODE_ENV = "TINYOL_RENODE"      # path of the launcher, checked before PATH
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
    $TINYOL_RENODE, else `renode` from PATH; None when there is none."""
    if explicit is None and os.environ.get(RENODE_ENV):
        explicit = os.environ[RENODE_ENV]
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


def renode_command(
    board: str,
    elf: str | os.PathLike,
    port: int,
    *,
    renode: str | None = None,
    renode_dir: str | os.PathLike | None = None,
    start: bool = True,
    hide_log: bool = True,
    log_file: str | os.PathLike | None = None,
    imu: bool = False,
    flash_store: str | os.PathLike | None = None,
    quantum: float | None = None,
) -> list[str]:
    """Command line that boots `elf` on `board` in Renode, headless, with the console
    UART served raw (no telnet negotiation) on TCP `port` of 127.0.0.1.

    Each Monitor command is its own ``-e`` argument:
    ``renode --disable-xwt --console --hide-log -e 'set elf @/abs/fw.elf' -e 'set port N'
    -e 'include @/abs/mcu/renode/<board>.resc' -e start``.
    `renode`: the launcher; None looks it up on PATH (TinyolError with an install hint
    when missing). `start=False` leaves the machine paused (e.g. to attach a debugger).
    `hide_log=False` keeps Renode's log on stdout (whoever runs it must then drain it);
    `log_file` makes Renode write its log there (``logFile @path``, the first command).
    With ``--console`` Renode quits when its stdin ends: keep stdin open (a pipe, as
    ``start_renode`` does) or run it from a terminal.
    `imu=True` (B-L475E-IOT01A only) adds the board's IMU on I2C2 (<board>_imu.resc; Renode
    compiles its I2C front end at start-up, about 10 s more; docs/sensor.md).
    `flash_store`: the script that serves the store region instead of flash.py (a copy that
    keeps it in a file: :func:`store_script`).
    `quantum`: Renode's synchronisation quantum in seconds of virtual time instead of the board
    scripts' 0.01 (an idle board in WFI then costs the host ~0.04 of a core, against ~0.5 at
    Renode's own 0.0001). Renode 1.15 cannot ``emulation RunFor`` less than one quantum, nor
    shrink it once the machine ran: whoever steps virtual time finely asks for it here.
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
    if log_file is not None:
        cmd += ["-e", f"logFile {monitor_path(log_file)}"]
    if imu:
        imu_script = script.with_name(f"{board}_imu.resc")
        if not imu_script.is_file():
            raise TinyolError(f"no IMU model for {board} in Renode",
                              hint="the B-L475E-IOT01A (disco_l475vg_iot01a) has one: docs/sensor.md")
        cmd += ["-e", f"set imu {monitor_path(imu_script)}"]
    if flash_store is not None:
        cmd += ["-e", f"set flash_store {monitor_path(flash_store)}"]
    if quantum is not None:
        if isinstance(quantum, bool) or not isinstance(quantum, (int, float)) or not 0 < quantum <= 1:
            raise TinyolError(f"invalid Renode quantum {quantum!r}", hint="seconds of virtual time, e.g. 0.0001")
        cmd += ["-e", f'set quantum "{quantum:.7f}"']
    cmd += [
        "-e", f"set elf {monitor_path(elf_path)}",
        "-e", f"set port {port}",
        "-e", f"include {monitor_path(script)}",
    ]
    if start:
        cmd += ["-e", "start"]
    return cmd


_STORE_LINE = re.compile(r'^machine PyDevFromFile \$flash_store (0x[0-9A-Fa-f]+) (0x[0-9A-Fa-f]+) true "flash_store"$',
                         re.M)
CTRL_SIZE = 0x400   # flash.py's register window after the store (mcu/renode/flash.py CTRL_SIZE)


def store_region(board: str, renode_dir: str | os.PathLike | None = None) -> tuple[int, int]:
    """(address, bytes) of the store region the board's .resc gives flash.py."""
    m = _STORE_LINE.search(resc_path(board, renode_dir).read_text())
    if not m:
        raise TinyolError(f"the Renode script of {board} maps no flash store",
                          hint="reinstall tinyol: its Renode platform files (mcu/renode/) are damaged")
    return int(m[1], 16), int(m[2], 16) - CTRL_SIZE


def image_bytes(board: str) -> int:
    """Size of the board's flash image file: the store's bytes and one state byte per
    double-word (flash.py's image, the native target's flash.bin format)."""
    return store_region(board)[1] // 8 * 9


def store_script(image: str | os.PathLike, folder: str | os.PathLike,
                 renode_dir: str | os.PathLike | None = None) -> Path:
    """Write `folder`/flash_store.py: flash.py with a first line naming `image`, so that
    Renode's store region is read from that file and written through to it."""
    src = (Path(renode_dir if renode_dir is not None else RENODE_DIR) / "flash.py").read_text(encoding="ascii")
    # an ASCII literal whatever the path (IronPython 2 reads the file as ASCII)
    literal = str(Path(image).resolve()).encode("unicode_escape").decode("ascii").replace('"', '\\"')
    out = Path(folder) / "flash_store.py"
    out.write_text(f'tol_flash_image = u"{literal}"\n' + src, encoding="ascii")
    return out


def serial_url(port: int) -> str:
    """The pyserial URL of the console served by `renode_command(..., port)`."""
    return f"socket://127.0.0.1:{port}"


# ---- the Monitor over a pipe ------------------------------------------------------------

_PROMPT = re.compile(r"\(([\w.\-]+)\) $")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# How Renode's Monitor reports a failed command (it keeps running and prints a prompt).
_MONITOR_ERRORS = re.compile(r"^(No such command|There was an error|Could not|Error|"
                             r"Invalid|Parameters did not match|.*[Ee]xception)")


def _crash_summary(text: str) -> str:
    """The lines of a Renode crash that say what happened (not the .NET stack)."""
    lines = [l.strip() for l in text.split("\n") if l.strip() and not l.strip().startswith("at ")]
    for i, line in enumerate(lines):
        if "Fatal error" in line or "Exception" in line:
            return " ".join(lines[i:i + 3])[:500]
    return " ".join(lines[-3:])[:500]


class Monitor:
    """Renode's Monitor on the stdin/stdout pipes of a ``--console`` process.

    Each command is written as one line; Renode echoes it after its prompt, prints its
    output and a new prompt ``(machine) ``. :meth:`execute` returns the output and raises
    TinyolError when Renode reports an error, exits, or does not answer in time.
    """

    def __init__(self, proc: subprocess.Popen, what: str = "Renode"):
        self.proc = proc
        self.what = what
        self._buf = ""

    def _exchange(self, command: str, timeout: float) -> tuple[str, str]:
        """Send `command`; (everything before its echo, its output)."""
        if self.proc.poll() is not None:
            raise TinyolError(f"{self.what} is not running (exit code {self.proc.returncode})")
        try:
            self.proc.stdin.write((command + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise TinyolError(f"{self.what} is not running (exit code {self.proc.wait()})") from None
        echo = re.compile(r"(?:^|\) )" + re.escape(command) + r"\n", re.M)
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while True:
            text = _ANSI.sub("", self._buf).replace("\r", "")
            m = echo.search(text)
            if m and _PROMPT.search(text, m.end()):
                self._buf = ""
                body = text[m.end():]
                out = body[:_PROMPT.search(body).start()].strip()
                return text[:m.start()], out
            left = deadline - time.monotonic()
            if left <= 0:
                raise TinyolError(f"{self.what} did not answer `{command}` within {timeout:g} s "
                                  f"(last output: {text.strip()[-300:]!r})",
                                  hint="see Renode's log")
            ready, _, _ = select.select([fd], [], [], min(left, 0.2))
            if ready:
                data = os.read(fd, 65536)
                if not data:
                    code = self.proc.wait()
                    raise TinyolError(f"{self.what} exited (code {code}) at `{command}`: "
                                      f"{_crash_summary(text)}")
                self._buf += data.decode("utf-8", "replace")

    def wait_ready(self, timeout: float = 60.0) -> str:
        """Wait until the start-up commands (`-e`) have run; raise if one of them failed."""
        before, out = self._exchange("version", timeout)
        self._check(before, "start-up")
        return before

    def execute(self, command: str, timeout: float = 60.0) -> str:
        """Run one Monitor command; its output (echo and prompt removed)."""
        _, out = self._exchange(command, timeout)
        self._check(out, command)
        return out

    def _check(self, text: str, command: str) -> None:
        for line in text.split("\n"):
            if _MONITOR_ERRORS.match(line.strip()):
                raise TinyolError(f"{self.what} failed at `{command}`: {line.strip()}",
                                  hint="check the board's .resc in mcu/renode/ and the firmware file")

    def close(self) -> None:
        """End of stdin: Renode quits on its own."""
        try:
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass

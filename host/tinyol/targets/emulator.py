"""Running firmware without hardware: QEMU, the native process, Renode.

Every runner exposes a pyserial URL (`socket://127.0.0.1:PORT`) that the same
host client uses as for a real board. QEMU always runs under a time limit.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal as _signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..boards import BOARDS, NATIVE, store_geometry
from ..errors import TinyolError
from . import renode as rn

QEMU_MACHINE = "b-l475e-iot01a"   # the only STM32L4 machine QEMU has (>= 9.1)
QEMU_MIN = (9, 1)
QEMU_SERIALS = 6                  # USART1, USART2, USART3, UART4, UART5, LPUART1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shown_path(path: Path) -> str:
    """A firmware image as messages name it: relative to the current folder when inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def qemu_binary() -> str:
    path = shutil.which("qemu-system-arm")
    if not path:
        raise TinyolError("qemu-system-arm not found",
                          hint="run `make setup` (installs QEMU >= 9.1; on Debian 12 from bookworm-backports)")
    out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"version (\d+)\.(\d+)", out)
    if not m or (int(m[1]), int(m[2])) < QEMU_MIN:
        raise TinyolError(f"QEMU {m[1]}.{m[2] if m else '?'} is too old: the {QEMU_MACHINE} machine "
                          f"with UARTs needs >= {QEMU_MIN[0]}.{QEMU_MIN[1]}",
                          hint="on Debian 12: apt-get install -t bookworm-backports qemu-system-arm")
    return path


def qemu_command(board: str, elf: Path, chardev: str, *, icount_shift: int | None = None,
                 semihosting: bool = True, extra: list[str] | None = None) -> list[str]:
    """The QEMU command line that runs `elf` with the board's console on `chardev`.

    `chardev` is a QEMU character device spec, e.g.
    ``tcp:127.0.0.1:4321,server=on,wait=on`` (output is kept until a client connects).
    """
    b = BOARDS[board]
    if b.qemu_serial_index is None:
        raise TinyolError(f"{board} cannot run in QEMU")
    serials: list[str] = []
    for i in range(b.qemu_serial_index + 1):
        serials += ["-serial", chardev if i == b.qemu_serial_index else "null"]
    argv = [qemu_binary(), "-M", QEMU_MACHINE, "-nographic", "-monitor", "none",
            "-kernel", str(elf), *serials]
    if semihosting:
        argv += ["-semihosting-config", "enable=on,target=native"]
    if icount_shift is not None:
        argv += ["-icount", f"shift={icount_shift},align=off,sleep=off"]
    return argv + (extra or [])


@dataclass
class Target:
    """A running emulated device. Use as a context manager; `url` is its serial port."""
    argv: list[str]
    url: str = ""
    timeout: float = 600.0
    proc: subprocess.Popen | None = None
    log: list[str] = field(default_factory=list)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def output(self) -> str:
        """What the emulator printed so far (QEMU's warnings and errors)."""
        f = getattr(self, "logfile", None)
        if f is None:
            return ""
        f.seek(0)
        return f.read()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise TinyolError(f"emulated target did not exit within {timeout} s") from None

    def stop(self) -> int | None:
        try:
            return self._stop()
        finally:
            lock = getattr(self, "state_lock", None)
            if lock is not None:            # the --state folder is free again
                unlock_state(lock)
                self.state_lock = None

    def _stop(self) -> int | None:
        if self.proc is None:
            return None
        monitor = getattr(self, "monitor", None)
        if monitor is not None and self.proc.poll() is None:
            monitor.close()           # Renode quits at the end of its stdin
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_qemu(board: str, elf: Path, *, port: int | None = None, icount_shift: int | None = None,
               timeout: float = 600.0) -> Target:
    """Boot `elf` in QEMU; QEMU waits for the first client on the returned URL."""
    if not Path(elf).is_file():
        raise TinyolError(f"firmware not found: {elf}", hint="build it with `tinyol build --board ...`")
    port = port or free_port()
    # nodelay: without it Nagle + the client's delayed ACK hold every reply ~40 ms
    chardev = f"tcp:127.0.0.1:{port},server=on,wait=on,nodelay=on"
    argv = ["timeout", "-s", "TERM", str(int(timeout))] + qemu_command(
        board, Path(elf), chardev, icount_shift=icount_shift)
    t = Target(argv, url=f"socket://127.0.0.1:{port}", timeout=timeout)
    # QEMU prints little (warnings); a file, not a pipe, so it can never block on a full pipe
    t.logfile = tempfile.TemporaryFile(mode="w+")
    t.proc = subprocess.Popen(argv, stdout=t.logfile, stderr=subprocess.STDOUT, text=True,
                              preexec_fn=die_with_parent)
    _wait_listening(t, port)
    return t


def start_native(program: Path, *, port: int = 0, state_dir: Path | None = None,
                 board: str | None = None, timeout: float = 600.0,
                 store_bytes: int | None = None) -> Target:
    """Start the native firmware process; its URL comes from its first stdout line.

    The process itself keeps the time limit (``--max-seconds``) and ends with its parent
    (no `timeout` wrapper in between that a kill -9 of this process would leave behind).
    It creates and locks `state_dir`; a second target on the same folder refuses."""
    if not Path(program).is_file():
        raise TinyolError(f"native firmware not found: {program}",
                          hint="build it with `tinyol build --board native`")
    argv = [str(program), "--port", str(port), "--max-seconds", str(max(1, int(timeout)))]
    if state_dir:
        argv += ["--state", str(state_dir)]
    if board:
        # the board's store region and pages (or the build's --store-bytes): the same slots, so
        # a save keeps on native exactly what it keeps on that board
        argv += ["--board", board]
        if board in BOARDS:
            argv += ["--flash", "%d:%d:%d" % store_geometry(BOARDS[board], store_bytes)]
    t = Target(argv, timeout=timeout)
    t.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = t.proc.stdout.readline().strip()
    m = re.match(r"tinyol native serial: (\S+)", line)
    if not m:
        t.stop()
        line = line.removeprefix("tinyol native: ")
        hint = ("stop the other target, or give this one another --state folder"
                if "in use by process" in line else None)
        raise TinyolError(f"native target did not start: {line or 'no output'}", hint=hint)
    t.url = m[1]
    return t


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when the process that started it dies (Linux
    PR_SET_PDEATHSIG), so a killed `tinyol emulate` or test run leaves no emulator behind.
    `timeout` passes the SIGTERM on to the emulator it runs."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(_signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the time limit still applies


def _wait_listening(t: Target, port: int, limit: float = 10.0, what: str = "QEMU") -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if not t.alive():
            out = t.output()
            raise TinyolError(f"{what} exited at start (code {t.proc.returncode}): {out.strip()[-500:]}")
        # connecting would consume QEMU's single wait=on connection: read the listen table instead
        if _port_listening(port):
            return
        time.sleep(0.05)
    t.stop()
    raise TinyolError(f"{what} did not open its serial socket on port {port} within {limit} s")


def _port_listening(port: int) -> bool:
    try:
        text = Path("/proc/net/tcp").read_text()
    except OSError:
        time.sleep(0.5)
        return True
    want = f":{port:04X} "
    return any(want in line and line.split()[3] == "0A" for line in text.splitlines()[1:])


FLASH_IMAGE = "flash.bin"    # a --state folder's flash (native: flash_native.c; Renode: flash.py)


_LOCKED: dict[int, str] = {}   # descriptor -> folder, held by this process (POSIX locks are per process)


def lock_state(folder: Path) -> int:
    """Lock `folder`/lock as the native target does (a POSIX record lock): one target per
    --state folder, in this process or another. Returns the descriptor that holds the lock
    (`unlock_state` frees it)."""
    import fcntl
    folder.mkdir(parents=True, exist_ok=True)
    where = str(folder.resolve())
    busy = TinyolError(f"state folder {folder} is in use by another target; one target per --state folder",
                       hint="stop the other target, or give this one another --state folder")
    if where in _LOCKED.values():
        raise busy
    fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise busy from None
    _LOCKED[fd] = where
    return fd


def unlock_state(fd: int) -> None:
    _LOCKED.pop(fd, None)
    os.close(fd)


NATIVE_IMAGE_BYTES = 128 * 1024 // 8 * 9   # flash_native.c's default (the L476RG's 128 KB store) + state bytes


def image_bytes(emulator: str, board: str, store_bytes: int | None = None) -> int:
    """Size of the flash.bin a target of `emulator` keeps in its --state folder: the store of the
    board it runs or imitates (native: `--flash`, the board's geometry) and a state byte per
    double-word."""
    if board in BOARDS:
        return store_geometry(BOARDS[board], store_bytes)[1] // 8 * 9
    return NATIVE_IMAGE_BYTES


def check_state(folder: Path, emulator: str, board: str, store_bytes: int | None = None) -> None:
    """Before a build: the --state folder is free and its flash.bin (if any) fits the target,
    so a wrong folder is named at once (the target checks both again when it starts)."""
    what = "the native target" if emulator == "native" or board == NATIVE else f"the {board} store in Renode"
    _check_image(Path(folder) / FLASH_IMAGE, image_bytes(emulator, board, store_bytes), what)
    if Path(folder).is_dir():
        unlock_state(lock_state(Path(folder)))


def _check_image(image: Path, nbytes: int, what: str) -> None:
    if image.exists() and image.stat().st_size != nbytes:
        raise TinyolError(f"{image} has {image.stat().st_size:,} bytes, but {what} takes {nbytes:,} "
                          f"({nbytes // 9 * 8 // 1024} KB and a state byte per double-word): "
                          "another board's flash, or not a flash image",
                          hint="move it away (the board then starts with an erased flash) "
                               "or give another --state folder")


def flash_image(folder: Path, nbytes: int, what: str) -> Path:
    """`folder`/flash.bin of `nbytes` bytes: checked when it exists (a wrong size is refused,
    never wiped), else created erased (0xFF, every double-word erased), written aside and
    renamed into place."""
    image = folder / FLASH_IMAGE
    if image.exists():
        _check_image(image, nbytes, what)
        return image
    store = nbytes // 9 * 8
    tmp = image.with_name(FLASH_IMAGE + ".tmp")
    with open(tmp, "wb") as f:
        f.write(b"\xff" * store + bytes(store // 8))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, image)
    return image


def start_renode(board: str, elf: Path, *, port: int | None = None, timeout: float = 600.0,
                 renode: str | None = None, imu: bool = False, state_dir: Path | None = None,
                 quantum: float | None = None) -> Target:
    """Boot `elf` on `board` in Renode (mcu/renode/<board>.resc), headless, under a time limit.

    With `state_dir`, the board's flash store lives in `state_dir`/flash.bin (created erased;
    flash.py reads it at start and writes every change through), so it survives Renode
    restarts as it survives a machine reset; the folder is locked while the target runs.

    Renode's Monitor runs on a pipe that the returned Target holds open (`t.monitor`,
    tinyol.targets.renode.Monitor): it keeps serving whether or not our stdin is a terminal, and
    quits when the Target is stopped. Its log goes to a temporary file (`t.output()`).
    Renode deletes stale $TMPDIR/renode-* folders at start-up, so it gets a private TMPDIR.
    `quantum`: see tinyol.targets.renode.renode_command (a test that steps virtual time by
    less than the board scripts' 10 ms asks for 0.0001, Renode's own default).
    """
    port = port or free_port()
    t = Target([], url=rn.serial_url(port), timeout=timeout)
    t.board = board  # its console UART is the peripheral tests may feed through the Monitor
    t.tmpdir = tempfile.TemporaryDirectory(prefix="tinyol-renode-")
    log = Path(t.tmpdir.name) / "renode.log"
    store = None
    if state_dir is not None:
        folder = Path(state_dir)
        t.state_lock = lock_state(folder)
        try:
            image = flash_image(folder, rn.image_bytes(board), f"the {board} store in Renode")
        except BaseException:
            t.stop()
            raise
        t.flash_image = image
        store = rn.store_script(image, t.tmpdir.name)
    cmd = rn.renode_command(board, elf, port, renode=renode, log_file=log, imu=imu, flash_store=store,
                            quantum=quantum)
    t.argv = ["timeout", "-s", "TERM", str(int(timeout))] + cmd
    env = dict(os.environ, TMPDIR=t.tmpdir.name, RENODE_TMPDIR=t.tmpdir.name)
    t.logfile = _RenodeLog(log)
    t.proc = subprocess.Popen(t.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, env=env)
    t.monitor = rn.Monitor(t.proc)
    try:
        t.monitor.wait_ready(timeout=min(120.0, timeout))
        _wait_listening(t, port, limit=30.0, what="Renode")
    except TinyolError:
        t.stop()
        raise
    return t


def renode_cpu_report(target: Target, elf: Path, kernels: str | None = None) -> tuple[int, int] | None:
    """(faults, fallbacks) of the firmware's boot self-test (tol_cpu.h), read from the running
    Renode machine's memory (the kernels' fault mask); None for a firmware without it.
    `kernels`: the build's kernel set (None: simd, the STM32L4 default); only the SIMD
    kernels have fallbacks."""
    from ..armdsp import CPU_CHECKS, CPU_FALLBACKS

    nm = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True)
    addr = next((int(ln.split()[0], 16) for ln in nm.stdout.splitlines() if ln.endswith(" tol_cpu_faults_")), None)
    if addr is None:
        return None
    # the self-test runs first thing in the model's init: wait until the core is well past it
    deadline = time.monotonic() + 10.0
    while (int(target.monitor.execute("sysbus.cpu ExecutedInstructions").split()[-1], 0) < 2_000_000
           and time.monotonic() < deadline):
        time.sleep(0.1)
    faults = int(target.monitor.execute(f"sysbus ReadWord 0x{addr:08x}").split()[-1], 0)   # a uint16_t
    fallback = sum(1 << i for i, c in enumerate(CPU_CHECKS) if c.name in CPU_FALLBACKS) if kernels != "ref" else 0
    return faults, faults & fallback


class _RenodeLog:
    """Renode's log file, read like the QEMU log (`Target.output`)."""

    def __init__(self, path: Path):
        self.path = path

    def seek(self, _pos: int) -> None:
        pass

    def read(self) -> str:
        try:
            return self.path.read_text(errors="replace")
        except OSError:
            return ""


def start(board: str, build, *, emulator: str = "qemu", port: int | None = None,
          state_dir: Path | None = None, icount_shift: int | None = None, timeout: float = 600.0,
          imu: bool = False) -> Target:
    """Start a built firmware (tinyol.targets.firmware.BuildResult) on the chosen emulator."""
    if emulator == "native" or board == NATIVE:
        # the native process answers INFO with the board it imitates (its name only: no
        # memory limits), so `--board nucleo_l432kc --emulator native` reports nucleo_l432kc
        return start_native(build.program, port=port or 0, state_dir=state_dir,
                            board=None if board == NATIVE else board, timeout=timeout,
                            store_bytes=getattr(getattr(build, "config", None), "store_bytes", None))
    if emulator == "qemu":
        if state_dir is not None:
            raise TinyolError("QEMU cannot keep a board's flash: its STM32L4 flash is read-only "
                              "(the firmware reports persistence unavailable)",
                              hint="--state works with --emulator renode or native")
        return start_qemu(board, build.elf, port=port, icount_shift=icount_shift, timeout=timeout)
    if emulator == "renode":
        if getattr(getattr(build, "config", None), "store_bytes", None) is not None:
            raise TinyolError("Renode maps the default store region (the last 1/8 of flash; "
                              "mcu/renode/flash.py): a firmware built with --store-bytes needs "
                              "its .resc changed", hint="use native or QEMU, or build without --store-bytes")
        return start_renode(board, build.elf, port=port, timeout=timeout, imu=imu, state_dir=state_dir)
    raise TinyolError(f"unknown emulator {emulator!r}", hint="choose qemu, renode or native")

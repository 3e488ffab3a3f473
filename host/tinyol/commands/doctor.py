"""`tinyol doctor`: first time on a board. Checks what goes wrong on real silicon.

Runs right after `tinyol flash` (docs/boards.md): INFO and versions; the clock tree and
console baud as the firmware read them back (BOARD); the core clock measured against the
host's clock across two BOARD requests; the flash geometry the firmware uses for its
store; a SAVE/LOAD round trip that leaves the learned state as it was. Each check is ok,
FAIL (with what is wrong) or skip (with why); any FAIL exits non-zero with one line.
On a serial port that gives no usable reply, other baud rates are tried to tell a wrong
clock/BRR from a dead board.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import click

from .. import __version__
from ..boards import BOARDS
from ..errors import TinyolError
from ..link.device import Device
from ..link.protocol import DeviceError, Link, Msg, Status, open_serial
from ..options import emit_json, json_option, port_option, resolve_port

BAUD_TOLERANCE = 0.025       # a UART receiver tolerates a few percent of baud error
CLOCK_TOLERANCE = 0.025      # measured core clock vs the one the firmware assumes (MSI's spread)
SCAN_BAUDS = (9600, 19200, 38400, 57600, 76800, 92160, 100800, 103680, 108000, 122880, 128000,
              138240, 153600, 172800, 230400)


@dataclass
class Check:
    name: str
    status: str      # ok | FAIL | skip
    detail: str


def _mhz(hz: int) -> str:
    return f"{hz / 1e6:.3f}".rstrip("0").rstrip(".") + " MHz"


def _scan_baud(url: str, expected: int, timeout: float) -> int | None:
    """The baud rate at which the device answers INFO, on a real serial port (None: none)."""
    for baud in SCAN_BAUDS:
        if baud == expected:
            continue
        try:
            with Link(open_serial(url, baudrate=baud), url=url, timeout=timeout, retries=1) as link:
                link.request(Msg.INFO, timeout=timeout)
            return baud
        except TinyolError:
            continue
    return None


def _page_sizes(board) -> tuple[int, ...]:
    """Page sizes the part can have: a 2 MB L4R5 has 4 KB pages with OPTR.DBANK = 1 (factory
    default) and 8 KB with DBANK = 0 (RM0432); the others one size."""
    return (board.page_bytes, 2 * board.page_bytes) if board.flash_bytes >= 2048 * 1024 else (board.page_bytes,)


def check_clock(dev, emulated: bool, seconds: float) -> tuple[Check, dict]:
    """Cycle counter against the host's monotonic clock across two BOARD requests. Judged
    only on a board (not `emulated`): an emulator's counter runs in its virtual time
    (Renode's idles ahead of the host, QEMU's follows executed instructions)."""
    a_host0 = time.monotonic()
    a = dev.board()
    a_host1 = time.monotonic()
    time.sleep(seconds)   # the measurement interval (not a synchronisation)
    b_host0 = time.monotonic()
    b = dev.board()
    b_host1 = time.monotonic()
    host_s = ((b_host0 + b_host1) - (a_host0 + a_host1)) / 2
    jitter = (a_host1 - a_host0 + b_host1 - b_host0) / 2
    cycles = (b.cycles - a.cycles) & 0xFFFFFFFF
    out = {"host_seconds": host_s, "cycles": cycles, "uncertainty_s": jitter}
    if a.cycles_epoch != b.cycles_epoch:
        return Check("core clock", "skip", "the cycle counter was restarted between the two readings"), out
    measured = cycles / host_s if host_s > 0 else 0.0
    out["measured_hz"] = measured
    if emulated:
        return Check("core clock", "skip",
                     f"emulator or host process: its counter runs in virtual time "
                     f"({_mhz(int(measured))} against the host's clock)"), out
    err = measured / a.cpu_hz - 1.0
    if abs(err) > CLOCK_TOLERANCE + jitter / max(host_s, 1e-9):
        return Check("core clock", "FAIL",
                     f"the core runs at {_mhz(int(measured))} by the host's clock, the firmware assumes "
                     f"{_mhz(a.cpu_hz)} ({err:+.1%}): a wrong PLL or clock source"), out
    return Check("core clock", "ok", f"{_mhz(int(measured))} by the host's clock over {host_s:.1f} s "
                                     f"(firmware assumes {_mhz(a.cpu_hz)}, {err:+.2%})"), out


def run_checks(url: str, *, baud: int = 115200, timeout: float = 2.0, clock_seconds: float = 2.0,
               save: bool = True) -> tuple[list[Check], dict]:
    """All checks on the device at `url`; (checks, facts for --json)."""
    checks: list[Check] = []
    facts: dict = {"port": url, "baud": baud}
    serial_port = not url.startswith(("socket://", "loop://", "rfc2217://"))
    try:
        dev = Device(Link(open_serial(url, baudrate=baud), url=url, timeout=timeout))
    except TinyolError as e:
        detail = str(e)
        if serial_port and "no reply" in detail:
            found = _scan_baud(url, baud, min(timeout, 0.5))
            if found:
                detail = (f"no reply at {baud} baud, but the device answers at {found} baud: its UART "
                          f"runs {found / baud:.3f}x too fast or slow (a wrong clock tree or BRR)")
        elif "no reply" in detail:
            detail += ("; a device whose UART runs at another baud (wrong clock tree or BRR) never "
                       "decodes what is sent and looks the same")
        checks.append(Check("link", "FAIL", detail))
        return checks, facts
    with dev:
        info = dev.info
        facts["info"] = asdict(info)
        checks.append(Check("link", "ok", f"INFO answered on {url}"))
        checks.append(Check("versions", "ok", f"firmware {info.fw_version}, protocol {info.proto_version}, "
                                              f"host tinyol {__version__}; board {info.board}, model {info.model}"))
        # emulators serve a TCP socket (QEMU, Renode, native); a board is a serial port
        emulated = "emulated" in info.flags or not serial_port
        try:
            rep = dev.board()
        except DeviceError as e:
            if e.status == Status.ERR_TYPE:
                checks.append(Check("board report", "FAIL", "the firmware predates the BOARD query: "
                                                           "rebuild and flash it with this tinyol"))
                return checks, facts
            raise
        facts["board_report"] = asdict(rep)
        checks.append(check_cpu(rep))
        # clock tree as read back from the RCC registers
        if rep.sysclk_hz == 0:
            checks.append(Check("clock tree", "skip", "no clock registers on this target (host process)"))
        elif rep.sysclk_hz != rep.cpu_hz:
            checks.append(Check("clock tree", "FAIL",
                                f"the clock registers give SYSCLK {_mhz(rep.sysclk_hz)}, the firmware assumes "
                                f"{_mhz(rep.cpu_hz)}: a wrong PLL setting (PLLM/PLLN/PLLR) or clock source"))
        else:
            checks.append(Check("clock tree", "ok", f"SYSCLK {_mhz(rep.sysclk_hz)} as the firmware assumes"))
        # console baud from BRR
        if rep.uart_baud == 0:
            checks.append(Check("console baud", "skip", "no UART on this target (host process)"))
        elif abs(rep.uart_baud / baud - 1.0) > BAUD_TOLERANCE:
            checks.append(Check("console baud", "FAIL",
                                f"the console UART is set to {rep.uart_baud} baud (BRR at {_mhz(rep.sysclk_hz)}), "
                                f"the host uses {baud}: a wrong BRR or TOL_BAUD"))
        else:
            checks.append(Check("console baud", "ok", f"{rep.uart_baud} baud from BRR (host {baud})"))
        clock, facts["clock"] = check_clock(dev, emulated, clock_seconds)
        checks.append(clock)
        # flash geometry the store uses
        board = BOARDS.get(info.board)
        if rep.flash_status != 0:
            name = Status(rep.flash_status).name if rep.flash_status in Status._value2member_map_ else rep.flash_status
            checks.append(Check("flash geometry", "skip", f"no writable flash on this target ({name}): "
                                                          "saving is unavailable (QEMU)"))
        elif board is not None and rep.flash_page_bytes not in _page_sizes(board):
            checks.append(Check("flash geometry", "FAIL",
                                f"the firmware erases {rep.flash_page_bytes}-byte pages, a {board.mcu} has "
                                + " or ".join(f"{p}-byte" for p in _page_sizes(board)) + " pages"))
        elif board is not None and not (0x08000000 <= rep.store_start
                                        and rep.store_start + rep.store_bytes <= 0x08000000 + board.flash_bytes):
            checks.append(Check("flash geometry", "FAIL",
                                f"store region 0x{rep.store_start:08x} + {rep.store_bytes} bytes lies outside "
                                f"the {board.flash_bytes // 1024} KB flash of a {board.mcu}"))
        else:
            bank = ""
            if board is not None and len(_page_sizes(board)) == 2:
                bank = " (OPTR.DBANK = 1, dual bank)" if rep.flash_page_bytes == board.page_bytes \
                    else " (OPTR.DBANK = 0, single bank)"
            checks.append(Check("flash geometry", "ok",
                                f"store at 0x{rep.store_start:08x}, {rep.store_bytes // 1024} KB in "
                                f"{rep.flash_page_bytes}-byte pages{bank}"))
        checks.append(check_save_load(dev, rep.flash_status == 0, save))
    return checks, facts


def check_cpu(rep) -> Check:
    """The core's boot self-test (BOARD): one line when it disagrees with the architecture."""
    from ..armdsp import CPU_CHECKS, cpu_verdict

    if rep.cpu_checked is None:
        return Check("core self-test", "skip", "the firmware predates the boot self-test: rebuild it")
    if rep.cpu_checked == 0:
        return Check("core self-test", "skip", "firmware without a model: no kernel to check")
    verdict = cpu_verdict(rep.cpu_faults, rep.cpu_fallbacks)
    if verdict is None:
        n = bin(rep.cpu_checked).count("1")
        return Check("core self-test", "ok", f"{n} of {len(CPU_CHECKS)} instruction checks as the ARMv7-M manual says")
    # routed around everywhere: outputs stay exact, so it is a warning, not a failure
    exact = rep.cpu_faults & ~(rep.cpu_fallbacks or 0) == 0
    return Check("core self-test", "ok" if exact else "FAIL", verdict)


def _learned_state(dev):
    """The learner's state as the host can read it back: the head (or the stage image)."""
    try:
        w, b, active = dev.get_head()
        return ("head", w.tobytes() + b.tobytes() + active.tobytes())
    except DeviceError as e:
        if e.status != Status.ERR_TYPE:
            raise
    return ("stage", dev.get_stage())


def check_save_load(dev, flash_ok: bool, save: bool) -> Check:
    if "has_model" not in dev.info.flags:
        return Check("save/load", "skip", "firmware without a model: nothing to save")
    if not flash_ok:
        return Check("save/load", "skip", "no writable flash on this target")
    if not save:
        return Check("save/load", "skip", "--no-save")
    before = _learned_state(dev)
    seen = dev.stats().samples_seen
    try:
        saved = dev.save()
        loaded = dev.load()
    except DeviceError as e:
        return Check("save/load", "FAIL", f"{e}")
    after = _learned_state(dev)
    if loaded.seq != saved.seq:
        return Check("save/load", "FAIL", f"LOAD restored record {loaded.seq}, SAVE wrote {saved.seq}")
    if after != before or dev.stats().samples_seen != seen:
        return Check("save/load", "FAIL", "the learned state read back after SAVE + LOAD differs from before")
    return Check("save/load", "ok", f"record {saved.seq} ({saved.bytes} bytes, {saved.pages} pages) saved and "
                                    "loaded; the learned state is unchanged")


@click.command("doctor")
@port_option()
@click.option("--baud", type=int, default=115200, show_default=True,
              help="Baud rate the host uses on a serial port (the firmware's TOL_BAUD).")
@click.option("--clock-seconds", type=float, default=2.0, show_default=True,
              help="Interval over which the core clock is measured against the host's.")
@click.option("--no-save", is_flag=True, help="Skip the SAVE/LOAD round trip (it writes a new record).")
@json_option
@click.option("--timeout", type=float, default=2.0, show_default=True, help="Seconds per attempt.")
def cmd(port, baud, clock_seconds, no_save, as_json, timeout):
    """Check a freshly flashed board: link and versions, clock tree, console baud, the core
    clock against the host's, the flash geometry of the store, and a SAVE/LOAD round trip
    (it stores the current learned state as a new record and leaves it as it was).

    \b
    Examples:
      tinyol doctor --port /dev/ttyACM0
      tinyol doctor --port socket://127.0.0.1:4321 --json
    """
    if clock_seconds <= 0:
        raise TinyolError("--clock-seconds must be > 0")
    checks, facts = run_checks(resolve_port(port), baud=baud, timeout=timeout, clock_seconds=clock_seconds,
                               save=not no_save)
    failed = [c for c in checks if c.status == "FAIL"]
    if as_json:
        emit_json({"ok": not failed, "checks": [asdict(c) for c in checks], **facts})
    else:
        for c in checks:
            click.echo(f"{c.status:>4}  {c.name:<15} {c.detail}")
    if failed:
        raise TinyolError(f"doctor: {len(failed)} check(s) failed: " + "; ".join(f"{c.name}: {c.detail}"
                                                                              for c in failed),
                          hint="docs/boards.md says what to check on each board")

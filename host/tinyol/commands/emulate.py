"""`tinyol emulate`: run the firmware in QEMU, Renode or natively; print its serial URL."""
from __future__ import annotations

import contextlib
import signal
import tempfile

import click

from .. import emulator
from ..checks import output_dir
from ..firmware import BuildConfig, build
from ..options import board_option, model_option


@click.command("emulate")
@board_option()
@model_option()
@click.option("--emulator", "emu", type=click.Choice(["qemu", "renode", "native"]), default="qemu",
              show_default=True, help="What runs the firmware.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="TCP port for the serial line (0: a free one).")
@click.option("--state", type=click.Path(file_okay=False), default=None,
              help="native: directory for persistent state (boot counter, flash image).")
@click.option("--icount", type=click.IntRange(0, 10), default=None, metavar="SHIFT",
              help="qemu: deterministic time, one instruction = 2^SHIFT ns.")
@click.option("--test-build", is_flag=True, hidden=True,
              help="A test build (EXIT ends the program; for test harnesses).")
@click.pass_context
def cmd(ctx, board, model, emu, port, state, icount, test_build):
    """Start the firmware without hardware and print its pyserial URL.

    \b
    In another shell:
      tinyol info --port socket://127.0.0.1:PORT
    Ctrl-C stops the target.
    """
    verbose = ctx.find_root().obj.get("verbose", False)
    if state:
        output_dir(state, "--state")  # before the build: a bad path is named at once
    native = emu == "native" or board == "native"
    # a release build: any local client could end a test build with EXIT
    cfg = BuildConfig("native" if native else board, model, test_build=test_build)
    res = build(cfg, verbose=verbose, echo=click.echo if verbose else None)
    with contextlib.ExitStack() as stack:
        state_dir = state or (stack.enter_context(tempfile.TemporaryDirectory(prefix="tinyol-native-"))
                              if native else None)
        _run(emulator.start(board, res, emulator=emu, port=port or None, state_dir=state_dir,
                            icount_shift=icount, timeout=24 * 3600), emu, board, native)


def _run(target, emu, board, native):
    what = (f"{board} imitated by a host process (board name only; memory and speed are the "
            f"host's)" if native and board != "native" else board)
    click.echo(f"{emu}: {what} running; serial port: {target.url}")
    click.echo("stop with Ctrl-C")
    try:
        signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
        rc = target.proc.wait()
        click.echo(f"{emu} exited with code {rc}")
    except KeyboardInterrupt:
        click.echo("stopping")
    finally:
        target.stop()

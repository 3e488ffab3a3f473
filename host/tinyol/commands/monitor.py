"""`tinyol monitor`: watch a sensor firmware (--app imu, examples/imu_learner) predict and learn
live, and give it labels (docs/sensor.md)."""
from __future__ import annotations

import sys
import threading
import time

import click

from ..checks import Number

from ..errors import TinyolError
from ..link.protocol import open_serial
from ..options import emit_json, json_option, port_option, resolve_port


class Tally:
    """Per-class counts of a sensor firmware's lines (the console format of mcu/app/imu)."""

    def __init__(self):
        self.windows = 0
        self.predicted: dict[int, int] = {}
        self.learned: dict[int, int] = {}
        self.last = None

    def feed(self, line: str) -> str | None:
        """Count one line; a short summary to show, or None for lines not about windows."""
        f = line.split()
        if f[:1] == ["w"] and len(f) == 5:
            self.windows += 1
            lab, conf = int(f[3]), int(f[4]) / 1e6
            self.predicted[lab] = self.predicted.get(lab, 0) + 1
            self.last = int(f[1])
            return f"window {f[1]}: class {lab} ({conf:.0%})"
        if f[:1] == ["learned"] and len(f) == 4:
            lab = int(f[2])
            self.learned[lab] = self.learned.get(lab, 0) + 1
            return f"window {f[1]} learned as class {lab} ({f[3]} samples learned)"
        return None

    def summary(self) -> dict:
        return {"windows": self.windows, "predicted": dict(sorted(self.predicted.items())),
                "learned": dict(sorted(self.learned.items()))}


@click.command("monitor")
@port_option()
@click.option("--until", default=None, metavar="PREFIX",
              help="Stop at the first device line starting with PREFIX (e.g. done).")
@click.option("--seconds", type=Number(0.0, 1e9, min_open=True), default=None, help="Stop after this long.")
@json_option
def cmd(port, until, seconds, as_json):
    """Show what a sensor-driven board predicts and learns, live, with per-class counts; type
    a class number and Enter to label the last window (the device learns it), `q` for its
    counters, Ctrl-D to stop typing (monitoring goes on), Ctrl-C to end.

    \b
    Example (after `tinyol emulate ... --app imu --sensor DIR`):
      tinyol monitor --port socket://127.0.0.1:PORT
    """
    ser = open_serial(resolve_port(port), timeout=0.1)
    tally = Tally()
    stop = threading.Event()

    def typing():
        for text in sys.stdin:
            text = text.strip()
            if text == "q":
                ser.write(b"q")
            elif text.isdigit() and int(text) < 255:
                ser.write(b"l" + bytes([int(text)]))
            elif text:
                click.echo(f"(a class number 0..254, or q; not {text!r})", err=True)
        # end of input: keep monitoring

    threading.Thread(target=typing, daemon=True).start()
    end = time.monotonic() + seconds if seconds else None
    buf = b""
    try:
        while not stop.is_set() and (end is None or time.monotonic() < end):
            try:
                buf += ser.read(256)
            except Exception as e:  # noqa: BLE001 - the link went away: one line
                raise TinyolError(f"serial port {port}: {e}") from None
            while b"\n" in buf:
                raw, buf = buf.split(b"\n", 1)
                line = raw.decode(errors="replace").strip()
                shown = tally.feed(line)
                if not as_json:
                    click.echo(shown or line)
                if until and line.startswith(until):
                    stop.set()
                    break
    except KeyboardInterrupt:
        pass
    finally:
        ser.close()
    s = tally.summary()
    if as_json:
        emit_json(s)
    else:
        click.echo(f"{s['windows']} windows; predicted per class {s['predicted']}; "
                   f"learned per class {s['learned']}")

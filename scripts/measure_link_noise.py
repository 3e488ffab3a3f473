"""Stream 30 digits samples through a baud-paced noisy line and count what it cost (issue 34).

The native firmware (models/digits) behind tests/_stream_util.FaultProxy: each byte, both
ways, has one bit flipped with probability FLIP (0.05: 5 % of the bytes damaged), seeded;
with BAUD the line carries 10 bit times a byte each way; the host sees a socket URL and is
not told the rate (a serial-to-network bridge; the issue's trial). The faults run from the
first sample to the last reply (tests/_stream_util.noisy_rows). Prints one line per case: samples
delivered, resends (every request's, the opening INFO and STATS too), bytes the line carried
both ways, bytes per delivered sample, wall time (docs/reliability.md,
"Noise overhead"). Usage, from the checkout's root:

    PYTHONPATH=host:studies:tests python scripts/measure_link_noise.py [FLIP:BAUD[:told] ...]

(`told`: the host is told the baud, as of a tty; default 0:115200 0.01:115200 0.05:115200 0.05:0, 0 baud = a socket without a rate).
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models/digits"
N = 30


def measure(program, flip: float, baud: int, *, n: int = N, seed: int = 5,
            patience: float = 300.0, seconds: float = 300.0, told: bool = False) -> dict:
    """One stream of `n` samples at `flip` per byte and `baud` (0: no rate), stopped as
    Ctrl-C stops it after `seconds` (the samples answered by then are the delivered ones);
    `told`: the host is told the baud (as of a tty: `Stream(baud=)`)."""
    import _thread
    import threading

    import numpy as np
    from _stream_util import FaultProxy, noisy_rows, quiet_after
    from tinyol.data.datasets import load_source
    from tinyol.errors import TinyolError
    from tinyol.link import Device
    from tinyol.link.stream import Stream
    from tinyol.model.folder import load_manifest
    from tinyol.targets import emulator

    X, y, _ = load_source("digits:5-9@train")
    order = np.random.default_rng(11).permutation(len(y))[:n]
    out = {"flip": flip, "baud": baud, "n": n, "error": None}
    t0 = time.monotonic()
    s, st = None, None
    with emulator.start_native(program, timeout=patience + 120) as t, \
            FaultProxy(t.url, flip=flip, seed=seed, baud=baud or None) as px:
        px.enabled = False  # the opening INFO and STATS go clean (_stream_util.noisy_rows)

        def stop_now():  # as Ctrl-C does; the closing STATS goes clean too
            px.enabled = False
            _thread.interrupt_main()
        stop = threading.Timer(seconds, stop_now)
        stop.start()
        dev = None
        try:
            dev = Device.open(px.url, timeout=0.2, patience=patience)
            # the host sees a socket (as through a serial-to-network bridge): no rate told
            st = Stream(dev, load_manifest(MODEL), window=4, timeout=0.2, patience=patience,
                        baud=baud if told and baud else None)
            rows = ((i, X[j], int(y[j])) for i, j in enumerate(order))
            s = st.run(noisy_rows(px, rows), on_record=quiet_after(px, st.records, n))
        except TinyolError as e:
            s = getattr(e, "summary", None)
            out["error"] = str(e).splitlines()[0]
        except KeyboardInterrupt:  # before the stream began: INFO or the opening STATS
            out["error"] = "the opening INFO/STATS had no answer when stopped"
        finally:
            stop.cancel()
        out["stopped"] = s is None or s.interrupted
        out["device_seen"] = None
        pipe = getattr(st, "pipeline", None)
        out["pipeline"] = vars(pipe.stats).copy() if pipe is not None else None
        if st is not None:
            px.enabled = False
            try:
                out["device_seen"] = st.device.stats().samples_seen
            except TinyolError:
                pass
            st.device.close()
        out["flipped"] = px.counts["flip"]
        carried = px.carried["up"] + px.carried["down"]
        noisy = px.noisy
    delivered = s.samples if s is not None else 0
    out.update(delivered=delivered, bytes=carried, noisy_bytes=noisy, seconds=time.monotonic() - t0,
               resends=dev.link.stats.retries if dev is not None else None,
               counters=[r.samples_seen for r in st.records] if st is not None else [],
               bytes_per_sample=carried / delivered if delivered else math.inf)
    return out


def native_program() -> Path:
    from tinyol.targets.firmware import BuildConfig, build
    return build(BuildConfig("native", str(MODEL.relative_to(ROOT)), None, False)).program


def main(argv: list[str]) -> None:
    cases = [tuple(a.split(":")) for a in argv] or [("0", "115200"), ("0.01", "115200"),
                                                     ("0.05", "115200"), ("0.05", "0")]
    program = native_program()
    print("| flips per byte | baud | delivered | resends | bytes | bytes/sample | s |")
    print("|--:|--:|--:|--:|--:|--:|--:|")
    for flip, baud, *told in cases:
        m = measure(program, float(flip), int(baud), told=told == ["told"])
        note = f" ({m['error']})" if m["error"] else " (stopped at 300 s)" if m["stopped"] else ""
        note += f" device learned {m['device_seen']}" if m["device_seen"] is not None else ""
        line = f"{baud} (host told)" if told == ["told"] else int(baud) or "socket"
        print(f"| {float(flip):.0%} | {line} | {m['delivered']}/{m['n']} | "
              f"{m['resends'] if m['resends'] is None else format(m['resends'], ',')} | "
              f"{m['bytes']:,} | {m['bytes_per_sample']:,.0f} | "
              f"{m['seconds']:.0f} |{note}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

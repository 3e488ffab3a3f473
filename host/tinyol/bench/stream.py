"""Streaming throughput, end to end (`tinyol bench --stream`, docs/streaming.md): a data set
through :func:`tinyol.link.stream.stream` on a running device (:func:`bench_stream`), and on
freshly built emulated targets, native and QEMU (:func:`bench_emulators`).
"""
from __future__ import annotations

import numpy as np

from ..data.datasets import load_source
from ..link.device import Device
from ..link.pipeline import DEFAULT_WINDOW, UART_BAUD
from ..link.stream import stream
from ..model.folder import load_manifest
from ..targets import emulator
from ..targets.firmware import BuildConfig, build


def bench_stream(url: str, model_dir: str = "models/digits", *, n: int = 400, mode: str = "predict",
                 window: int = DEFAULT_WINDOW, encoding: str = "int8", timeout: float = 2.0,
                 baud: int = UART_BAUD, data: str = "digits") -> dict:
    """End-to-end throughput of `n` samples on the device at `url` (already running).

    Returns samples/s and bytes/s measured, the bytes each sample needs on the
    wire in each direction, and the UART limit at `baud` 8N1 for those bytes
    (the link is full duplex: the busier direction bounds it). Emulators
    (socket URLs) have no baud limit; compare with ``uart_samples_per_s`` to see
    what a real board's ST-Link VCP would allow. mode=train changes the device's
    learned state.
    """
    manifest = load_manifest(model_dir)
    X, y, _ = load_source(data)
    reps = -(-n // len(X))
    X, y = np.concatenate([X] * reps)[:n], np.concatenate([y] * reps)[:n]
    with Device.open(url, timeout=timeout) as dev:
        s, _ = stream(dev, X, y, manifest, mode=mode, window=window, encoding=encoding,
                      timeout=timeout)
        board = dev.info.board
    out_ps, in_ps = s.bytes_out / s.samples, s.bytes_in / s.samples
    uart_bps = baud / 10
    uart_sps = uart_bps / max(out_ps, in_ps)
    return {
        "board": board, "url": url, "mode": mode, "window": window, "encoding": encoding,
        "samples": s.samples, "seconds": s.seconds,
        "samples_per_s": s.samples_per_s, "bytes_per_s": s.bytes_per_s,
        "bytes_out_per_sample": out_ps, "bytes_in_per_sample": in_ps,
        "uart_baud": baud, "uart_bytes_per_s": uart_bps, "uart_samples_per_s": uart_sps,
        "fraction_of_uart": s.samples_per_s / uart_sps,
        "retries": s.retries, "link_limited": not url.startswith("socket://"),
    }


def bench_emulators(model_dir: str = "models/digits", *, board: str = "nucleo_l476rg",
                    targets: tuple[str, ...] = ("native", "qemu"), windows: tuple[int, ...] = (1, 4),
                    n_native: int = 1000, n_qemu: int = 300, mode: str = "train") -> list[dict]:
    """Build the model's firmware, start each emulated target and run :func:`bench_stream`
    for every window (a fresh target each time). For `tinyol bench` and docs/streaming.md."""
    rows = []
    for kind in targets:
        fw = build(BuildConfig("native" if kind == "native" else board, model_dir, None, kind != "native"))
        for w in windows:
            t = (emulator.start_native(fw.program, timeout=300) if kind == "native"
                 else emulator.start_qemu(board, fw.elf, timeout=300))
            with t:
                r = bench_stream(t.url, model_dir, n=n_native if kind == "native" else n_qemu,
                                 window=w, mode=mode, timeout=3.0)
            r["target"] = kind
            rows.append(r)
    return rows

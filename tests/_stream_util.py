"""Helpers for the streaming tests: a fault-injecting TCP proxy, the reference run.

:class:`FaultProxy` sits between the host client and a target's TCP serial
socket and, with a fixed seed, flips bits in, drops and duplicates bytes in
both directions, like a noisy UART. When the target's side closes (the process
was killed and restarted), it reconnects to the same address and keeps the
client's connection open, like a board's USB serial port that survives a reset.
With ``baud``, each direction is a line of that rate (8N1: 10 bit times a byte):
bytes leave no faster, and what waits for the line is held to a driver's buffer
(``LINE_BUFFER`` bytes; the sender then blocks, as a tty's write() does), so a
host that resends too much pays for it in time, as on a real UART (a socket has
no rate: issue 34's 5 % flood could not be reproduced on one).
"""
from __future__ import annotations

import random
import select
import socket
import threading
import time

import numpy as np
from tinyol.model.folder import quantize
from tinyol.targets.twin import latents, learner_settings, load_model, make_learner


class FaultProxy:
    LINE_BUFFER = 4096   # bytes a paced direction holds before its sender blocks (a tty's buffer)

    def __init__(self, upstream_url: str, *, flip: float = 0.0, drop: float = 0.0, dup: float = 0.0,
                 seed: int = 1, protect_first: int = 0, baud: int | None = None):
        host, port = upstream_url.removeprefix("socket://").rsplit(":", 1)
        self.upstream = (host, int(port))
        self.flip, self.drop, self.dup = flip, drop, dup
        self.rng = {"up": random.Random(seed), "down": random.Random(seed + 1)}
        self.protect = {"up": protect_first, "down": protect_first}  # clean bytes at the start
        self.counts = {"flip": 0, "drop": 0, "dup": 0, "reconnects": 0}
        self.enabled = True
        self.byte_time = 10.0 / baud if baud else 0.0
        self.carried = {"up": 0, "down": 0}   # bytes delivered each way (after the faults)
        self.noisy = 0                        # bytes that met the faults (while enabled), both ways
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if baud:  # the kernel's socket buffers would be a far larger driver buffer than a tty's
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.LINE_BUFFER)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.url = f"socket://127.0.0.1:{self.listener.getsockname()[1]}"
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _mutate(self, data: bytes, direction: str) -> bytes:
        if not self.enabled:
            return data
        self.noisy += len(data)
        rng = self.rng[direction]
        out = bytearray()
        for b in data:
            if self.protect[direction] > 0:
                self.protect[direction] -= 1
                out.append(b)
                continue
            r = rng.random()
            if r < self.drop:
                self.counts["drop"] += 1
                continue
            if r < self.drop + self.flip:
                self.counts["flip"] += 1
                b ^= 1 << rng.randrange(8)
            elif r < self.drop + self.flip + self.dup:
                self.counts["dup"] += 1
                out.append(b)
            out.append(b)
        return bytes(out)

    def _connect_upstream(self, limit: float = 10.0) -> socket.socket | None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and not self._stop:
            try:
                s = socket.create_connection(self.upstream, timeout=1.0)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return s
            except OSError:
                time.sleep(0.02)
        return None

    def _run(self) -> None:
        client, _ = self.listener.accept()
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        up = self._connect_upstream()
        line = {"up": _Line(self.byte_time), "down": _Line(self.byte_time)}
        try:
            while not self._stop and up is not None:
                readers = [s for s, d in ((client, "up"), (up, "down")) if line[d].room(self.LINE_BUFFER)]
                wait = min([0.1] + [line[d].wait() for d in line if line[d].queue])
                r, _, _ = select.select(readers, [], [], wait)
                if client in r:
                    data = client.recv(4096)
                    if not data:
                        break
                    line["up"].queue += self._mutate(data, "up")
                if up in r:
                    try:
                        data = up.recv(4096)
                    except OSError:
                        data = b""
                    if not data:  # the target went away: wait for it to come back
                        up.close()
                        self.counts["reconnects"] += 1
                        line["down"].queue.clear()
                        up = self._connect_upstream()
                        continue
                    line["down"].queue += self._mutate(data, "down")
                try:
                    self.carried["up"] += line["up"].send(up)
                except OSError:
                    line["up"].queue.clear()  # target down: the bytes are lost, like a UART during a reset
                try:
                    self.carried["down"] += line["down"].send(client)
                except OSError:
                    break  # the client hung up
        finally:
            client.close()
            if up is not None:
                up.close()

    def close(self) -> None:
        self._stop = True
        self.listener.close()
        self._thread.join(2)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Line:
    """One direction of a serial line: bytes wait in `queue` and leave at one per `byte_time`
    seconds (all at once when 0: a socket)."""

    def __init__(self, byte_time: float):
        self.byte_time = byte_time
        self.queue = bytearray()
        self.clock = 0.0   # when the line is free again (monotonic seconds)
        self.idle = True   # nothing was waiting at the last send: the line's clock restarts

    def room(self, limit: int) -> bool:
        return len(self.queue) < limit

    def wait(self) -> float:
        """Seconds until the next byte may leave (at least 1 ms on a paced line: bytes leave in
        small bursts, as from a UART driver's FIFO)."""
        return max(0.001, self.clock + self.byte_time - time.monotonic()) if self.byte_time else 0.0

    def send(self, sock: socket.socket) -> int:
        if not self.queue:
            self.idle = True
            return 0
        now = time.monotonic()
        if not self.byte_time:
            n = len(self.queue)
        else:
            if self.idle:  # an idle line does not save up time; a busy one runs at the rate, so
                # a clock behind `now` (the proxy's loop wakes every ~1 ms) is bytes owed, not idle
                # time (clamped at every send it let one byte leave per wake-up: ~9,000 baud)
                self.clock = max(self.clock, now - self.byte_time)
                self.idle = False
            # a small epsilon: clock = now - byte_time gives (now - clock) / byte_time just
            # under 1 for some values of now (float rounding), which sent nothing, ever
            n = min(len(self.queue), int((now - self.clock) / self.byte_time + 1e-6))
            self.clock += n * self.byte_time
        if n:
            sock.sendall(bytes(self.queue[:n]))
            del self.queue[:n]
        self.idle = not self.queue
        return n


def noisy_rows(px: FaultProxy, rows):
    """The rows of a stream through `px` with the faults on from the first sample (the
    opening INFO and STATS go clean, so what is measured is the samples' exchanges; with the
    faults from the first byte: tests/device/test_link_noise.py's `test_a_stream_starts_...`,
    where the whole STATS reply, ~200 bytes, came through at 5 % flips ~1 time in 20,000 and
    its short form comes through ~1 in 40). Open the device with ``px.enabled = False``."""
    for row in rows:
        px.enabled = True
        yield row


def quiet_after(px: FaultProxy, records: list, n: int):
    """An on_record callback: the faults end with the n-th reply (the closing STATS, as the
    opening one, goes clean)."""
    def on_record(_):
        if len(records) >= n:
            px.enabled = False
    return on_record


def reference_run(model_dir: str, X: np.ndarray, y: np.ndarray, *, prefill=None, n_new=None,
                  mode: str | None = None) -> dict:
    """Predictions of the numpy reference learner (`tinyol simulate`) on the same int8 stream.

    The inputs are quantized exactly as `tinyol stream` does (tinyol.link.device.quantize), the
    backbone runs in TFLM's runtime, the head learns with the manifest's settings and seed.
    """
    model = load_model(model_dir)
    settings, replay = learner_settings(model, replay_n_new=n_new, mode=mode)
    lrn = make_learner(model, settings, replay)
    Xq = np.stack([quantize(x.ravel(), *model.input_q) for x in X])
    Q = latents(model, Xq)
    preds, conf, seen = [], [], []
    for q, t in zip(Q, y):
        p, c = lrn.predict(q)
        lrn.learn(q, int(t))
        preds.append(p)
        conf.append(c)
        seen.append(lrn.samples_seen)
    return {"predictions": np.array(preds), "confidence": np.array(conf), "learner": lrn,
            "samples_seen": seen}


# --------------------------------------------------------------------------- in-process device
class CPort:
    """A pyserial-like port whose other end is the firmware's protocol stack, compiled for the
    host (tests/c/hal_capture.c + the digits model) and called in-process through ctypes.

    `drop_writes`: indices of write() calls whose bytes are lost (the device never sees them);
    `drop_reads`: indices of device replies (one per write that produced output) to lose
    (kept in `lost_reads`).
    """

    def __init__(self, lib, *, drop_writes=(), drop_reads=(), inject=b""):
        import ctypes
        self.ctypes = ctypes
        self.lib = lib
        self.buf = bytearray(inject)
        self.writes = 0
        self.outputs = 0
        self.drop_writes, self.drop_reads = set(drop_writes), set(drop_reads)
        self.timeout = 0.01
        self.wire_log: list[bytes] = []
        self.lost_reads: list[bytes] = []
        out = ctypes.create_string_buffer(1 << 16)
        self.buf += out.raw[: lib.tol_test_take(out, len(out))]  # the boot line, if any

    def write(self, data: bytes) -> int:
        i = self.writes
        self.writes += 1
        self.wire_log.append(bytes(data))
        if i in self.drop_writes:
            return len(data)
        self.lib.tol_test_feed(bytes(data), len(data))
        out = self.ctypes.create_string_buffer(1 << 16)
        n = self.lib.tol_test_take(out, len(out))
        if n:
            if self.outputs not in self.drop_reads:
                self.buf += out.raw[:n]
            else:
                self.lost_reads.append(out.raw[:n])
            self.outputs += 1
        return len(data)

    def read(self, n: int = 1) -> bytes:
        if not self.buf:
            time.sleep(self.timeout)
            return b""
        d = bytes(self.buf[:n])
        del self.buf[:n]
        return d

    @property
    def in_waiting(self) -> int:
        return len(self.buf)

    def close(self) -> None:
        pass


def compile_device(model: str = "models/digits"):
    """The digits firmware's protocol stack as a ctypes library (cached)."""
    import ctypes

    from conftest import ROOT, compile_shared
    mcu = ROOT / "mcu"
    srcs = (sorted((mcu / "src").glob("*.c")) + sorted((mcu / "src/kernels/ref").glob("*.c"))
            + [mcu / "app/model.c", mcu / "app/learner_head.c", mcu / "app/wire_head.c", mcu / "embed/tinyol.c",
               mcu / "embed/tinyol_head.c", ROOT / model / "backbone.c", ROOT / model / "head_init.c",
               ROOT / "tests/c/hal_capture.c", ROOT / "tests/c/flash_sim.c"])
    lib = compile_shared(srcs, [mcu / "include", ROOT / model], {"TOL_TEST_BUILD": 0})
    lib.tol_test_feed.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.tol_test_take.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.tol_test_take.restype = ctypes.c_size_t
    lib.sim_setup.argtypes = [ctypes.c_uint32] * 3 + [ctypes.c_uint32]
    lib.sim_setup.argtypes[2] = ctypes.c_uint8
    return lib

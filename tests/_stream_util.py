"""Helpers for the streaming tests: a fault-injecting TCP proxy, the reference run.

:class:`FaultProxy` sits between the host client and a target's TCP serial
socket and, with a fixed seed, flips bits in, drops and duplicates bytes in
both directions, like a noisy UART. When the target's side closes (the process
was killed and restarted), it reconnects to the same address and keeps the
client's connection open, like a board's USB serial port that survives a reset.
"""
from __future__ import annotations

import random
import select
import socket
import threading
import time

import numpy as np

from tinyol.commands.simulate import latents, learner_settings, load_model, make_learner
from tinyol.device import quantize


class FaultProxy:
    def __init__(self, upstream_url: str, *, flip: float = 0.0, drop: float = 0.0, dup: float = 0.0,
                 seed: int = 1, protect_first: int = 0):
        host, port = upstream_url.removeprefix("socket://").rsplit(":", 1)
        self.upstream = (host, int(port))
        self.flip, self.drop, self.dup = flip, drop, dup
        self.rng = {"up": random.Random(seed), "down": random.Random(seed + 1)}
        self.protect = {"up": protect_first, "down": protect_first}  # clean bytes at the start
        self.counts = {"flip": 0, "drop": 0, "dup": 0, "reconnects": 0}
        self.enabled = True
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.url = f"socket://127.0.0.1:{self.listener.getsockname()[1]}"
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _mutate(self, data: bytes, direction: str) -> bytes:
        if not self.enabled:
            return data
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
        try:
            while not self._stop and up is not None:
                r, _, _ = select.select([client, up], [], [], 0.1)
                if client in r:
                    data = client.recv(4096)
                    if not data:
                        break
                    try:
                        up.sendall(self._mutate(data, "up"))
                    except OSError:
                        pass  # target down: the bytes are lost, like a UART during a reset
                if up in r:
                    try:
                        data = up.recv(4096)
                    except OSError:
                        data = b""
                    if not data:  # the target went away: wait for it to come back
                        up.close()
                        self.counts["reconnects"] += 1
                        up = self._connect_upstream()
                        continue
                    client.sendall(self._mutate(data, "down"))
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


def reference_run(model_dir: str, X: np.ndarray, y: np.ndarray, *, prefill=None, n_new=None) -> dict:
    """Predictions of the numpy reference learner (`tinyol simulate`) on the same int8 stream.

    The inputs are quantized exactly as `tinyol stream` does (tinyol.device.quantize), the
    backbone runs in TFLM's runtime, the head learns with the manifest's settings and seed.
    """
    model = load_model(model_dir)
    settings, replay = learner_settings(model, replay_n_new=n_new)
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

"""The gateways' door to the SuperLink: only Flower's Fleet API, nothing else (docs/fleet.md).

Flower 1.42 serves its Control API (register a SuperNode's key, start and stop runs; no
user authentication without Flower's enterprise plugins), its Fleet API (what SuperNodes
speak) and its Runtime API on one HTTP server. A gateway holding only ``ca.pem`` could
therefore register its own key and join. `tinyol superlink` binds that server to loopback
(the Control API's address, ``--control``) and puts this gate on the address gateways
reach (``--listen``): an HTTPS reverse proxy (uvicorn, the same ASGI server and TLS
settings Flower uses) that forwards requests under ``/v1/fleet/`` to the SuperLink, byte
for byte with their headers (SuperNode authentication signs a timestamp, not the
address), and answers every other path 403 without forwarding anything.

Run as its own process (tinyol.fleet.deploy.start_gate):
``python -m tinyol.fleet.gate --listen HOST:PORT --upstream URL [--cert F --key F --ca F]``.
"""
from __future__ import annotations

import argparse
import sys

ALLOWED = ("/v1/fleet/",)  # Flower's Fleet API: what a SuperNode needs, and all it gets
HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
       "transfer-encoding", "upgrade", "host", "content-length"}


def allowed(path: str) -> bool:
    """Whether a request path is the Fleet API's (no '..' games: the path as sent)."""
    return path.startswith(ALLOWED) and ".." not in path and "%" not in path


def make_app(upstream: str, ca: str | None = None):
    """The ASGI app: forward Fleet API requests to `upstream`, refuse the rest."""
    import ssl

    import httpx
    verify: ssl.SSLContext | bool = False
    if ca:  # the SuperLink's certificate must be signed by the fleet's CA; it names the public
        verify = ssl.create_default_context(cafile=ca)  # host (--host), not the loopback one
        verify.check_hostname = False
    client = httpx.AsyncClient(base_url=upstream.rstrip("/"), verify=verify, timeout=120.0)

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path = scope["path"]
        if not allowed(path) or scope["method"] != "POST":
            body = b"tinyol fleet gate: only the Fleet API is served here\n"
            await send({"type": "http.response.start", "status": 403,
                        "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        chunks = []
        while True:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]
                   if k.decode("latin-1").lower() not in HOP]
        url = path + (("?" + scope["query_string"].decode("latin-1")) if scope.get("query_string") else "")
        try:
            r = await client.request("POST", url, content=b"".join(chunks), headers=headers)
        except httpx.HTTPError as e:
            body = f"tinyol fleet gate: the SuperLink did not answer: {type(e).__name__}\n".encode()
            await send({"type": "http.response.start", "status": 502,
                        "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in r.headers.items() if k.lower() not in HOP]
        out.append((b"content-length", str(len(r.content)).encode()))
        await send({"type": "http.response.start", "status": r.status_code, "headers": out})
        await send({"type": "http.response.body", "body": r.content})

    return app


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tinyol.fleet.gate", description=__doc__.splitlines()[0])
    ap.add_argument("--listen", required=True, metavar="HOST:PORT")
    ap.add_argument("--upstream", required=True, metavar="URL", help="the SuperLink, e.g. https://127.0.0.1:9093")
    ap.add_argument("--cert"), ap.add_argument("--key"), ap.add_argument("--ca")
    a = ap.parse_args(argv)
    import uvicorn
    host, _, port = a.listen.rpartition(":")
    uvicorn.run(make_app(a.upstream, a.ca), host=host.strip("[]"), port=int(port), access_log=False,
                ssl_certfile=a.cert, ssl_keyfile=a.key, log_level="info", lifespan="on")
    return 0


if __name__ == "__main__":
    sys.exit(main())

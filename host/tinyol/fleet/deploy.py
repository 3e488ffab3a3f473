"""Fleets beyond one host: Flower's deployment engine, started for tinyol (docs/fleet.md).

Nothing here moves a byte between machines: Flower's SuperLink (``flower-superlink``)
and SuperNodes (``flower-supernode``) do, over TLS, with SuperNode authentication. This
module starts them with the right flags, makes the certificates and keys of a test fleet
(:func:`make_certs`, the ``cryptography`` package Flower already needs), registers the
gateways' public keys with the SuperLink (Flower's own Control API client), writes the
Flower App folder (:func:`write_app`: a pyproject.toml naming tinyol.fleet.app's
ServerApp and ClientApp) and starts a run with ``flwr run``.

Processes: every child gets its own process group and its own log file; :class:`Child`
waits for a log line (never a fixed sleep) and stops the whole group.
"""
from __future__ import annotations

import datetime
import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import TinyolError

APP_NAME = "tinyol-fleet"
CONNECTION = "tinyol"
CA, CA_KEY, LINK_CERT, LINK_KEY = "ca.pem", "ca.key", "superlink.pem", "superlink.key"


def _bin(name: str) -> str:
    """A Flower executable next to this Python (the venv's), else on PATH."""
    p = Path(sys.executable).with_name(name)
    return str(p) if p.exists() else name


# --------------------------------------------------------------------------- certificates and node keys
def make_certs(out: str | Path, *, hosts: list[str] | tuple[str, ...] | None = ("localhost", "127.0.0.1"),
               nodes: list[str] | tuple[str, ...] = (), days: int = 365, force: bool = False) -> dict[str, Path]:
    """A test fleet's credentials in `out`: a CA (ca.pem, ca.key), the SuperLink's TLS
    certificate for `hosts` signed by it (superlink.pem/.key), and one EC P-384 key pair
    per node name (NAME.key: OpenSSH private key, NAME.pub: its public key, the form
    `flower-supernode --auth-supernode-private-key` and SuperLink registration take).
    An existing CA in `out` is reused, so nodes can be added later. A key that exists
    already (a node's, or the SuperLink's when `hosts` asks for a new certificate) is
    never replaced without `force`: the refusal comes before anything is written.
    `hosts` None or empty: a SuperLink certificate only if there is none yet."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    until = now + datetime.timedelta(days=days)
    pem, pkcs8, none = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()

    def private(path: Path, key, fmt=pkcs8, enc=pem) -> None:
        path.unlink(missing_ok=True)  # (--force) a new file: readable by its owner only from the start
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key.private_bytes(enc, fmt, none))

    for n in nodes:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", n):
            raise TinyolError(f"node name {n!r}: letters, digits, '_', '.', '-' only")
    if len(set(nodes)) != len(nodes):
        raise TinyolError("a node name is given twice: " + ", ".join(sorted({n for n in nodes if nodes.count(n) > 1})))
    new_link = bool(hosts) or not (out / LINK_CERT).is_file()
    hosts = list(hosts or ("localhost", "127.0.0.1"))
    there = [out / f for n in nodes for f in (f"{n}.key", f"{n}.pub") if (out / f).exists()]
    if new_link:
        there += [out / f for f in (LINK_CERT, LINK_KEY) if (out / f).exists()]
    if there and not force:
        raise TinyolError(f"{there[0]} exists" + (f" (and {len(there) - 1} more)" if len(there) > 1 else "")
                          + ": tinyol certs never replaces a key",
                          hint="a new name (--node NAME), no --host to keep the SuperLink's certificate, "
                               "or --force to replace them (the old keys stop working)")
    written: dict[str, Path] = {}
    if (out / CA).is_file() and (out / CA_KEY).is_file():
        ca_cert = x509.load_pem_x509_certificate((out / CA).read_bytes())
        ca_key = serialization.load_pem_private_key((out / CA_KEY).read_bytes(), None)
    else:
        ca_key = ec.generate_private_key(ec.SECP384R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tinyol fleet CA")])
        ca_cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now).not_valid_after(until)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                content_commitment=False, key_encipherment=False,
                                                data_encipherment=False, key_agreement=False,
                                                encipher_only=False, decipher_only=False), critical=True)
                   .sign(ca_key, hashes.SHA256()))
        (out / CA).write_bytes(ca_cert.public_bytes(pem))
        private(out / CA_KEY, ca_key)
        written["ca"] = out / CA
    sans: list = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    if new_link:
        key = ec.generate_private_key(ec.SECP384R1())
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0] if hosts else "localhost")]))
                .issuer_name(ca_cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
                .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        (out / LINK_CERT).write_bytes(cert.public_bytes(pem))
        private(out / LINK_KEY, key)
        written["superlink"] = out / LINK_CERT
    for n in nodes:
        key = ec.generate_private_key(ec.SECP384R1())
        private(out / f"{n}.key", key, serialization.PrivateFormat.OpenSSH)
        (out / f"{n}.pub").write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                                      serialization.PublicFormat.OpenSSH)
                                       + f" {n}\n".encode())
        written[n] = out / f"{n}.key"
    return written


# --------------------------------------------------------------------------- child processes
class Child:
    """A child process in its own process group, its output in a log file."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict | None = None):
        self.name, self.argv, self.log = name, argv, Path(log)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.log, "ab")
        self.offset = self._f.tell()  # this start's output begins here (a log may hold earlier ones)
        env = {**os.environ, **(env or {})}
        # Flower starts flower-superexec, flwr-serverapp and flwr-clientapp by name: this venv's first
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        self.proc = subprocess.Popen(argv, stdout=self._f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def text(self) -> str:
        """This start's output so far."""
        return self.log.read_bytes()[self.offset:].decode(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 120.0, *, since: int | None = None) -> re.Match:
        """Wait until the log (from byte `since`, default: this start's output) matches
        `pattern`; a child that exits first or a timeout is an error naming the log's last line."""
        rx = re.compile(pattern)
        since = self.offset if since is None else since
        t_end = time.monotonic() + timeout
        while True:
            text = self.log.read_bytes()[since:].decode(errors="replace")
            m = rx.search(text)
            if m:
                return m
            if not self.alive() or time.monotonic() > t_end:
                last = (text.strip().splitlines() or ["(no output)"])[-1]
                why = f"exited with {self.proc.returncode}" if not self.alive() else f"no {pattern!r} in {timeout} s"
                raise TinyolError(f"{self.name} {why}: {last}", hint=f"its log: {self.log}")
            time.sleep(0.05)  # polling a log file

    def signal(self, sig) -> None:
        """Send `sig` to the child's whole process group."""
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM to the whole group, SIGKILL after `grace`."""
        stop_all([self], grace)


def stop_all(children: list["Child | None"], grace: float = 5.0) -> None:
    """Stop children together: SIGTERM to every group, then SIGKILL to whatever is left
    after `grace` seconds (a SuperNode says goodbye to its SuperLink first)."""
    kids = [c for c in children if c is not None]
    for c in kids:
        if c.proc.poll() is None:
            c.signal(signal.SIGTERM)
    t_end = time.monotonic() + grace
    for c in kids:
        try:
            c.proc.wait(max(0.0, t_end - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for c in kids:
        c.signal(signal.SIGKILL)  # the rest, and children left in the group
        try:
            c.proc.wait(5.0)
        except subprocess.TimeoutExpired:
            pass
        c._f.close()


# --------------------------------------------------------------------------- the SuperLink side
@dataclass
class Tls:
    """TLS settings of one end: the CA that signs the SuperLink's certificate, and the
    SuperLink's certificate and key (on the SuperLink only). None everywhere: --insecure."""
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None

    @classmethod
    def from_dir(cls, d: str | Path) -> "Tls":
        d = Path(d)
        missing = [f for f in (CA, LINK_CERT, LINK_KEY) if not (d / f).is_file()]
        if missing:
            raise TinyolError(f"{d} has no {', '.join(missing)}", hint="make them: tinyol certs " + str(d))
        return cls(d / CA, d / LINK_CERT, d / LINK_KEY)

    @property
    def insecure(self) -> bool:
        return self.ca is None


def start_superlink(state: Path, port: int, tls: Tls, *, host: str = "127.0.0.1", auth: bool = True,
                    env: dict | None = None, timeout: float = 180.0, database: bool = True) -> Child:
    """flower-superlink with its database in `state` (a restart resumes it), TLS and
    SuperNode authentication unless `tls` is insecure; waits until it serves.
    `host`:`port` serves all of Flower's APIs, the Control API among them (registering
    keys, starting runs): loopback by default; gateways reach the Fleet API through
    :func:`start_gate`. `database=False`: Flower's in-memory state instead of SQLite
    (nothing survives a restart; under many nodes on few cores, SQLite's file lock makes
    the SuperLink answer "database is locked" and lose replies, docs/fleet.md)."""
    state.mkdir(parents=True, exist_ok=True)
    argv = [_bin("flower-superlink")]
    if database:
        argv += ["--database", str(state / "superlink.db")]
    argv += ["--host", host, "--port", str(port), "--disable-runtime-dependency-installation"]
    if tls.insecure:
        if auth:
            raise TinyolError("SuperNode authentication needs TLS", hint="leave out --insecure, or --no-auth too")
        argv.append("--insecure")
    else:
        argv += ["--ssl-ca-certfile", str(tls.ca), "--ssl-certfile", str(tls.cert), "--ssl-keyfile", str(tls.key)]
    if auth:
        argv.append("--enable-supernode-auth")
    link = Child("the SuperLink", argv, state / "superlink.log", env)
    try:
        link.wait_for(r"Uvicorn running on", timeout)
    except TinyolError:
        link.stop()
        raise
    return link


def start_gate(state: Path, host: str, port: int, upstream: str, tls: Tls, *, env: dict | None = None,
               timeout: float = 120.0) -> Child:
    """The gateways' door (tinyol.fleet.gate) on `host`:`port`: Flower's Fleet API of the
    SuperLink at `upstream` (HOST:PORT, on loopback), and nothing else: a gateway that
    holds ca.pem can join with a registered key, never register one or start a run."""
    argv = [sys.executable, "-m", "tinyol.fleet.gate", "--listen", f"{host}:{port}"]
    if tls.insecure:
        argv += ["--upstream", f"http://{upstream}"]
    else:
        argv += ["--upstream", f"https://{upstream}", "--cert", str(tls.cert), "--key", str(tls.key),
                 "--ca", str(tls.ca)]
    gate = Child("the fleet gate", argv, Path(state) / "gate.log", env)
    try:
        gate.wait_for(r"Uvicorn running on", timeout)
    except TinyolError:
        gate.stop()
        raise
    return gate


def flwr_env(home: Path, address: str, tls: Tls) -> dict:
    """FLWR_HOME for the flwr CLI and the SuperLink's apps: a config.toml whose connection
    `tinyol` is this SuperLink (root certificate, or insecure)."""
    home.mkdir(parents=True, exist_ok=True)
    lines = ["[superlink]", f'default = "{CONNECTION}"', "", f"[superlink.{CONNECTION}]", f'address = "{address}"']
    lines.append("insecure = true" if tls.insecure else f'root-certificates = "{Path(tls.ca).resolve()}"')
    (home / "config.toml").write_text("\n".join(lines) + "\n")
    return {"FLWR_HOME": str(home)}


def register_keys(address: str, tls: Tls, pubs: list[Path], env: dict) -> dict[str, str]:
    """Register every public key with the SuperLink's Control API (Flower's own client;
    what `flwr supernode register` does). A key registered before (a restarted SuperLink
    with its database) is left as it is. Returns name -> node id or 'registered before'."""
    os.environ.update(env)
    from flwr.cli.supernode.register import try_load_public_key
    from flwr.cli.typing import SuperLinkConnection
    from flwr.cli.utils import init_http_client_from_connection
    from flwr.proto.control_pb2 import RegisterNodeRequest  # pylint: disable=E0611

    conn = SuperLinkConnection(name=CONNECTION, address=address,
                               root_certificates=None if tls.insecure else str(Path(tls.ca).resolve()),
                               insecure=tls.insecure)
    client = init_http_client_from_connection(conn)
    out = {}
    try:
        for p in pubs:
            try:
                res = client.RegisterNode(RegisterNodeRequest(public_key=try_load_public_key(Path(p)),
                                                              name=Path(p).stem))
                out[Path(p).stem] = str(res.node_id)
            except Exception as e:  # noqa: BLE001 - Flower's client raises its own errors
                said = str(e) + " " + str(getattr(getattr(e, "response", None), "text", ""))
                if "already in use" not in said.lower():
                    raise TinyolError(f"the SuperLink refused the key {p}: {e}") from None
                out[Path(p).stem] = "registered before"
    finally:
        client.close()
    return out


def write_app(dest: Path) -> Path:
    """The Flower App folder `flwr run` builds a FAB from: only a pyproject.toml naming
    tinyol.fleet.app's ServerApp and ClientApp (they are imported from the installed
    tinyol on the SuperLink and on every gateway: the same version everywhere)."""
    from .. import __version__
    from .app import RUN_DEFAULTS
    dest.mkdir(parents=True, exist_ok=True)
    cfg = "\n".join(f"{k} = {_toml(v)}" for k, v in RUN_DEFAULTS.items())
    (dest / "pyproject.toml").write_text(f"""# generated by tinyol {__version__} (tinyol.fleet.deploy.write_app) - do not edit
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{APP_NAME}"
version = "{__version__}"
description = "tinyol boards learn together: Flower ServerApp and ClientApp"
license = "Apache-2.0"
dependencies = []

[tool.flwr.app]
publisher = "tinyol"

[tool.flwr.app.components]
serverapp = "tinyol.fleet.app:server_app"
clientapp = "tinyol.fleet.app:client_app"

[tool.flwr.app.config]
{cfg}
""")
    return dest


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))


def config_args(d: dict) -> str:
    """Flower's key=value list (--node-config, --run-config): strings quoted, TOML values."""
    return " ".join(f"{k}={_toml(v)}" for k, v in d.items())


def start_run(app: Path, env: dict, run_config: dict, log: Path, timeout: float = 300.0) -> str:
    """`flwr run APP tinyol --run-config ...`: the SuperLink starts the ServerApp. Returns the run id."""
    argv = [_bin("flwr"), "run", str(app), CONNECTION, "--run-config", config_args(run_config), "--format", "json"]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **env}, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TinyolError(f"flwr run did not answer in {timeout} s") from None
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write(p.stdout + p.stderr)
    m = re.search(r'"run-id":\s*"?(\d+)', p.stdout)
    if p.returncode != 0 or not m:
        last = ((p.stdout + p.stderr).strip().splitlines() or ["no output"])[-1]
        raise TinyolError(f"flwr run failed: {last}", hint=f"its output: {log}")
    return m.group(1)


# --------------------------------------------------------------------------- the gateway side
def start_supernode(superlink: str, name: str, node_config: dict, runtime_port: int, log: Path, *,
                    tls: Tls, key: Path | None, env: dict | None = None, max_retries: int | None = None) -> Child:
    """flower-supernode for one board: TLS to `superlink` (the CA in `tls`), authenticated
    with `key` (its public key registered with the SuperLink), the board and its data in
    `node_config`. Its Runtime API listens on 127.0.0.1:`runtime_port` (one per SuperNode)."""
    argv = [_bin("flower-supernode"), "--superlink", superlink, "--node-config", config_args(node_config),
            "--host", "127.0.0.1", "--port", str(runtime_port)]
    argv += ["--insecure"] if tls.insecure else ["--root-certificates", str(tls.ca)]
    if key is not None:
        argv += ["--auth-supernode-private-key", str(key)]
    if max_retries is not None:
        argv += ["--max-retries", str(max_retries)]
    return Child(name, argv, log, env)


def node_started(node: Child, timeout: float = 120.0) -> str:
    """Wait until a SuperNode is accepted (its node id); a refused one raises TinyolError."""
    return node.wait_for(r"SuperNode ID: (\d+)", timeout).group(1)


def follow(path: Path, link: Child, on_record, *, start: int = 0, timeout: float | None = None) -> list[dict]:
    """Read the ServerApp's JSON log from byte `start` as it grows until its 'done' record
    (or the SuperLink dies)."""
    recs, pos, t_end = [], start, None if timeout is None else time.monotonic() + timeout
    while True:
        if path.is_file():
            data = path.read_bytes()
            end = data.rfind(b"\n") + 1
            for line in data[pos:end].decode().splitlines():
                if line.strip():
                    rec = json.loads(line)
                    recs.append(rec)
                    on_record(rec)
                    if rec.get("event") == "done":
                        return recs
                    if rec.get("event") == "failed":
                        raise TinyolError(f"tinyol's ServerApp failed: {rec['error']}",
                                          hint=f"the SuperLink's log: {link.log}")
            pos = end
        if not link.alive():
            raise TinyolError(f"the SuperLink stopped (exit {link.proc.returncode}) before the run ended",
                              hint=f"its log: {link.log}")
        if t_end is not None and time.monotonic() > t_end:
            raise TinyolError(f"the run did not end in {timeout} s", hint=f"the SuperLink's log: {link.log}")
        time.sleep(0.1)  # polling a log file


def supervise(nodes: list[Child], pool=None, on_event=lambda msg: None) -> None:
    """Watch a gateway's SuperNodes until every one has stopped (or Ctrl-C): report each
    that stops, and power an emulated board that died up again (the ClientApp finds it
    back on the same port, with its flash)."""
    reported: set[str] = set()
    while True:
        for node in nodes:
            if not node.alive() and node.name not in reported:
                reported.add(node.name)
                last = (node.text().strip().splitlines() or ["(no output)"])[-1]
                on_event(f"{node.name}: its SuperNode stopped (exit {node.proc.returncode}): {last}")
        if len(reported) == len(nodes):
            raise TinyolError("every SuperNode of this gateway stopped",
                              hint=f"their logs: {nodes[0].log.parent}")
        if pool is not None:
            for i in range(len(nodes)):
                if pool.revive(i):
                    on_event(f"{nodes[i].name}: its emulated board died; started again")
        time.sleep(1.0)  # a supervisor's pace


def exit_on_sigterm() -> None:
    """SIGTERM (systemd stop, kill) ends the command like Ctrl-C: its children are stopped."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, handler)

"""`tinyol certs`, `tinyol superlink`, `tinyol gateway`: a fleet over Flower's deployment engine.

One command per machine: the server runs `tinyol superlink` (Flower's SuperLink, the
tinyol ServerApp), each gateway runs `tinyol gateway` (a Flower SuperNode per board);
TLS and SuperNode authentication are on unless --insecure. The machinery is
tinyol.fleet.deploy, the app tinyol.fleet.app; docs/fleet.md describes both.
"""
from __future__ import annotations

import socket
from pathlib import Path

import click

from ..errors import TinyolError
from ..options import emit_json, json_option, model_option, resolve_port

DEFAULT_PORT = 9092
CONTROL_PORT = 9093
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _hostport(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise TinyolError(f"{value!r} is not HOST:PORT", hint="e.g. fleet.example.org:9092 or 127.0.0.1:9092")
    return host.strip("[]"), int(port)


# --------------------------------------------------------------------------- certs
@click.command("certs")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--host", "hosts", multiple=True, metavar="NAME",
              help="A name or IP address gateways use to reach the SuperLink (repeat; "
                   "default localhost and 127.0.0.1).")
@click.option("--node", "nodes", multiple=True, metavar="NAME", help="Make a key pair for this SuperNode (repeat).")
@click.option("--nodes", "n_nodes", type=click.IntRange(0), default=0, metavar="N",
              help="Make key pairs board0 .. board<N-1>.")
@click.option("--days", type=click.IntRange(1), default=365, show_default=True, help="Validity of the certificates.")
@click.option("--force", is_flag=True, help="Replace keys that exist already (their old copies stop working).")
@json_option
def cmd_certs(out, hosts, nodes, n_nodes, days, force, as_json):
    """Make a test fleet's CA, the SuperLink's TLS certificate and the SuperNodes' keys.

    \b
    OUT/ca.pem          the CA: every gateway gets a copy (--ca)
    OUT/ca.key          the CA's key: keep it here, it signs new certificates
    OUT/superlink.pem   the SuperLink's certificate for --host names, and its .key
    OUT/NAME.key        a SuperNode's private key (copy it to its gateway only)
    OUT/NAME.pub        its public key: the SuperLink registers it (tinyol superlink --certs OUT)

    \b
    Examples:
      tinyol certs fleet-certs --host fleet.example.org --nodes 6
      tinyol certs fleet-certs --node lab-board7          # one more node, same CA

    An existing key is never replaced (the command stops before writing anything) unless
    --force; without --host, an existing SuperLink certificate is kept.
    """
    names = list(nodes) + [f"board{i}" for i in range(n_nodes)]
    from ..fleet.deploy import make_certs
    written = make_certs(out, hosts=list(hosts) or None, nodes=names, days=days, force=force)
    if as_json:
        emit_json({k: str(v) for k, v in written.items()})
        return
    for k, v in written.items():
        click.echo(f"{k:<12} {v}")


# --------------------------------------------------------------------------- superlink
@click.command("superlink")
@click.option("--listen", default=f"0.0.0.0:{DEFAULT_PORT}", show_default=True, metavar="HOST:PORT",
              help="Where gateways reach the SuperLink: Flower's Fleet API only (tinyol.fleet.gate).")
@click.option("--control", default=f"127.0.0.1:{CONTROL_PORT}", show_default=True, metavar="HOST:PORT",
              help="Where the SuperLink itself serves, its Control API (register keys, start runs) with it: "
                   "keep it on loopback; gateways never need it.")
@click.option("--certs", "certs_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("fleet-certs"),
              show_default=True, help="From `tinyol certs`: ca.pem, superlink.pem/.key, and the nodes' .pub keys.")
@click.option("--register", "pubs", multiple=True, type=click.Path(dir_okay=False, path_type=Path), metavar="PUB",
              help="Register this SuperNode public key (repeat; default: every .pub in --certs).")
@click.option("--insecure", is_flag=True, help="No TLS and no SuperNode authentication (a closed test network only).")
@click.option("--state", "state_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="The SuperLink's database, the fleet's checkpoint and logs; the same DIR resumes.")
@model_option()
@click.option("--every", "-k", "k", type=click.IntRange(1), default=20, show_default=True,
              help="Samples each board learns per round.")
@click.option("--rounds", type=click.IntRange(1), default=10, show_default=True, help="Rounds in all (a resumed fleet "
              "carries on to this many).")
@click.option("--strategy", type=click.Choice(["fedavg", "fedavgm", "fedmedian", "fedtrimmedavg", "fedprox",
                                               "fedadam", "fedyogi", "fedadagrad", "none"]),
              default="fedavg", show_default=True, help="Flower strategy that aggregates (as tinyol fleet).")
@click.option("--server-lr", type=float, default=None, metavar="ETA", help="Server learning rate (as tinyol fleet).")
@click.option("--min-boards", type=click.IntRange(1), default=1, show_default=True,
              help="Aggregate only when at least this many boards finished the round.")
@click.option("--strict", is_flag=True, help="A round where any board failed pushes nothing.")
@click.option("--save", is_flag=True, help="Every board SAVEs its learned state after the PULL, before the next "
              "PUSH (survives resets; as tinyol fleet --save).")
@click.option("--wait", "wait_n", type=click.IntRange(1), default=1, show_default=True,
              help="Boards to wait for before round 1.")
@click.option("--in-flight", type=click.IntRange(0), default=0, show_default=True, metavar="N",
              help="At most N boards' messages out at a time (many SuperNodes on one small machine; 0: all).")
@click.option("--round-timeout", type=float, default=300.0, show_default=True,
              help="Seconds a round waits for its boards; a board that has not answered is a failure.")
@click.option("--eval", "eval_spec", default="digits@test", show_default=True, metavar="SOURCE",
              help="Held-out set for the aggregate's accuracy ('' to skip); each gateway measures its "
                   "board's own head on its copy of it.")
@click.option("--eval-every", type=click.IntRange(0), default=1, show_default=True,
              help="Measure every board's own head every N rounds and the last (0: never).")
@click.option("--log", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="One JSON record per round (default: STATE/fleet.jsonl).")
@click.option("--record-pulls", is_flag=True, hidden=True, help="Keep every reply's parameters in STATE.")
@json_option
@click.pass_context
def cmd_superlink(ctx, listen, control, certs_dir, pubs, insecure, state_dir, model, k, rounds, strategy, server_lr, min_boards,
                  strict, save, wait_n, in_flight, round_timeout, eval_spec, eval_every, log, record_pulls, as_json):
    """The server side of a fleet over Flower's deployment engine: start a SuperLink
    (TLS, SuperNode authentication, its database in --state), register the gateways'
    keys, run tinyol's Flower App and print every round; stop when the run ends.

    \b
    Examples:
      tinyol superlink --certs fleet-certs --state run/ --wait 6 --rounds 20 --strategy fedadam
      tinyol superlink --insecure --state run/ --listen 127.0.0.1:9092     # a closed test network only
    """
    from .. import fleet as F
    from ..fleet import deploy as D
    F.require_flower()
    F.check_server_lr(strategy, server_lr)
    host, port = _hostport(listen)
    chost, cport = _hostport(control)
    if insecure:
        given = [flag for name, flag in (("certs_dir", "--certs"), ("pubs", "--register"))
                 if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT]
        if given:
            raise TinyolError(f"--insecure and {' '.join(given)} exclude each other: --insecure turns TLS and "
                              "SuperNode authentication off", hint="leave out one or the other")
    if port == cport and (host == chost or "0.0.0.0" in (host, chost) or "::" in (host, chost)):
        raise TinyolError(f"--listen {listen} and --control {control} are one address: gateways would reach "
                          "the Control API", hint=f"e.g. --control 127.0.0.1:{CONTROL_PORT}")
    D.exit_on_sigterm()
    tls = D.Tls() if insecure else D.Tls.from_dir(certs_dir)
    if not insecure and not pubs:
        pubs = sorted(Path(certs_dir).glob("*.pub"))
        if not pubs:
            raise TinyolError(f"no SuperNode public keys (*.pub) in {certs_dir}",
                              hint=f"tinyol certs {certs_dir} --nodes N, or --register PUB")
    echo = (lambda *a, **kw: None) if as_json else click.echo
    state_dir = Path(state_dir).resolve()
    log = Path(log).resolve() if log else state_dir / "fleet.jsonl"
    clocal = "127.0.0.1" if chost in ("0.0.0.0", "::", "") else chost
    if chost not in LOOPBACK:
        echo(f"warning: --control {control} is not loopback: whoever reaches it can register SuperNodes "
             "and start runs (Flower's Control API has no user authentication)", err=True)
    env = D.flwr_env(state_dir / "flwr-home", f"{clocal}:{cport}", tls)
    link = D.start_superlink(state_dir / "superlink", cport, tls, host=chost, auth=not insecure, env=env)
    gate = None
    records = []
    try:
        gate = D.start_gate(state_dir / "superlink", host, port, f"{clocal}:{cport}", tls, env=env)
        echo(f"SuperLink: gateways on {host}:{port} (Fleet API only), control on {chost}:{cport} "
             f"({'insecure' if insecure else 'TLS, SuperNode authentication'}), state {state_dir}")
        if pubs:
            for name, node_id in D.register_keys(f"{clocal}:{cport}", tls, list(pubs), env).items():
                echo(f"  registered {name}: node {node_id}")
        app = D.write_app(state_dir / "app")
        start = log.stat().st_size if log.is_file() else 0
        rc = {"model": str(Path(model).resolve()), "every": k, "rounds": rounds, "strategy": strategy,
              "server-lr": float(server_lr or 0.0), "min-boards": min_boards, "strict": strict,
              "eval": eval_spec, "state": str(state_dir / "fleet"), "log": str(log), "wait": wait_n,
              "round-timeout": round_timeout, "record-pulls": record_pulls, "save": save,
              "eval-every": eval_every, "in-flight": in_flight}
        run_id = D.start_run(app, env, rc, state_dir / "flwr-run.log")
        echo(f"run {run_id}: waiting for {wait_n} board{'s' if wait_n > 1 else ''}; {rounds} rounds of {k} samples, "
             f"strategy {strategy}")

        def show(rec):
            if rec.get("round") is not None and "boards" in rec:
                records.append(rec)
                from .fleet import _round_line
                echo(_round_line(rec) + f", {rec['seconds']:.1f} s")
            elif rec.get("event") == "resumed":
                echo(f"resuming after round {rec['round']}")
            elif rec.get("event") == "done":
                echo(f"done after round {rec['round']}; the aggregate pushed to {', '.join(rec['pushed_to']) or 'no board'}")
        D.follow(log, link, show, start=start)
    finally:
        D.stop_all([gate, link])
    if as_json:
        emit_json({"rounds": len(records), "records": records})


# --------------------------------------------------------------------------- gateway
@click.command("gateway")
@click.option("--superlink", required=True, metavar="HOST:PORT", help="The SuperLink (tinyol superlink --listen).")
@click.option("--port", "-p", "ports", multiple=True, metavar="URL", help="A board's serial port (repeat).")
@click.option("--emulate", type=click.IntRange(1, 64), default=None, metavar="N",
              help="Start N native emulated boards here and serve them (CI, demos).")
@click.option("--twins", type=click.IntRange(1, 1000), default=None, metavar="N", help="N numpy twins (no boards).")
@click.option("--key", "keys", multiple=True, type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="A SuperNode private key (tinyol certs NAME.key), one per board, in order.")
@click.option("--ca", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The CA that signed the SuperLink's certificate (tinyol certs' ca.pem).")
@click.option("--insecure", is_flag=True, help="No TLS, no authentication (only with tinyol superlink --insecure).")
@model_option()
@click.option("--data", "-d", default="digits:5-9@train", show_default=True, metavar="SOURCE",
              help="This gateway's local data (tinyol stream's sources); it never leaves the gateway.")
@click.option("--split", default="iid", show_default=True, help="How --parts deals --data out (iid, classes:C).")
@click.option("--parts", type=click.IntRange(1), default=1, show_default=True,
              help="Deal --data into this many parts ...")
@click.option("--part", "first_part", type=click.IntRange(0), default=0, show_default=True,
              help="... and give this gateway's boards parts P, P+1, ... (one each).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--prefill", default=None, metavar="SOURCE", help="Put samples of this source into every board's "
              "replay buffer when it first joins (as tinyol fleet --prefill).")
@click.option("--prefill-n", type=click.IntRange(1), default=100, show_default=True)
@click.option("--learn", "learn_mode", type=click.Choice(["sgd", "replay"]), default=None)
@click.option("--name", "names", multiple=True, metavar="NAME",
              help="Each board's name in the fleet (repeat; default: the key's name, else HOST-board<i>).")
@click.option("--state", "state_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Where each board's stream position (and emulated boards' flash) is kept.")
def cmd_gateway(superlink, ports, emulate, twins, keys, ca, insecure, model, data, split, parts, first_part, seed,
                prefill, prefill_n, learn_mode, names, state_dir):
    """A gateway: one Flower SuperNode per board on this machine, connected to the
    SuperLink over TLS and authenticated with its key; each runs tinyol's ClientApp on
    its board and this gateway's data. Runs until interrupted.

    \b
    Examples:
      tinyol gateway --superlink fleet.example.org:9092 --ca ca.pem --state gw/ \\
          --port /dev/ttyACM0 --key board0.key --port /dev/ttyACM1 --key board1.key
      tinyol gateway --superlink 127.0.0.1:9092 --ca fleet-certs/ca.pem --state gw/ --emulate 3 \\
          --key fleet-certs/board0.key --key fleet-certs/board1.key --key fleet-certs/board2.key
    """
    from .. import fleet as F
    from ..fleet import deploy as D
    from ..targets.emulator import free_port
    F.require_flower()
    _hostport(superlink)
    D.exit_on_sigterm()
    chosen = [x for x in (bool(ports), emulate, twins) if x]
    if len(chosen) != 1:
        raise TinyolError("choose the boards: --port URL (repeated), --emulate N or --twins N")
    n = len(ports) or emulate or twins
    if insecure and (ca is not None or keys):
        given = " ".join(f for f, v in (("--ca", ca is not None), ("--key", bool(keys))) if v)
        raise TinyolError(f"--insecure and {given} exclude each other: --insecure turns TLS and "
                          "authentication off", hint="leave out one or the other")
    if insecure:
        tls = D.Tls()
    else:
        if ca is None:
            raise TinyolError("TLS needs the CA that signed the SuperLink's certificate: --ca ca.pem",
                              hint="or --insecure, if the SuperLink runs with --insecure")
        if len(keys) != n:
            raise TinyolError(f"{n} boards need {n} keys (--key FILE, one per board), got {len(keys)}",
                              hint="tinyol certs DIR --nodes N makes them; the SuperLink registers the .pub files")
        tls = D.Tls(Path(ca).resolve())
    if names and len(names) != n:
        raise TinyolError(f"{n} boards need {n} --name, got {len(names)}")
    if first_part + n > parts:
        raise TinyolError(f"parts {first_part}..{first_part + n - 1} of --parts {parts} do not exist")
    state_dir = Path(state_dir).resolve()
    me = socket.gethostname().split(".")[0]
    names = list(names) or [Path(keys[i]).stem if keys else f"{me}-board{i}" for i in range(n)]
    pool = None
    nodes = []
    try:
        if emulate:
            from .fleet import EmulatedPool
            pool = EmulatedPool(n, model, state_dir=state_dir)
            urls = pool.urls
        else:
            urls = [resolve_port(u) for u in ports]
        for i in range(n):
            nc = {"name": names[i], "model": str(Path(model).resolve()), "data": data, "split": split,
                  "parts": parts, "part": first_part + i, "seed": seed, "state": str(state_dir / "nodes")}
            if twins:
                nc["twin"] = 1
            else:
                nc["port"] = urls[i]
            if prefill:
                nc.update({"prefill": prefill, "prefill-n": prefill_n})
            if learn_mode:
                nc["learn"] = learn_mode
            key = Path(keys[i]).resolve() if keys else None
            nodes.append(D.start_supernode(superlink, names[i], nc, free_port(), state_dir / "logs" / f"{names[i]}.log",
                                           tls=tls, key=key))
            click.echo(f"{names[i]}: {urls[i] if not twins else 'numpy twin'}, part {first_part + i} of {parts}")
        click.echo(f"gateway {me}: {n} SuperNode{'s' if n > 1 else ''} for {superlink} "
                   f"({'insecure' if insecure else 'TLS, authenticated'}); Ctrl-C stops")
        for node in nodes:
            try:
                click.echo(f"  {node.name}: node {D.node_started(node)}")
            except TinyolError as e:
                click.echo(f"  {node.name}: refused or gone: {e}", err=True)
        D.supervise(nodes, pool, on_event=lambda msg: click.echo(msg, err=True))
    finally:
        D.stop_all(nodes)
        if pool is not None:
            pool.stop()

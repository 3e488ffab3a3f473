"""The generated reliability suite (issue 25, docs/reliability.md): every verb of the CLI,
enumerated from its click command tree, run with a table of bad inputs.

New verbs and new options join by default: the cases are made from each parameter's click
type and name (a path to read or to write, a folder, a number with or without a range, a
choice, a serial port, a model folder, a data source). Each case that must fail asserts:
a non-zero exit, at most a few lines on stderr, no traceback, nothing left behind (the
sandbox folder the verb runs in, and the temporary folder, are as they were), and the
shared native device's state unchanged (STATS and its head, read with GET_HEAD). A case
whose value may be legitimate (a huge seed) asserts only "no traceback, nothing left
behind". Verbs run in-process (tinyol.cli.main); one native device serves the module.

Device conditions (gone, fenced by a cut push, running another model) are a second table.
Each case must finish within ALARM_S: a verb that starts acting on a bad input instead of
refusing it (a build, an emulator) is reported, not waited for.
"""
from __future__ import annotations

import hashlib
import signal
import struct
import tempfile
from pathlib import Path

import click
import pytest
from conftest import ROOT
from tinyol._defs import Msg
from tinyol.checks import Number
from tinyol.cli import group, main
from tinyol.link.device import Device
from tinyol.targets import emulator

pytestmark = pytest.mark.slow  # ~500 cases, some import TensorFlow: `make test`, not test-fast

MODEL = str(ROOT / "models" / "digits")
ALARM_S = 60

# a verb's base arguments: valid and cheap, so that a bad value is the only thing wrong
# (a verb without an entry runs with the bad value alone: it joins the suite by default)
BASE = {
    "init": ["{sandbox}/newproject"],
    "export": [f"{MODEL}/digits.keras", "--out", "{sandbox}/exported"],
    "build": ["--board", "native", "--model", MODEL],
    "flash": ["--board", "nucleo_l476rg", "--model", MODEL, "--port", "{gone}"],
    "emulate": ["--emulator", "native", "--model", MODEL],
    "info": ["--port", "{url}"],
    "stream": ["--port", "{url}", "--model", MODEL, "--data", "digits:5-9@train", "--limit", "3",
               "--predict", "--no-progress"],
    "simulate": ["--model", MODEL, "--data", "digits:5-9@train"],
    "verify": ["--port", "{url}", "--model", MODEL, "-n", "2"],
    "save": ["--port", "{url}"],
    "load": ["--port", "{url}"],
    "pull": ["--port", "{url}", "--out", "{sandbox}/pulled.npz"],
    "push": ["--port", "{url}", "--in", f"{MODEL}/head_init.npz"],
    "set": ["--port", "{url}"],
    "reset": ["--port", "{url}"],
    "compare": ["{good_log}", "{good_log}"],
    "fleet": ["--twins", "2", "--rounds", "1", "--every", "5", "--eval", "", "--model", MODEL],
}

# parameters known by role (their name); every other one is judged by its click type
PORTS = {"port", "ports"}
MODEL_DIRS = {"model", "model_dir"}
SOURCES = {"data", "prefill", "calib", "eval_spec", "prefill_spec"}
OUT_FILES = {"log", "plot", "out"}
OUT_DIRS = {"state", "state_dir", "out_dir", "directory"}
IN_FILES = {"log_a", "log_b", "resume", "inp", "model"}

ODD_OUT_FILES = [("missing-folder", "{sandbox}/missing/x.out"), ("a-folder", "{dir}"),
                 ("system", "/proc/tinyol/x.out"), ("under-a-file", "{file}/x.out")]
ODD_OUT_DIRS = [("a-file", "{file}"), ("system", "/proc/tinyol-dir"), ("under-a-file", "{file}/sub")]
ODD_IN_FILES = [("missing", "{sandbox}/nope.jsonl"), ("a-folder", "{dir}"), ("binary", "{binary}"),
                ("empty", "{empty}"), ("truncated", "{truncated}")]
ODD_MODELS = [("missing", "{sandbox}/nope"), ("a-file", "{file}"), ("empty-folder", "{dir}"),
              ("binary-manifest", "{badmodel}")]
ODD_SOURCES = [("missing", "{sandbox}/nope.csv"), ("binary", "{binary_csv}"), ("empty", "{empty}"),
               ("truncated", "{truncated}"), ("no-classes", "digits:99-100")]
ODD_PORTS = [("gone", "{gone}"), ("not-a-url", "nowhere://x"), ("a-file", "{file}")]


def bad_values(name: str, param: click.Parameter) -> list[tuple[str, str, bool]]:
    """(label, value, must_fail) for one parameter."""
    t = param.type
    if name in PORTS:
        return [(lab, v, True) for lab, v in ODD_PORTS]
    if isinstance(t, click.Path) and not t.dir_okay or name in IN_FILES - MODEL_DIRS:
        if name in OUT_FILES or (isinstance(t, click.Path) and not t.exists and name not in IN_FILES):
            return [(lab, v, True) for lab, v in ODD_OUT_FILES]
        return [(lab, v, True) for lab, v in ODD_IN_FILES]
    if name in MODEL_DIRS:
        return [(lab, v, True) for lab, v in ODD_MODELS]
    if name in SOURCES:
        return [(lab, v, True) for lab, v in ODD_SOURCES]
    if name in OUT_DIRS or isinstance(t, click.Path) and not t.file_okay:
        return [(lab, v, True) for lab, v in ODD_OUT_DIRS]
    if name in OUT_FILES:
        return [(lab, v, True) for lab, v in ODD_OUT_FILES]
    if isinstance(t, click.Choice):
        return [("bogus", "bogus-choice", True)]
    if isinstance(t, (click.IntRange, click.FloatRange)):
        out = [("nan", "nan", True), ("text", "many", True)]
        if t.min is not None:
            out.append(("below-min", str(t.min - 1), True))
        if t.max is not None:
            out.append(("above-max", str(t.max + 1), True))
        else:
            out.append(("huge", "1" + "0" * 30, False))
        return out
    if t is click.INT:
        return [("text", "many", True), ("fraction", "1.5", True), ("huge", "1" + "0" * 30, False),
                ("negative", "-1", False)]
    if isinstance(t, Number):
        out = [("nan", "nan", True), ("-inf", "-inf", True), ("text", "many", True)]
        if t.min is not None:
            out.append(("below-min", str(t.min - 1), True))
        if t.max is not None:
            out.append(("above-max", str(t.max * 2 + 1), True))
        elif t.f32:
            out.append(("beyond-float32", "1e39", True))
        return out
    if t is click.FLOAT:
        return [("nan", "nan", True), ("-inf", "-inf", True), ("text", "many", True),
                ("negative", "-1", False), ("huge", "1e308", False)]
    return []  # a free-form string: no generic bad value


def _params(cmd: click.Command):
    for p in cmd.params:
        if isinstance(p, click.Option) and (p.is_flag or p.count or p.hidden):
            continue
        yield p


def generated_cases():
    ctx = click.Context(group)
    for verb in group.list_commands(ctx):
        cmd = group.get_command(ctx, verb)
        for p in _params(cmd):
            for label, value, must in bad_values(p.name, p):
                yield pytest.param(verb, p.name, value, must, id=f"{verb}-{p.name}-{label}")


CASES = list(generated_cases())


def argv_for(verb: str, param: str, value: str) -> list[str]:
    """The verb's base arguments with `param` set to `value` (an option replaced or added,
    or a positional argument put in its place)."""
    cmd = group.get_command(click.Context(group), verb)
    p = next(x for x in cmd.params if x.name == param)
    base = list(BASE.get(verb, []))
    if isinstance(p, click.Argument):
        pos = [x.name for x in cmd.params if isinstance(x, click.Argument)]
        i = pos.index(param)
        opts_at = next((k for k, a in enumerate(base) if a.startswith("-")), len(base))
        args, rest = base[:opts_at], base[opts_at:]
        while len(args) < len(pos):
            args.append("x")
        args[i] = value
        return [verb, *args, *rest]
    flag = max(p.opts, key=len)
    out, k = [], 0
    while k < len(base):
        if base[k] in p.opts:
            k += 2
            continue
        out.append(base[k])
        k += 1
    return [verb, *out, flag, value]


# ---- the shared world: one device, a sandbox with odd files --------------------------------
class Overran(BaseException):
    pass


@pytest.fixture(scope="module")
def world(firmware, tmp_path_factory):
    sandbox = tmp_path_factory.mktemp("sandbox")
    (sandbox / "file").write_text("not what you think\n")
    (sandbox / "dir").mkdir()
    (sandbox / "binary").write_bytes(bytes(range(256)) * 4)
    (sandbox / "binary.csv").write_bytes(b"\x00\xff\xfe" * 300)
    (sandbox / "empty").write_bytes(b"")
    npz = Path(MODEL, "head_init.npz").read_bytes()
    (sandbox / "truncated").write_bytes(npz[: len(npz) // 2])
    (sandbox / "badmodel").mkdir()
    (sandbox / "badmodel" / "manifest.json").write_bytes(b"\x89\x00\xffmanifest")
    (sandbox / "good.jsonl").write_text('{"index": 0, "prediction": 1, "label": 1}\n')
    tmp = sandbox / "tmp"
    tmp.mkdir()
    gone = emulator.free_port()  # nothing listens there
    fw = firmware("native", model="models/digits")
    with emulator.start_native(fw.program, timeout=900) as t:
        yield {"sandbox": str(sandbox), "file": str(sandbox / "file"), "dir": str(sandbox / "dir"),
               "binary": str(sandbox / "binary"), "binary_csv": str(sandbox / "binary.csv"),
               "empty": str(sandbox / "empty"), "truncated": str(sandbox / "truncated"),
               "badmodel": str(sandbox / "badmodel"), "good_log": str(sandbox / "good.jsonl"),
               "gone": f"socket://127.0.0.1:{gone}", "url": t.url, "tmp": str(tmp)}


def device_state(url: str) -> tuple:
    """STATS counters and a digest of the head (GET_HEAD): what a bad input must not change."""
    with Device.open(url, timeout=2.0) as dev:
        st = dev.stats()
        w, b, active = dev.get_head()
    h = hashlib.sha256(w.tobytes() + b.tobytes() + active.tobytes()).hexdigest()[:16]
    return (st.samples_seen, st.updates, st.n_active, tuple(st.class_counts or ()), h)


def tree(root: str) -> dict[str, bytes]:
    out = {}
    for p in sorted(Path(root).rglob("*")):
        out[str(p)] = p.read_bytes() if p.is_file() else b"<dir>"
    return out


def run_case(world, argv, monkeypatch, capsys):
    argv = [a.format(**world) for a in argv]
    monkeypatch.chdir(world["sandbox"])
    monkeypatch.setattr(tempfile, "tempdir", world["tmp"])
    monkeypatch.setenv("TMPDIR", world["tmp"])

    def overran(*_):
        raise Overran(f"still running after {ALARM_S} s: it acted on the bad input instead of refusing it")

    old = signal.signal(signal.SIGALRM, overran)
    signal.alarm(ALARM_S)
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    out = capsys.readouterr()
    return argv, code, out.out, out.err


def check_refused(argv, code, out, err):
    shown = f"tinyol {' '.join(argv)}\nexit {code}\nstdout: {out[-600:]}\nstderr: {err[-1500:]}"
    assert "Traceback" not in err and "Traceback" not in out, shown
    assert code not in (0, None), shown
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert 1 <= len(lines) <= 4, shown  # error + hint, or click's usage + try + error


KNOWN: dict[str, tuple] = {}  # the device's state after the last case (read once, not per case)


@pytest.mark.parametrize("verb, param, value, must_fail", CASES)
def test_bad_input(world, verb, param, value, must_fail, monkeypatch, capsys):
    uses_device = any("{url}" in a for a in BASE.get(verb, []))
    before_dev = None
    if uses_device and must_fail:
        before_dev = KNOWN.get("state") or device_state(world["url"])
    before = tree(world["sandbox"])
    argv, code, out, err = run_case(world, argv_for(verb, param, value), monkeypatch, capsys)
    assert "Traceback" not in err, f"tinyol {' '.join(argv)}\n{err[-2000:]}"
    if not must_fail:
        KNOWN.clear()  # a legitimate run may have changed the device
        return
    check_refused(argv, code, out, err)
    assert tree(world["sandbox"]) == before, f"tinyol {' '.join(argv)} left something behind or changed a file"
    if before_dev is not None and code != 2:  # 2: click refused the arguments, the verb never ran
        after = device_state(world["url"])
        assert after == before_dev, f"tinyol {' '.join(argv)} changed the device"
        KNOWN["state"] = after


def test_every_verb_is_in_the_table():
    """New verbs join by default; this names the ones that have no base arguments yet (they
    still run, with the bad value alone) and fails if a verb has no case at all."""
    ctx = click.Context(group)
    verbs = group.list_commands(ctx)
    covered = {c.values[0] for c in CASES}
    assert set(verbs) - {"demo", "bench"} <= covered, sorted(set(verbs) - covered)
    assert len(CASES) >= 200, len(CASES)


# ---- device conditions ----------------------------------------------------------------------
def fence(url) -> None:
    with Device.open(url) as dev:
        d = dev.info.latent_dim
        dev.link.request(Msg.SET_HEAD, struct.pack("<HHBBHf", 0, 0, 1, 1, d, 0.0) + bytes(4 * d))


FENCED = [
    ["stream", "--port", "{url}", "--model", MODEL, "--data", "digits:5-9@train", "--limit", "4", "--no-progress"],
    ["stream", "--port", "{url}", "--model", MODEL, "--data", "digits@test", "--limit", "4", "--eval",
     "--no-progress"],
    ["stream", "--port", "{url}", "--model", MODEL, "--data", "digits@test", "--limit", "4", "--predict",
     "--no-progress"],
    ["save", "--port", "{url}"],
    ["verify", "--port", "{url}", "--model", MODEL, "-n", "2"],
]


@pytest.mark.parametrize("argv", FENCED, ids=lambda a: "-".join(a[:1] + [x for x in a if x.startswith("--")][-2:]))
def test_a_fenced_device_is_refused(world, argv, monkeypatch, capsys):
    KNOWN.clear()
    with Device.open(world["url"]) as dev:
        dev.reset()
    fence(world["url"])
    try:
        before = device_state(world["url"])
        argv, code, out, err = run_case(world, argv, monkeypatch, capsys)
        if argv[0] == "verify" and code == 0:
            return  # EMBED runs the frozen backbone only: a fenced head does not matter
        check_refused(argv, code, out, err)
        assert device_state(world["url"]) == before
    finally:
        with Device.open(world["url"]) as dev:
            dev.reset()


@pytest.fixture(scope="module")
def other_model_url(firmware):
    with emulator.start_native(firmware("native", model="models/digits_adaptive").program,
                               timeout=900) as t:
        yield t.url


OTHER_MODEL = [
    ["stream", "--port", "{other}", "--model", MODEL, "--data", "digits:5-9@train", "--limit", "4",
     "--no-progress"],
    ["push", "--port", "{other}", "--in", f"{MODEL}/head_init.npz"],
    ["verify", "--port", "{other}", "--model", MODEL, "-n", "2"],
]


@pytest.mark.parametrize("argv", OTHER_MODEL, ids=lambda a: a[0])
def test_a_device_of_another_model_is_refused(world, other_model_url, argv, monkeypatch, capsys):
    before = device_state_any(other_model_url)
    argv, code, out, err = run_case({**world, "other": other_model_url}, argv, monkeypatch, capsys)
    check_refused(argv, code, out, err)
    assert device_state_any(other_model_url) == before


def device_state_any(url):
    with Device.open(url, timeout=2.0) as dev:
        st = dev.stats()
        stage = dev.get_stage() if dev.info.stage_layers else b""
    return st.samples_seen, st.updates, hashlib.sha256(stage).hexdigest()[:16]


def test_the_sweep_is_large_enough():
    """The issue's sweep: 200+ bad inputs. The count is printed for docs/reliability.md."""
    n_fail = sum(1 for c in CASES if c.values[3])
    print(f"\n{len(CASES)} generated cases ({n_fail} must fail) + {len(FENCED)} fenced + "
          f"{len(OTHER_MODEL)} other-model")
    assert n_fail >= 200

"""The house rules of host/tinyol that a reader relies on (issue 21), checked on the source:
one error root, no import circle, subpackages layered (none imports one above it), one reader of
manifest.json, one owner of resuming a stream, subpackages cheap to import."""
from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import tinyol
from tinyol.errors import TinyolError

PKG = Path(tinyol.__file__).parent
MODULES = sorted(PKG.rglob("*.py"))


def _name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    return ".".join(p for p in rel.parts if p != "__init__")


def test_every_error_class_derives_from_tinyol_error():
    """Anything the package raises for a user to see is a TinyolError (one line + exit code)."""
    found = []
    for m in pkgutil.walk_packages(tinyol.__path__, "tinyol."):
        if m.name.endswith("__main__"):
            continue
        mod = importlib.import_module(m.name)
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if cls.__module__ == mod.__name__ and issubclass(cls, BaseException):
                found.append(cls)
    assert len(found) >= 8, found  # DeviceError, LinkTimeout, ..., LearnerError, Unsupported
    stray = [f"{c.__module__}.{c.__qualname__}" for c in found if not issubclass(c, TinyolError)]
    assert not stray, f"error classes outside the TinyolError root: {stray}"


def _imports(path: Path) -> set[str]:
    """tinyol modules imported by `path`, at module top or inside functions (a lazy import
    hides a circle from Python, not from the reader)."""
    me = _name(path).split(".")
    pkg = me if path.name == "__init__.py" else me[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = pkg[:len(pkg) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.add(sub if (PKG.parent / (sub.replace(".", "/") + ".py")).exists() else target)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("tinyol.")}
    return out - {_name(path)}


def test_no_import_circle():
    graph = {_name(p): _imports(p) for p in MODULES}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                raise AssertionError("import circle: " + " -> ".join(stack[stack.index(m):] + [m]))
            if m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    assert "tinyol.link.protocol" in graph["tinyol.link.device"]  # the walk sees real edges


def test_only_model_folder_reads_the_manifest():
    reads = re.compile(r"""(manifest\.json["']\)?|MANIFEST\))\.read_(text|bytes)|json\.load\(open\([^)]*manifest""")
    assert reads.search('json.loads((model_dir / "manifest.json").read_text())')  # the pattern bites
    readers = [p.relative_to(PKG).as_posix() for p in MODULES
               if p.relative_to(PKG).as_posix() != "model/folder.py" and reads.search(p.read_text())]
    assert not readers, f"read manifest.json through tinyol.model.folder, not directly: {readers}"


#: What resuming an interrupted stream is made of (issue 35: it had two owners, the command and
#: link/stream.py, and a per-sample closure between them). One module owns every piece of it.
RESUME_OWNER = "link/resume.py"
RESUME_NAMES = {"WAL_SUFFIX", "Journal", "RunLog", "Resume", "Resumed", "reconcile", "resend_pending",
                "check_same_device", "check_resumed", "WriteAhead", "resume_session"}


def test_resume_has_one_owner():
    """Only tinyol.link.resume defines the journal, the write-ahead log, the reconciliation,
    the same-device checks and the resends, or names the WAL file; the stream and its pipeline
    are handed one journal object (no write-ahead callbacks); the command writes no file."""
    owners: dict[str, list[str]] = {}
    for p in MODULES:
        tree = ast.parse(p.read_text())
        rel = p.relative_to(PKG).as_posix()
        for node in tree.body:
            names = ([node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else
                     [t.id for t in node.targets if isinstance(t, ast.Name)] if isinstance(node, ast.Assign)
                     else [])
            for n in names:
                if n in RESUME_NAMES or n.lstrip("_") in RESUME_NAMES:
                    owners.setdefault(n, []).append(rel)
        wal = [c.value for c in ast.walk(tree) if isinstance(c, ast.Constant) and c.value == ".wal"]
        if wal:
            owners.setdefault(".wal", []).append(rel)
        callbacks = [a.attr for a in ast.walk(tree) if isinstance(a, ast.Attribute)
                     and a.attr in ("on_send", "on_check")]
        if callbacks:
            owners.setdefault("on_send/on_check", []).append(rel)
    strays = {n: where for n, where in owners.items() if where != [RESUME_OWNER]}
    assert not strays, f"resume has one owner, {RESUME_OWNER}: {strays}"
    assert set(owners) >= {"WAL_SUFFIX", "RunLog", "Resume", "reconcile", ".wal"}, owners  # it bites
    cmd = ast.parse((PKG / "commands/stream.py").read_text())
    opens = [c.lineno for c in ast.walk(cmd) if isinstance(c, ast.Call)
             and isinstance(c.func, ast.Name) and c.func.id == "open"]
    assert not opens, f"commands/stream.py opens files (lines {opens}): the journal is link.resume's"


def _defining(pattern: str) -> list[str]:
    return sorted(p.relative_to(PKG).as_posix() for p in MODULES if re.search(pattern, p.read_text(), re.M))


def test_one_flatbuffer_reader_one_tflm_arena_one_memory_plan():
    """Issue 35: one concept, one home. .tflite files are read by model/tflite.py alone (without
    TensorFlow), TFLM's arena is measured by codegen alone, and an export's memory plan (fit
    check, replay capacity, budget) lives in model/plan.py, asked of tinyol.memory."""
    schema = r"schema_py_generated|InitFromPackedBuf|GetRootAsModel"
    assert re.search(schema, "s.ModelT.InitFromPackedBuf(bytearray(data), 0)")  # the pattern bites
    assert _defining(schema) == ["model/tflite.py"]
    assert _defining(r"^def tflm_arena_bytes\(") == ["model/codegen.py"]
    for fn in ("memory_model", "budget", "board_plan", "check_fit", "choose_replay_capacity", "warn_store"):
        assert _defining(rf"^def {fn}\(") == ["model/plan.py"], fn


#: host/tinyol's floors, bottom up (README, "host/tinyol, package by package"): a module may import
#: its own floor and the floors below it, never one above.
LAYERS = ["base", "data", "learn", "model", "targets", "link", "fleet", "bench", "cli"]


def _floor(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] in LAYERS:
        return parts[1]
    if parts[1:2] == ["commands"] or module == "tinyol.cli":
        return "cli"
    return "base"   # tinyol, tinyol.errors, tinyol.paths, ... and the subpackages' own names


def test_subpackages_are_layered():
    assert _floor("tinyol.link.device") == "link" and _floor("tinyol.commands.stream") == "cli"
    up = []
    for p in MODULES:
        me = _name(p)
        for dep in _imports(p):
            if LAYERS.index(_floor(dep)) > LAYERS.index(_floor(me)) and not dep.endswith(("._lazy", "tinyol")):
                up.append(f"{me} imports {dep}")
    assert not up, "imports running up the floors: " + "; ".join(up)
    pkgs = {p.parent.name for p in MODULES if p.name == "__init__.py" and p.parent != PKG}
    assert pkgs == set(LAYERS[1:-1]) | {"commands"}, pkgs


STUDIES = PKG.parents[1] / "studies"


def _study_imports(source: str) -> list[str]:
    """The tinyol_studies modules a module's source imports (at module top or inside functions)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out += [node.module] if node.module.split(".")[0] == "tinyol_studies" else []
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.split(".")[0] == "tinyol_studies"]
    return out


def test_the_product_never_imports_the_studies():
    """The studies (studies/tinyol_studies/) use tinyol as a user does; tinyol imports none of
    them (they are not in the wheel: a verb that needed one would fail for every user)."""
    probe = "def f():\n    from tinyol_studies import zoo\nimport tinyol_studies.depth as D\n"
    assert sorted(_study_imports(probe)) == ["tinyol_studies", "tinyol_studies.depth"]  # it bites
    found = {_name(p): _study_imports(p.read_text()) for p in MODULES}
    assert not {k: v for k, v in found.items() if v}, found
    studies = sorted((STUDIES / "tinyol_studies").glob("*.py"))
    assert len(studies) >= 10 and not (PKG / "studies").exists()


def _packaged(where: list[str]) -> set[str]:
    from setuptools import find_packages
    root = PKG.parents[1]
    return {p for w in where for p in find_packages(str(root / w))}


def test_the_wheel_ships_no_study():
    """The wheel's Python packages are what pyproject.toml's package discovery finds (setup.py
    adds only mcu/, models/, examples/ as firmware data): tinyol and its subpackages, no study.
    Checked on the configuration itself; the finder sees a study package when pointed at it."""
    import tomllib
    root = PKG.parents[1]
    conf = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    where = conf["packages"]["find"]["where"]
    assert "tinyol_studies" in _packaged(where + ["studies"])  # the check bites
    shipped = _packaged(where)
    assert "tinyol.bench" in shipped and "tinyol.model" in shipped, shipped
    assert all(p == "tinyol" or p.startswith("tinyol.") for p in shipped), shipped
    assert not [p for p in shipped if "studies" in p.split(".")], shipped
    assert set(conf["package-dir"].values()) == {"host"}, conf["package-dir"]
    setup_py = (root / "setup.py").read_text()
    firmware = ast.literal_eval(re.search(r"^FIRMWARE = (\[.*\])", setup_py, re.M).group(1))
    assert firmware and "studies" not in firmware, firmware


def test_subpackages_state_their_names_and_import_nothing_heavy():
    """Each subpackage lists its public names; importing all of them loads neither TensorFlow
    nor Flower nor any of their modules (tinyol info and --help stay fast)."""
    import subprocess
    import sys
    code = ("import sys, importlib\n"
            f"for s in {LAYERS[1:-1]!r}:\n"
            "    m = importlib.import_module('tinyol.' + s)\n"
            "    assert m.__all__, s\n"
            "    for n in m.__all__: assert n in dir(m), (s, n)\n"
            "print(sorted(k for k in sys.modules if k.startswith('tinyol.')))\n"
            "print('tensorflow' in sys.modules, 'flwr' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded, heavy = out.strip().splitlines()
    assert heavy == "False False", out
    assert "tinyol.link.device" not in loaded and "tinyol.learn.learner" not in loaded, loaded
    # ... and each name resolves to where the table says, in a fresh interpreter
    for sub in LAYERS[1:-1]:
        mod = importlib.import_module("tinyol." + sub)
        for name in mod.__all__:
            obj = getattr(mod, name)
            assert getattr(obj, "__module__", "").startswith(f"tinyol.{sub}.") or not callable(obj), (sub, name)


def test_head_learner_and_stage_write_what_they_share_once():
    """What the head learner and the adaptive stage share has one owner (issue 21's repeated
    runs): the configuration fields and their checks (learner.OnlineConfig), set-up, reset,
    settings, the update on queue + replay (learner.OnlineLearner); in C the fields every
    state header holds go through tol_state (put_core / check_core / get_core), latents
    through tol_learner_dequantize / tol_learner_finite, every convolution window through
    tol_stage_win_. Checked on the source: cheap and deterministic."""
    from tinyol.learn.learner import Config, Learner, OnlineConfig, OnlineLearner
    from tinyol.learn.stage import Stage, StageConfig

    shared = set(OnlineConfig.__annotations__) - {"_"}
    assert {"replay_capacity", "max_new", "settings", "seed"} <= shared, shared
    for cfg in (Config, StageConfig):
        again = shared & set(vars(cfg).get("__annotations__", {}))
        assert issubclass(cfg, OnlineConfig) and not again, (cfg.__name__, again)
    owned = {"_setup", "_reset_common", "_update", "_grad_add_replayed", "learn", "replay_add_f",
             "stats"}
    for lrn in (Learner, Stage):
        redone = owned & set(vars(lrn))
        assert issubclass(lrn, OnlineLearner) and not redone, (lrn.__name__, redone)
    assert "set_settings" not in vars(Stage)  # the head adds its anomaly threshold, the stage nothing

    src = PKG.parents[1] / "mcu" / "src"
    for name in ("tol_learner.c", "tol_stage.c"):
        text = (src / name).read_text()
        for call in ("tol_state_put_core(", "tol_state_check_core(", "tol_state_get_core("):
            assert text.count(call) == 1, (name, call)
        # no private copy of the latent helpers (a float array's finite check, a dequantize loop)
        assert not re.search(r"static int \w*finite\w*\(const float \*", text), name
        assert not re.search(r"\(float\)\(\(int32_t\)q\[j\]", text), name
    stage = (src / "tol_stage.c").read_text()
    assert stage.count("tol_stage_taps_(") == 3, "a window computed outside tol_stage_win_"


# A repository path as docs and comments name it: a top-level folder, then path characters; a
# pattern (`board_<name>.c`, `tol_*.c`, an f-string's `{name}`) is no path.
_PATH_REF = re.compile(r"(?<![\w./<>-])((?:host/tinyol|studies|mcu|tests|docs|models|scripts|examples|\.ci)"
                       r"/[\w./-]*[\w])(?![\w./-]*[<*{$])")
# Names that stand for the reader's own files in examples, never for ours.
_PLACEHOLDERS = ("models/mine", "models/my_model", "models/nope", "models/old", "models/x")
_TEXT = (".md", ".c", ".h", ".py", ".ini", ".toml", ".sh", ".resc", ".repl", ".robot", "Makefile")


def _named_path_exists(root: Path, ref: str) -> bool:
    ref = ref.rstrip(".")
    if (root / ref).exists() or any(ref == p or ref.startswith(p + "/") for p in _PLACEHOLDERS):
        return True
    # `tests/_stream_util.CPort`: a module path followed by a name in it
    m = re.fullmatch(r"(.+)\.[A-Za-z_]\w*", ref)
    return bool(m) and (root / (m.group(1) + ".py")).exists()


def test_every_path_named_in_docs_and_comments_exists():
    """A path a README line, a doc or a comment names is where it says (moved files leave no stale
    pointer): every `host/tinyol/...`, `mcu/...`, `tests/...`, `docs/...`, `models/...` reference in
    the tracked text files exists in the checkout."""
    import subprocess
    root = PKG.parents[1]
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.split()
    stale = {}
    for f in tracked:
        if not f.endswith(_TEXT) or not (root / f).is_file():
            continue
        for m in _PATH_REF.finditer((root / f).read_text(errors="replace")):
            if not _named_path_exists(root, m.group(1)):
                stale.setdefault(m.group(1), set()).add(f)
    assert len(tracked) > 300  # the listing worked
    assert not stale, "paths named but absent:\n" + "\n".join(
        f"  {p}  (in {', '.join(sorted(fs)[:3])})" for p, fs in sorted(stale.items()))


def test_readme_is_two_screens_and_every_doc_link_resolves():
    """The front door stays short (the details live in docs/, indexed by docs/index.md), and every
    relative link in the README and in docs/ reaches a file that exists."""
    root = PKG.parents[1]
    readme = (root / "README.md").read_text()
    assert len(readme.splitlines()) <= 200, "README.md is past two screens: move detail to docs/"
    for must in ("make demo", "make test", "docs/index.md", "docs/architecture.md"):
        assert must in readme, must
    broken = []
    for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            target = target.split("#")[0]
            if not target or re.match(r"[a-z]+:", target):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(root)} -> {target}")
    assert not broken, broken
    indexed = set(re.findall(r"\]\(([\w-]+\.md)\)", (root / "docs" / "index.md").read_text()))
    unlisted = sorted(p.name for p in (root / "docs").glob("*.md") if p.name != "index.md")
    assert not [n for n in unlisted if n not in indexed], "pages docs/index.md does not list"

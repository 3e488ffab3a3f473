"""The house rules of host/tinyol that a reader relies on (issue 21), checked on the source:
one error root, no import circle, one reader of manifest.json."""
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
    assert "tinyol.protocol" in graph["tinyol.device"]  # the walk sees real edges


def test_only_model_folder_reads_the_manifest():
    reads = re.compile(r"""(manifest\.json["']\)?|MANIFEST\))\.read_(text|bytes)|json\.load\(open\([^)]*manifest""")
    assert reads.search('json.loads((model_dir / "manifest.json").read_text())')  # the pattern bites
    readers = [p.relative_to(PKG).as_posix() for p in MODULES
               if p.name != "model_folder.py" and reads.search(p.read_text())]
    assert not readers, f"read manifest.json through tinyol.model_folder, not directly: {readers}"

"""Check before acting: the paths a verb will write, validated before it sends the first
frame or writes the first byte (docs/reliability.md).

Each check raises :class:`~tinyol.errors.TinyolError` with one line naming the option and
the path; nothing is created. A folder that does not exist yet is fine for an output
*folder* (it is made when the verb writes), as long as its nearest existing parent is a
writable folder; an output *file* needs its folder to exist already.
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import TinyolError

#: Folders of the operating system a tinyol output never goes into (even as root).
SYSTEM_DIRS = ("/proc", "/sys", "/dev", "/boot", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32",
               "/lib64", "/run", "/var/lib", "/var/run")


def _system(p: Path) -> str | None:
    s = str(p)
    for d in SYSTEM_DIRS:
        if s == d or s.startswith(d + "/"):
            return d
    return None


def _nearest_existing(p: Path) -> Path:
    q = p
    while not q.exists() and q != q.parent:
        q = q.parent
    return q


def _check_parent(p: Path, what: str, shown) -> None:
    sysdir = _system(p)
    if sysdir:
        raise TinyolError(f"{what} {shown}: inside the system folder {sysdir}",
                          hint="write somewhere of yours (a project folder, your home)")
    anc = _nearest_existing(p.parent)
    if not anc.is_dir():
        raise TinyolError(f"{what} {shown}: {anc} is a file, not a folder",
                          hint="choose a path whose folders are folders")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise TinyolError(f"{what} {shown}: the folder {anc} is not writable",
                          hint="write somewhere you may write")


def output_file(path, what: str) -> Path:
    """A file the verb will write: not a folder, in an existing writable folder, not a system one."""
    shown = path
    p = Path(os.path.abspath(Path(path).expanduser()))
    if p.is_dir():
        raise TinyolError(f"{what} {shown}: is a folder, not a file", hint="give a file name")
    if not p.parent.exists():
        _check_parent(p, what, shown)  # a file in its way, or a system folder, is named first
        raise TinyolError(f"{what} {shown}: folder {Path(path).parent} does not exist",
                          hint="create it first, or write somewhere else")
    _check_parent(p, what, shown)
    if p.exists() and not os.access(p, os.W_OK):
        raise TinyolError(f"{what} {shown}: the file is not writable", hint="write somewhere else")
    return p


def output_dir(path, what: str) -> Path:
    """A folder the verb will write into (made if missing): not a file, under a writable folder."""
    shown = path
    p = Path(os.path.abspath(Path(path).expanduser()))
    if p.exists() and not p.is_dir():
        raise TinyolError(f"{what} {shown}: is a file, not a folder", hint="give a folder")
    _check_parent(p / "x", what, shown)
    return p


# ---- numbers: refused by the option parser, before the verb runs ---------------------------
import math  # noqa: E402

import click  # noqa: E402

F32_MAX = 3.4028234663852886e38
U32_MAX = 0xFFFFFFFF


class Number(click.ParamType):
    """A finite float (NaN and +-Inf refused), optionally at least `min` (or above it, with
    `min_open`) and at most `max`; `f32`: it must fit a float32 (what the device stores)."""

    name = "number"

    def __init__(self, min: float | None = None, max: float | None = None, *, min_open: bool = False,
                 f32: bool = False):
        self.min, self.max, self.min_open, self.f32 = min, max, min_open, f32

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            v = float(value)
        else:
            try:
                v = float(str(value).strip())
            except ValueError:
                self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.f32 and abs(v) > F32_MAX:
            self.fail(f"{value!r} does not fit a float32 (|x| <= 3.4e38)", param, ctx)
        if self.min is not None and (v <= self.min if self.min_open else v < self.min):
            self.fail(f"{value!r} must be {'>' if self.min_open else '>='} {self.min:g}", param, ctx)
        if self.max is not None and v > self.max:
            self.fail(f"{value!r} must be <= {self.max:g}", param, ctx)
        return v

    def __repr__(self):
        return f"Number({self.min}, {self.max})"


#: a timeout in seconds: finite, positive, at most a day
TIMEOUT = Number(0.0, 86400.0, min_open=True)

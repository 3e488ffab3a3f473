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

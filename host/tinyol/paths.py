"""Where things are: the project checkout, build outputs, tools."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from .errors import TinyolError


def project_root() -> Path:
    """The tinyol checkout (the directory holding platformio.ini and mcu/).

    Looked up from the current directory upwards, then from this package's
    location (an editable install lives inside the checkout).
    """
    env = os.environ.get("TINYOL_ROOT")
    candidates = [Path(env)] if env else []
    cwd = Path.cwd().resolve()
    candidates += [cwd, *cwd.parents, *Path(__file__).resolve().parents]
    for c in candidates:
        if (c / "platformio.ini").is_file() and (c / "mcu").is_dir():
            return c
    raise TinyolError(
        "cannot find the tinyol checkout (platformio.ini + mcu/)",
        hint="run from inside the repository or set TINYOL_ROOT",
    )


def core_dir() -> Path:
    return Path(os.environ.get("PLATFORMIO_CORE_DIR") or project_root() / ".pio-core")


def pio_command() -> list[str]:
    """PlatformIO from this Python environment."""
    return [sys.executable, "-m", "platformio"]


def require_tool(name: str, install_hint: str) -> str:
    path = shutil.which(name)
    if not path:
        raise TinyolError(f"{name} not found on PATH", hint=install_hint)
    return path

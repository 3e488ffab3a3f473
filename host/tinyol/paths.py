"""Where things are: the firmware sources tinyol ships, the user's project, tools.

The firmware sources (``mcu/``: core, boards, both PlatformIO dev-platforms,
Renode files), the example models (``models/``) and the library manifest travel
with the Python package:

* installed from a wheel, they are package data under ``tinyol/_firmware/``
  (``setup.py`` copies them there when the wheel is built);
* in an editable install (``pip install -e .``, what ``make setup`` does) the
  package lives in ``host/tinyol/`` of the checkout and uses the checkout's
  ``mcu/`` and ``models/`` directly.

Nothing here looks at the current directory to find tinyol itself. The
current directory is the *user's* place: relative paths given on the command
line resolve against it, and builds, state and outputs go under it
(:func:`project_dir`).
"""
from __future__ import annotations

import os
import sys
from importlib import resources
from pathlib import Path

from .errors import TinyolError

#: Marker every tinyol-made platformio.ini carries (ours and `tinyol init`'s).
PROJECT_MARKER = "tinyol"


def firmware_root() -> Path:
    """The directory that holds ``mcu/`` and ``models/`` for this installation."""
    packaged = Path(str(resources.files("tinyol"))) / "_firmware"
    if (packaged / "mcu" / "src").is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[2]   # host/tinyol/paths.py -> checkout
    if (checkout / "mcu" / "src").is_dir() and (checkout / "host" / "tinyol").is_dir():
        return checkout
    raise TinyolError("this tinyol installation has no firmware sources (tinyol/_firmware is missing)",
                      hint="reinstall tinyol from a wheel built with `pip wheel .`, or `pip install -e .` "
                           "from a checkout")


def mcu_dir() -> Path:
    return firmware_root() / "mcu"


def models_dir() -> Path:
    """The example models shipped with tinyol (models/digits, models/anomaly, ...)."""
    return firmware_root() / "models"


def renode_dir() -> Path:
    return mcu_dir() / "renode"


def platform_dir(family: str) -> Path:
    """One of our offline PlatformIO dev-platforms: ``stm32l4`` or ``native``."""
    return mcu_dir() / "platform" / family


def example_model(name: str) -> Path:
    return models_dir() / name


def user_path(arg: str | os.PathLike) -> Path:
    """A path the user typed: relative to the current directory, made absolute."""
    return (Path.cwd() / Path(arg).expanduser()).resolve()


def resolve_model(arg: str | os.PathLike) -> Path:
    """A model directory for library callers: absolute as given; relative against the
    current directory; a relative path that does not exist there but names a directory
    tinyol ships (``models/digits``, ``mcu/app/nomodel``) is the shipped one.

    The CLI resolves user input strictly against the current directory
    (:func:`user_path`); this fallback keeps ``BuildConfig("native", "models/digits")``
    working from anywhere."""
    p = Path(arg).expanduser()
    if p.is_absolute():
        return p
    here = Path.cwd() / p
    if here.exists():
        return here.resolve()
    shipped = firmware_root() / p
    return shipped if shipped.exists() else here.resolve()


def _is_project(d: Path) -> bool:
    ini = d / "platformio.ini"
    try:
        return ini.is_file() and PROJECT_MARKER in ini.read_text(errors="replace")
    except OSError:
        return False


def project_dir() -> Path:
    """The user's project: the nearest directory from the current one upwards whose
    platformio.ini is a tinyol one (our checkout, or one made by `tinyol init`);
    otherwise the current directory itself. Build outputs (.pio/), the PlatformIO core
    (.pio-core/) and emulator state live under it."""
    cwd = Path.cwd().resolve()
    for d in (cwd, *cwd.parents):
        if _is_project(d):
            return d
    return cwd


def project_ini() -> Path | None:
    """The project's own platformio.ini, or None (tinyol then writes one under .pio/)."""
    ini = project_dir() / "platformio.ini"
    return ini if _is_project(ini.parent) else None


def project_root() -> Path:
    """Deprecated name of :func:`firmware_root` (kept for callers that read shipped files)."""
    return firmware_root()


def core_dir() -> Path:
    """PlatformIO's core dir: $PLATFORMIO_CORE_DIR, else the project's .pio-core/, else
    (editable install) the checkout's seeded one, else the project's (seeded on first build)."""
    env = os.environ.get("PLATFORMIO_CORE_DIR")
    if env:
        return Path(env)
    own = project_dir() / ".pio-core"
    if own.is_dir():
        return own
    checkout = firmware_root() / ".pio-core"
    if (checkout / "packages" / "tool-scons").is_dir():
        return checkout
    return own


def pio_command() -> list[str]:
    """PlatformIO from this Python environment."""
    return [sys.executable, "-m", "platformio"]


def monitor_path(path: str | os.PathLike) -> str:
    """A file argument for Renode's Monitor: `@` + the absolute path, spaces escaped."""
    text = str(Path(path).resolve())
    return "@" + text.replace("\\", "/").replace(" ", "\\ ")

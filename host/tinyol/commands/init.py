"""`tinyol init`: create a user project that builds tinyol firmware offline."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import click

from .. import __version__
from ..errors import TinyolError
from ..firmware import project_ini_text
from ..options import board_option
from ..paths import example_model, user_path
from ..pio_core import seed

README = """# {name}: a tinyol project

Made by `tinyol init` (tinyol {version}). Everything tinyol builds or runs for
this project stays in this folder: PlatformIO's build outputs in `.pio/`, its
core in `.pio-core/`, your exported models in `models/`.

```sh
cd {name}
tinyol build                          # firmware for {board} with models/digits (see tinyol.toml)
tinyol emulate                        # run it in QEMU; prints a socket:// URL
tinyol stream --port socket://127.0.0.1:PORT --data digits:5-9 --train
tinyol export my_model.keras --out models/my_model --calib ...   # then set model = "models/my_model"
```

`tinyol.toml` holds this project's defaults per command (board, model, port).
`platformio.ini` builds the same firmware with PlatformIO directly
(`pio run -e {board}`); it points at the firmware sources of the installed
tinyol package. If you reinstall tinyol somewhere else, run `tinyol init --update .`
Paths you type are relative to where you stand. See tinyol's docs/project.md.
"""

TOML = """# tinyol settings for this project: [verb] tables of option = value
# (command-line flags and TINYOL_<VERB>_<OPTION> environment variables override them).
# Paths are relative to the directory you run tinyol from (this one).

[build]
board = "{board}"
model = "{model}"

[flash]
board = "{board}"
model = "{model}"

[emulate]
board = "{board}"
model = "{model}"
state = "build/native-state"

[stream]
model = "{model}"

[verify]
model = "{model}"
"""

GITIGNORE = ".pio/\n.pio-core/\nbuild/\n"


@click.command("init")
@click.argument("directory", type=click.Path(file_okay=False))
@board_option()
@click.option("--update", is_flag=True,
              help="Only rewrite platformio.ini of an existing project (after reinstalling tinyol).")
@click.pass_context
def cmd(ctx, directory, board, update):
    """Create a tinyol project in DIRECTORY: platformio.ini, tinyol.toml, models/, README.md.

    \b
    The project builds offline with `tinyol build` (or `pio run`) from its own
    folder, with a copy of the digits example model to start from.
    Example:
      tinyol init my-learner --board nucleo_l432kc && cd my-learner && tinyol build
    """
    d = user_path(directory)
    model = "models/digits"
    if update:
        if not (d / "platformio.ini").is_file():
            raise TinyolError(f"{d} is not a tinyol project (no platformio.ini)",
                              hint=f"create one: tinyol init {directory}")
        old = (d / "platformio.ini").read_text()
        if ctx.get_parameter_source("board") != click.core.ParameterSource.COMMANDLINE:
            m = re.search(r"^default_envs\s*=\s*(\S+)", old, re.M)
            board = m[1] if m else board  # keep the project's board
        m = re.search(r"^custom_model\s*=\s*(.+?)\s*$", old, re.M)
        (d / "platformio.ini").write_text(project_ini_text(m[1] if m else model, board))
        click.echo(f"updated {d / 'platformio.ini'}")
        return
    if d.exists() and any(d.iterdir()):
        clash = [n for n in ("platformio.ini", "tinyol.toml", "models") if (d / n).exists()]
        if clash:
            raise TinyolError(f"{d} already has {', '.join(clash)}; not overwriting",
                              hint="choose a new or empty directory, or --update to refresh platformio.ini")
    (d / "models").mkdir(parents=True, exist_ok=True)
    (d / "build" / "native-state").mkdir(parents=True, exist_ok=True)
    shutil.copytree(example_model("digits"), d / model,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (d / "platformio.ini").write_text(project_ini_text(model, board))
    (d / "tinyol.toml").write_text(TOML.format(board=board, model=model))
    (d / "README.md").write_text(README.format(name=d.name, board=board, version=__version__))
    (d / ".gitignore").write_text(GITIGNORE)
    try:  # PlatformIO's core for `pio run` in this folder, offline (tool-scons from the scons package)
        seed(d / ".pio-core", echo=lambda m: None)
    except ImportError:
        click.echo("note: SCons is not installed; `tinyol build` needs it (pip install 'tinyol[fw]')")
    click.echo(f"created tinyol project {d} (board {board}, model {model})")
    click.echo(f"next: cd {Path(directory)} && tinyol build")

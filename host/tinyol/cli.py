"""The `tinyol` command line.

One click group; each verb lives in ``tinyol.commands.<verb>`` and exposes a
click command named ``cmd``. Verbs are imported lazily so that ``tinyol info``
never pays for importing TensorFlow.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

import click
import tomllib

from . import __version__
from .errors import TinyolError

# verb -> (module, one-line help shown in `tinyol --help`)
VERBS: dict[str, tuple[str, str]] = {
    "init": ("init", "Create a project folder (platformio.ini, tinyol.toml, models/) that builds offline."),
    "export": ("export", "Split a Keras model; write the int8 backbone, C code and head."),
    "build": ("build", "Build the firmware for a board with PlatformIO (offline)."),
    "flash": ("flash", "Build and upload the firmware to a board."),
    "emulate": ("emulate", "Run the firmware in QEMU, Renode or natively; print its serial URL."),
    "info": ("info", "Ask a device for its INFO record."),
    "doctor": ("doctor", "Check a freshly flashed board: clock, baud, flash geometry, save/load."),
    "stream": ("stream", "Stream labelled samples to a device; show live accuracy."),
    "simulate": ("simulate", "Run a stream through the numpy reference learner."),
    "verify": ("verify", "Compare a device's backbone outputs with TFLM, bit for bit."),
    "bench": ("bench", "Measure instructions, memory and throughput; write docs/benchmarks.md."),
    "demo": ("demo", "Build, boot in QEMU, stream digits 5-9 and show the board learn."),
    "save": ("persist", "Ask the device to save its learned state to flash."),
    "load": ("persist", "Ask the device to reload its learned state from flash."),
    "pull": ("persist", "Copy a device's learned head to an .npz file."),
    "push": ("persist", "Copy a head from an .npz file onto a device."),
    "set": ("set", "Read or change a device's learner settings (mode, lr, momentum, ...)."),
    "reset": ("reset", "Put a device's learner back to its exported state."),
    "compare": ("compare", "Compare two per-sample logs (device vs simulator) line by line."),
    "fleet": ("fleet", "Many boards learn together; Flower aggregates their heads."),
    "record-to-resd": ("sensor", "Turn a labelled IMU recording into Renode sensor files + labels."),
    "sensor-header": ("sensor", "Write a sensor firmware's window and scaling header from a model."),
    "monitor": ("monitor", "Watch a sensor-driven board predict and learn live; send it labels."),
    "superlink": ("deploy", "A fleet's server: Flower's SuperLink (TLS, authenticated nodes) runs tinyol's app."),
    "gateway": ("deploy", "A fleet's gateway: one Flower SuperNode per board on this machine."),
    "certs": ("deploy", "Make a test fleet's CA, SuperLink certificate and SuperNode keys."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return [v for v in VERBS if self._available(v)]

    @staticmethod
    def _available(verb: str) -> bool:
        mod = VERBS[verb][0]
        return importlib.util.find_spec(f"tinyol.commands.{mod}") is not None

    def get_command(self, ctx, name):
        if name not in VERBS or not self._available(name):
            return None
        mod = importlib.import_module(f"tinyol.commands.{VERBS[name][0]}")
        cmd = getattr(mod, f"cmd_{name.replace('-', '_')}", None) or getattr(mod, "cmd")
        return cmd

    def format_commands(self, ctx, formatter):
        rows = [(v, VERBS[v][1]) for v in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


# top-level keys of tinyol.toml: one value for every verb that has the option
SHARED_SETTINGS = {"model": "--model", "board": "--board"}


def load_settings(path: str | None = None) -> dict:
    """Option defaults from a TOML file: top-level ``model = ...`` / ``board = ...`` for every
    verb with that option, and [verb] tables of option = value (a table wins over the top level).

    Layering (lowest first): this file (./tinyol.toml, or $TINYOL_CONFIG), then
    environment variables TINYOL_<VERB>_<OPTION> (e.g. TINYOL_STREAM_PORT),
    then command-line flags. The shared values come back under the key ``""``.
    """
    p = Path(path or os.environ.get("TINYOL_CONFIG") or "tinyol.toml")
    if not p.is_file():
        if path or os.environ.get("TINYOL_CONFIG"):
            raise TinyolError(f"settings file not found: {p}")
        return {}
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise TinyolError(f"{p}: {e}") from None
    shared = {k: v for k, v in data.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    bad = sorted(set(shared) - set(SHARED_SETTINGS))
    if bad:
        raise TinyolError(f"{p}: unknown top-level setting(s) {', '.join(bad)}",
                          hint="at the top level: " + ", ".join(SHARED_SETTINGS) + "; anything "
                               "else goes in a [verb] table")
    unknown = sorted(set(tables) - set(VERBS))
    if unknown:
        raise TinyolError(f"{p}: unknown section(s) {', '.join(unknown)}",
                          hint="sections are verb names: " + ", ".join(VERBS))
    out = {verb: {k.replace("-", "_"): v for k, v in opts.items()} for verb, opts in tables.items()}
    named = [v for v, t in out.items() if "model" in t]
    if "model" not in shared and len(named) > 1:  # a file written before the top-level key
        click.echo(f"hint: {p} names the model in {len(named)} tables ({', '.join(named)}); one "
                   "top-level `model = \"...\"` line above the tables now serves every verb",
                   err=True)
    if shared:
        out[""] = shared
    return out


def apply_shared(default_map: dict, verb: str | None, command) -> None:
    """Copy the file's top-level values into `verb`'s defaults, under the name of the
    command's parameter that has that flag (simulate's --model is `model_dir`, bench's takes
    several); a value in the verb's own table wins."""
    if verb is None or command is None:
        return
    shared = default_map.get("", {})
    table = default_map.setdefault(verb, {})
    for key, flag in SHARED_SETTINGS.items():
        for prm in command.params:
            if flag not in getattr(prm, "opts", ()):
                continue
            if key in table and prm.name != key:
                table[prm.name] = table.pop(key)  # [simulate] model = ... names model_dir
            elif key in shared and prm.name not in table:
                table[prm.name] = [shared[key]] if getattr(prm, "multiple", False) else shared[key]


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"],
                                             "auto_envvar_prefix": "TINYOL"})
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks and debug output.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Settings file (default: ./tinyol.toml if present).")
@click.version_option(__version__, prog_name="tinyol")
@click.pass_context
def group(ctx, verbose, config_path):
    """tinyol: keep learning on an STM32L4 after deployment.

    \b
    Settings: flags > TINYOL_<VERB>_<OPTION> environment variables > tinyol.toml
    (top-level model = "models/x" and board = "..." for every verb; [verb] tables, e.g.
    [stream] port = "socket://127.0.0.1:4321").
    """
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose
    ctx.default_map = load_settings(config_path)
    verb = ctx.invoked_subcommand
    apply_shared(ctx.default_map, verb, group.get_command(ctx, verb) if verb else None)


def main(argv: list[str] | None = None) -> int:
    verbose = "-v" in (argv if argv is not None else sys.argv[1:]) or "--verbose" in (
        argv if argv is not None else sys.argv[1:]
    )
    try:
        rv = group.main(args=argv, prog_name="tinyol", standalone_mode=False)
        return rv if isinstance(rv, int) else 0
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except TinyolError as e:
        if verbose:
            raise
        click.echo(f"error: {e}", err=True)
        if e.hint:
            click.echo(f"hint: {e.hint}", err=True)
        return e.exit_code
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except OSError as e:  # the operating system refused a path the checks could not foresee
        if verbose:
            raise
        where = f": {e.filename}" if e.filename else ""
        click.echo(f"error: {e.strerror or e}{where}", err=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())

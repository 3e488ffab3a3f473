"""Seed PlatformIO's core dir with `tool-scons`, offline, from the PyPI scons wheel.

PlatformIO runs builds with `python <core>/packages/tool-scons/scons.py` and
would download that package from its registry on first use. We build the same
package from the `scons` distribution already installed in the venv (a
dependency in pyproject.toml): the SCons/ tree, a scons.py launcher, and the
package.json/.piopm metadata PlatformIO checks (owner platformio, version
4.41101.0, the version range PlatformIO 6.1/6.2 asks for).

Used by scripts/seed_pio_core.py (make setup) and by `tinyol build` / `tinyol init`
when a project's core dir is not seeded yet. Idempotent.
"""
import json
import pathlib
import shutil

# Lazy on purpose: SCons (the optional extra tinyol[fw]) is imported where the core is seeded.

PKG_VERSION = "4.41101.0"
LAUNCHER = '''"""scons launcher seeded by tinyol (tinyol.targets.pio_core)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import SCons.Script  # noqa: E402

SCons.Script.main()
'''


def is_seeded(core_dir) -> bool:
    pkg = pathlib.Path(core_dir) / "packages" / "tool-scons"
    return (pkg / "package.json").is_file() and (pkg / "SCons").is_dir() and (pkg / "scons.py").is_file()


def seed(core_dir, echo=print) -> bool:
    """Seed CORE_DIR with tool-scons; False when it already was."""
    import SCons

    pkg = pathlib.Path(core_dir) / "packages" / "tool-scons"
    meta = pkg / "package.json"
    if is_seeded(core_dir):
        return False
    if pkg.exists():
        shutil.rmtree(pkg)
    pkg.mkdir(parents=True)
    shutil.copytree(pathlib.Path(SCons.__file__).parent, pkg / "SCons",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "scons.py").write_text(LAUNCHER)
    meta.write_text(json.dumps({
        "name": "tool-scons", "version": PKG_VERSION,
        "description": "SCons " + SCons.__version__ + " from the PyPI wheel, seeded offline by tinyol",
        "system": "*",
    }, indent=2))
    (pkg / ".piopm").write_text(json.dumps({
        "type": "tool", "name": "tool-scons", "version": PKG_VERSION,
        "spec": {"owner": "platformio", "id": None, "name": "tool-scons", "requirements": None, "uri": None},
    }))
    echo(f"seeded {pkg} (SCons {SCons.__version__})")
    return True


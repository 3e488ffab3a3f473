"""Seed PlatformIO's core dir with `tool-scons`, offline (see host/tinyol/targets/pio_core.py).

Usage: python scripts/seed_pio_core.py CORE_DIR   (idempotent)
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "host"))
from tinyol.targets.pio_core import seed  # noqa: E402

if __name__ == "__main__":
    seed(sys.argv[1] if len(sys.argv) > 1 else ".pio-core")
    sys.exit(0)

"""Shared fixtures: the checkout, host-compiled C, firmware builds, emulators."""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "host"))

STRICT = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wshadow", "-Wconversion", "-Wdouble-promotion"]
ARM_FLAGS = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-O2"]
BUILD_CACHE = ROOT / "build" / "test-c"


def compile_shared(sources: list[Path], includes: list[Path], defines: dict | None = None,
                   extra: list[str] | None = None) -> ctypes.CDLL:
    """Compile C sources with the strict flags into a shared library (cached by content)."""
    args = STRICT + ["-O1", "-g", "-fPIC", "-shared"] + [f"-I{p}" for p in includes]
    args += [f"-D{k}={v}" for k, v in (defines or {}).items()] + (extra or [])
    h = hashlib.sha256(" ".join(args).encode())
    for s in sources:
        h.update(Path(s).read_bytes())
    for inc in includes:
        for f in sorted(Path(inc).glob("*.h")):
            h.update(f.read_bytes())
    out = BUILD_CACHE / f"lib{h.hexdigest()[:16]}.so"
    if not out.exists():
        BUILD_CACHE.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(["gcc", *args, *map(str, sources), "-o", str(tmp), "-lm"], check=True)
        tmp.rename(out)
    return ctypes.CDLL(str(out))


def compile_arm_objects(sources: list[Path], includes: list[Path], defines: dict | None = None) -> None:
    """Compile (no link) for Cortex-M4 with the strict flags; skip if no cross compiler."""
    if not shutil.which("arm-none-eabi-gcc"):
        pytest.skip("arm-none-eabi-gcc not installed")
    args = ARM_FLAGS + STRICT + ["-c", "-o", "/dev/null"]
    args += [f"-I{p}" for p in includes] + [f"-D{k}={v}" for k, v in (defines or {}).items()]
    for s in sources:
        subprocess.run(["arm-none-eabi-gcc", *args, str(s)], check=True)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


class _FirmwareCache:
    def __init__(self):
        self.built = {}

    def __call__(self, board: str, model: str = "mcu/app/nomodel", kernels: str | None = None,
                 test_build: bool = True):
        from tinyol.targets.firmware import BuildConfig, build

        cfg = BuildConfig(board, model, kernels, test_build and board != "native")
        if cfg not in self.built:
            self.built[cfg] = build(cfg)
        return self.built[cfg]


@pytest.fixture(scope="session")
def firmware():
    """firmware(board, model=..., kernels=..., test_build=...) -> BuildResult (built once per session)."""
    os.environ.setdefault("PLATFORMIO_CORE_DIR", str(ROOT / ".pio-core"))
    return _FirmwareCache()


def pytest_collection_modifyitems(config, items):
    if shutil.which("qemu-system-arm"):
        return
    skip = pytest.mark.skip(reason="qemu-system-arm not installed (run make setup)")
    for item in items:
        if "qemu" in item.keywords:
            item.add_marker(skip)

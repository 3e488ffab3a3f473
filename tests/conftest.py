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
# the studies beside the product (studies/tinyol_studies/: tinyol never imports them, tests do)
sys.path.insert(1, str(ROOT / "studies"))
# tests/host (Python + host-compiled C) and tests/device (PlatformIO, emulators, TensorFlow) import
# each other's tables (`from test_stage_equiv import ...`); helpers (_x_util.py) live in tests/.
sys.path[1:1] = [str(ROOT / "tests" / "host"), str(ROOT / "tests" / "device")]

STRICT = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wshadow", "-Wconversion", "-Wdouble-promotion"]
ARM_FLAGS = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-O2"]
BUILD_CACHE = ROOT / "build" / "test-c"
# shared/ beside the checkout (CI: a copy next to the clone; a worktree in a subfolder: one more up);
# $TINYOL_SHARED names another. Vendor headers, TFLM sources and the Renode tarball live there.
SHARED = next((p for p in (Path(os.environ.get("TINYOL_SHARED", "/nonexistent")), ROOT.parent / "shared",
                           ROOT.parent.parent / "shared") if p.is_dir()), ROOT.parent / "shared")


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


# The order the files start in is xdist's: with --dist loadfile it starts the files with the most
# tests first (test_bad_inputs, test_cpu_instructions), then the rest, and any file order set here
# is overridden. Starting the four longest files first instead (`--no-loadscope-reorder` with them
# at the head of the list) was measured slower on the 2-core machine (clean clones, 2026-12-04:
# 17 min 35 s of pytest and 1,811 CPU s against 15 min 53 s and 1,606 CPU s; six workers: 17 min
# 5 s): TFLM's compile, the linker sweeps and Renode then compete for the two cores at once. So
# was xdist's order with only those three moved to start beside the fleets that mostly wait
# (the cores stay busy all the same: vmstat, docs/project.md session 15): 15 min 10 s and 1,549 CPU s against
# 14 min 43 s and 1,503 CPU s (clean clones of d5eb341 and its variant); moving only TFLM's
# compile there gave 14 min 40 s (the same within a run's spread).
def pytest_collection_modifyitems(config, items):
    if shutil.which("qemu-system-arm"):
        return
    skip = pytest.mark.skip(reason="qemu-system-arm not installed (run make setup)")
    for item in items:
        if "qemu" in item.keywords:
            item.add_marker(skip)


# ---- where the time goes: TINYOL_TEST_TIMES=FILE appends one JSON line per test --------------
# (wall seconds of setup + call + teardown, and the CPU seconds of the worker and of the children
# it reaped meanwhile: builds, emulators). Read with scripts/test_times.py; docs/project.md.
_TIMES = os.environ.get("TINYOL_TEST_TIMES")

if _TIMES:
    import json
    import resource
    import time

    def _cpu() -> tuple[float, float]:
        s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        t0, (s0, c0) = time.monotonic(), _cpu()
        yield
        t1, (s1, c1) = time.monotonic(), _cpu()
        rec = {"id": item.nodeid, "wall": round(t1 - t0, 3), "cpu": round(s1 - s0, 3),
               "children": round(c1 - c0, 3), "worker": os.environ.get("PYTEST_XDIST_WORKER", "-")}
        with open(_TIMES, "a") as f:
            f.write(json.dumps(rec) + "\n")

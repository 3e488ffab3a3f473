"""Building firmware with PlatformIO, offline (`tinyol build`, tests, demo, bench).

Each configuration (board, model, kernels, test build) gets its own build
directory under .pio/variants/, so switching between them never rebuilds
everything and never mixes objects.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .boards import BOARDS, NATIVE
from .errors import TinyolError
from .paths import core_dir, pio_command, project_root

DEFAULT_MODEL = "models/digits"
NO_MODEL = "mcu/app/nomodel"


@dataclass(frozen=True)
class BuildConfig:
    board: str
    model: str = DEFAULT_MODEL   # model directory, relative to the checkout or absolute
    kernels: str | None = None   # simd (boards) / ref (native) when None
    test_build: bool = False

    def variant(self) -> str:
        key = f"{Path(self.model).resolve() if Path(self.model).is_absolute() else self.model}|{self.kernels}|{self.test_build}"
        tag = "test" if self.test_build else "rel"
        name = Path(self.model).name or "model"
        return f"{name}-{self.kernels or 'default'}-{tag}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class BuildResult:
    config: BuildConfig
    build_dir: Path

    @property
    def elf(self) -> Path:
        return self.build_dir / "firmware.elf"

    @property
    def bin(self) -> Path:
        return self.build_dir / "firmware.bin"

    @property
    def program(self) -> Path:
        """The native executable."""
        return self.build_dir / "firmware"


def check_board(board: str) -> None:
    if board != NATIVE and board not in BOARDS:
        raise TinyolError(f"unknown board {board!r}",
                          hint="choose one of: " + ", ".join([*BOARDS, NATIVE]))


def build_env(cfg: BuildConfig) -> dict[str, str]:
    root = project_root()
    env = dict(os.environ)
    env["PLATFORMIO_CORE_DIR"] = str(core_dir())
    env["PLATFORMIO_BUILD_DIR"] = str(root / ".pio" / "variants" / cfg.variant())
    env["TINYOL_MODEL"] = cfg.model
    env["TINYOL_TEST_BUILD"] = "yes" if cfg.test_build else "no"
    if cfg.kernels:
        env["TINYOL_KERNELS"] = cfg.kernels
    else:
        env.pop("TINYOL_KERNELS", None)
    env.setdefault("PLATFORMIO_NO_ANSI", "true")
    return env


def build(cfg: BuildConfig, *, verbose: bool = False, echo=None) -> BuildResult:
    """Build one configuration; raise TinyolError with the compiler's complaint on failure."""
    check_board(cfg.board)
    root = project_root()
    model_dir = Path(cfg.model) if Path(cfg.model).is_absolute() else root / cfg.model
    if not (model_dir / "config.h").is_file():
        raise TinyolError(f"model directory {cfg.model} has no config.h",
                          hint="export a model first: tinyol export MODEL --out DIR")
    if not (core_dir() / "packages" / "tool-scons" / "scons.py").is_file():
        raise TinyolError("PlatformIO core is not seeded (tool-scons missing)",
                          hint="run `make setup` (or scripts/setup.sh)")
    env = build_env(cfg)
    argv = [*pio_command(), "run", "-d", str(root), "-e", cfg.board]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    if echo:
        for line in out.splitlines():
            if verbose or line.startswith("tinyol:"):
                echo(line)
    if proc.returncode != 0:
        errors = [l for l in out.splitlines()
                  if "error" in l.lower() or "overflow" in l.lower() or l.startswith("tinyol:")]
        detail = "\n".join(errors[-15:]) or out[-2000:]
        raise TinyolError(f"firmware build for {cfg.board} failed:\n{detail}",
                          hint="rerun with -v for the full PlatformIO output")
    result = BuildResult(cfg, Path(env["PLATFORMIO_BUILD_DIR"]) / cfg.board)
    return result

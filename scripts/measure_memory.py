"""Measure the model-independent SRAM1 use of the firmware (memory.FIXED_RAM1, and
memory.FIXED_RAM1_STAGE_DELTA: what a firmware with an adaptive stage reserves more) and rewrite
them.

For each board and build kind, builds models/digits, reads the linked ELF's sections and the sizes of
the model-dependent objects (tol_server, tol_input, tol_latent, tol_arena, tol_learner_mem when in SRAM1)
and keeps the rest. The stage's delta: the same for models/digits_adaptive, minus the head's, on
every board the stage fits (it must be one number). Run after changing the firmware's static memory:

    .venv/bin/python scripts/measure_memory.py          # prints and rewrites host/tinyol/memory.py
    .venv/bin/python scripts/measure_memory.py --check  # exit 1 if the table is stale
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "host"))

from tinyol import memory  # noqa: E402
from tinyol.boards import BOARDS  # noqa: E402
from tinyol.targets.firmware import BuildConfig, build  # noqa: E402

MODEL_OBJECTS = ("tol_server", "tol_input", "tol_latent", "tol_arena", "tol_learner_mem", "tol_replay_mem")


def elf_ram1(elf: Path) -> tuple[int, dict[str, tuple[int, int]]]:
    """SRAM1 bytes (.data .bss .noinit .stack, as the build reports them) and {symbol: (addr, size)}."""
    out = subprocess.check_output(["arm-none-eabi-size", "-A", str(elf)], text=True)
    sec = {m[1]: int(m[2]) for m in re.finditer(r"^(\.\S+)\s+(\d+)\s+\d+", out, re.M)}
    ram1 = sum(sec.get(s, 0) for s in (".data", ".bss", ".noinit", ".stack"))
    syms = {}
    for line in subprocess.check_output(["arm-none-eabi-nm", "-S", str(elf)], text=True).splitlines():
        f = line.split()
        if len(f) == 4 and f[3] in MODEL_OBJECTS:
            syms[f[3]] = (int(f[0], 16), int(f[1], 16))
    return ram1, syms


def fixed_ram1(elf: Path, ram_bytes: int) -> int:
    ram1, syms = elf_ram1(elf)
    model = sum(size for addr, size in syms.values() if 0x20000000 <= addr < 0x20000000 + ram_bytes)
    return ram1 - memory.STACK_BYTES - model


def measure() -> dict:
    table = {}
    for name, b in BOARDS.items():
        for test_build in (False, True):
            res = build(BuildConfig(name, "models/digits", test_build=test_build))
            table[(name, test_build)] = fixed_ram1(res.elf, b.ram_bytes)
            print(f"{name:<22} {'test' if test_build else 'release':<8} {table[(name, test_build)]}")
    return table


def measure_stage_delta(head: dict) -> int:
    model = memory.Model.from_manifest(__import__("json").loads(
        (ROOT / "models/digits_adaptive/manifest.json").read_text()))
    deltas = {}
    for name, b in BOARDS.items():
        if not memory.plan(model, name, memory.board_regions(b)).fits:
            continue
        for test_build in (False, True):
            res = build(BuildConfig(name, "models/digits_adaptive", test_build=test_build))
            deltas[(name, test_build)] = fixed_ram1(res.elf, b.ram_bytes) - head[(name, test_build)]
            print(f"stage delta {name:<22} {'test' if test_build else 'release':<8} "
                  f"{deltas[(name, test_build)]}")
    if len(set(deltas.values())) != 1:
        # one number for every board: the largest (the plan may then reserve a few bytes more
        # than a board's stage firmware uses, never fewer)
        print(f"the stage's fixed SRAM1 delta differs between boards ({sorted(set(deltas.values()))}); "
              f"keeping the largest")
    return max(deltas.values())


def render(table: dict) -> str:
    rows = "".join(f"    ({n!r}, {t}): {v},\n" for (n, t), v in table.items())
    return "FIXED_RAM1 = {\n" + rows + "}\n"


def main() -> int:
    table = measure()
    delta = measure_stage_delta(table)
    path = ROOT / "host" / "tinyol" / "memory.py"
    text = path.read_text()
    new = re.sub(r"FIXED_RAM1 = \{\n.*?\}\n", lambda m: render(table), text, flags=re.S)
    new = re.sub(r"FIXED_RAM1_STAGE_DELTA = -?\d+", f"FIXED_RAM1_STAGE_DELTA = {delta}", new)
    if "--check" in sys.argv:
        return 0 if new == text else 1
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())

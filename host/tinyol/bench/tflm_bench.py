"""Side by side with TensorFlow Lite Micro: `tinyol bench --tflm DIR`.

Builds TFLM (with CMSIS-NN kernels, and with its reference kernels) from a
source tree, links it into our own bare-metal harness (mcu/bench/), and runs
each model through TFLM and through tinyol's generated backbone on the same
QEMU machine (b-l475e-iot01a, -icount shift=7) with the same SysTick counter
as the firmware (tinyol.bench.icount). Both runs get the same input; their output
bytes must be equal. Reported per model: instructions per inference (total
and per operator), arena, peak stack (painted), flash.

The source tree is the pruned TFLM + CMSIS-NN subset in ``../shared/tflm/``
(a ``.tar.xz`` or its unpacked folder), described by the ``SOURCES.txt``
inside it: sources per build, include dirs, defines and flags as TFLM's own
Makefile uses them for cortex_m_generic cortex-m4+fp release. No TFLM code
is copied into the repository; the built libraries are cached under
``build/tflm/``. Only the files a model's operators need are compiled (160 of the 315
for digits), with TFLM's flatbuffer schema read from a precompiled header (measured on the
digits set: 1.7 instead of 4.3 CPU seconds per C++ file, ~40 % of the library's compile time
saved after the header's own ~14 s).

C++ without libstdc++: Debian's arm-none-eabi toolchain ships no C++ library
(its libstdc++ package is 1.5 GB). TFLM needs only header-only parts of it
(<cstdint>, <algorithm>, <type_traits>, <new>, ...) and builds with
-fno-exceptions -fno-rtti. When arm-none-eabi-g++ finds no <cstdint>, we use
the host's libstdc++ headers (same GCC major) with three configuration
headers of ours (mcu/bench/cxx_shim/bits/) that describe bare metal, link
with gcc (no libstdc++) and define the two runtime symbols TFLM references
(mcu/bench/cxx_shim.cc).
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import TinyolError
from ..model.codegen import FC_WEIGHTS, generate_backbone
from ..model.cwriter import byte_array
from ..model.folder import read_manifest
from ..paths import project_dir, project_root
from ..targets.emulator import qemu_binary
from .icount import SHIFT, ticks_to_instructions

CPU_HZ = 80_000_000          # the harness sets the firmware's 80 MHz clock (bench_clock_stm32l4.c)
QEMU_MACHINE = "b-l475e-iot01a"


@dataclass(frozen=True)
class Machine:
    """A QEMU machine the harness runs on: its linker script, clock file and SysTick clock.
    Instructions are counted from SysTick at that clock (icount.ticks_to_instructions), so the
    same code gives the same count on either machine (tests/device/test_bench_machines.py)."""
    qemu: str
    ld: str
    clock: str
    cpu_hz: int


L475 = Machine(QEMU_MACHINE, "bench.ld", "bench_clock_stm32l4.c", CPU_HZ)
# Cortex-M4 with 4 MB of data SRAM, for a TFLM arena the L475's 96 + 32 KB cannot hold (issue 34:
# 100-120 KB arenas). QEMU gives its processor clock 25 MHz.
MPS2 = Machine("mps2-an386", "bench_mps2.ld", "bench_clock_mps2.c", 25_000_000)
VARIANTS = ("cmsis_nn", "reference")
ARM = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"]
OURS_CFLAGS = [*ARM, "-O2", "-std=c11", "-ffunction-sections", "-fdata-sections"]


def _bench_dir() -> Path:
    return project_root() / "mcu" / "bench"


# ---------------------------------------------------------------------------- the source tree

@dataclass
class Tree:
    root: Path
    sections: dict[str, list[str]]
    digest: str

    def sources(self, variant: str) -> list[str]:
        return self.sections[f"sources_{variant}"]

    def includes(self, variant: str) -> list[str]:
        return [f"-I{self.root / d}" for d in self.sections[f"include_dirs_{variant}"]]

    def defines(self, variant: str) -> list[str]:
        d = list(self.sections["defines_common"])
        if variant == "cmsis_nn":
            d += self.sections.get("defines_cmsis_nn_only", [])
        return d

    def opt(self, src: str) -> str:
        for line in self.sections["optimization"]:
            flag, _, prefix = line.partition(" ")
            if prefix == "*" or src.startswith(prefix):
                return flag
        return "-O2"


def parse_sources_txt(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    cur = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"\[(\w+)\]", line)
        if m:
            cur = sections.setdefault(m[1], [])
        elif cur is not None:
            cur.append(line)
    return sections


def open_tree(path: str | Path, cache: Path | None = None) -> Tree:
    """A TFLM source tree: a folder holding SOURCES.txt, or the .tar.xz of one (unpacked once)."""
    p = Path(path).expanduser()
    cache = cache or project_dir() / "build" / "tflm"
    if p.is_file() and p.name.endswith((".tar.xz", ".tar.gz", ".tar")):
        digest = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
        dest = cache / f"src-{digest}"
        if not (dest / "SOURCES.txt").is_file():
            tmp = cache / f"src-{digest}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            with tarfile.open(p) as t:
                t.extractall(tmp, filter="data")
            tmp.rename(dest)
        p = dest
    elif p.is_dir() and not (p / "SOURCES.txt").is_file():
        tars = sorted(p.glob("*.tar.xz"))
        if len(tars) == 1:
            return open_tree(tars[0], cache)
    if not (p / "SOURCES.txt").is_file():
        raise TinyolError(f"{path}: no SOURCES.txt (the TFLM source list this benchmark builds from)",
                          hint="point --tflm at ../shared/tflm (or its tflm-cmsisnn-src.tar.xz); "
                               "for your own tflite-micro checkout, write a SOURCES.txt in the same "
                               "format (see docs/benchmarks.md)")
    text = (p / "SOURCES.txt").read_text()
    sections = parse_sources_txt(text)
    for need in ("defines_common", "cxx_flags", "c_flags", "optimization", "sources_cmsis_nn",
                 "sources_reference", "include_dirs_cmsis_nn", "include_dirs_reference"):
        if need not in sections:
            raise TinyolError(f"{p / 'SOURCES.txt'}: no [{need}] section",
                              hint="the file must list sources, include dirs, defines and flags per build")
    return Tree(p, sections, hashlib.sha256(text.encode()).hexdigest()[:16])


# ---------------------------------------------------------------------------- C++ without libstdc++

def _tool(name: str) -> str:
    path = shutil.which(name)
    if not path:
        raise TinyolError(f"{name} not found",
                          hint="apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi binutils-arm-none-eabi")
    return path


def cxx_system_includes() -> list[str]:
    """Extra -isystem flags arm-none-eabi-g++ needs for the C++ standard headers ([] if none)."""
    probe = subprocess.run([_tool("arm-none-eabi-g++"), *ARM, "-std=c++17", "-x", "c++", "-E", "-"],
                           input="#include <cstdint>\n#include <algorithm>\n", capture_output=True, text=True)
    if probe.returncode == 0:
        return []
    ver = subprocess.run(["arm-none-eabi-g++", "-dumpversion"], capture_output=True, text=True).stdout.strip()
    major = ver.split(".")[0]
    hdr = Path(f"/usr/include/c++/{major}")
    cfg = next(iter(sorted(Path("/usr/include").glob(f"*/c++/{major}/bits/c++config.h"))), None)
    if not hdr.is_dir() or cfg is None:
        raise TinyolError(f"arm-none-eabi-g++ {ver} has no C++ standard headers and the host has no "
                          f"libstdc++ {major} headers to borrow",
                          hint=f"apt-get install libstdc++-{major}-dev (host headers, small) "
                               "or libstdc++-arm-none-eabi-newlib")
    return ["-isystem", str(_bench_dir() / "cxx_shim"), "-isystem", str(hdr), "-isystem", str(cfg.parents[1])]


def _toolchain_id() -> str:
    v = subprocess.run(["arm-none-eabi-gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    shim = b"".join(f.read_bytes() for f in sorted((_bench_dir() / "cxx_shim").rglob("*.h")))
    return hashlib.sha256(v.encode() + shim).hexdigest()[:8]


# ---------------------------------------------------------------------------- the libraries

# Every operator the exporter accepts (codegen's _OPS and the shape-only ops of a converted
# Flatten), as the harness registers it: builtin name -> (MicroMutableOpResolver method, TFLM
# kernel file stem). The harness registers the ops of the model it runs (bench_case.h, written
# from this table), as a TFLM user would; the library holds the kernels of all of them. Only these
# kernels (with TFLM's core and all of CMSIS-NN) are compiled: the linker would drop every other
# kernel anyway (--gc-sections), and compiling all 315 files takes long.
HARNESS_OPS: dict[str, tuple[str, str]] = {
    "CONV_2D": ("AddConv2D", "conv"),
    "DEPTHWISE_CONV_2D": ("AddDepthwiseConv2D", "depthwise_conv"),
    "FULLY_CONNECTED": ("AddFullyConnected", "fully_connected"),
    "AVERAGE_POOL_2D": ("AddAveragePool2D", "pooling"),
    "MAX_POOL_2D": ("AddMaxPool2D", "pooling"),
    "MEAN": ("AddMean", "reduce"),
    "REDUCE_MAX": ("AddReduceMax", "reduce"),
    "ADD": ("AddAdd", "add"),
    "SUB": ("AddSub", "sub"),
    "MUL": ("AddMul", "mul"),
    "PAD": ("AddPad", "pad"),
    "PADV2": ("AddPadV2", "pad"),
    "QUANTIZE": ("AddQuantize", "quantize"),
    "RELU": ("AddRelu", "activations"),
    "RELU6": ("AddRelu6", "activations"),
    "LOGISTIC": ("AddLogistic", "logistic"),
    "TANH": ("AddTanh", "tanh"),
    "LEAKY_RELU": ("AddLeakyRelu", "leaky_relu"),
    "HARD_SWISH": ("AddHardSwish", "hard_swish"),
    "SOFTMAX": ("AddSoftmax", "softmax"),
    "CONCATENATION": ("AddConcatenation", "concatenation"),
    "RESHAPE": ("AddReshape", "reshape"),
    "SQUEEZE": ("AddSqueeze", "squeeze"),
    "EXPAND_DIMS": ("AddExpandDims", "expand_dims"),
    "SHAPE": ("AddShape", "shape"),
    "STRIDED_SLICE": ("AddStridedSlice", "strided_slice"),
    "PACK": ("AddPack", "pack"),
    "UNPACK": ("AddUnpack", "unpack"),
    "GATHER": ("AddGather", "gather"),
    "SLICE": ("AddSlice", "slice"),
    "CAST": ("AddCast", "cast"),
    "FILL": ("AddFill", "fill"),
}
HARNESS_KERNELS = tuple(sorted({stem for _, stem in HARNESS_OPS.values()}))
_KERNEL_SUPPORT = ("kernel_util", "runtime_shape", "portable_tensor_utils", "tensor_ctypes", "common",
                   "quantization_util", "tensor_utils", "micro_tensor_utils")
# files a kernel needs beyond its own: depthwise_conv_common.cc uses conv_common.cc's tensor
# indices (kConvBiasTensor ...): a depthwise-only model (micro_speech) did not link without it
_KERNEL_NEEDS = {"depthwise_conv": ("conv_common",)}
# TFLM files the harness never links (mcu/bench/tflm_main.cc times operators itself and sets no
# target up): the test-only context, TFLM's profiler and its clock, hexdump, the offline-plan
# shim and the legacy error reporter. Skipping them saves a third of a build's C++ compiles;
# were one needed after all, the harness link would name the missing symbol.
_HARNESS_UNUSED = ("fake_micro_context", "micro_profiler", "micro_time", "hexdump", "system_setup",
                   "non_persistent_buffer_planner_shim", "error_reporter")


def model_ops(tflite: bytes) -> list[str]:
    """The distinct operators of a .tflite, in the harness table's order; one clear error for an
    operator the harness cannot register."""
    from ..model.tflite import parse_model

    names = {op.opname for op in parse_model(tflite).operators}
    missing = sorted(names - set(HARNESS_OPS))
    if missing:
        raise TinyolError(f"the TFLM harness cannot run operator(s) {', '.join(missing)}",
                          hint="tinyol exports none of these either; see docs/kernels.md for the supported ops")
    return [n for n in HARNESS_OPS if n in names]


def harness_sources(tree: Tree, variant: str, kernels: tuple[str, ...] = HARNESS_KERNELS) -> list[str]:
    """The tree's sources for `variant` that the harness can link: core, the kernels of `kernels`
    (TFLM's file stems; all the harness registers by default), CMSIS-NN."""
    keep = []
    for s in tree.sources(variant):
        name = s.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        if (s.startswith("tflm/signal/") or name.startswith(("test_helper", "mock_", "recording_"))
                or name in _HARNESS_UNUSED):
            continue
        if "/micro/kernels/" in s:
            stem = name.removesuffix("_common")
            needed = any(name in _KERNEL_NEEDS.get(k, ()) for k in kernels)
            if stem not in kernels and name not in _KERNEL_SUPPORT and not needed:
                continue
        keep.append(s)
    return keep

def _compile_cmd(tree: Tree, variant: str, src: str, obj: Path, cxx_inc: list[str],
                 pch: dict[str, Path] | None = None) -> list[str]:
    opt = tree.opt(src)
    common = [*tree.defines(variant), *tree.includes(variant), opt, "-c", str(tree.root / src), "-o", str(obj)]
    if src.endswith((".cc", ".cpp")):
        first = ["-include", str(pch[opt])] if pch and opt in pch else []
        return [_tool("arm-none-eabi-g++"), *tree.sections["cxx_flags"], *cxx_inc, *first, *common]
    return [_tool("arm-none-eabi-gcc"), *tree.sections["c_flags"], *common]


# TFLM's flatbuffer schema: parsing it is ~4 of the ~4.5 s each of TFLM's C++ files takes to compile
_PCH_HEADER = "tensorflow/lite/schema/schema_generated.h"
_PCH_MIN_FILES = 10     # making a precompiled header costs ~5 files of what it saves per file


def _precompiled_schema(tree: Tree, variant: str, srcs: list[str], work: Path, cxx_inc: list[str]) -> dict:
    """{optimisation flag: header} for the optimisation levels with enough C++ files to compile: a
    header that includes the schema, precompiled beside it (g++ reads header.gch in its place).
    g++ checks the .gch against the flags and falls back to the text when they differ. The code is
    the same either way: the 79 C++ files of the full harness gave the same object bytes, debug
    sections aside (measured once, session 11), and tests/device/test_tflm_bench.py holds TFLM's
    instruction count to the independent anchor."""
    levels = [tree.opt(s) for s in srcs if s.endswith((".cc", ".cpp"))]

    def make(opt):
        d = work / f"pch{opt}"
        d.mkdir(parents=True, exist_ok=True)
        header = d / "tflm_schema.h"
        header.write_text(f'#include "{_PCH_HEADER}"\n')
        cmd = [_tool("arm-none-eabi-g++"), *tree.sections["cxx_flags"], *cxx_inc, *tree.defines(variant),
               *tree.includes(variant), opt, "-x", "c++-header", str(header), "-o", str(header) + ".gch"]
        return opt, header if subprocess.run(cmd, capture_output=True).returncode == 0 else None

    wanted = [o for o in sorted(set(levels)) if levels.count(o) >= _PCH_MIN_FILES]
    with ThreadPoolExecutor(max(1, len(wanted))) as ex:
        return {opt: h for opt, h in ex.map(make, wanted) if h is not None}


def build_library(tree: Tree, variant: str, *, ops: Iterable[str] | None = None, jobs: int | None = None,
                  echo=print, cache: Path | None = None) -> Path:
    """libtflm_<variant>.a for the tree, built once and cached (keyed by SOURCES.txt and the toolchain).
    ops: only the kernels these operators need (a smaller, faster build for one model's ops, e.g.
    model_ops(tflite)); by default every operator the harness registers."""
    cache = cache or project_dir() / "build" / "tflm"
    stems = HARNESS_KERNELS if ops is None else tuple(sorted(
        {HARNESS_OPS[o][1] for o in ops} | {n for o in ops for n in _KERNEL_NEEDS.get(HARNESS_OPS[o][1], ())}))
    # keyed by the tree's SOURCES.txt, the toolchain and the files compiled
    srcs = harness_sources(tree, variant, stems)
    kernels = hashlib.sha256(" ".join(srcs).encode()).hexdigest()[:8]
    out = cache / f"lib-{tree.digest}-{_toolchain_id()}-{kernels}" / variant
    lib = out / f"libtflm_{variant}.a"
    if lib.is_file():
        return lib
    cxx_inc = cxx_system_includes()
    # objects depend on the source and the flags only: one folder for every kernel set, so a
    # second model's library compiles just the kernels the first did not need
    obj_dir = cache / f"obj-{tree.digest}-{_toolchain_id()}" / variant
    objs = [obj_dir / (s.replace("/", "__") + ".o") for s in srcs]
    todo = [(s, o) for s, o in zip(srcs, objs) if not o.is_file()]
    obj_dir.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    echo(f"  building TFLM ({variant} kernels): {len(todo)} of {len(srcs)} files to compile "
         f"({len(tree.sources(variant))} in the tree), cached in {out}")

    pch_dir = Path(tempfile.mkdtemp(prefix="pch-", dir=obj_dir))   # ~250 MB per level: removed after
    try:
        pch = _precompiled_schema(tree, variant, [s for s, _ in todo], pch_dir, cxx_inc)

        def one(item):
            s, o = item
            tmp = o.with_suffix(".tmp.o")
            r = subprocess.run(_compile_cmd(tree, variant, s, tmp, cxx_inc, pch), capture_output=True, text=True)
            if r.returncode != 0:
                return f"{s}: {r.stderr.strip()[-800:]}"
            tmp.rename(o)
            return None

        with ThreadPoolExecutor(jobs or os.cpu_count() or 2) as ex:
            errors = [e for e in ex.map(one, todo) if e]
    finally:
        shutil.rmtree(pch_dir, ignore_errors=True)
    if errors:
        raise TinyolError(f"TFLM did not compile ({len(errors)} files): {errors[0]}",
                          hint="check the toolchain (arm-none-eabi-gcc 12) and the tree's SOURCES.txt")
    tmp_lib = lib.with_suffix(".tmp.a")
    tmp_lib.unlink(missing_ok=True)
    subprocess.run([_tool("arm-none-eabi-ar"), "rcs", str(tmp_lib), *map(str, objs)], check=True)
    tmp_lib.rename(lib)
    return lib


# ---------------------------------------------------------------------------- one model, both runtimes

@dataclass
class RunResult:
    instructions: int
    stack: int
    output: bytes
    flash: int
    arena: int | None = None
    ops: list[tuple[str, int]] = field(default_factory=list)
    machine: str = QEMU_MACHINE   # the QEMU machine it ran on (Machine.qemu)


def _case_files(work: Path, tflite: bytes, x: bytes, arena: int, persist: int) -> None:
    work.mkdir(parents=True, exist_ok=True)
    split = 1 if persist else 0
    ops = model_ops(tflite)
    xops = " ".join(f"X({k}, {n}, {HARNESS_OPS[n][0]})" for k, n in enumerate(ops))
    (work / "bench_case.h").write_text(
        "/* generated by tinyol bench --tflm (bench build only) — do not edit */\n"
        "#ifndef TOL_BENCH_CASE_H\n#define TOL_BENCH_CASE_H\n"
        f"#define TOL_BENCH_INPUT_SIZE {len(x)}u\n#define TOL_BENCH_ARENA_BYTES {arena}u\n"
        f"#define TOL_BENCH_PERSIST_BYTES {max(persist, 16)}u\n#define TOL_BENCH_SPLIT_ARENA {split}\n"
        "/* the model's operators: X(index, builtin name, MicroMutableOpResolver method) */\n"
        f"#define TOL_BENCH_N_OP_TYPES {len(ops)}\n#define TOL_BENCH_OPS(X) {xops}\n"
        "#ifdef __cplusplus\nextern \"C\" {\n#endif\n"
        "extern const unsigned char tol_bench_model[];\nextern const signed char tol_bench_input[];\n"
        "#ifdef __cplusplus\n}\n#endif\n#endif\n")
    xs = ",".join(str(v) for v in np.frombuffer(x, dtype=np.int8))
    (work / "bench_case.c").write_text(
        "/* generated by tinyol bench --tflm (bench build only) — do not edit */\n"
        "#include \"bench_case.h\"\n"
        + byte_array("tol_bench_model", tflite)
        + f"const signed char tol_bench_input[{len(x)}] = {{{xs}}};\n")


def _flash_bytes(elf: Path) -> int:
    out = subprocess.run([_tool("arm-none-eabi-size"), "-A", str(elf)], capture_output=True, text=True,
                         check=True).stdout
    total = 0
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] in (".isr_vector", ".text", ".ARM.exidx", ".data"):
            total += int(parts[1])
    return total


def _run(elf: Path, timeout: float, machine: Machine = L475) -> dict:
    argv = [qemu_binary(), "-M", machine.qemu, "-nographic", "-monitor", "none", "-serial", "null",
            "-semihosting-config", "enable=on,target=native", "-icount", f"shift={SHIFT},align=off,sleep=off",
            "-kernel", str(elf)]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise TinyolError(f"{elf.name}: QEMU did not finish within {timeout:.0f} s",
                          hint="the model may be too large for the harness; see docs/benchmarks.md") from e
    text = r.stdout + r.stderr
    if r.returncode != 0 or "done" not in text.split():
        raise TinyolError(f"{elf.name}: the benchmark harness failed (exit {r.returncode}): "
                          f"{(text + r.stderr).strip()[-300:]}", hint="see docs/benchmarks.md")
    res: dict = {"ops": []}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        parts = lines[i].split()
        if parts and parts[0] == "op" and len(parts) == 3:
            res["ops"].append((parts[1], int(parts[2])))
        elif parts and parts[0] == "output":
            res["output"] = bytes.fromhex("".join(parts[1:]))
        elif len(parts) == 2 and parts[1].isdigit():
            res[parts[0]] = int(parts[1])
        i += 1
    return res


def _instr(ticks: int, machine: Machine = L475) -> int:
    return round(ticks_to_instructions(ticks, machine.cpu_hz))


def _link(cmd_tail: list[str], elf: Path, *, stack: int, echo, machine: Machine = L475) -> Path:
    b = _bench_dir()
    cmd = [_tool("arm-none-eabi-gcc"), *ARM, "-nostartfiles", "--specs=nano.specs", "-T", str(b / machine.ld),
           f"-Wl,--defsym=TOL_STACK_BYTES={stack}", "-Wl,--gc-sections", *cmd_tail, "-o", str(elf), "-lm",
           "-lc", "-lgcc"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        msg = next((ln.split("ld: ")[-1] for ln in r.stderr.splitlines() if "overflowed" in ln),
                   r.stderr.strip()[-400:])
        raise TinyolError(f"{elf.name}: does not link: {msg}", hint="see docs/benchmarks.md")
    return elf


def _rt_objs(work: Path, cxx: bool, machine: Machine = L475) -> list[str]:
    b = _bench_dir()
    inc = [f"-I{project_root() / 'mcu' / 'boards' / 'stm32l4'}", f"-I{b}", f"-I{work}"]
    objs = []
    for src in [b / "bench_rt.c", b / machine.clock, work / "bench_case.c"]:
        o = work / (src.stem + ".o")
        subprocess.run([_tool("arm-none-eabi-gcc"), *OURS_CFLAGS, "-Wall", "-Wextra", "-Werror", *inc, "-c",
                        str(src), "-o", str(o)], check=True)
        objs.append(str(o))
    return objs


def run_tflm(tree: Tree, variant: str, lib: Path, work: Path, *, stack: int = 8192, timeout: float = 900,
             echo=print, machine: Machine = L475) -> RunResult:
    b = _bench_dir()
    objs = _rt_objs(work, True, machine)
    cxx_inc = cxx_system_includes()
    for src in (b / "tflm_main.cc", b / "cxx_shim.cc"):
        o = work / f"{src.stem}_{variant}.o"
        cmd = [_tool("arm-none-eabi-g++"), *tree.sections["cxx_flags"], *cxx_inc, *tree.defines(variant),
               *tree.includes(variant), f"-I{b}", f"-I{work}", "-Os", "-c", str(src), "-o", str(o)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise TinyolError(f"{src.name} does not compile against this TFLM tree: {r.stderr.strip()[-600:]}",
                              hint="the harness uses tflite::MicroInterpreter's public API")
        objs.append(str(o))
    elf = _link([*objs, str(lib)], work / f"tflm_{variant}.elf", stack=stack, echo=echo, machine=machine)
    res = _run(elf, timeout, machine)
    i = functools.partial(_instr, machine=machine)
    return RunResult(i(res["invoke_ticks"]) - i(res["overhead_ticks"]), res["stack"], res["output"],
                     _flash_bytes(elf), res.get("arena_used"),
                     [(n, i(t) - i(res["overhead_ticks"])) for n, t in res["ops"]], machine.qemu)


def run_ours(model_dir: Path, impl: str, work: Path, *, stack: int = 8192, timeout: float = 900,
             echo=print, machine: Machine = L475) -> RunResult:
    b = _bench_dir()
    root = project_root()
    objs = _rt_objs(work, False, machine)
    inc = [f"-I{root / 'mcu' / 'include'}", f"-I{root / 'mcu' / 'src' / 'kernels'}", f"-I{b}", f"-I{work}"]
    kernels = sorted((root / "mcu" / "src" / "kernels" / impl).glob("*.c"))
    results = {}
    for timed in (False, True):
        src = model_dir / "backbone.c"
        if timed:
            src = work / "backbone_timed.c"
            src.write_text(instrument_backbone((model_dir / "backbone.c").read_text()))
        tag = "timed" if timed else "plain"
        o_objs = []
        for s in [src, b / "ours_main.c", *kernels]:
            o = work / f"ours_{impl}_{tag}_{s.stem}.o"
            cmd = [_tool("arm-none-eabi-gcc"), *OURS_CFLAGS, *inc, f"-I{model_dir}", "-c", str(s), "-o", str(o)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise TinyolError(f"{s.name}: {r.stderr.strip()[-600:]}", hint="regenerate the model (tinyol export)")
            o_objs.append(str(o))
        elf = _link([*objs, *o_objs], work / f"ours_{impl}_{tag}.elf", stack=stack, echo=echo, machine=machine)
        results[timed] = (elf, _run(elf, timeout, machine))
    elf, res = results[False]
    i = functools.partial(_instr, machine=machine)
    ops = [(n, i(t) - i(res["overhead_ticks"])) for n, t in results[True][1]["ops"]]
    return RunResult(i(res["invoke_ticks"]) - i(res["overhead_ticks"]), res["stack"], res["output"],
                     _flash_bytes(elf), None, ops, machine.qemu)


def run_ours_fitting(model_dir: Path, impl: str, work: Path, **kw) -> RunResult:
    """run_ours on the L475, or on QEMU's mps2-an386 (MPS2) when the model's activations and
    input do not fit the L475's SRAM (e.g. a 180 x 180 input whose first layer writes 62 KB):
    the instruction count does not depend on the machine (tests/device/test_bench_machines.py)."""
    try:
        return run_ours(model_dir, impl, work, **kw)
    except TinyolError as e:
        if "does not link" not in str(e):
            raise
        echo = kw.get("echo", print)
        echo(f"  tinyol {impl}: does not fit {QEMU_MACHINE} ({e}): on {MPS2.qemu}")
        return run_ours(model_dir, impl, work, machine=MPS2, **kw)


_OP_COMMENT = re.compile(r"^\s*/\* (\d+): ([A-Z0-9_]+)")
_CALL = re.compile(r"^(\s*)(tol_\w+\(.*\));\s*$")


def instrument_backbone(src: str) -> str:
    """Wrap every operator call in tol_backbone_invoke with TOL_BENCH_OP (bench builds only)."""
    out = ['#include "bench_op.h"']
    in_invoke = False
    op = None
    for line in src.splitlines():
        if line.startswith("tol_status_t tol_backbone_invoke("):
            in_invoke = True
        m = _OP_COMMENT.match(line)
        if in_invoke and m:
            op = (m[1], m[2])
        c = _CALL.match(line)
        if in_invoke and c and op:
            line = f'{c[1]}TOL_BENCH_OP({op[0]}, "{op[1]}", {c[2]});'
        out.append(line)
    return "\n".join(out) + "\n"


def tflm_arena_guess(model_dir: Path) -> int:
    """A first arena size for the harness: the exporter's measurement of TFLM's minimum arena
    (manifest, from TFLM's Python runtime on this host) with a margin for the 32-bit target, or,
    for a folder without one, TFLM's runtime asked now; 4 KB when neither is at hand."""
    mem = read_manifest(model_dir).get("memory", {})
    need = int(mem.get("tflm_arena_bytes") or 0)
    if not need:
        try:
            from ..model.codegen import tflm_arena_bytes

            need = int(tflm_arena_bytes(model_dir / "backbone.tflite"))
        except Exception:          # no tflite-micro wheel: the harness grows the arena itself
            need = 0
    return max(4096, (need * 5 // 4 + 2048 + 15) // 16 * 16)


# One SRAM block of the harness machine (96 KB, minus stack and harness) holds at most this much
# arena; above it TFLM's persistent allocations go to SRAM2 (32 KB) and the rest stays in SRAM1.
ARENA_ONE_BLOCK = 80 * 1024
ARENA_SPLIT = (74 * 1024, 31 * 1024)      # (SRAM1 part, SRAM2 part)


def arena_layout(arena: int) -> tuple[int, int]:
    """(arena, persistent arena) for a wanted size: one block, or the split layout."""
    return (arena, 0) if arena <= ARENA_ONE_BLOCK else ARENA_SPLIT


MPS2_ARENA_MAX = 2 * 1024 * 1024           # one block in mps2-an386's 3 MB of harness RAM


def run_tflm_sized(tree: Tree, variant: str, lib: Path, work: Path, tfl: bytes, x: bytes, arena: int, *,
                   timeout: float = 900, echo=print) -> RunResult:
    """run_tflm with an arena that fits: start at `arena`, double it while TFLM's AllocateTensors
    says it is too small, up to the largest layout the L475 holds (split across its two SRAMs);
    beyond that on QEMU's mps2-an386 (MPS2), one block, doubling up to MPS2_ARENA_MAX. The
    instruction count does not depend on the machine; the arena only has to fit."""
    machine = L475
    while True:
        size, persist = arena_layout(arena) if machine is L475 else (arena, 0)
        _case_files(work, tfl, x, size, persist)
        try:
            return run_tflm(tree, variant, lib, work, timeout=timeout, echo=echo, machine=machine)
        except TinyolError as e:
            if "AllocateTensors" not in str(e) and "does not link" not in str(e):
                raise
            if machine is L475 and (persist or "does not link" in str(e)):
                machine, arena = MPS2, max(arena, sum(ARENA_SPLIT)) * 2
                echo(f"  TFLM {variant}: the arena does not fit {QEMU_MACHINE}: on {MPS2.qemu}, {arena:,} B")
                continue
            if machine is MPS2 and arena >= MPS2_ARENA_MAX:
                raise
            arena *= 2
            shown = arena if machine is MPS2 else arena_layout(arena)[0]
            echo(f"  TFLM {variant}: arena too small, retrying with {shown:,} B")


# ---------------------------------------------------------------------------- the learner by part

LEARNER_SOURCES = ("tol_learner.c", "tol_head.c", "tol_replay.c", "tol_prng.c", "tol_anomaly.c", "tol_status.c",
                   "tol_segs.c", "tol_state.c")


def run_learner_profile(work: Path, *, timeout: float = 300) -> dict[str, int]:
    """Instructions of the learner's train step, prediction and autoencoder step, whole and by
    part (mcu/bench/learner_main.c), on the same machine and counter as the backbones."""
    root = project_root()
    b = _bench_dir()
    work.mkdir(parents=True, exist_ok=True)
    (work / "bench_case.c").write_text("/* no model */\nconst unsigned char tol_bench_unused;\n")
    objs = _rt_objs(work, False)
    inc = [f"-I{root / 'mcu' / 'include'}", f"-I{root / 'mcu' / 'src'}", f"-I{b}"]
    for s in [b / "learner_main.c", *(root / "mcu" / "src" / n for n in LEARNER_SOURCES)]:
        o = work / f"learner_{s.stem}.o"
        r = subprocess.run([_tool("arm-none-eabi-gcc"), *OURS_CFLAGS, "-Wall", "-Wextra", "-Werror", *inc,
                            "-c", str(s), "-o", str(o)], capture_output=True, text=True)
        if r.returncode != 0:
            raise TinyolError(f"{s.name}: {r.stderr.strip()[-600:]}", hint="see docs/benchmarks.md")
        objs.append(str(o))
    res = _run(_link(objs, work / "learner.elf", stack=8192, echo=print), timeout)
    return {k: _instr(v) for k, v in res.items() if k != "ops" and isinstance(v, int)}


STAGE_SOURCES = (*LEARNER_SOURCES, "tol_stage.c")


# ---------------------------------------------------------------------------- the stage per layer type

STAGE_BENCH_CLASSES = 10
STAGE_BENCH_CAP = 32


def stage_bench_cases() -> list[tuple[str, str, list]]:
    """The stages `tinyol bench` times per layer type (mcu/bench/stage_main.c): (layer type, what
    the row shows, layers). Each is the layer under test followed by the Dense classifier (10
    classes); shapes of the example models' and the study's stages, small enough that the float
    stage fits QEMU's 96 + 32 KB machine. The pooling rows put a Conv2D before the pool (a pool
    has no parameters: on its own the stage's backward would stop above it)."""
    from ..learn.stage import AVGPOOL, CONV, DENSE, DWCONV, GAP, MAXPOOL, Layer

    c = STAGE_BENCH_CLASSES

    def dense(n_in, n_out, act=0):
        return Layer(DENSE, 1, 1, n_in, 1, 1, n_out, act)

    def conv(h, w, ci, co, kh, kw, s=1, same=True, act=1, kind=CONV):
        if same:
            oh, ow = -(-h // s), -(-w // s)
            pt, pl = max((oh - 1) * s + kh - h, 0) // 2, max((ow - 1) * s + kw - w, 0) // 2
        else:
            oh, ow, pt, pl = (h - kh) // s + 1, (w - kw) // s + 1, 0, 0
        return Layer(kind, h, w, ci, oh, ow, co, 0 if kind in (MAXPOOL, AVGPOOL) else act, kh, kw, s, s, pt, pl)

    conv8 = conv(8, 8, 8, 16, 3, 3)
    return [
        ("Dense", "dense 128 -> 32 + ReLU", [dense(128, 32, 1), dense(32, c)]),
        ("Conv1D", "conv 1x3, 16 -> 16 ch, 22 -> 20 steps + ReLU",
         [conv(1, 22, 16, 16, 1, 3, same=False), dense(320, c)]),
        ("Conv2D", "conv 3x3 / 2 same, 8 -> 16 ch, 8x8 -> 4x4 + ReLU",
         [conv(8, 8, 8, 16, 3, 3, s=2), dense(256, c)]),
        ("DepthwiseConv2D", "depthwise 3x3 same, 16 ch, 8x8 + ReLU, then GAP",
         [conv(8, 8, 16, 16, 3, 3, kind=DWCONV), Layer(GAP, 8, 8, 16, 1, 1, 16), dense(16, c)]),
        ("MaxPooling2D", "conv 3x3 same 8 -> 16 ch on 8x8 + ReLU, max pool 2x2",
         [conv8, conv(8, 8, 16, 16, 2, 2, s=2, same=False, kind=MAXPOOL), dense(256, c)]),
        ("AveragePooling2D", "conv 3x3 same 8 -> 16 ch on 8x8 + ReLU, avg pool 2x2",
         [conv8, conv(8, 8, 16, 16, 2, 2, s=2, same=False, kind=AVGPOOL), dense(256, c)]),
        ("GlobalAveragePooling2D", "conv 3x3 same 8 -> 16 ch on 8x8 + ReLU, GAP",
         [conv8, Layer(GAP, 8, 8, 16, 1, 1, 16), dense(16, c)]),
    ]


def _valid_taps(n_out: int, stride: int, pad: int, k: int, n_in: int) -> int:
    """Sum over the outputs of one axis of the kernel taps that fall inside the input."""
    return sum(sum(1 for t in range(k) if 0 <= o * stride - pad + t < n_in) for o in range(n_out))


def layer_macs(l) -> int:
    """Multiply-accumulates of one forward pass of a stage layer (taps in the zero padding are
    skipped, as tol_stage does); 0 for the layers without parameters."""
    from ..learn.stage import CONV, DENSE, DWCONV

    if l.kind == DENSE:
        return l.in_c * l.out_c
    if l.kind in (CONV, DWCONV):
        taps = _valid_taps(l.out_h, l.sh, l.pt, l.kh, l.in_h) * _valid_taps(l.out_w, l.sw, l.pl, l.kw, l.in_w)
        return taps * l.out_c * (l.in_c if l.kind == CONV else 1)
    return 0


def stage_step_macs(layers, batch: int = 17) -> int:
    """Nominal multiply-accumulates of one training step on `batch` samples: every layer's forward,
    the weight gradient of every layer whose weights train, and the input deltas of every layer
    above the first one that trains (backward stops there). ReLU-masked deltas, which tol_stage
    skips, are counted: a nominal figure."""
    from ..learn.stage import TRAIN_ALL, TRAIN_FROZEN

    first = next(i for i, l in enumerate(layers) if l.n_params and l.train != TRAIN_FROZEN)
    per = sum(layer_macs(l) for l in layers)
    per += sum(layer_macs(l) for l in layers if l.n_params and l.train == TRAIN_ALL)
    per += sum(layer_macs(l) for i, l in enumerate(layers) if i > first)
    return batch * per


def stage_bench_header(cases) -> str:
    """stage_bench_case.h for mcu/bench/stage_main.c: the layer lists of `cases` and the sizes the
    harness reserves (the float stage's memory with 32 replay slots, no momentum)."""
    from ..learn.stage import stage_bytes

    lines = ["/* generated by tinyol.bench.tflm_bench.stage_bench_header (bench build) */", "#include <stdint.h>",
             '#include "tol_stage.h"']
    for k, (_, _, layers) in enumerate(cases):
        lines.append(f"static const tol_stage_layer_t sb_layers_{k}[] = {{"
                     + ",".join("{" + ",".join(map(str, l.as_tuple())) + "}" for l in layers) + "};")
    lines.append("static const struct { const tol_stage_layer_t *layers; uint8_t n_layers; } sb_cases[] = {"
                 + ",".join(f"{{sb_layers_{k}, {len(c[2])}u}}" for k, c in enumerate(cases)) + "};")
    mem = max(stage_bytes(layers, STAGE_BENCH_CAP, 8, 1, 16, True) for _, _, layers in cases)
    defs = {"SB_N_CASES": len(cases), "SB_MAX_LAYERS": max(len(c[2]) for c in cases),
            "SB_MAX_PARAMS": max(sum(l.n_params for l in c[2]) for c in cases),
            "SB_MAX_LATENT": max(c[2][0].in_size for c in cases), "SB_MEM": mem,
            "SB_CAP": STAGE_BENCH_CAP, "SB_CLASSES": STAGE_BENCH_CLASSES}
    lines += [f"#define {k} {v}u" for k, v in defs.items()]
    return "\n".join(lines) + "\n"


def run_stage_profile(work: Path, *, timeout: float = 600) -> list[dict]:
    """Instructions of the adaptive stage's prediction and training step (1 + 16, 8-bit replay) per
    layer type, as the float stage ("all") and as the lean stage ("bias": the layers below the
    classifier train their biases only), from mcu/bench/stage_main.c in QEMU; each row with the
    step's nominal MACs (stage_step_macs) and instructions per MAC."""
    import dataclasses

    from ..learn.stage import TRAIN_BIAS

    cases = stage_bench_cases()
    root = project_root()
    b = _bench_dir()
    work.mkdir(parents=True, exist_ok=True)
    (work / "stage_bench_case.h").write_text(stage_bench_header(cases))
    (work / "bench_case.c").write_text("/* no model */\nconst unsigned char tol_bench_unused;\n")
    objs = _rt_objs(work, False)
    inc = [f"-I{root / 'mcu' / 'include'}", f"-I{root / 'mcu' / 'src'}", f"-I{b}", f"-I{work}"]
    for src in [b / "stage_main.c", *(root / "mcu" / "src" / n for n in STAGE_SOURCES)]:
        o = work / f"stage_{src.stem}.o"
        r = subprocess.run([_tool("arm-none-eabi-gcc"), *OURS_CFLAGS, "-Wall", "-Wextra", "-Werror", *inc,
                            "-c", str(src), "-o", str(o)], capture_output=True, text=True)
        if r.returncode != 0:
            raise TinyolError(f"{src.name}: {r.stderr.strip()[-600:]}", hint="see docs/benchmarks.md")
        objs.append(str(o))
    res = _run(_link(objs, work / "stage.elf", stack=8192, echo=print), timeout)
    rows = []
    for k, (kind, what, layers) in enumerate(cases):
        for mode in ("all", "bias"):
            ls = layers if mode == "all" else [
                dataclasses.replace(l, train=TRAIN_BIAS) if l.n_params and i < len(layers) - 1 else l
                for i, l in enumerate(layers)]
            key = f"s{chr(ord('a') + k)}_{mode}"
            step, macs = _instr(res[f"{key}_step"]), stage_step_macs(ls)
            rows.append({"layer": kind, "stage": what, "describe": [l.describe() for l in ls], "mode": mode,
                         "fwd_macs": sum(layer_macs(l) for l in layers), "params": sum(l.n_params for l in layers),
                         "trained": sum(l.n_train for l in ls), "predict": _instr(res[f"{key}_predict"]),
                         "step": step, "step_macs": macs, "per_mac": step / macs})
    return rows


def run_learner_stream(work: Path, header: str, *, timeout: float = 300, main: str = "learner_stream.c",
                       case: str = "learner_case.h", sources=LEARNER_SOURCES,
                       keys=("w", "b")) -> dict[str, bytes]:
    """Build mcu/bench/`main` (learner_stream.c; stage_stream.c for the adaptive stage) with `header`
    (written as `case`) for the M4, run it in QEMU and return the printed arrays ({key: bytes}):
    the test of the M4-only code paths."""
    root = project_root()
    b = _bench_dir()
    work.mkdir(parents=True, exist_ok=True)
    (work / case).write_text(header)
    (work / "bench_case.c").write_text("/* no model */\nconst unsigned char tol_bench_unused;\n")
    objs = _rt_objs(work, False)
    inc = [f"-I{root / 'mcu' / 'include'}", f"-I{root / 'mcu' / 'src'}", f"-I{b}", f"-I{work}"]
    for s in [b / main, *(root / "mcu" / "src" / n for n in sources)]:
        o = work / f"ls_{s.stem}.o"
        r = subprocess.run([_tool("arm-none-eabi-gcc"), *OURS_CFLAGS, "-Wall", "-Wextra", "-Werror", *inc,
                            "-c", str(s), "-o", str(o)], capture_output=True, text=True)
        if r.returncode != 0:
            raise TinyolError(f"{s.name}: {r.stderr.strip()[-600:]}", hint="see docs/benchmarks.md")
        objs.append(str(o))
    elf = _link(objs, work / "learner_stream.elf", stack=8192, echo=print)

    argv = [qemu_binary(), "-M", QEMU_MACHINE, "-nographic", "-monitor", "none", "-serial", "null",
            "-semihosting-config", "enable=on,target=native", "-kernel", str(elf)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    out = {}
    for line in (r.stdout + r.stderr).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in keys:
            out[parts[0]] = bytes.fromhex(parts[1])
    if r.returncode != 0 or set(out) != set(keys):
        raise TinyolError(f"learner stream on the M4 failed (exit {r.returncode}): {(r.stdout + r.stderr)[-300:]}")
    return out


# ---------------------------------------------------------------------------- one model, side by side

@dataclass
class Comparison:
    model: str
    sha16: str
    input_bytes: int
    ours: RunResult | None = None
    ours_ref: RunResult | None = None
    tflm: dict[str, RunResult] = field(default_factory=dict)   # variant -> result
    outputs_equal: bool | None = None
    note: str | None = None
    macs: int | None = None
    latent_bytes: int | None = None
    arena_bytes: int | None = None     # tinyol's arena (manifest)
    learner_bytes: int | None = None   # the on-device learner's RAM (manifest), the same for either runtime
    fc_bound: bool = False         # every MAC-bearing operator is a FULLY_CONNECTED (the 0.6x target)
    fc_weights: str = "int8"       # how the folder's backbone.c stores FULLY_CONNECTED weights
    weights_bytes: int | None = None   # the folder's backbone constants in flash
    fc_alt: str | None = None      # the other FULLY_CONNECTED weight format, measured next to it
    fc_alt_run: RunResult | None = None
    fc_alt_weights_bytes: int | None = None
    cycles: object | None = None       # tinyol.bench.cycles.CycleResult (`bench --cycles`)


def sha16(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def compare_model(model_dir: Path, tree: Tree | None, libs: dict[str, Path], work: Path, *,
                  seed: int = 0, echo=print, ours_kernels=("simd",), timeout: float = 900) -> Comparison:
    """Run `model_dir`'s backbone through TFLM (each built variant) and through tinyol on one input."""
    model_dir = Path(model_dir).resolve()
    manifest = read_manifest(model_dir)
    tfl = (model_dir / "backbone.tflite").read_bytes()
    n_in = int(manifest["input"]["size"])
    x = np.random.default_rng(seed).integers(-128, 128, n_in, dtype=np.int8).tobytes()
    cmp = Comparison(manifest["name"], sha16(model_dir / "backbone.tflite"), n_in,
                     macs=manifest.get("memory", {}).get("macs"), latent_bytes=manifest["latent"]["dim"],
                     arena_bytes=manifest.get("memory", {}).get("arena_bytes"),
                     learner_bytes=manifest.get("memory", {}).get("learner_bytes"))
    mac_ops = {n for n in model_ops(tfl) if n in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")}
    cmp.fc_bound = mac_ops == {"FULLY_CONNECTED"}
    cmp.fc_weights = manifest.get("fc_weights", "int8")
    cmp.weights_bytes = manifest.get("memory", {}).get("weights_bytes")
    arena = tflm_arena_guess(model_dir)
    if "FULLY_CONNECTED" in mac_ops and "simd" in ours_kernels:
        # the other FULLY_CONNECTED weight storage (`tinyol export --fc-weights`), next to the folder's
        cmp.fc_alt = next(f for f in FC_WEIGHTS if f != cmp.fc_weights)
        w = work / f"ours_fc_{cmp.fc_alt}"
        alt_dir = w / "model"
        info = generate_backbone(model_dir / "backbone.tflite", alt_dir, "backbone.tflite", cmp.fc_alt)
        cmp.fc_alt_weights_bytes = info.weights_bytes
        _case_files(w, tfl, x, *arena_layout(arena))
        try:
            cmp.fc_alt_run = run_ours_fitting(alt_dir, "simd", w, timeout=timeout, echo=echo)
            echo(f"  {cmp.model}: tinyol simd, FULLY_CONNECTED weights {cmp.fc_alt}: "
                 f"{cmp.fc_alt_run.instructions:,} instructions, {info.weights_bytes:,} B of constants")
        except TinyolError as e:
            echo(f"  {cmp.model}: FULLY_CONNECTED weights {cmp.fc_alt} not measured: {e}")
    for k in ours_kernels:
        w = work / f"ours_{k}"
        _case_files(w, tfl, x, *arena_layout(arena))
        try:
            r = run_ours_fitting(model_dir, k, w, timeout=timeout, echo=echo)
        except TinyolError as e:
            cmp.note = f"ours ({k}): {e}"
            echo(f"  {cmp.model}: ours ({k}) not measured: {e}")
            continue
        if k == "simd":
            cmp.ours = r
        else:
            cmp.ours_ref = r
        on = "" if r.machine == QEMU_MACHINE else f" (on {r.machine}: its memory does not fit {QEMU_MACHINE})"
        echo(f"  {cmp.model}: tinyol {k}: {r.instructions:,} instructions, stack {r.stack:,} B{on}")
    for variant, lib in libs.items():
        try:
            r = run_tflm_sized(tree, variant, lib, work / f"tflm_{variant}", tfl, x, arena, timeout=timeout,
                               echo=echo)
        except TinyolError as e:
            cmp.note = f"TFLM ({variant}): {e}"
            echo(f"  {cmp.model}: TFLM {variant} not measured: {e}")
            continue
        cmp.tflm[variant] = r
        on = "" if r.machine == QEMU_MACHINE else f" (on {r.machine}: the arena does not fit {QEMU_MACHINE})"
        echo(f"  {cmp.model}: TFLM {variant}: {r.instructions:,} instructions, arena {r.arena:,} B, "
             f"stack {r.stack:,} B{on}")
    outs = [r.output for r in [cmp.ours, cmp.ours_ref, cmp.fc_alt_run, *cmp.tflm.values()] if r is not None]
    if len(outs) >= 2:
        cmp.outputs_equal = all(o == outs[0] for o in outs)
        if not cmp.outputs_equal:
            raise TinyolError(f"{cmp.model}: tinyol's output differs from TFLM's on the same input",
                              hint="the kernels are no longer bit-exact with TFLM: run tests/device/test_kernels.py")
    return cmp

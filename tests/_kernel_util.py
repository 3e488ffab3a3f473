"""Helpers for the kernel / codegen tests: build tiny int8 .tflite models with
TensorFlow's converter (cached per session), generate C with tinyol.model.codegen,
compile it on the host as a shared library and run it through ctypes.

The oracle is always TFLM's Python runtime (tinyol.model.codegen.run_tflm)."""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MCU_INC = ROOT / "mcu" / "include"
KERNELS = ROOT / "mcu" / "src" / "kernels"
STRICT = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wconversion", "-Wdouble-promotion", "-Wshadow"]
# AddressSanitizer + UBSan build of generated code and kernels (the sanitizer tests)
SANITIZE = [*STRICT, "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
ARM_FLAGS = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-O2"]
IMPLS = ("ref", "simd")


def kernel_sources(impl: str) -> list[Path]:
    return sorted((KERNELS / impl).glob("*.c"))


def kernel_objects(impl: str, cc: str, flags: list[str]) -> list[Path]:
    """`impl`'s kernel sources compiled by `cc` with `flags`, once: kept under build/kernel-objs/ by
    a key of the compiler, the flags and every source and header they can include, so each test
    that links a generated backbone compiles only its backbone.c. Each source was always its own
    translation unit (no LTO), so the objects are the ones a one-command build made."""
    key = hashlib.sha256(" ".join([cc, *flags]).encode())
    for f in sorted([*KERNELS.rglob("*"), *(ROOT / "mcu" / "src").glob("*.h"), *MCU_INC.glob("*.h")]):
        if f.is_file():
            key.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    out = ROOT / "build" / "kernel-objs" / f"{impl}-{Path(cc).name}-{key.hexdigest()[:16]}"
    srcs = kernel_sources(impl)
    objs = [out / f"{s.stem}.o" for s in srcs]
    if not all(o.is_file() for o in objs):
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
        for s in srcs:
            subprocess.run([cc, *flags, f"-I{MCU_INC}", "-c", str(s), "-o", str(tmp / f"{s.stem}.o")], check=True)
        try:
            os.rename(tmp, out)            # atomic: a parallel worker's finished folder is never replaced
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return objs


def convert(keras_model, input_shape, seed: int = 0, n_rep: int = 32) -> bytes:
    """Keras model -> int8 .tflite bytes (int8 input/output, per-channel where TF does it)."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)

    def rep():
        for _ in range(n_rep):
            yield [rng.normal(0.0, 1.0, size=(1,) + tuple(input_shape)).astype(np.float32)]

    conv = tf.lite.TFLiteConverter.from_keras_model(keras_model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = rep
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = tf.int8
    conv.inference_output_type = tf.int8
    return conv.convert()


class ModelCache:
    """Builds each named model once per test session."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def get(self, name: str, build, input_shape, seed: int = 0) -> Path:
        path = self.root / f"{name}.tflite"
        if not path.exists():
            import keras

            keras.utils.set_random_seed(seed)
            model = build()
            path.write_bytes(convert(model, input_shape, seed=seed))
        return path


class CBackbone:
    """A generated backbone compiled with one kernel implementation, driven by ctypes."""

    def __init__(self, tflite_path: Path, impl: str, workdir: Path, opt: str = "-O1", fc_weights: str = "int8",
                 conv_pixels: int = 0):
        from tinyol.model import codegen

        self.tflite_path = Path(tflite_path)
        tag = hashlib.sha256(self.tflite_path.read_bytes()).hexdigest()[:10]
        self.dir = Path(workdir) / f"{self.tflite_path.stem}_{tag}_{impl}_{fc_weights}_px{conv_pixels}"
        gen_dir = self.dir / "gen"
        self.gen_dir = gen_dir
        self.info = codegen.generate_backbone(self.tflite_path, gen_dir, self.tflite_path.name, fc_weights,
                                              conv_pixels)
        lib = self.dir / "libbackbone.so"
        cmd = ["gcc", *STRICT, opt, "-shared", "-fPIC", f"-I{MCU_INC}", f"-I{gen_dir}",
               str(gen_dir / "backbone.c"), *map(str, kernel_objects(impl, "gcc", [*STRICT, opt, "-fPIC"])),
               "-o", str(lib)]
        subprocess.run(cmd, check=True, capture_output=False)
        self.lib = ctypes.CDLL(str(lib))
        self.lib.tol_backbone_invoke.restype = ctypes.c_int
        self.lib.tol_backbone_invoke.argtypes = [ctypes.c_void_p, ctypes.c_void_p]

    def run(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(np.asarray(x, dtype=np.int8).reshape(-1, int(np.prod(self.info.input_shape))))
        out = np.zeros((x.shape[0], self.info.latent_size), np.int8)
        for i in range(x.shape[0]):
            rc = self.lib.tol_backbone_invoke(x[i].ctypes.data, out[i].ctypes.data)
            assert rc == 0, f"tol_backbone_invoke returned {rc}"
        return out


def random_inputs(shape, n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(-128, 128, size=(n,) + tuple(shape), dtype=np.int8)


def assert_bit_exact(tflite_path: Path, impl: str, workdir: Path, n: int = 16, seed: int = 1,
                     fc_weights: str = "int8", conv_pixels: int = 0):
    """Compare the generated C (with kernels `impl`) with TFLM on n random inputs."""
    from tinyol.model import codegen

    cb = CBackbone(tflite_path, impl, workdir, fc_weights=fc_weights, conv_pixels=conv_pixels)
    x = random_inputs(cb.info.input_shape, n, seed)
    want = codegen.run_tflm(tflite_path, x).reshape(n, -1)
    got = cb.run(x)
    bad = np.argwhere(want != got)
    assert bad.size == 0, (
        f"{tflite_path.name} [{impl}]: {len(bad)} of {want.size} outputs differ from TFLM "
        f"(first at {bad[0].tolist()}: tflm {want[tuple(bad[0])]} vs C {got[tuple(bad[0])]}; "
        f"max |diff| {np.abs(want.astype(int) - got.astype(int)).max()})")
    return cb


def have_arm_gcc() -> bool:
    return shutil.which("arm-none-eabi-gcc") is not None


# ----------------------------------------------------------------------------- Cortex-M4 in QEMU
# A bare-metal harness for QEMU's mps2-an386 (Cortex-M4F): runs the generated
# backbone on embedded inputs, prints the outputs through semihosting and marks
# the first invoke so the executed instructions can be counted exactly from
# QEMU's one-instruction-per-block execution log.

_M4_START = r"""
#include <stdint.h>
extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _estack;
int main(void);
static int semi(int op, const void *arg)
{
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}
void tol_semi_write0(const char *s) { (void)semi(0x04, s); }
void tol_semi_exit(int code)
{
    const uint32_t a[2] = {0x20026u, (uint32_t)code};
    (void)semi(0x20, a);
    for (;;) {
    }
}
void Reset_Handler(void)
{
    uint32_t *s = &_sidata, *d = &_sdata;
    while (d < &_edata) *d++ = *s++;
    for (d = &_sbss; d < &_ebss;) *d++ = 0;
    *(volatile uint32_t *)0xE000ED88u |= (0xFu << 20);
    tol_semi_exit(main());
}
void Default_Handler(void) { tol_semi_exit(99); }
__attribute__((section(".isr_vector"), used)) void (*const tol_vectors[16])(void) = {
    (void (*)(void))(uintptr_t)&_estack, Reset_Handler, Default_Handler, Default_Handler,
    Default_Handler, Default_Handler, Default_Handler, 0, 0, 0, 0,
    Default_Handler, Default_Handler, 0, Default_Handler, Default_Handler};
"""

_M4_LD = """
MEMORY { FLASH (rx) : ORIGIN = 0x00000000, LENGTH = 4M  RAM (rwx) : ORIGIN = 0x20000000, LENGTH = 4M }
_estack = ORIGIN(RAM) + LENGTH(RAM);
SECTIONS {
  .text : { KEEP(*(.isr_vector)) *(.text*) *(.rodata*) } > FLASH
  _sidata = LOADADDR(.data);
  .data : { _sdata = .; *(.data*) _edata = .; } > RAM AT > FLASH
  .bss (NOLOAD) : { _sbss = .; *(.bss*) *(COMMON) . = ALIGN(4); _ebss = .; } > RAM
}
"""


def have_qemu_m4() -> bool:
    return have_arm_gcc() and shutil.which("qemu-system-arm") is not None


def run_on_m4(tflite_path: Path, impl: str, x: np.ndarray, workdir: Path, count: bool = True,
              fc_weights: str = "int8", conv_pixels: int = 0):
    """Run the generated backbone on Cortex-M4 (QEMU mps2-an386).

    Returns (outputs int8 [n, latent], instructions executed by the first
    tol_backbone_invoke or None)."""
    from tinyol.model import codegen

    workdir = Path(workdir) / f"m4_{Path(tflite_path).stem}_{impl}_{fc_weights}_px{conv_pixels}"
    gen = workdir / "gen"
    info = codegen.generate_backbone(tflite_path, gen, Path(tflite_path).name, fc_weights, conv_pixels)
    x = np.asarray(x, dtype=np.int8).reshape(-1, int(np.prod(info.input_shape)))
    rows = ",\n".join("{" + ",".join(str(int(v)) for v in r) + "}" for r in x)
    main = (
        "#include <stdint.h>\n#include \"backbone.h\"\n"
        "void tol_semi_write0(const char *s);\n"
        "__attribute__((noinline)) void tol_bench_mark(int i) { __asm__ volatile(\"\" : : \"r\"(i)); }\n"
        f"static const int8_t inputs[{len(x)}][TOL_BACKBONE_INPUT_SIZE] = {{\n{rows}\n}};\n"
        "static int8_t latent[TOL_BACKBONE_LATENT_SIZE];\n"
        "static char line[4 * TOL_BACKBONE_LATENT_SIZE + 4];\n"
        "int main(void)\n{\n"
        f"    for (int n = 0; n < {len(x)}; ++n) {{\n"
        "        tol_bench_mark(1);\n"
        "        if (tol_backbone_invoke(inputs[n], latent) != TOL_OK) return 2;\n"
        "        tol_bench_mark(2);\n"
        "        int k = 0;\n"
        "        for (int i = 0; i < TOL_BACKBONE_LATENT_SIZE; ++i) {\n"
        "            const uint8_t b = (uint8_t)latent[i];\n"
        "            line[k++] = \"0123456789abcdef\"[b >> 4];\n"
        "            line[k++] = \"0123456789abcdef\"[b & 15];\n"
        "        }\n"
        "        line[k++] = '\\n';\n        line[k] = 0;\n        tol_semi_write0(line);\n"
        "    }\n    return 0;\n}\n")
    (workdir / "main.c").write_text(main)
    (workdir / "start.c").write_text(_M4_START)
    (workdir / "link.ld").write_text(_M4_LD)
    elf = workdir / "bench.elf"
    subprocess.run(["arm-none-eabi-gcc", *ARM_FLAGS, "-std=c11", "-nostartfiles", "--specs=nano.specs",
                    f"-I{MCU_INC}", f"-I{gen}", "-T", str(workdir / "link.ld"),
                    str(workdir / "start.c"), str(workdir / "main.c"), str(gen / "backbone.c"),
                    *map(str, kernel_objects(impl, "arm-none-eabi-gcc", [*ARM_FLAGS, "-std=c11", "--specs=nano.specs"])),
                    "-o", str(elf), "-lc", "-lgcc"], check=True)
    qemu = ["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-monitor", "none", "-serial", "none",
            "-semihosting-config", "enable=on,target=native", "-kernel", str(elf)]
    res = subprocess.run(["timeout", "120", *qemu], capture_output=True, text=True)
    assert res.returncode == 0, f"QEMU run failed ({res.returncode}): {res.stderr[-500:]}"
    lines = [ln for ln in (res.stdout + res.stderr).split("\n") if ln.strip() and all(c in "0123456789abcdef" for c in ln.strip())]
    out = np.array([[int(ln[i:i + 2], 16) for i in range(0, len(ln), 2)] for ln in lines],
                   dtype=np.uint8).view(np.int8)
    instr = None
    if count:
        mark = int(subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True)
                   .stdout.split("tol_bench_mark")[0].split("\n")[-1].split()[0], 16)
        log = workdir / "exec.log"
        # re-run logging every executed instruction (keep x small: the log grows ~90 B/instruction)
        subprocess.run(["timeout", "300", *qemu, "-accel", "tcg,one-insn-per-tb=on",
                        "-d", "exec,nochain", "-D", str(log)], capture_output=True, text=True)
        pcs = []
        with open(log) as f:
            for n, ln in enumerate(f):
                if ln.startswith("Trace") and f"/{mark:016x}/" in ln:
                    pcs.append(n)
                    if len(pcs) == 2:
                        break
        if len(pcs) == 2:
            # lines between the two marks, minus the mark function's own instructions
            instr = pcs[1] - pcs[0] - 3
        log.unlink(missing_ok=True)
    return out, instr

"""Helpers for the kernel / codegen tests: build tiny int8 .tflite models with
TensorFlow's converter (cached per session), generate C with tinyol.codegen,
compile it on the host as a shared library and run it through ctypes.

The oracle is always TFLM's Python runtime (tinyol.codegen.run_tflm)."""
from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MCU_INC = ROOT / "mcu" / "include"
KERNELS = ROOT / "mcu" / "src" / "kernels"
STRICT = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wconversion", "-Wdouble-promotion", "-Wshadow"]
ARM_FLAGS = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-O2"]
IMPLS = ("ref", "simd")


def kernel_sources(impl: str) -> list[Path]:
    return sorted((KERNELS / impl).glob("*.c"))


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

    def __init__(self, tflite_path: Path, impl: str, workdir: Path, opt: str = "-O1"):
        from tinyol import codegen

        self.tflite_path = Path(tflite_path)
        tag = hashlib.sha256(self.tflite_path.read_bytes()).hexdigest()[:10]
        self.dir = Path(workdir) / f"{self.tflite_path.stem}_{tag}_{impl}"
        gen_dir = self.dir / "gen"
        self.info = codegen.generate_backbone(self.tflite_path, gen_dir, self.tflite_path.name)
        lib = self.dir / "libbackbone.so"
        cmd = ["gcc", *STRICT, opt, "-shared", "-fPIC", f"-I{MCU_INC}", f"-I{gen_dir}",
               str(gen_dir / "backbone.c"), *map(str, kernel_sources(impl)), "-o", str(lib)]
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


def assert_bit_exact(tflite_path: Path, impl: str, workdir: Path, n: int = 16, seed: int = 1):
    """Compare the generated C (with kernels `impl`) with TFLM on n random inputs."""
    from tinyol import codegen

    cb = CBackbone(tflite_path, impl, workdir)
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

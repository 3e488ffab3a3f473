"""The C learner compiled for the Cortex-M4F and run in QEMU equals the numpy
reference learner bit for bit on whole streams. The M4 build takes code paths a
host build never compiles (VMLA/VMLS and VLDM blocks in mcu/src/tol_fmac.h):
this is their oracle test. Shapes cover 4-row and single-row forward blocks,
8-wide gradient blocks with and without a remainder, the one-sample
(autoencoder) update and the momentum path."""
from __future__ import annotations

import shutil
import zlib

import numpy as np
import pytest
from tinyol.learn.learner import (
    HEAD_AUTOENCODER,
    HEAD_CLASSIFIER,
    MODE_REPLAY,
    MODE_SGD,
    Config,
    Learner,
    LearnerError,
    Settings,
)

pytestmark = [pytest.mark.slow, pytest.mark.qemu]

if shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None:
    pytest.skip("needs arm-none-eabi-gcc and qemu-system-arm", allow_module_level=True)


def _f(v) -> str:
    return f"{float(np.float32(v)).hex()}f" if np.isfinite(v) else "0.0f"


def _case(kind, d, c, n, *, cap=0, bits=8, n_old=0, momentum=0.0, wd=0.0, lr=0.05, init=None,
          buffers=None, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 0.3, (c, d)).astype(np.float32)
    b = rng.normal(0, 0.1, c).astype(np.float32)
    q = rng.integers(-128, 128, (n, d), dtype=np.int8)
    y = rng.integers(0, c, n)
    t = rng.integers(-128, 128, (n, c), dtype=np.int8)
    init = c if init is None else init
    buffers = momentum != 0.0 if buffers is None else buffers
    settings = Settings(lr=lr, momentum=momentum, weight_decay=wd, n_old=n_old,
                        mode=MODE_REPLAY if cap else MODE_SGD)
    cfg = Config(latent_dim=d, n_outputs=c, head_kind=kind, init_classes=init, init_weight=w,
                 init_bias=b, latent_scale=0.05, latent_zero_point=-3, target_scale=0.02,
                 target_zero_point=1, replay_capacity=cap, replay_bits=bits, max_old=n_old,
                 no_momentum=not buffers, seed=7, settings=settings)
    arr = lambda name, ty, a: f"static const {ty} {name}[] = {{{','.join(a)}}};\n"
    hdr = "\n".join([
        f"#define LC_KIND {kind}u", f"#define LC_D {d}u", f"#define LC_C {c}u", f"#define LC_N {n}u",
        f"#define LC_CAP {cap}u", f"#define LC_BITS {bits}u", f"#define LC_MAX_OLD {n_old}u",
        f"#define LC_N_OLD {n_old}u", f"#define LC_NO_MOMENTUM {0 if buffers else 1}u",
        f"#define LC_INIT {init}u", f"#define LC_SCALE {_f(0.05)}", "#define LC_ZP (-3)",
        f"#define LC_TSCALE {_f(0.02)}", "#define LC_TZP 1", f"#define LC_LR {_f(lr)}",
        f"#define LC_MOMENTUM {_f(momentum)}", f"#define LC_WD {_f(wd)}", "#define LC_CLIP 0.0f",
        f"#define LC_MODE {MODE_REPLAY if cap else MODE_SGD}u", "#include <stdint.h>", ""])
    hdr += arr("lc_w", "float", [_f(v) for v in w.ravel()]) + arr("lc_b", "float", [_f(v) for v in b])
    hdr += f"static const int8_t lc_q[{n}][{d}] = {{" + ",".join(
        "{" + ",".join(map(str, r)) + "}" for r in q) + "};\n"
    hdr += arr("lc_y", "uint16_t", [str(v) for v in y])
    hdr += f"static const int8_t lc_t[{n}][{c}] = {{" + ",".join(
        "{" + ",".join(map(str, r)) + "}" for r in t) + "};\n"
    ref = Learner(cfg)
    for i in range(n):
        try:
            if kind == HEAD_CLASSIFIER:
                ref.learn(q[i], int(y[i]))
            else:
                ref.anomaly(q[i], t[i])
        except LearnerError:
            pass
    return hdr, ref


CASES = {
    # digits-like: D = 32 (4 blocks of 8), 10 rows (two 4-row blocks + 2 single), 1 + 16
    "replay_d32_c10": dict(kind=HEAD_CLASSIFIER, d=32, c=10, n=60, cap=40, n_old=16, init=5),
    # D = 27: 8-blocks plus a remainder of 3, 7-bit replay through tol_replay_get
    "replay_d27_c7_bits7": dict(kind=HEAD_CLASSIFIER, d=27, c=7, n=50, cap=30, bits=7, n_old=5,
                                wd=1e-3, init=3),
    # the firmware's configuration: momentum buffers allocated, momentum 0
    "buffers_mu0_d32_c10": dict(kind=HEAD_CLASSIFIER, d=32, c=10, n=60, cap=40, n_old=16, init=5,
                                buffers=True),
    "autoencoder_buffers_d8_out64": dict(kind=HEAD_AUTOENCODER, d=8, c=64, n=40, lr=0.01, buffers=True),
    # momentum 0.9
    "momentum_d16_c5": dict(kind=HEAD_CLASSIFIER, d=16, c=5, n=40, cap=20, n_old=3, momentum=0.9),
    # autoencoder: one sample per step, the e x gradient blocks
    "autoencoder_d8_out64": dict(kind=HEAD_AUTOENCODER, d=8, c=64, n=40, lr=0.01, wd=1e-4),
    "autoencoder_d12_out20": dict(kind=HEAD_AUTOENCODER, d=12, c=20, n=30, lr=0.01),
    # momentum buffers, momentum 0, D = 12: the tight commit's block of 8 plus a remainder of 4
    "autoencoder_buffers_d12_out20": dict(kind=HEAD_AUTOENCODER, d=12, c=20, n=30, lr=0.01, wd=1e-4,
                                          buffers=True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_m4_learner_stream_equals_numpy_bit_for_bit(tmp_path, name):
    from tinyol.bench.tflm_bench import run_learner_stream

    seed = zlib.crc32(name.encode())  # fixed across runs (hash() changes with PYTHONHASHSEED)
    print(f"seed {seed}")  # shown with the failure
    hdr, ref = _case(**CASES[name], seed=seed)
    got = run_learner_stream(tmp_path, hdr)
    w = np.frombuffer(got["w"], dtype=np.float32).reshape(ref.head.w.shape)
    b = np.frombuffer(got["b"], dtype=np.float32)
    assert not np.array_equal(ref.head.w, np.asarray(ref.cfg.init_weight, np.float32)), "it learned"
    np.testing.assert_array_equal(w.view(np.uint32), ref.head.w.view(np.uint32))
    np.testing.assert_array_equal(b.view(np.uint32), ref.head.b.view(np.uint32))

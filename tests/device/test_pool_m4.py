"""The SIMD pooling kernels (SXTAB16 window sums, SSUB8 + SEL maxima) built for
the Cortex-M4 and run in QEMU give TFLM's bytes (the `tflite-micro` runtime is
the oracle). A host build compiles their portable C fallbacks instead, so this
is the test of the real DSP instructions. Channel counts 6 and 5 take the
four-channel path plus the scalar remainder."""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.qemu, pytest.mark.tf]


@pytest.mark.parametrize("name", ["avgpool_2", "avgpool_3_s2_same", "maxpool_2", "maxpool_3_s2_same"])
def test_simd_pooling_on_cortex_m4_equals_tflm(tmp_path, name):
    from _kernel_util import ModelCache, have_qemu_m4, random_inputs, run_on_m4
    from test_kernels import CASES
    from tinyol.model import codegen

    if not have_qemu_m4():
        pytest.skip("arm-none-eabi-gcc or qemu-system-arm missing")
    build, shape = CASES[name]
    path = ModelCache(tmp_path / "models").get(name, build, shape)
    x = random_inputs(shape, 4, seed=11)
    want = codegen.run_tflm(path, x).reshape(4, -1)
    got, _ = run_on_m4(path, "simd", x, tmp_path, count=False)
    assert np.array_equal(got, want)

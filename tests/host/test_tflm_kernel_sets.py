"""bench --tflm builds only the kernels a model's operators need (issue 34: a depthwise-only
model, micro_speech, did not link: undefined tflite::kConvBiasTensor). Oracle: TFLM's own
sources in ../shared/tflm: every kConv*/kDepthwise* tensor index a selected kernel file uses
is defined (`const int kX = N;`) in a selected file."""
from __future__ import annotations

import re

import pytest

from conftest import SHARED as _SHARED_DIR

SHARED = _SHARED_DIR / "tflm"  # ../shared/tflm beside the checkout (conftest finds it)


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/tflm is not here")
@pytest.mark.parametrize("ops", [["DEPTHWISE_CONV_2D"], ["CONV_2D"], ["DEPTHWISE_CONV_2D", "FULLY_CONNECTED"]])
def test_a_kernel_set_defines_every_tensor_index_it_uses(ops):
    from tinyol.bench import tflm_bench as T
    tree = T.open_tree(SHARED)
    stems = tuple(sorted({T.HARNESS_OPS[o][1] for o in ops}))
    for variant in ("cmsis_nn", "reference"):
        files = [tree.root / s for s in T.harness_sources(tree, variant, stems) if "/micro/kernels/" in s]
        text = {f: f.read_text(errors="replace") for f in files}
        defined = {m for t in text.values() for m in re.findall(r"^const int (k\w+Tensor)\s*=", t, re.M)}
        used = {m for t in text.values() for m in re.findall(r"\b(kConv\w+Tensor|kDepthwise\w+Tensor)\b", t)}
        assert used <= defined, (variant, ops, sorted(used - defined))

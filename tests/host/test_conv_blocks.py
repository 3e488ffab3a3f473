"""CONV_2D pixel blocks (`scratch_px`, docs/kernels.md): the export's automatic choice never makes
the arena larger than the two-column scratch does, and `conv_pixels` forces a block whatever it
costs. The bit-exactness of the blocked kernel is tests/device/test_kernels.py's
(test_conv_pixel_blocks_*, against TFLM)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from tinyol.errors import TinyolError
from tinyol.model.codegen import generate_sources
from tinyol.model.tflite import load_model

ROOT = Path(__file__).resolve().parents[2]
MLPERF = ROOT.parent / "shared" / "mlperf-tiny"
MODELS = ["kws_ref_model", "vww_96_int8", "resnet_quant"]


def _gen(name: str, conv_pixels: int):
    path = MLPERF / f"{name}.tflite"
    if not path.is_file():
        pytest.skip(f"{path} not here (../shared/mlperf-tiny)")
    files, info = generate_sources(load_model(path), name, "int8", conv_pixels)
    return [int(v) for v in re.findall(r"\.scratch_px = (\d+),", files["backbone.c"])], info


@pytest.mark.parametrize("name", MODELS)
def test_automatic_blocks_cost_no_arena(name):
    two, info2 = _gen(name, 2)
    auto, info0 = _gen(name, 0)
    assert two == [], "conv_pixels=2 asks for the two-column scratch everywhere"
    assert info0.arena_bytes == info2.arena_bytes, (name, info0.arena_bytes, info2.arena_bytes)
    assert all(4 <= n <= 16 and n % 2 == 0 for n in auto), auto
    forced, info8 = _gen(name, 8)
    assert forced and all(4 <= n <= 8 for n in forced), forced
    assert len(forced) >= len(auto)
    assert info8.arena_bytes >= info0.arena_bytes


def test_automatic_blocks_found_where_the_arena_has_room():
    # MobileNet's late layers are small next to its 48x48 ones: their blocks are free
    auto, _ = _gen("vww_96_int8", 0)
    assert len(auto) >= 8 and max(auto) == 16, auto


def test_conv_pixels_refused():
    with pytest.raises(TinyolError, match="even number from 2 to 16"):
        _gen("kws_ref_model", 7)


def test_export_setting_refused():
    from tinyol.model.export import ExportSettings

    for bad in (7, 1, 18):
        with pytest.raises(TinyolError, match="--conv-pixels must be an even number"):
            ExportSettings(conv_pixels=bad).check()
    ExportSettings(conv_pixels=8).check()
    ExportSettings().check()

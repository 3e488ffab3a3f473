"""The model, from a Keras file to the C the firmware compiles: the exported folder (`folder`, the
one reader of manifest.json), `export` and `stage_export`, the .tflite reader (`tflite`),
TFLM's integer maths (`tflm_int8`), the lowering to kernel calls (`codegen`) and every C
literal (`cwriter`). Layer 3: imports the base modules, data and learn.
"""
from .._lazy import exports

_WHERE = {
    "ExportSettings": "export",
    "check_device_model": "folder",
    "check_fit": "plan",
    "check_manifest": "folder",
    "export_model": "export",
    "input_q": "folder",
    "load_manifest": "folder",
    "parse_model": "tflite",
    "quantize": "folder",
    "refresh_config": "export",
    "stage_from_keras": "stage_export",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)

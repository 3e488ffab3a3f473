"""Where samples come from: data sets and sources (files, pipes, the example sets), and the board's
own sensor readings turned into the model's int8 windows (host half of mcu/src/tol_window.c).
Layer 1: imports only the base modules.
"""
from .._lazy import exports

_WHERE = {
    "check_labels": "datasets",
    "fit_layout": "datasets",
    "iter_source": "datasets",
    "load_source": "datasets",
    "parse_line": "datasets",
    "save_npz": "datasets",
    "scale_raw": "sensor",
    "split_spec": "datasets",
    "watch_windows": "datasets",
    "window_starts": "sensor",
    "windows": "sensor",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)

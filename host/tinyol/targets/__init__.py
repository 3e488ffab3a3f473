"""Building and running the firmware: PlatformIO builds (`firmware`, `pio_core`), QEMU and the
native target (`emulator`), Renode (`renode`), and a board without the board: TFLM's runtime
plus the numpy twin (`simulation`). Layer 4: imports base, data, learn and model.
"""
from .._lazy import exports

_WHERE = {
    "BuildConfig": "firmware",
    "build": "firmware",
    "evaluate": "simulation",
    "free_port": "emulator",
    "latents": "simulation",
    "load_model": "simulation",
    "make_learner": "simulation",
    "qemu_binary": "emulator",
    "run_anomaly": "simulation",
    "run_classifier": "simulation",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)

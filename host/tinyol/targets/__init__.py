"""Building and running the firmware: PlatformIO builds (`firmware`, `pio_core`), QEMU and the
native target (`emulator`), Renode (`renode`), and a board without the board: TFLM's runtime
plus the numpy twin (`twin`). Layer 4: imports base, data, learn and model.
"""
from .._lazy import exports

_WHERE = {
    "BuildConfig": "firmware",
    "build": "firmware",
    "evaluate": "twin",
    "free_port": "emulator",
    "latents": "twin",
    "load_model": "twin",
    "make_learner": "twin",
    "qemu_binary": "emulator",
    "run_anomaly": "twin",
    "run_classifier": "twin",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)

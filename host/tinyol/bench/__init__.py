"""The measurements in docs/: backbone and learner benchmarks (`bench`, `tflm_bench`, `icount`),
the studies (`replay`, `depth`, `lean`), the example model zoo (`zoo`) and plots
(`plotting`). Layer 7: imports everything below it; only the CLI imports it.
"""
from .._lazy import exports

_WHERE = {
    "RECIPES": "zoo",
    "Session": "icount",
    "accuracy_curves": "plotting",
    "plot_learning_curve": "plotting",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)

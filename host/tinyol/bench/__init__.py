"""What `tinyol bench` measures with: the backbone and learner benchmarks under QEMU -icount
(`bench`, `icount`), tinyol side by side with TFLM in the bare-metal harness (`tflm_bench`),
the Cortex-M4 cycle estimate (`cycles`) and the streaming throughput on emulated targets
(`stream`). Layer 7: imports everything below it; only the CLI imports it. The studies that
use these (docs/study.md) live beside the product, in studies/tinyol_studies/.
"""
from .._lazy import exports

_WHERE = {
    "Session": "icount",
    "bench_emulators": "stream",
    "bench_model": "bench",
    "bench_stream": "stream",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)

"""`tinyol bench`: deterministic cost of the backbone and the learner.

Every number comes from a firmware run under QEMU with -icount (see
tinyol.bench.icount): instructions, not seconds, so results are identical run to run
and independent of the machine's load. Memory comes from the firmware's own
INFO record (linker symbols) and the exporter's manifest (our arena vs TFLM's).
"""
from __future__ import annotations

import hashlib
import json
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import __version__
from ..errors import TinyolError
from ..link.device import Device
from ..model.folder import read_manifest
from ..paths import project_root
from ..targets.firmware import BuildConfig, build
from .icount import Session

BOARD = "nucleo_l476rg"
# models that need a larger part than the L476RG (their manifest names the board)
MODEL_BOARDS = {"mobilenet_v1_vww": "nucleo_l4r5zi"}

# TensorFlow Lite Micro measured side by side on the same machine and counter (design.md,
# "Performance anchors"): TFLM 90b983c2 + CMSIS-NN 4ab83cc3, QEMU b-l475e-iot01a, -icount shift=7.
# Keyed by sha256(backbone.tflite)[:16]: an anchor belongs to one model file and to no other.
TFLM_ANCHORS = {
    "e45a0e45b14ffd7c": {"model": "digits", "macs": 31_232, "ref": 498_565, "cmsis": 136_585,
                         "arena": 2_356, "flash": 58_388},
    "fcaff228cc9f3cf1": {"model": "anomaly encoder", "macs": 166_912, "ref": 1_061_704, "cmsis": 369_392,
                         "arena": 9_716, "flash": 32_248},
    "1ae9a989f717b787": {"model": "ds_cnn", "macs": 2_656_000, "ref": 43_069_006, "cmsis": 7_692_372,
                         "arena": 22_548, "flash": 63_616},
    "f9f30a3ac55ef941": {"model": "resnet8", "macs": 12_500_992, "ref": 107_358_375, "cmsis": 29_842_731,
                         "arena": 54_724, "flash": 58_476},
    "ac9791f7b00d3328": {"model": "mobilenet_v1_vww", "macs": 7_489_152, "ref": 100_526_039,
                         "cmsis": 24_099_214, "arena": 100_452, "flash": 63_560},
}

# issue 14's targets
TARGET_CONV = 0.55          # conv models vs TFLM + CMSIS-NN
TARGET_FC = 0.60            # FULLY_CONNECTED-bound models
TARGET_TRAIN = 40_000       # train step, 1 new + 16 replayed, D = 32, C = 10
TARGET_AE = 150_000         # 640-output autoencoder step
TARGET_PREDICT = 1_500
FC_BOUND = {"anomaly"}
# TFLM operators tinyol does not run: aliases in its memory plan, and (when they only compute the
# int32 shape of a RESHAPE, as in a converted Flatten) shape-only ops dropped by codegen
_ALIAS_OPS = {"RESHAPE", "SQUEEZE", "EXPAND_DIMS"}      # models whose MACs are (almost) all FULLY_CONNECTED


def backbone_sha16(model_dir: Path) -> str | None:
    p = Path(model_dir) / "backbone.tflite"
    return hashlib.sha256(p.read_bytes()).hexdigest()[:16] if p.is_file() else None


@dataclass
class ModelBench:
    model: str
    kernels: str
    macs: int
    backbone_instr: int | None = None
    predict_instr: int | None = None
    train_instr: int | None = None
    n_old: int | None = None
    flash_used: int | None = None
    ram_used: int | None = None
    ram2_used: int | None = None
    arena_bytes: int | None = None
    tflm_arena_bytes: int | None = None
    latent_dim: int | None = None
    outputs: int | None = None
    trained_layers: int = 1          # > 1: an adaptive stage (docs/adaptive.md)
    error: str | None = None
    sha16: str | None = None
    board: str = BOARD
    input_size: int | None = None
    learner_bytes: int | None = None

    @property
    def instr_per_mac(self) -> float | None:
        return self.backbone_instr / self.macs if self.backbone_instr and self.macs else None


def _fill_replay(dev: Device, rng: np.random.Generator, n: int) -> None:
    classes = max(1, min(dev.info.max_classes, 10))
    for i in range(n):
        x = rng.integers(-128, 128, dev.info.input_size, dtype=np.int8)
        dev.sample(x, i % classes)


def bench_model(model_dir: str, kernels: str, *, echo=print, seed: int = 0) -> ModelBench:
    root = project_root()
    path = Path(model_dir) if Path(model_dir).is_absolute() else root / model_dir
    manifest = read_manifest(path)
    mem = manifest.get("memory", {})
    board = MODEL_BOARDS.get(manifest["name"]) or manifest.get("board") or BOARD
    r = ModelBench(manifest["name"], kernels, int(mem.get("macs", 0)),
                   arena_bytes=mem.get("arena_bytes"), tflm_arena_bytes=mem.get("tflm_arena_bytes"),
                   latent_dim=manifest["latent"]["dim"],
                   outputs=manifest["head"].get("out_dim") or manifest["head"].get("max_classes"),
                   trained_layers=len(manifest.get("stage", {}).get("layers", [None])),
                   sha16=backbone_sha16(path), board=board,
                   input_size=manifest.get("input", {}).get("size"), learner_bytes=mem.get("learner_bytes"))
    try:
        res = build(BuildConfig(board, str(model_dir), kernels, test_build=True))
    except TinyolError as e:
        lines = str(e).splitlines()
        r.error = next((l.split("ld: ")[-1] for l in lines if "overflowed by" in l), lines[-1])[:200]
        echo(f"  {r.model}/{kernels}: does not build for {board}: {r.error}")
        return r
    rng = np.random.default_rng(seed)
    try:
        return _measure(r, board, res.elf, manifest, rng, echo)
    except TinyolError as e:
        r.error = f"does not run in QEMU's STM32L475 machine (96 + 32 KB SRAM): {str(e).splitlines()[0][:160]}"
        echo(f"  {r.model}/{kernels}: {r.error}")
        return r


def _measure(r: ModelBench, board: str, elf, manifest: dict, rng, echo) -> ModelBench:
    with Session(board, elf) as s:
        dev = Device(s.link)
        info = dev.info
        r.flash_used, r.ram_used, r.ram2_used = info.flash_used, info.ram_used, info.ram2_used
        x = rng.integers(-128, 128, info.input_size, dtype=np.int8)
        dev.embed(x)                       # loads the input and computes its latent
        if manifest.get("memory", {}).get("macs"):
            r.backbone_instr = s.instructions(2)
        r.predict_instr = s.instructions(3)
        if info.head_mode == "classifier":
            r.n_old = int(dev.get("n_old"))
            _fill_replay(dev, rng, max(2 * r.n_old, 8))
            dev.embed(x)
        r.train_instr = s.instructions(4)
    echo(f"  {r.model}/{r.kernels}: backbone {r.backbone_instr} instr"
         + (f" ({r.instr_per_mac:.2f}/MAC)" if r.instr_per_mac else "")
         + f", predict {r.predict_instr}, train step {r.train_instr}")
    return r


# ---- a learner-only model with a 256-value latent --------------------------------------

def latent256_model(out: Path, dim: int = 256, classes: int = 10, capacity: int = 64, bits: int = 8) -> Path:
    """A synthetic model directory for benchmarking the learner at D=256.

    Its "backbone" copies the int8 input to the latent (no computation), so only
    BENCH regions 3 (predict) and 4 (train step) are meaningful for it.
    """
    out.mkdir(parents=True, exist_ok=True)
    banner = f"/* generated by tinyol {__version__} from tinyol.bench.bench (learner-only benchmark model) — do not edit */\n"
    (out / "config.h").write_text(banner + textwrap.dedent(f"""\
        #ifndef TOL_CONFIG_H
        #define TOL_CONFIG_H
        #define TOL_MODEL_NAME "latent{dim}"
        #define TOL_MODEL_HASH 0u
        #define TOL_INPUT_SIZE {dim}
        #define TOL_LATENT_DIM {dim}
        #define TOL_INPUT_SCALE 0.0078125f
        #define TOL_INPUT_ZERO_POINT 0
        #define TOL_LATENT_SCALE 0.0078125f
        #define TOL_LATENT_ZERO_POINT 0
        #define TOL_HEAD_MODE 0
        #define TOL_HEAD_OUT_DIM 0
        #define TOL_HEAD_INIT_CLASSES 0
        #define TOL_HEAD_MAX_CLASSES {classes}
        #define TOL_REPLAY_CAPACITY {capacity}
        #define TOL_REPLAY_BITS {bits}
        #define TOL_LR 0.05f
        #define TOL_MOMENTUM 0.0f
        #define TOL_WEIGHT_DECAY 0.0f
        #define TOL_REPLAY_N_NEW 1
        #define TOL_REPLAY_N_OLD 4
        #define TOL_SEED 1u
        #endif
        """))
    (out / "backbone.h").write_text(banner + textwrap.dedent(f"""\
        #ifndef TOL_BACKBONE_H
        #define TOL_BACKBONE_H
        #include <stdint.h>
        #include "tol_status.h"
        #define TOL_BACKBONE_INPUT_SIZE {dim}
        #define TOL_BACKBONE_LATENT_SIZE {dim}
        tol_status_t tol_backbone_invoke(const int8_t *input, int8_t *latent);
        #endif
        """))
    (out / "backbone.c").write_text(banner + textwrap.dedent("""\
        #include <string.h>
        #include "backbone.h"
        tol_status_t tol_backbone_invoke(const int8_t *input, int8_t *latent)
        {
            memcpy(latent, input, TOL_BACKBONE_LATENT_SIZE);
            return TOL_OK;
        }
        """))
    (out / "head_init.c").write_text(banner + textwrap.dedent("""\
        #include "config.h"
        const float tol_head_init_weight[TOL_HEAD_MAX_CLASSES * TOL_LATENT_DIM] = {0};
        const float tol_head_init_bias[TOL_HEAD_MAX_CLASSES] = {0};
        """))
    (out / "manifest.json").write_text(json.dumps({
        "name": f"latent{dim}", "latent": {"dim": dim}, "head": {"mode": "classifier", "max_classes": classes},
        "memory": {"macs": 0}, "synthetic": "learner-only benchmark model: identity backbone"}, indent=2))
    return out


# ---- report ---------------------------------------------------------------------------

def _stage_rows(rows: list[dict]) -> list[str]:
    """The adaptive stage's cost per layer type (tinyol.bench.tflm_bench.run_stage_profile)."""
    lines = ["", "## Adaptive stage: training step per layer type", "",
             "mcu/bench/stage_main.c: each stage is the layer under test followed by a Dense classifier",
             "(10 classes, all active), one training step = 1 fresh + 16 replayed latents (8-bit replay,",
             "32 slots), no momentum; \"all\" trains every parameter (the float stage), \"bias\" is the lean",
             "stage (`--stage-train bias`: the layers below the classifier train their biases only, their",
             "weights stay in flash). Nominal MACs of a step = 17 x (every layer's forward + the weight",
             "gradients of the layers whose weights train + the input deltas above the first layer that",
             "trains); tol_stage skips ReLU-masked and zero deltas, so fewer are done (a max pool passes",
             "one delta in four back to its convolution). The pooling rows share the Conv2D 3x3 in front",
             "of the pool: compare them with each other. Instructions per MAC include everything (replay",
             "draws and dequantization, softmax, the SGD pass and its finiteness check).", "",
             "| layer type | stage | params (trained) | forward MACs / sample | prediction | training step | nominal MACs / step | instr / MAC |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        stage = " → ".join(r["describe"])
        lines.append(f"| {r['layer']} ({r['mode']}) | {stage} | {_fmt(r['params'])} ({_fmt(r['trained'])}) "
                     f"| {_fmt(r['fwd_macs'])} | {_fmt(r['predict'])} | {_fmt(r['step'])} "
                     f"| {_fmt(r['step_macs'])} | {r['per_mac']:.2f} |")
    return lines


def _fmt(n) -> str:
    return "–" if n is None else (n if isinstance(n, str) else f"{n:,}")


def _ratio(a, b) -> str:
    return f"{a / b:.3f}x" if a and b else "–"


def _mcyc(n) -> str:
    return "–" if n is None else f"{n / 1e6:.3f} M"


def _cycles_section(compare: dict) -> list[str]:
    """Estimated Cortex-M4 cycles (`tinyol bench --cycles`, tinyol.bench.cycles) beside the published
    silicon figures of the MLPerf Tiny reference models."""
    from . import cycles as cy

    rows = [(m, c) for m, c in compare.items() if c is not None and getattr(c, "cycles", None) is not None]
    if not rows:
        return []
    l4r5, l476 = cy.BOARDS["nucleo_l4r5zi"].name, cy.BOARDS["nucleo_l476rg"].name
    zw = cy.ZERO_WAIT.name
    lines = ["", "## Cycles: estimated Cortex-M4 cycles per inference (`tinyol bench --cycles`)", "",
             "The same harness ELFs as above, traced instruction by instruction (unicorn) and priced with the",
             "Cortex-M4 TRM's timings plus the STM32L4 flash wait states and ART accelerator (model and",
             "uncertainty: docs/benchmarks-cycles.md). The instruction column is the trace's own count of the",
             "same region: QEMU -icount's above less its SysTick-wrap interrupts (a few instructions per 1.6 M",
             "instructions; the trace has no interrupts). \"range\" re-prices every taken branch at P = 1 and",
             "P = 3 (the TRM's pipeline-refill range). X-CUBE-AI: the best published MLPerf Tiny closed-division",
             "latency on the NUCLEO-L4R5ZI at 120 MHz as cycles (../shared/mlperf-tiny/README.md); only the",
             "MLPerf reference model files (matched by sha256) have one.", "",
             "| model | MACs | tinyol instr | tinyol cycles, zero-wait | tinyol L4R5ZI 120 MHz (range) | ms "
             "| TFLM + CMSIS-NN L4R5ZI | X-CUBE-AI published L4R5ZI | tinyol / X-CUBE-AI | tinyol L476RG 80 MHz "
             "| TFLM + CMSIS-NN L476RG | tinyol / TFLM (L4R5ZI) |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for m, c in rows:
        r = c.cycles
        o, t = r.ours, r.tflm
        pub = cy.PUBLISHED.get(c.sha16)
        oc = o.cycles[l4r5] if o else None
        lo, hi = o.low_high(l4r5) if o else (None, None)
        lines.append(
            f"| {m} | {_fmt(c.macs)} | {_fmt(o.instr if o else None)} | {_mcyc(o.cycles[zw] if o else None)} "
            f"| {_mcyc(oc)} ({_mcyc(lo)} – {_mcyc(hi)}) | {oc / 120e3:.2f} |" if o else f"| {m} | – | – | – | – | – |")
        lines[-1] += (f" {_mcyc(t.cycles[l4r5] if t else None)} | {_mcyc(pub[2]) + ' (' + pub[1] + ')' if pub else '–'} "
                      f"| {_ratio(oc, pub[2]) if pub else '–'} | {_mcyc(o.cycles[l476] if o else None)} "
                      f"| {_mcyc(t.cycles[l476] if t else None)} | {_ratio(oc, t.cycles[l4r5] if t else None)} |")
    lines += ["", "Per operator, estimated cycles on the NUCLEO-L4R5ZI (120 MHz, 5 WS), tinyol vs TFLM + CMSIS-NN,",
              "and cycles per instruction (CPI) of each side: where the time goes.", "",
              "| model | # | operator | tinyol cycles | tinyol CPI | TFLM + CMSIS-NN cycles | TFLM CPI | ratio |",
              "|---|--:|---|--:|--:|--:|--:|--:|"]
    for m, c in rows:
        r = c.cycles
        ours = list(r.ours_ops)
        k = 0
        for i, (name, t) in enumerate(r.tflm_ops):
            o = None
            if name not in _ALIAS_OPS and k < len(ours) and ours[k][0] == name:
                o = ours[k][1]
                k += 1
            if o is None:
                continue
            oc, tc = o.cycles[l4r5], t.cycles[l4r5]
            lines.append(f"| {m} | {i} | {name} | {_fmt(oc)} | {oc / max(o.instr, 1):.2f} | {_fmt(tc)} "
                         f"| {tc / max(t.instr, 1):.2f} | {_ratio(oc, tc)} |")
    lines += ["", "Where the memory stalls come from (whole harness run, NUCLEO-L4R5ZI): instruction-fetch stall",
              "cycles and flash data-read stall cycles.", "",
              "| model | side | fetch stall | I-cache hits | prefetch hits | fetch misses | data stall | D-cache hits | D-cache misses |",
              "|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    for m, c in rows:
        for side, st in c.cycles.stats.items():
            s4 = st.get(l4r5)
            if s4:
                lines.append(f"| {m} | {'tinyol' if side == 'ours' else 'TFLM + CMSIS-NN'} | {_fmt(s4['fetch_stall'])} "
                             f"| {_fmt(s4['icache_hits'])} | {_fmt(s4['prefetch_hits'])} | {_fmt(s4['fetch_misses'])} "
                             f"| {_fmt(s4['data_stall'])} | {_fmt(s4['dcache_hits'])} | {_fmt(s4['dcache_misses'])} |")
    val = [(m, c) for m, c in rows if c.sha16 in cy.PUBLISHED_CMSIS and c.cycles.tflm]
    if val:
        lines += ["", "Validation (docs/benchmarks-cycles.md): published NUCLEO-L4R5ZI latencies of older CMSIS-NN stacks",
                  "on the same model files, as cycles at 120 MHz, beside this model's estimate for the TFLM + CMSIS-NN",
                  "built here; the estimate must lie below them (newer kernels) and above X-CUBE-AI.", "",
                  "| model | TFLM 2.3.1 + CMSIS-NN (MLPerf v0.5 reference) | microTVM + CMSIS-NN (v1.1, Krai) "
                  "| estimate: TFLM + CMSIS-NN built here | X-CUBE-AI |", "|---|--:|--:|--:|--:|"]
        for m, c in val:
            old_ref, tvm = cy.PUBLISHED_CMSIS[c.sha16]
            lines.append(f"| {m} | {_mcyc(old_ref)} | {_mcyc(tvm)} | {_mcyc(c.cycles.tflm.cycles[l4r5])} "
                         f"| {_mcyc(cy.PUBLISHED[c.sha16][2])} |")
    return lines


def _fc_weights_section(compare: dict) -> list[str]:
    """The FULLY_CONNECTED weight-storage trade (`tinyol export --fc-weights`), measured side by side."""
    rows = [(m, c) for m, c in compare.items() if c is not None and c.ours and c.fc_alt_run]
    if not rows:
        return []
    lines = ["", "## FULLY_CONNECTED weights: int8 (default) or int16 (`tinyol export --fc-weights int16`)", "",
             "The same backbone with its FULLY_CONNECTED weights stored pre-widened to int16 (twice their flash,",
             "no SXTB16 widening in the MAC loop: `tol_fully_connected_s8w16`), run in the same harness on the same",
             "input; outputs byte-equal to the int8 build and to TFLM. Constants: the whole backbone's (weights, biases,",
             "requantization), as the memory model counts them for the flash estimate.",
             "",
             "| model | FC weights | tinyol SIMD | vs TFLM + CMSIS-NN | FULLY_CONNECTED ops | backbone constants (flash) |",
             "|---|---|--:|--:|--:|--:|"]
    for m, c in rows:
        t = c.tflm.get("cmsis_nn")
        tcm = t.instructions if t else None
        runs = {c.fc_weights: (c.ours, c.weights_bytes), c.fc_alt: (c.fc_alt_run, c.fc_alt_weights_bytes)}
        base_b = runs.get("int8", (None, None))[1]
        for fmt in ("int8", "int16"):
            r, wb = runs.get(fmt, (None, None))
            if r is None:
                continue
            fc = sum(v for n, v in r.ops if n == "FULLY_CONNECTED")
            extra = f" (+{wb - base_b:,})" if fmt != "int8" and wb is not None and base_b is not None else ""
            lines.append(f"| {m} | {fmt}{' (default)' if fmt == 'int8' else ''} | {_fmt(r.instructions)} "
                         f"| {_ratio(r.instructions, tcm)} | {_fmt(fc)} | {_fmt(wb)}{extra} |")
    return lines


def _target_line(name: str, value, target, ok_text: str, why: str, fmt=_fmt, le=True) -> str:
    if value is None:
        return f"- {name}: not measured ({why})"
    met = value <= target if le else value < target
    if met:
        return f"- {name}: **met** — {fmt(value)} (target {'≤' if le else '<'} {fmt(target)}){ok_text}"
    return f"- {name}: **missed** — {fmt(value)} vs {fmt(target)}, gap {fmt(value - target) if fmt is _fmt else f'{value - target:+.3f}'}. {why}"


# What a real board's link carries (8N1: 10 bits per byte). 115200 is the firmware's default;
# 921600 is a rate the ST-LINK/V2-1 VCP (Nucleo-L476RG/L432KC, B-L475E-IOT01A) and common host
# drivers accept; the firmware's USART at 80 MHz (oversampling 16) reaches 5 Mbaud.
LINK_BAUDS = (115_200, 921_600)
CPU_HZ = 80_000_000


def _frame_bytes(input_size: int, stream: list[dict] | None) -> tuple[float, float]:
    """(bytes out, bytes in) per SAMPLE exchange for an input of `input_size` int8 values: the
    measured digits frames (64 input bytes) with the input part swapped, else the protocol's
    fixed part (header 6 + CRC 4 + COBS 1 + delimiter 1 + label/encoding 3; reply 30)."""
    out_fixed, reply = 15.0, 30.0
    st = next((r for r in stream or [] if r.get("bytes_out_per_sample")), None)
    if st:
        out_fixed, reply = st["bytes_out_per_sample"] - 64, st["bytes_in_per_sample"]
    return input_size + out_fixed + input_size // 254, reply


# What stands in the way of the 0.55x / 0.6x targets, per example model (from the per-operator
# table and docs/kernels.md's profiles).
_IN_THE_WAY = {
    "digits": "Two small CONV_2Ds (9-72 MACs per output) are requantization-bound (~11-12 instructions "
              "per output plus per-filter-pair set-up: 0.62x / 0.69x per operator), and the "
              "FULLY_CONNECTED (0.83x) widens int8 weights in its loop (int16 weights: next line); 0.55x "
              "needs requantization under ~5 instructions per output.",
    "digits_adaptive": "The same two requantization-bound CONV_2Ds as digits (0.62x / 0.69x).",
    "anomaly": "With the default int8 weights every FULLY_CONNECTED widens its weights with SXTB16 in the loop "
               "(27 instructions per 16 MACs, ~1.8 per MAC with requantization); 0.6x needs < 1.3 per MAC, "
               "which the int16-weight export reaches (next line) at twice the weight flash.",
    "ds_cnn": "Pointwise CONV_2Ds at 0.80x (64 filters x 64 channels: 1.25/MAC loop floor of int8 weights plus "
              "requantization) and the 3x3 depthwise at 0.68x (~2.5 instructions per MAC in the tap loop).",
    "resnet8": "CONV_2D (all of the MACs) already runs its inner loop at the 1.25 instructions/MAC floor "
               "of int8 weights (0.69-0.75x per operator); below that needs int16 weights in flash.",
    "mobilenet_v1_vww": "The pointwise CONV_2Ds (half of the instructions) run at 0.74-0.81x per operator: the "
                        "1.25/MAC loop floor of int8 weights plus ~11 instructions per output of requantization "
                        "(the per-layer table now covers their 128-256 channels); the depthwise layers on small "
                        "maps reach only 0.75-0.92x.",
}


def _board_section(results: list[ModelBench], compare: dict, stream: list[dict] | None) -> list[str]:
    rows = [r for r in results if r.kernels == "simd" and r.train_instr and r.input_size]
    if not rows and not any(c is not None and c.ours for c in compare.values()):
        return []
    lines = ["", "## On a board: time at 80 MHz and samples per second while learning", "",
             "Time = instructions / 80 MHz: a **floor** — a real STM32L4 at 80 MHz runs flash with 4 wait states",
             "(the ART accelerator hides most, not all), and loads, `SMLAD`'s neighbours, divisions and taken",
             "branches take more than one cycle, so a board needs somewhat longer (QEMU counts instructions, not",
             "cycles). A learning sample costs backbone + prediction + training step (firmware, SIMD kernels).",
             "Sustained samples/s is the lower of what the CPU allows (that floor) and what the serial link carries",
             "for the SAMPLE frames (8N1; the busier direction bounds it; frame sizes as measured for digits, the",
             "input part swapped). 115200 baud is the firmware's default; 921600 is a rate the boards' ST-LINK/V2-1",
             "USB VCP accepts (the L4R5ZI's STLINK-V3E goes higher) — the firmware's baud would have to be raised.",
             "",
             "| model | backbone, ms (floor) | TFLM+CMSIS-NN backbone, ms | sample (backbone + predict + train), instr "
             "| ms (floor) | CPU-bound samples/s | bytes out / in | samples/s at 115200 | at 921600 |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        c = compare.get(r.model)
        t = c.tflm.get("cmsis_nn") if c is not None else None
        bb = r.backbone_instr or 0
        total = bb + (r.predict_instr or 0) + r.train_instr
        cpu = CPU_HZ / total
        out_b, in_b = _frame_bytes(r.input_size, stream)
        link = [baud / 10 / max(out_b, in_b) for baud in LINK_BAUDS]
        sust = [f"{min(cpu, lk):,.0f}{' (link)' if lk < cpu else ' (CPU)'}" for lk in link]
        lines.append(f"| {r.model} | {bb / CPU_HZ * 1e3:.3f} | "
                     f"{(f'{t.instructions / CPU_HZ * 1e3:.3f}' if t else '–')} | {total:,} | {total / CPU_HZ * 1e3:.3f} "
                     f"| {cpu:,.0f} | {out_b:.0f} / {in_b:.0f} | {sust[0]} | {sust[1]} |")
    return lines


def render(results: list[ModelBench], stream: list[dict] | None = None, *, compare: dict | None = None,
           tflm_source: str | None = None, learner: dict | None = None) -> str:
    """docs/benchmarks.md. `compare`: model -> tflm_bench.Comparison (live TFLM), else anchors."""
    compare = compare or {}
    live = any(c is not None and c.tflm for c in compare.values())
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `tinyol bench` (tinyol {__version__}); do not edit by hand. Instruction counts come",
        "from firmware and harness runs in QEMU 10 (`b-l475e-iot01a`, Cortex-M4F) with `-icount shift=7`",
        "(SysTick advances with executed instructions: exact and repeatable); the measurement overhead",
        "is subtracted. Firmware: arm-none-eabi-gcc 12, -O2, for the board named per row.",
        "",
        "TFLM comparisons are " + (
            f"**measured live** by `tinyol bench --tflm {tflm_source}`: TensorFlow Lite Micro built from that "
            "tree with CMSIS-NN kernels" + (" (and with its reference kernels)" if any(
                c is not None and "reference" in c.tflm for c in compare.values()) else
                " (its reference-kernel build was not measured in this run: the TFLM ref column shows "
                "design.md's anchors where the model file matches one)") + ", linked into our bare-metal harness "
            "(mcu/bench/) on the same QEMU machine and counter, fed the same input as tinyol's backbone; every "
            "output byte was compared (see \"outputs\")." if live else
            "the **anchors** of design.md (TFLM 90b983c2 + CMSIS-NN 4ab83cc3, same machine and counter), "
            "matched to a model by the sha256 of its `backbone.tflite`: a model whose file changed has "
            "**no anchor** until it is measured again (`tinyol bench --tflm DIR`)."),
        "",
        "## Backbone: instructions per inference",
        "",
        "| model | backbone.tflite sha256[:16] | MACs | tinyol ref kernels | tinyol SIMD | SIMD instr/MAC "
        "| TFLM ref | TFLM + CMSIS-NN | SIMD vs CMSIS-NN | outputs |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    by = {(r.model, r.kernels): r for r in results}
    models = list(dict.fromkeys(r.model for r in results if r.macs))
    for m in compare:
        if m not in models:
            models.append(m)
    ratios = {}
    for m in models:
        ref, simd = by.get((m, "ref")), by.get((m, "simd"))
        base = simd or ref
        c = compare.get(m)
        sha = (base.sha16 if base else None) or (c.sha16 if c else None)
        simd_i = simd.backbone_instr if simd and simd.backbone_instr else (c.ours.instructions if c and c.ours else None)
        macs = (base.macs if base else None) or (getattr(c, "macs", None) if c else None) or (TFLM_ANCHORS.get(sha, {}).get("macs"))
        if c is not None and c.tflm:
            t_ref = c.tflm.get("reference")
            t_cm = c.tflm.get("cmsis_nn")
            a = TFLM_ANCHORS.get(sha or "", {})
            tref, tcm = (t_ref.instructions if t_ref else None), (t_cm.instructions if t_cm else None)
            if tref is None and a.get("ref"):
                tref = f"{a['ref']:,} (anchor)"
            outs = "byte-equal" if c.outputs_equal else ("–" if c.outputs_equal is None else "DIFFER")
        else:
            a = TFLM_ANCHORS.get(sha or "", {})
            tref, tcm = a.get("ref"), a.get("cmsis")
            outs = "anchor" if a else "no anchor"
        if tcm and simd_i:
            ratios[m] = simd_i / tcm
        err = next((r.error for r in (ref, simd) if r and r.error and not r.backbone_instr), None)
        ours_ref = ref.backbone_instr if ref and ref.backbone_instr else None
        per_mac = f"{simd_i / macs:.2f}" if simd_i and macs else "–"
        note = f" (harness; the firmware: {err.replace('`', chr(39))})" if err else ""
        lines.append(f"| {m} | `{sha or '–'}` | {_fmt(macs)} | {_fmt(ours_ref)} | {_fmt(simd_i)}{note} | {per_mac} "
                     f"| {_fmt(tref)} | {_fmt(tcm)} | {_ratio(simd_i, tcm)} | {outs} |")
    diffs = []
    for m, c in compare.items():
        a = TFLM_ANCHORS.get(c.sha16 if c else "", {})
        if c is None or not a:
            continue
        for v, key in (("cmsis_nn", "cmsis"), ("reference", "ref")):
            if v in c.tflm:
                diffs.append(f"{m} {v} {c.tflm[v].instructions - a[key]:+,}")
    if diffs:
        lines += ["", "Live TFLM counts minus design.md's anchors for the same model files (instructions): "
                  + ", ".join(diffs) + "."]
    if any(c is not None and c.ours and c.tflm.get("cmsis_nn") for c in compare.values()):
        lines += ["", "## Per operator: tinyol SIMD vs TFLM + CMSIS-NN (live)", "",
                  "Each operator timed inside the harnesses (TFLM: every registration's invoke wrapped in a",
                  "timer; tinyol: every kernel call of a copy of backbone.c). RESHAPE is free in tinyol (it aliases), and so",
                  "are the SHAPE/STRIDED_SLICE/PACK ops of a converted Flatten (codegen drops them).",
                  "",
                  "| model | # | operator | tinyol SIMD | TFLM + CMSIS-NN | ratio |",
                  "|---|--:|---|--:|--:|--:|"]
        for m, c in compare.items():
            if c is None or not c.ours or "cmsis_nn" not in c.tflm:
                continue
            ours_ops = list(c.ours.ops)
            k = 0
            for i, (name, t) in enumerate(c.tflm["cmsis_nn"].ops):
                o = None
                if name not in _ALIAS_OPS and k < len(ours_ops) and ours_ops[k][0] == name:
                    o = ours_ops[k][1]
                    k += 1
                free = "0 (alias)" if name in _ALIAS_OPS else "0 (shape only: dropped)"
                lines.append(f"| {m} | {i} | {name} | {_fmt(o) if o is not None else free} | {_fmt(t)} "
                             f"| {_ratio(o, t) if o else '–'} |")
    lines += _cycles_section(compare)
    lines += _fc_weights_section(compare)
    lines += ["", "## Memory (like with like)", "",
              "TFLM's `arena_used_bytes` includes its input/output tensors and metadata; tinyol's arena",
              "excludes the caller's input and latent buffers, so both are shown, plus the peak stack of one",
              "inference (measured: the harness paints the stack, runs the model, and finds the deepest",
              "overwritten word; it includes one SysTick interrupt frame, ≤ 104 B). Flash is the whole harness",
              "image (runtime, kernels, model constants) — the firmware's own figures follow. Peak RAM adds the",
              "on-device learner's memory (head weights, replay buffer, scratch: the manifest's `learner_bytes`),",
              "which a TFLM-based firmware would need just the same: tinyol = arena + input + latent + stack +",
              "learner; TFLM = arena used (includes its input/output tensors) + stack + learner.",
              "",
              "| model | tinyol arena | + input + latent | tinyol peak stack | TFLM arena used | TFLM peak stack "
              "| peak RAM tinyol / TFLM+CMSIS-NN | harness flash tinyol / TFLM+CMSIS-NN | firmware flash "
              "| firmware SRAM1 / SRAM2 |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m in models:
        r = by.get((m, "simd")) or by.get((m, "ref"))
        c = compare.get(m)
        sha = (r.sha16 if r else None) or (c.sha16 if c else None)
        a = TFLM_ANCHORS.get(sha or "", {})
        arena = r.arena_bytes if r else None
        if arena is None and c is not None:
            arena = getattr(c, "arena_bytes", None)     # measured by the harness only
        latent = (r.latent_dim if r else None) or getattr(c, "latent_bytes", None)
        io = (arena + c.input_bytes + (latent or 0)) if (arena is not None and c) else None
        t = c.tflm.get("cmsis_nn") if c else None
        learner_b = (r.learner_bytes if r else None) or getattr(c, "learner_bytes", None) or 0
        peak_ours = io + c.ours.stack + learner_b if (io is not None and c and c.ours) else None
        peak_tflm = t.arena + t.stack + learner_b if (t and t.arena) else None
        lines.append(
            f"| {m} | {_fmt(arena)} | {_fmt(io)} | {_fmt(c.ours.stack if c and c.ours else None)} "
            f"| {_fmt(t.arena if t else a.get('arena'))}{'' if t else (' (anchor)' if a else '')} "
            f"| {_fmt(t.stack if t else None)} | {_fmt(peak_ours)} / {_fmt(peak_tflm)} "
            f"| {_fmt(c.ours.flash if c and c.ours else None)} / {_fmt(t.flash if t else None)} "
            f"| {_fmt(r.flash_used if r else None)} | {_fmt(r.ram_used if r else None)} / {_fmt(r.ram2_used if r else None)} |")
    lines += ["", "## Learner: instructions per prediction and per training step", "",
              "A training step is one SGD update on 1 fresh + `n_old` replayed latents (8-bit replay storage),",
              "including the replay buffer update; a prediction is the head's forward pass and softmax.",
              "The autoencoder's step is one MSE update of its 640-output reconstruction layer, no replay.",
              "The replayed samples go through the head as one batch (four rows x two samples per register",
              "block: each block of weights is loaded once for two samples), then softmax and errors per sample.",
              "The gradient is formed once per step (a batch of one: e_r x_j inline; larger batches: into a",
              "rows x D scratch, five rows x four columns of sums in registers), every multiply-add is the",
              "M4F's VMLA/VMLS (rounds like the separate multiply and add, so the numpy twin is unchanged",
              "and bit-identical) with VLDM block loads;",
              "a step checks every new weight before committing any (two passes over the weights), except that",
              "a step on one sample (the autoencoder) skips the check pass when a magnitude bound proves no new",
              "value can overflow (same committed values), and then commits in one tight row loop. The commit",
              "pass stores without accumulating the check; with momentum 0 the momentum buffers are written,",
              "never read or scanned (0 x a finite buffer adds nothing).",
              "`latent256` is a learner-only model (identity backbone) for the D = 256 case.",
              "",
              "| model | trained layers | latent D | outputs (classes or reconstruction) | prediction | training step | n_old |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if r.kernels != "simd" or r.error or r.predict_instr is None:
            continue
        lines.append(f"| {r.model} | {r.trained_layers} | {r.latent_dim} | {_fmt(r.outputs)} | {_fmt(r.predict_instr)} | {_fmt(r.train_instr)} | {_fmt(r.n_old)} |")
    if learner:
        lines += ["", "Where a training step goes (mcu/bench/learner_main.c: a digits-shaped learner, D = 32, C = 10,",
                  "all 10 classes active, 1 + 16; and a D = 8, 640-output autoencoder head):", "",
                  "| part | instructions |", "|---|---:|"]
        names = {"train_step": "train step (whole)", "part_forward": "forward, one sample (320 MACs)",
                 "part_softmax": "softmax, one sample", "part_grad_add_ce": "the fresh sample: forward + softmax + errors",
                 "part_grad_add_x16": "16 replayed samples as one batch: forward + softmax + errors", "part_replay_get_x16": "16 replay rows drawn and dequantized",
                 "part_step": "gradient (5,440 MACs, once, 5 x 4 blocks) + check pass + commit pass", "part_replay_add": "replay buffer update",
                 "predict": "prediction (10 active classes)", "ae_step": "autoencoder step (whole)",
                 "ae_score": "autoencoder score (forward 5,120 MACs + MSE)", "ae_part_step": "autoencoder update (check + commit, 5,120 weights)"}
        for k, v in learner.items():
            if k in names:
                lines.append(f"| {names[k]} | {_fmt(v)} |")
    if learner and learner.get("cycles"):
        from . import cycles as cy

        cyc = learner["cycles"]
        lines += ["", "The same learner harness priced by the cycle model (`--cycles`; docs/benchmarks-cycles.md):",
                  "estimated Cortex-M4 cycles. The float learner's CPI is high: VMLA/VMLS issue in 3 cycles",
                  "on the M4 (TRM), VLDM/VSTM in 1 + N.", "",
                  "| part | instructions | " + " | ".join(f"cycles, {cy.BOARDS[b].name}" for b in cyc) + " |",
                  "|---|---:|" + "---:|" * len(cyc)]
        for k, v in learner.items():
            if k in names:
                lines.append(f"| {names[k]} | {_fmt(v)} | " + " | ".join(_fmt(cyc[b].get(k)) for b in cyc) + " |")
    if learner and learner.get("stage"):
        lines += _stage_rows(learner["stage"])
    if stream:
        lines += ["", "## Streaming throughput (end to end)", "",
                  "`tinyol stream` in train mode (SAMPLE: predict, then learn; int8 inputs) over the emulators'",
                  "sockets, `window` requests in flight. Emulator sockets have no baud limit. A board's ST-Link VCP",
                  "at 115200 baud (8N1: 11,520 bytes/s each way, full duplex: the busier direction bounds it)",
                  "allows the rate in the \"115200-baud limit\" column for the same frames (it is the same for",
                  "every board: the frames depend on the model, not the board); the last column is the measured",
                  "rate as a fraction of that limit (> 1: the emulator link is faster than a real UART, i.e. neither",
                  "the host nor the device is the bottleneck at 115200 baud). Wall-clock rates depend on this",
                  "machine (2 shared cores); see docs/streaming.md. A QEMU rate below 1.0x is the emulator's",
                  "instruction-by-instruction CPU on a shared machine, not the host client: the same client",
                  "drives the native build several times faster than a 115200-baud link could carry.",
                  "",
                  "| target | window | samples/s | bytes/s (both ways) | bytes/sample out / in | 115200-baud limit, samples/s | measured / limit |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for st in stream:
            frac = st['samples_per_s'] / st['uart_samples_per_s'] if st.get('uart_samples_per_s') else None
            lines.append(f"| {st['target']} | {st['window']} | {st['samples_per_s']:.0f} | {st['bytes_per_s']:.0f} "
                         f"| {st['bytes_out_per_sample']:.0f} / {st['bytes_in_per_sample']:.0f} "
                         f"| {st['uart_samples_per_s']:.0f} | {f'{frac:.1f}x' if frac else '–'} |")
    lines += _board_section(results, compare, stream)
    # ---- targets (issue 14)
    lines += ["", "## Targets", ""]
    for m in models:
        if m not in ratios:
            continue
        c = compare.get(m)
        tgt = TARGET_FC if m in FC_BOUND or getattr(c, "fc_bound", False) else TARGET_CONV
        lines.append(_target_line(f"{m} backbone vs TFLM + CMSIS-NN", ratios[m], tgt, "",
                                  (_IN_THE_WAY.get(m, "") + " See docs/kernels.md: the remaining instructions "
                                   "and the SMLAD floor.").strip(),
                                  fmt=lambda v: f"{v:.3f}x"))
        t = c.tflm.get("cmsis_nn") if c is not None else None
        if c is not None and c.fc_alt == "int16" and c.fc_alt_run and t:
            extra = (c.fc_alt_weights_bytes - c.weights_bytes) if c.weights_bytes is not None else None
            lines.append(_target_line(f"{m} with `--fc-weights int16` ({_fmt(extra)} more bytes of flash)",
                                      c.fc_alt_run.instructions / t.instructions, tgt, "",
                                      "Its convolutions, not the FULLY_CONNECTED, are what stands in the way "
                                      "(line above).", fmt=lambda v: f"{v:.3f}x"))
    slower = []
    for m, c in compare.items():
        if c is None or not c.ours or "cmsis_nn" not in c.tflm:
            continue
        ours_ops = [o for o in c.ours.ops]
        k = 0
        for i, (name, t) in enumerate(c.tflm["cmsis_nn"].ops):
            if name in _ALIAS_OPS:
                continue
            if k < len(ours_ops) and ours_ops[k][0] == name:
                if ours_ops[k][1] > t:
                    slower.append(f"{m} #{i} {name} {ours_ops[k][1] / t:.2f}x")
                k += 1
    if live:
        lines.append("- never slower than CMSIS-NN on a single operator: " + (
            "**met** (every operator measured above is below 1.0x)" if not slower else
            "**missed** — " + ", ".join(slower) + " (see docs/kernels.md)"))
    dig = by.get(("digits", "simd"))
    ae = by.get(("anomaly", "simd"))
    if dig is None and ae is None:      # a user's model folder: no learner targets to report
        lines += _reproducing()
        return "\n".join(lines)
    lines.append(_target_line("train step (1 + 16, D = 32, C = 10), digits firmware", dig.train_instr if dig else None,
                              TARGET_TRAIN, " (was 186,134; 49,727 before the batched forward and the 5 x 4 "
                              "gradient blocks)",
                              "Where it goes (table above): the fresh sample's forward + softmax + errors, the 16 "
                              "replayed ones as one batch, the gradient over 17 samples formed once (5,440 MACs) "
                              "with the check and commit passes, 16 replay rows dequantized."))
    lines.append(_target_line("autoencoder step (640 outputs)", ae.train_instr if ae else None, TARGET_AE,
                              " (was 595,120)",
                              "The update now skips its check pass when a bound proves no new weight or momentum "
                              "can overflow (every old value finite and below 2^65, the gradient below "
                              "max|e| max|x|: ~2 instructions per value instead of ~8 per weight; the committed "
                              "values are the same, so the numpy twin is unchanged): update 176,747 -> 151,348 "
                              "instructions in the harness. What remains: the score's forward (5,120 MACs, ~40 k) "
                              "and the commit pass over 5,120 weights and their momentum buffers (~7 instructions "
                              "per weight plus ~50 of set-up per row of only 8 weights). Next: the whole row loop "
                              "in assembly.", le=False))
    lines.append(_target_line("prediction (digits)", dig.predict_instr if dig else None, TARGET_PREDICT,
                              " (was 2,374)", "dequantization, finite check and softmax around the 320-MAC forward.",
                              le=False))
    lines += _reproducing()
    return "\n".join(lines)


def _reproducing() -> list[str]:
    return ["", "## Reproducing", "",
              "`make bench` (= `tinyol bench --tflm ../shared/tflm` when that folder exists). `--tflm DIR` takes a",
              "folder holding a `SOURCES.txt` (source lists, include dirs, defines and flags per build, the format",
              "of ../shared/tflm's tarball; point it at your own tflite-micro checkout by writing one) or the",
              "tarball itself. Only TFLM's core, CMSIS-NN and the kernels of the operators tinyol exports are",
              "compiled (`tflm_bench.HARNESS_OPS`: every operator codegen accepts, plus the SHAPE/STRIDED_SLICE/",
              "PACK/... a converted Flatten leaves in the file); the harness registers the ones the model uses,",
              "as a TFLM user would, and grows its arena (doubling from the exporter's estimate) until",
              "AllocateTensors succeeds; an arena QEMU's b-l475e-iot01a cannot hold, not even split over",
              "its SRAM1 and SRAM2 (100-120 KB, issue 34), is measured on QEMU's mps2-an386 (a Cortex-M4 with",
              "4 MB of SRAM: mcu/bench/bench_mps2.ld; instructions from SysTick at its 25 MHz, the same count",
              "for the same code as on the L475: tests/device/test_bench_machines.py). The libraries are",
              "cached under `build/tflm/`, keyed by the tree's",
              "SOURCES.txt, the toolchain and that kernel set. A model folder anywhere:",
              "`tinyol bench --model DIR --tflm ../shared/tflm [--no-firmware]` (report in DIR/benchmarks.md).",
              "`--no-firmware` alone re-measures only the side-by-side and keeps the last run's firmware rows.",
              "Debian's arm-none-eabi toolchain has no C++ library: the harness borrows the",
              "host's header-only libstdc++ parts with four bare-metal configuration headers of ours",
              "(mcu/bench/cxx_shim/) and links without libstdc++ (TFLM is built -fno-exceptions -fno-rtti).",
              "`tinyol bench --rerender` rewrites this file from the last run's saved results.",
              ""]

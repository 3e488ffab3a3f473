"""`tinyol bench`: instruction counts under QEMU -icount, memory, throughput."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import sys
from pathlib import Path

import click

from ..checks import output_file
from ..errors import TinyolError
from ..bench.stream import bench_emulators
from ..options import emit_json
from ..paths import models_dir, project_dir
from ..bench import bench, tflm_bench

DEFAULT_MODELS = ("digits", "digits_adaptive", "anomaly", "ds_cnn", "resnet8", "mobilenet_v1_vww")


@click.command("bench")
@click.option("--models", default=",".join(DEFAULT_MODELS), show_default=True,
              help="Comma-separated model names under models/.")
@click.option("--model", "model_dirs", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="A model folder written by `tinyol export` (anywhere; repeatable): measure it instead of "
                   "the example models. Skips the learner-only and streaming benchmarks; the report goes "
                   "to DIR/benchmarks.md unless --out says otherwise.")
@click.option("--kernels", default="ref,simd", show_default=True, help="Kernel sets to compare.")
@click.option("--tflm", "tflm_dir", type=click.Path(exists=True), default=None, envvar="TINYOL_TFLM",
              help="TFLM + CMSIS-NN source tree (a folder with SOURCES.txt, or its .tar.xz, e.g. "
                   "../shared/tflm): build it and measure every model side by side. Without it, the "
                   "TFLM columns are the anchors of design.md matched by backbone.tflite hash.")
@click.option("--tflm-variants", default="cmsis_nn,reference", show_default=True,
              help="TFLM builds to measure with --tflm.")
@click.option("--no-firmware", is_flag=True,
              help="Skip the firmware builds and runs (per-model rows, learner, streaming): with --tflm, only "
                   "the bare-metal harness side by side. For the example models the report keeps the "
                   "firmware results of the last run (build/bench/last_run.pkl), if there is one.")
@click.option("--no-latent256", is_flag=True, help="Skip the learner benchmark at latent size 256.")
@click.option("--stream/--no-stream", default=None,
              help="Also measure streaming throughput (default: on, off with --model).")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Markdown report to write [default: docs/benchmarks.md; with --model: DIR/benchmarks.md].")
@click.option("--cycles", "cycles", is_flag=True,
              help="With --tflm: also estimate Cortex-M4 cycles of both harness runs (tinyol, TFLM + "
                   "CMSIS-NN) on the NUCLEO-L4R5ZI (120 MHz, 5 WS) and the NUCLEO-L476RG (80 MHz, 4 WS): "
                   "the TRM's instruction timings plus flash wait states and the ART accelerator "
                   "(tinyol.bench.cycles; needs the [cycles] extra). Results are cached per ELF.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw results as JSON.")
@click.option("--rerender", is_flag=True,
              help="Write the report again from the last run's saved results (build/bench/last_run.pkl).")
def cmd(models, model_dirs, kernels, tflm_dir, tflm_variants, no_firmware, no_latent256, stream, out, cycles,
        as_json, rerender):
    """Measure every example model's backbone and the learner, deterministically.

    \b
    Builds each model's firmware (nucleo_l476rg; mobilenet_v1_vww: nucleo_l4r5zi)
    with the reference and SIMD kernels, runs it in QEMU with -icount and counts
    instructions per inference, per prediction and per training step. With
    --tflm DIR, also builds TensorFlow Lite Micro and runs each model through it
    and through tinyol in a bare-metal harness on the same machine: instructions
    (total and per operator), arena, peak stack, flash, output bytes compared.
    Writes docs/benchmarks.md.
    """
    if as_json:  # stdout is the JSON alone: progress, and whatever a build prints, to stderr
        with _stdout_to_stderr():
            return _cmd(models, model_dirs, kernels, tflm_dir, tflm_variants, no_firmware, no_latent256, stream,
                        out, cycles, as_json, rerender, echo=lambda *a, **k: click.echo(*a, err=True, **k))
    return _cmd(models, model_dirs, kernels, tflm_dir, tflm_variants, no_firmware, no_latent256, stream, out,
                cycles, as_json, rerender, echo=click.echo)


_REAL_STDOUT: list = []


@contextlib.contextmanager
def _stdout_to_stderr():
    """File descriptor 1 onto 2 (child processes included) until the JSON is written."""
    sys.stdout.flush()
    saved = os.dup(1)
    _REAL_STDOUT.append(saved)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        _REAL_STDOUT.pop()


def _emit_json_stdout(obj) -> None:
    """emit_json to the real stdout (fd 1 is stderr while measuring)."""
    sys.stdout.flush()
    if _REAL_STDOUT:
        cur = os.dup(1)
        os.dup2(_REAL_STDOUT[-1], 1)
        try:
            emit_json(obj)
            sys.stdout.flush()
        finally:
            os.dup2(cur, 1)
            os.close(cur)
    else:
        emit_json(obj)


def _last_run(saved: Path) -> dict:
    """The last run's saved results; one clear line when they are unreadable (a run of an
    older tinyol pickled classes that have moved since, e.g. tinyol.studies.bench's)."""
    try:
        return pickle.loads(saved.read_bytes())
    except (ImportError, AttributeError, EOFError, pickle.UnpicklingError) as e:
        raise TinyolError(f"{saved}: the last run's results cannot be read ({e})",
                          hint="run `tinyol bench` once more to measure again (it rewrites the file)") from None


def _cmd(models, model_dirs, kernels, tflm_dir, tflm_variants, no_firmware, no_latent256, stream, out, cycles,
         as_json, rerender, *, echo):
    saved = project_dir() / "build" / "bench" / "last_run.pkl"
    if cycles and not tflm_dir and not rerender:
        raise TinyolError("--cycles needs --tflm DIR (it prices the side-by-side harness runs)",
                          hint="tinyol bench --tflm ../shared/tflm --cycles")
    if out is None:
        out = str(Path(model_dirs[0]) / "benchmarks.md") if model_dirs else "docs/benchmarks.md"
    output_file(out, "--out")  # before hours of measuring
    if stream is None:
        stream = not model_dirs and not no_firmware
    if rerender:
        if not saved.is_file():
            raise TinyolError("no saved results to render", hint="run `tinyol bench` first")
        state = _last_run(saved)
        Path(out).write_text(bench.render(state["results"], state["stream"], compare=state["compare"],
                                          tflm_source=state["src"], learner=state["learner"]))
        echo(f"wrote {out}")
        return
    if model_dirs:
        dirs = [Path(d).resolve() for d in model_dirs]
        for d in dirs:
            if not (d / "manifest.json").is_file() or not (d / "backbone.tflite").is_file():
                raise TinyolError(f"{d}: not a model folder (no manifest.json / backbone.tflite)",
                                  hint="export one first: tinyol export MODEL.keras --out DIR")
    else:
        dirs = [models_dir() / m for m in models.split(",") if m]
    names = [d.name for d in dirs]
    results = []
    for d in ([] if no_firmware else dirs):
        for k in [k for k in kernels.split(",") if k]:
            echo(f"measuring {d.name} ({k} kernels) ...")
            results.append(bench.bench_model(str(d), k, echo=echo))
    if model_dirs or no_firmware:
        no_latent256 = True
    if not no_latent256:
        echo("measuring the learner at latent size 256 ...")
        d = bench.latent256_model(project_dir() / "build" / "bench" / "latent256")  # the user's folder
        results.append(bench.bench_model(str(d), "simd", echo=echo))
    work = project_dir() / "build" / "bench"  # the user's folder
    learner = None
    if not model_dirs and not no_firmware:
        echo("measuring the learner by part (harness) ...")
        learner = tflm_bench.run_learner_profile(work / "learner")
        if cycles:
            from ..bench import cycles as cycle_model

            learner["cycles"] = {b: cycle_model.printed_cycles(work / "learner" / "learner.elf", b,
                                                               cache=work / "cycles-cache")
                                 for b in cycle_model.CYCLE_BOARDS}
        echo("measuring the adaptive stage per layer type (harness) ...")
        learner["stage"] = tflm_bench.run_stage_profile(work / "stage")
    compare = {}
    if tflm_dir:
        tree = tflm_bench.open_tree(tflm_dir)
        # only the kernels these models' operators need: the first build on a user's model
        # compiles a fraction of TFLM (each kernel set is cached on its own)
        ops = sorted({o for d in dirs for o in tflm_bench.model_ops((d / "backbone.tflite").read_bytes())})
        libs = {}
        for v in [v for v in tflm_variants.split(",") if v]:
            if v not in tflm_bench.VARIANTS:
                raise TinyolError(f"unknown TFLM variant {v!r}", hint=f"use {', '.join(tflm_bench.VARIANTS)}")
            libs[v] = tflm_bench.build_library(tree, v, ops=ops, echo=echo)
        for d in dirs:
            echo(f"side by side with TFLM: {d.name} ...")
            c = tflm_bench.compare_model(d, tree, libs, work / "tflm" / d.name, echo=echo)
            if cycles:
                from ..bench import cycles as cycle_model

                echo(f"  estimating Cortex-M4 cycles: {d.name} ...")
                c.cycles = cycle_model.measure(work / "tflm" / d.name, echo=echo)
            compare[c.model] = c
    stream_rows = None
    if stream:
        echo("measuring streaming throughput (native and QEMU, windows 1 and 4) ...")
        stream_rows = bench_emulators()
        for r in stream_rows:
            echo(f"  {r['target']} window {r['window']}: {r['samples_per_s']:.0f} samples/s, "
                       f"{r['bytes_per_s']:.0f} bytes/s")
    src = None
    if tflm_dir:
        # as the user wrote it (../shared/tflm is a symlink: resolving it would show its target)
        src = os.path.normpath(tflm_dir) if not os.path.isabs(tflm_dir) else os.path.relpath(tflm_dir, project_dir())
    if no_firmware and not model_dirs and saved.is_file():
        last = _last_run(saved)
        results, stream_rows, learner = last["results"], last["stream"], last["learner"]
        echo("firmware rows, learner and streaming: from the last run (build/bench/last_run.pkl)")
    if not model_dirs:          # a user's model folder never replaces the example models' last run
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_bytes(pickle.dumps({"results": results, "stream": stream_rows, "compare": compare,
                                        "src": src, "learner": learner}))
    report = bench.render(results, stream_rows, compare=compare, tflm_source=src, learner=learner)
    Path(out).write_text(report)
    echo(f"wrote {out}")
    if as_json:
        _emit_json_stdout({"models": [dataclasses.asdict(r) for r in results], "stream": stream_rows,
                   "learner": learner,
                   "tflm": {m: _plain(dataclasses.asdict(c)) if c else None for m, c in compare.items()}})


def _plain(v):
    """JSON-ready: bytes (harness outputs) as hex."""
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v

"""`tinyol bench`: instruction counts under QEMU -icount, memory, throughput."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import click

from ..options import emit_json
from ..paths import project_root

DEFAULT_MODELS = ("digits", "anomaly", "ds_cnn", "resnet8", "mobilenet_v1_vww")


@click.command("bench")
@click.option("--models", default=",".join(DEFAULT_MODELS), show_default=True,
              help="Comma-separated model names under models/.")
@click.option("--kernels", default="ref,simd", show_default=True, help="Kernel sets to compare.")
@click.option("--tflm", "tflm_dir", type=click.Path(exists=True), default=None, envvar="TINYOL_TFLM",
              help="TFLM + CMSIS-NN source tree (a folder with SOURCES.txt, or its .tar.xz, e.g. "
                   "../shared/tflm): build it and measure every model side by side. Without it, the "
                   "TFLM columns are the anchors of design.md matched by backbone.tflite hash.")
@click.option("--tflm-variants", default="cmsis_nn,reference", show_default=True,
              help="TFLM builds to measure with --tflm.")
@click.option("--no-latent256", is_flag=True, help="Skip the learner benchmark at latent size 256.")
@click.option("--stream/--no-stream", default=True, help="Also measure streaming throughput.")
@click.option("--out", type=click.Path(dir_okay=False), default="docs/benchmarks.md", show_default=True,
              help="Markdown report to write.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw results as JSON.")
def cmd(models, kernels, tflm_dir, tflm_variants, no_latent256, stream, out, as_json):
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
    from .. import bench, tflm_bench

    names = [m for m in models.split(",") if m]
    results = []
    for name in names:
        for k in [k for k in kernels.split(",") if k]:
            click.echo(f"measuring {name} ({k} kernels) ...")
            results.append(bench.bench_model(f"models/{name}", k, echo=click.echo))
    if not no_latent256:
        click.echo("measuring the learner at latent size 256 ...")
        d = bench.latent256_model(project_root() / "build" / "bench" / "latent256")
        results.append(bench.bench_model(str(d), "simd", echo=click.echo))
    work = project_root() / "build" / "bench"
    click.echo("measuring the learner by part (harness) ...")
    learner = tflm_bench.run_learner_profile(work / "learner")
    compare = {}
    if tflm_dir:
        tree = tflm_bench.open_tree(tflm_dir)
        libs = {}
        for v in [v for v in tflm_variants.split(",") if v]:
            if v not in tflm_bench.VARIANTS:
                from ..errors import TinyolError
                raise TinyolError(f"unknown TFLM variant {v!r}", hint=f"use {', '.join(tflm_bench.VARIANTS)}")
            libs[v] = tflm_bench.build_library(tree, v, echo=click.echo)
        for name in names:
            click.echo(f"side by side with TFLM: {name} ...")
            compare[name] = tflm_bench.compare_model(project_root() / "models" / name, tree, libs,
                                                     work / "tflm" / name, echo=click.echo)
    stream_rows = None
    if stream:
        from ..stream import bench_emulators

        click.echo("measuring streaming throughput (native and QEMU, windows 1 and 4) ...")
        stream_rows = bench_emulators()
        for r in stream_rows:
            click.echo(f"  {r['target']} window {r['window']}: {r['samples_per_s']:.0f} samples/s, "
                       f"{r['bytes_per_s']:.0f} bytes/s")
    src = None
    if tflm_dir:
        src = os.path.relpath(Path(tflm_dir).resolve(), project_root())
    report = bench.render(results, stream_rows, compare=compare, tflm_source=src, learner=learner)
    Path(out).write_text(report)
    click.echo(f"wrote {out}")
    if as_json:
        emit_json({"models": [dataclasses.asdict(r) for r in results], "stream": stream_rows,
                   "learner": learner,
                   "tflm": {m: dataclasses.asdict(c) if c else None for m, c in compare.items()}})

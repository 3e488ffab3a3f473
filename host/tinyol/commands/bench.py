"""`tinyol bench`: instruction counts under QEMU -icount, memory, throughput."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from ..options import emit_json
from ..paths import project_dir

DEFAULT_MODELS = ("digits", "anomaly", "ds_cnn", "resnet8")


@click.command("bench")
@click.option("--models", default=",".join(DEFAULT_MODELS), show_default=True,
              help="Comma-separated model names under models/.")
@click.option("--kernels", default="ref,simd", show_default=True, help="Kernel sets to compare.")
@click.option("--no-latent256", is_flag=True, help="Skip the learner benchmark at latent size 256.")
@click.option("--stream/--no-stream", default=True, help="Also measure streaming throughput.")
@click.option("--out", type=click.Path(dir_okay=False), default="docs/benchmarks.md", show_default=True,
              help="Markdown report to write.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw results as JSON.")
def cmd(models, kernels, no_latent256, stream, out, as_json):
    """Measure every example model's backbone and the learner, deterministically.

    \b
    Builds each model's firmware for nucleo_l476rg with the reference and SIMD
    kernels, runs it in QEMU with -icount and counts instructions per
    inference, per prediction and per training step; writes docs/benchmarks.md.
    """
    from .. import bench

    results = []
    for name in [m for m in models.split(",") if m]:
        for k in [k for k in kernels.split(",") if k]:
            click.echo(f"measuring {name} ({k} kernels) ...")
            results.append(bench.bench_model(f"models/{name}", k, echo=click.echo))
    if not no_latent256:
        click.echo("measuring the learner at latent size 256 ...")
        d = bench.latent256_model(project_dir() / "build" / "bench" / "latent256")  # the user's folder
        results.append(bench.bench_model(str(d), "simd", echo=click.echo))
    stream_rows = None
    if stream:
        from ..stream import bench_emulators

        click.echo("measuring streaming throughput (native and QEMU, windows 1 and 4) ...")
        stream_rows = bench_emulators()
        for r in stream_rows:
            click.echo(f"  {r['target']} window {r['window']}: {r['samples_per_s']:.0f} samples/s, "
                       f"{r['bytes_per_s']:.0f} bytes/s")
    report = bench.render(results, stream_rows)
    Path(out).write_text(report)
    click.echo(f"wrote {out}")
    if as_json:
        emit_json({"models": [dataclasses.asdict(r) for r in results], "stream": stream_rows})

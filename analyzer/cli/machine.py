"""Commands about this machine: `env` (torch, CUDA, driver, GPUs) and `bench` (measured ceilings)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from analyzer.cli.app import app, console, fail
from analyzer.errors import GpuAnalyzeError


@app.command("env")
def env_cmd() -> None:
    """Check torch, CUDA, the driver and the GPUs; never fails on a machine without a GPU."""
    from analyzer.machine.env import check_env
    from analyzer.render.env import render_env

    console().print(render_env(check_env()))


@app.command("bench")
def bench_cmd(
    which: Annotated[str, typer.Argument(help="memory, copy, matmul, launch, allreduce, dataloader or all.")] = "all",
    backend: Annotated[str, typer.Option(help="auto, cupy, numba or cpu.")] = "auto",
    quick: Annotated[bool, typer.Option("--quick", help="Smaller sizes and fewer repeats.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Also write the JSON results here.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out if it exists.")] = False,
) -> None:
    """Measure this machine's ceilings; results are saved where `gpuanalyze TRACE` finds them."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from analyzer.machine.ceilings import default_path
    from analyzer.render.bench import render_bench, render_bench_json
    from gpuanalyze.kernels.suite import run_bench, save

    if out is not None and out.exists() and not force:
        fail(f"{out} exists; pass --force to overwrite it")
    try:
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        ) as progress:
            task = progress.add_task("starting", total=None)
            report = run_bench(
                which,
                backend,
                quick=quick,
                progress=lambda name: progress.update(task, description=f"benchmark: {name}"),
            )
    except GpuAnalyzeError as exc:
        fail(str(exc))
    for path in (default_path(), out):
        if path is not None:
            try:
                save(report, path)
            except OSError as exc:
                fail(f"cannot write {path}: {exc.strerror}")
    if json_out:
        typer.echo(render_bench_json(report))
    else:
        console().print(render_bench(report))
    if report.failed:
        raise typer.Exit(1)

"""Commands about this machine: `env` (torch, CUDA, driver, GPUs) and `bench` (measured ceilings)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer

from analyzer.cli import options
from analyzer.cli.base import app, console, fail, note
from analyzer.errors import GpuAnalyzeError
from analyzer.render.safe import clean


@app.command("env")
def env_cmd() -> None:
    """Check torch, CUDA, the driver and the GPUs; never fails on a machine without a GPU."""
    from analyzer.machine.env_check import check_env
    from analyzer.render.env import render_env

    console().print(render_env(check_env()))


@app.command("bench")
def bench_cmd(
    which: Annotated[str, typer.Argument(help="matmul, allreduce or all.")] = "all",
    backend: Annotated[str, typer.Option(help="auto, cupy or cpu.")] = "auto",
    quick: Annotated[bool, typer.Option("--quick", help="Smaller sizes and fewer repeats.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Also write the JSON results here.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out if it exists.")] = False,
    width: options.Width = None,
) -> None:
    """Measure this machine's ceilings; results are merged into the file `gpuanalyze TRACE` reads,
    under this machine's fingerprint."""
    from analyzer.files import check_target
    from analyzer.machine.ceilings_store import default_path, prepare_directory
    from analyzer.render.bench import render_bench, render_bench_json
    from analyzer.render.console import report_console
    from gpuanalyze.kernels.suite import run_bench, save_ceilings, write_report

    store = default_path()
    said = report_console(width, stderr=json_out)
    try:
        # before measuring: a bad --out or ceilings location fails at once and creates nothing
        if out is not None:
            check_target(out, force=force)
        prepare_directory(store)
        check_target(store, force=True)
        # a line as each suite ends, on stderr: a pipe or a CI log sees the run go on
        report = run_bench(which, backend, quick=quick, progress=lambda line: note(f"bench: {line}", err=True))
        # a Ctrl-C while the results print still saves nothing
        if json_out:
            typer.echo(render_bench_json(report))
        else:
            report_console(width).print(render_bench(report))
        if out is not None:
            write_report(report, out, force=force)
            said.print("wrote the report to", markup=False)
            said.print(clean(f"  {out}"), markup=False, soft_wrap=True)  # a path is never folded
        saved = save_ceilings(report, store)
    except GpuAnalyzeError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        _interrupted()
    if saved:
        said.print(
            clean(f"saved {', '.join(saved)} for {report.fingerprint.describe()} (other results kept) in"), markup=False
        )
        said.print(clean(f"  {store}"), markup=False, soft_wrap=True)
    if report.failed:
        raise typer.Exit(1)


def _interrupted() -> NoReturn:
    """Ctrl-C: one line and exit status 130, as a shell reports SIGINT; nothing is saved."""
    typer.echo("gpuanalyze: interrupted; nothing saved", err=True)
    raise typer.Exit(130)

"""The `gpuanalyze` command: thin wrappers that call the library and render its results."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from typer.core import TyperGroup

from analyzer import __version__
from analyzer.analyze import analyze
from analyzer.ceilings import default_path as default_ceilings_path
from analyzer.ceilings import find_ceilings
from analyzer.envcheck import check_env
from analyzer.render.bench import render_bench, render_bench_json
from analyzer.render.env import render_env
from analyzer.render.json_report import render_json
from analyzer.render.terminal import render_terminal
from ingest.errors import GpuAnalyzeError
from ingest.kineto_import import load_kineto, write_trace_file
from ingest.sources import load_any
from kernels.suite import run_bench, save

_GROUP_OPTIONS = {"--help", "-h", "--version", "--install-completion", "--show-completion"}


class _DefaultToAnalyze(TyperGroup):
    """`gpuanalyze TRACE ...` means `gpuanalyze analyze TRACE ...`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in _GROUP_OPTIONS:
            args = ["analyze", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(cls=_DefaultToAnalyze, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Find why a GPU training run is slow: data loading, batch size, kernels or sync.")


def fail(message: str) -> None:
    """One line on stderr, exit code 2: how every user error ends."""
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"gpuanalyze: error: {message}", markup=False)
    raise typer.Exit(2)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpuanalyze {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    """Find why a GPU training run is slow: data loading, batch size, kernels or sync."""


@app.command("analyze")
def analyze_cmd(
    trace: Annotated[Path, typer.Argument(help="A trace: .arrow (analyzer.profile), a PyTorch profiler .json[.gz], "
                                               "or a directory of per-rank traces.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the report.")] = False,
    ceilings: Annotated[Optional[Path], typer.Option(help="Measured ceilings from `gpuanalyze bench` "
                        "(default: the file bench saves, if present).")] = None,
) -> None:
    """Classify the bottleneck of a recorded run, with evidence and recommendations."""
    try:
        report = analyze(trace, ceilings=find_ceilings(ceilings))
    except GpuAnalyzeError as exc:
        fail(str(exc))
    if json_out:
        typer.echo(render_json(report))
    else:
        Console(highlight=False).print(render_terminal(report))


@app.command("import")
def import_cmd(
    trace: Annotated[Path, typer.Argument(help="A PyTorch profiler (Kineto) trace: .json or .json.gz.")],
    out: Annotated[Path, typer.Option("-o", "--out", help="The gpuanalyze trace to write (.arrow).")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite OUT if it exists.")] = False,
) -> None:
    """Convert a PyTorch profiler trace to a gpuanalyze trace (never writes over its input)."""
    try:
        loaded = load_kineto(trace) if trace.exists() else load_any(trace)
        write_trace_file(loaded, out, force=force)
    except GpuAnalyzeError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror}")
    typer.echo(f"{out}: {loaded.frame.height} step(s) from {trace}")


@app.command("env")
def env_cmd() -> None:
    """Check torch, CUDA, the driver and the GPUs; never fails on a machine without a GPU."""
    Console(highlight=False).print(render_env(check_env()))


@app.command("bench")
def bench_cmd(
    which: Annotated[str, typer.Argument(help="memory, copy, matmul, launch, allreduce, dataloader or all.")] = "all",
    backend: Annotated[str, typer.Option(help="auto, cupy, numba or cpu.")] = "auto",
    quick: Annotated[bool, typer.Option("--quick", help="Smaller sizes and fewer repeats.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    out: Annotated[Optional[Path], typer.Option("--out", help="Also write the JSON results here.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out if it exists.")] = False,
) -> None:
    """Measure this machine's ceilings; results are saved where `gpuanalyze TRACE` finds them."""
    if out is not None and out.exists() and not force:
        fail(f"{out} exists; pass --force to overwrite it")
    try:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                      console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("starting", total=None)
            report = run_bench(which, backend, quick=quick,
                               progress=lambda name: progress.update(task, description=f"benchmark: {name}"))
    except GpuAnalyzeError as exc:
        fail(str(exc))
    for path in (default_ceilings_path(), out):
        if path is not None:
            try:
                save(report, path)
            except OSError as exc:
                fail(f"cannot write {path}: {exc.strerror}")
    if json_out:
        typer.echo(render_bench_json(report))
    else:
        Console(highlight=False).print(render_bench(report))
    if report.failed:
        raise typer.Exit(1)


def main(argv: list[str] | None = None) -> Any:
    """Console-script entry point."""
    return app(args=argv if argv is not None else sys.argv[1:], prog_name="gpuanalyze")

"""`gpuanalyze [analyze] TRACE`: the verdict, its evidence, what to change and what it saves."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from analyzer.cli import options
from analyzer.cli.base import app, fail
from analyzer.cli.log_option import LogTo, log_reports, log_targets
from analyzer.errors import GpuAnalyzeError

if TYPE_CHECKING:
    from gpuanalyze.ingest.trace.reader import Trace


@app.command("analyze", cls=options.takes(options.cost, options.read))
def analyze_cmd(
    ctx: typer.Context,
    trace: Annotated[
        str,
        typer.Argument(
            help="A trace: .arrow (analyzer.profile), a PyTorch profiler .json[.gz], an Nsight Systems .sqlite "
            "export, or a directory (or URL of one) of per-rank traces."
        ),
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the report.")] = False,
    width: options.Width = None,
    step_range: options.StepRange = None,
    log: LogTo = None,
) -> None:
    """Classify the bottleneck of a recorded run, with evidence, recommendations and (with a run length) cost."""
    from analyzer.api import analyze

    try:
        trackers = log_targets(log)
        read = options.read_options(ctx.meta[options.GIVEN])
        report = analyze(trace if step_range is None else _nsys_steps(trace, step_range, read.max_bytes), read)
    except GpuAnalyzeError as exc:
        fail(str(exc))
    if json_out:
        from analyzer.render.json_report import render_json

        typer.echo(render_json(report))
    else:
        from analyzer.render.console import report_console
        from analyzer.render.terminal import render_terminal

        report_console(width).print(render_terminal(report))
    try:
        log_reports([report], trackers)
    except GpuAnalyzeError as exc:
        fail(str(exc))


def _nsys_steps(trace: str, step_range: str, max_bytes: int | None) -> Trace:
    """An Nsight Systems capture loaded with its steps from the NVTX ranges named ``step_range``."""
    from gpuanalyze.ingest.nsys.load import is_nsys_path
    from gpuanalyze.ingest.sources import load_nsys
    from gpuanalyze.ingest.trace.byte_source import ReadLimits

    if not is_nsys_path(Path(trace)):
        raise GpuAnalyzeError("--step-range is for Nsight Systems captures (.sqlite, .nsys-rep)")
    return load_nsys(Path(trace), ReadLimits(max_bytes=max_bytes), step_range)

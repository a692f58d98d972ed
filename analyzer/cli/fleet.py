"""`gpuanalyze fleet DIR|URL`: every run beneath, analysed, in one table ranked by what its top fix saves."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from analyzer.cli import options
from analyzer.cli.base import app, fail
from analyzer.errors import GpuAnalyzeError


@app.command("fleet")
def fleet_cmd(
    root: Annotated[
        str,
        typer.Argument(
            help="A directory (or fsspec URL) of runs: each trace file, or each directory of rank files, is one run."
        ),
    ],
    price_per_gpu_hour: options.PricePerGpuHour = None,
    steps_per_run: Annotated[
        float | None, typer.Option(help="Optimizer steps in a completed run (the same for every run).")
    ] = None,
    hours_per_run: Annotated[
        float | None, typer.Option(help="Hours of a completed run at today's step time (every run).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the table.")] = False,
    top: Annotated[int, typer.Option("--top", min=0, help="Rows of the table to print (0: all).")] = 25,
    width: options.Width = None,
    engine: options.Engine = "local",
    workers: options.Workers = None,
) -> None:
    """Triage many runs: each one's verdict, confidence, step time and GPU, ranked by the dollars (or
    GPU-hours) per run its top fix saves. Runs that cannot be analysed are skipped with a note."""
    from analyzer.fleet.fleet_options import FleetOptions, RunLength
    from analyzer.fleet.triage import triage

    try:
        opts = FleetOptions(
            length=RunLength(
                price_per_gpu_hour=price_per_gpu_hour, steps_per_run=steps_per_run, hours_per_run=hours_per_run
            ),
            engine=engine,
            workers=workers,
        )
        fleet = triage(root, opts, progress=_progress if sys.stderr.isatty() else None)
    except GpuAnalyzeError as exc:
        fail(str(exc))
    if json_out:
        from analyzer.fleet.fleet_output import fleet_struct
        from analyzer.render.output import dumps

        typer.echo(dumps(fleet_struct(fleet)))
    else:
        from analyzer.fleet.fleet_view import render_fleet
        from analyzer.render.console import report_console

        report_console(width).print(render_fleet(fleet, top=top))


def _progress(done: int, total: int) -> None:
    """``analysed N/M runs`` on the terminal's stderr line, redrawn in place (a TTY only)."""
    sys.stderr.write(f"\rgpuanalyze: analysed {done:,}/{total:,} runs" + ("\n" if done == total else ""))
    sys.stderr.flush()

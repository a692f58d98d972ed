"""`--log mlflow|wandb`, shared by `gpuanalyze TRACE` and `gpuanalyze run` (docs/trackers.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from analyzer.planning.outcome import Report
    from analyzer.track.log_options import LogOptions

LogTo = Annotated[
    list[str] | None,
    typer.Option(
        "--log",
        help="Also log the verdict, breakdown, projection and savings to mlflow or wandb (repeatable): the active "
        "run, else a new one, with the HTML report as an artifact (with the report extra).",
    ),
]


def log_targets(values: list[str] | None) -> LogOptions | None:
    """The trackers asked for, checked (installed) before any work; raises GpuAnalyzeError."""
    from analyzer.track.log_options import log_options

    options = log_options(values)
    if options is not None:
        options.check_installed()
    return options


def log_reports(reports: list[Report], options: LogOptions | None) -> None:
    """Log each report; one line per tracker on stderr; raises GpuAnalyzeError when a tracker fails."""
    if options is None:
        return
    from analyzer.render.safe import clean
    from analyzer.track.log_report import log_report

    for report in reports:
        for line in log_report(report, options):
            typer.echo(clean(f"gpuanalyze: {line}"), err=True)

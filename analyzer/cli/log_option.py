"""`--log mlflow|wandb`, shared by `gpuanalyze TRACE` and `gpuanalyze run` (docs/trackers.md)."""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Annotated

import typer

from analyzer.errors import GpuAnalyzeError

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
    """The trackers asked for, checked (installed, and MLflow's store usable) before any work; raises
    GpuAnalyzeError."""
    from analyzer.track.log_options import log_options

    options = log_options(values)
    if options is not None:
        options.check_installed()
    if options is not None and "mlflow" in options.to and not os.environ.get("MLFLOW_TRACKING_URI"):
        missing = [m for m in ("sqlalchemy", "alembic") if importlib.util.find_spec(m) is None]
        if missing:  # MLflow 3's default store, sqlite:///mlflow.db, fails on them after the analysis
            raise GpuAnalyzeError(
                f"--log mlflow: MLflow's default store (sqlite:///mlflow.db) needs {' and '.join(missing)}: "
                "pip install 'gpuanalyze[mlflow]', or set MLFLOW_TRACKING_URI to your server (http://HOST:5000)"
            )
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

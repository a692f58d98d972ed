"""Log one report to the trackers chosen: for `--log` (errors are the user's) and the callbacks (never raise)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from analyzer.errors import GpuAnalyzeError
from analyzer.render.flat_summary import Scalar, flat_summary
from analyzer.render.safe import clean
from analyzer.track.log_options import LogOptions
from analyzer.track.report_artifact import write_report_html
from analyzer.track.tracker_call import Terminated, tracker_call

if TYPE_CHECKING:
    from analyzer.planning.outcome import Report


def log_report(report: Report, options: LogOptions) -> list[str]:
    """Log ``report`` to every tracker in ``options``; returns one line per tracker (and a note when the
    HTML report was skipped). Raises GpuAnalyzeError when a tracker is missing or fails."""
    options.check_installed()
    values = flat_summary(report)
    name = clean(options.run_name or f"gpuanalyze-{Path(report.path).name}")
    lines: list[str] = []
    with tracker_call(), tempfile.TemporaryDirectory(prefix="gpuanalyze-log-", ignore_cleanup_errors=True) as tmp:
        html, skipped = write_report_html(report, Path(tmp)) if options.html else (None, None)
        if skipped:
            lines.append(skipped)
        for tracker in options.to:
            try:
                run_id = _log_one(tracker, values, html, name)
            except (GpuAnalyzeError, KeyboardInterrupt, GeneratorExit, Terminated):
                raise
            except SystemExit as exc:  # the tracker's own sys.exit: not the end of this command
                raise GpuAnalyzeError(f"--log {tracker}: the tracker tried to exit (status {exc.code!r})") from exc
            except BaseException as exc:  # a tracker's own BaseException subclasses too
                raise GpuAnalyzeError(f"--log {tracker}: {type(exc).__name__}: {_message(exc)[:300]}") from exc
            lines.append(f"logged to {tracker} run {run_id}" + (" (metrics and HTML report)" if html else ""))
    return lines


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises
        return "(its message cannot be shown)"


def _log_one(tracker: str, values: dict[str, Scalar], html: Path | None, name: str) -> str:
    if tracker == "mlflow":
        from analyzer.track.mlflow_log import log_mlflow

        return log_mlflow(values, html, name)
    from analyzer.track.wandb_log import log_wandb

    return log_wandb(values, html, name)


def log_quietly(report: Report, options: LogOptions) -> list[str]:
    """``log_report`` for a callback: a failure is one GpuAnalyzeWarning and training goes on."""
    from analyzer.record.notify import warn

    try:
        return log_report(report, options)
    except Exception as exc:  # noqa: BLE001 - never break the user's training
        warn(f"gpuanalyze: could not log the report to {', '.join(options.to)} ({exc})")
        return []

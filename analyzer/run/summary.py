"""The analysis printed when a recorded run ends (`gpuanalyze run`, the Lightning and Hugging Face
callbacks): the public ``analyzer.analyze`` and the existing renderers, nothing of its own."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from analyzer.planning.outcome import Report


def analyze_quietly(path: Path) -> tuple[Report | None, str | None]:
    """(report, None), or (None, the one-line reason it could not be analysed)."""
    from analyzer.api import analyze
    from analyzer.errors import GpuAnalyzeError

    try:
        return analyze(path), None
    except GpuAnalyzeError as exc:
        return None, str(exc)


def print_terminal(report: Report, *, stderr: bool = False, width: int | None = None) -> None:
    from analyzer.render.console import report_console
    from analyzer.render.terminal import render_terminal

    report_console(width, stderr=stderr).print(render_terminal(report))


def json_text(reports: list[Report]) -> str:
    """One JSON object for one report, an array for several."""
    from analyzer.render.json_report import report_struct
    from analyzer.render.output import dumps

    structs = [report_struct(r) for r in reports]
    return dumps(structs[0] if len(structs) == 1 else structs)


def summary(report: Report) -> dict[str, Any]:
    """The verdict in a few numbers, for a framework's logger (the one flat summary every tracker records)."""
    from analyzer.render.flat_summary import flat_summary

    return dict(flat_summary(report))


def verdict_line(report: Report) -> str:
    s = summary(report)
    line = (
        f"gpuanalyze: {report.bottleneck} (confidence {report.confidence.level}); "
        f"{s['steps']} steps, median {s['step_time_median_ms']:.2f} ms/step"
    )
    return f"{line}; {s['summary']}" if s["summary"] else line

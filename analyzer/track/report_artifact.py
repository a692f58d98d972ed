"""The HTML report as a file for a tracker to store as an artifact."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analyzer.planning.outcome import Report

SKIPPED_NO_PLOTLY = "HTML report not logged: it needs plotly (pip install 'gpuanalyze[report]'); metrics logged"


def write_report_html(report: Report, directory: Path) -> tuple[Path | None, str | None]:
    """(the report written into ``directory``, None), or (None, why it was skipped)."""
    if importlib.util.find_spec("plotly") is None:
        return None, SKIPPED_NO_PLOTLY
    from analyzer.files import write_bytes
    from analyzer.render.html_report import render_html
    from gpuanalyze.ingest.sources import load_any

    page = render_html(report, load_any(report.path)).encode()
    out = directory / "gpuanalyze-report.html"
    write_bytes(out, page, force=False)
    return out, None

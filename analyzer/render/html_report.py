"""The self-contained HTML report: one file, every script and style inlined, no network.

``render_html`` assembles the page from the text parts (``html_panel``) and the charts
(``html_charts``, which needs plotly: the ``report`` extra). A Content-Security-Policy in the page
forbids every request, so even a string that slipped through could not load anything.
``report`` is the Python path (``analyzer.report``), ``notebook_html`` what ``Report._repr_html_``
shows in a notebook.
"""

from __future__ import annotations

import html as _html
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from analyzer.errors import GpuAnalyzeError
from analyzer.planning.outcome import Report
from analyzer.render import html_panel as panel
from analyzer.render.safe import html as h
from analyzer.version import __version__

if TYPE_CHECKING:
    from analyzer.render.chart_data import ChartData
    from gpuanalyze.ingest.trace.reader import Trace

MISSING_EXTRA = "the HTML report draws its charts with plotly, which is not installed: pip install 'gpuanalyze[report]'"
CSP = (
    "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'"
)

STYLE = """
:root { --fg: #1d2330; --muted: #667085; --line: #e4e7ec; --bg: #fff; --panel: #f8f9fb; --pass: #1a7f37;
  --fail: #c62828; --warn: #b25e00; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  color: var(--fg); background: var(--bg); }
header { padding: 18px 28px 10px; border-bottom: 1px solid var(--line); }
header h1 { margin: 0; font-size: 20px; }
header .path { color: var(--muted); word-break: break-all; }
nav { padding: 6px 28px; border-bottom: 1px solid var(--line); font-size: 13px; position: sticky; top: 0;
  background: var(--bg); z-index: 10; }
nav a { margin-right: 14px; color: #2f5fb3; text-decoration: none; }
main { padding: 0 28px 28px; max-width: 1400px; }
section { margin-top: 22px; }
section > h2 { font-size: 17px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.verdict { background: var(--panel); border: 1px solid var(--line); border-left: 6px solid #4e79a7;
  border-radius: 6px; padding: 14px 18px; }
.v-none { border-left-color: var(--pass); } .v-unknown { border-left-color: var(--muted); }
.v-data_loading { border-left-color: #f28e2b; } .v-sync { border-left-color: #e15759; }
.v-kernels { border-left-color: #4e79a7; } .v-batch_size { border-left-color: #b07aa1; }
.v-host { border-left-color: #79706e; }
.verdict-head { display: flex; align-items: center; gap: 12px; }
.verdict-head h2 { margin: 0; font-size: 19px; }
.badge { font: 600 12px/1 ui-monospace, SFMono-Regular, Menlo, monospace; text-transform: uppercase;
  background: var(--fg); color: #fff; padding: 6px 8px; border-radius: 4px; }
.level { font-weight: 600; padding: 1px 6px; border-radius: 3px; }
.level-high { background: #dcfce7; } .level-medium { background: #fef3c7; } .level-low { background: #fee2e2; }
.finding { margin-top: 12px; } details.finding { border-top: 1px solid var(--line); padding-top: 6px; }
details.finding summary { cursor: pointer; font-weight: 600; }
.finding h3, h3.others { font-size: 15px; margin: 14px 0 4px; }
h4 { font-size: 13px; margin: 12px 0 4px; color: var(--muted); text-transform: uppercase; letter-spacing: .03em; }
.summary { font-size: 15px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 3px 14px; margin: 8px 0; }
dl.facts dt { font-weight: 600; color: var(--muted); } dl.facts dd { margin: 0; }
table { border-collapse: collapse; margin: 6px 0 10px; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 9px; text-align: left; vertical-align: top; }
th { background: var(--panel); font-weight: 600; }
table.num td { font-variant-numeric: tabular-nums; }
.pass { color: var(--pass); font-weight: 600; } .fail { color: var(--fail); font-weight: 600; }
.warn { color: var(--warn); font-weight: 600; }
.source, .muted { color: var(--muted); } .source { font-size: 12px; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; word-break: break-all; }
ul.notes li { color: var(--warn); }
.chart { border: 1px solid var(--line); border-radius: 6px; margin: 10px 0; padding: 4px; }
.row { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 12px; }
@media (max-width: 900px) { .row { grid-template-columns: minmax(0, 1fr); } }
footer { padding: 14px 28px; color: var(--muted); font-size: 12px; border-top: 1px solid var(--line); }
"""


def require_plotly() -> None:
    """Raise GpuAnalyzeError naming the extra when plotly is not installed."""
    try:
        import plotly  # noqa: F401
    except ImportError as exc:
        raise GpuAnalyzeError(MISSING_EXTRA) from exc


def _page(report: Report, sections: list[tuple[str, str, str]], head_script: str = "") -> str:
    nav = "".join(f'<a href="#{sid}">{title}</a>' for sid, title, _ in sections)
    body = "".join(f'<section id="{sid}"><h2>{title}</h2>{content}</section>' for sid, title, content in sections)
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="gpuanalyze {__version__}">'
        f"<title>gpuanalyze: {h(Path(report.path).name)}</title>"
        f"<style>{STYLE}</style>{head_script}</head><body>"
        f'<header><h1>gpuanalyze report</h1><div class="path">{h(report.path)}</div></header>'
        f'<nav><a href="#verdict">verdict</a>{nav}</nav>'
        f"<main>{panel.verdict_panel(report)}{body}</main>"
        f"<footer>gpuanalyze {__version__}, generated {generated}. One self-contained file: it loads nothing "
        "from the network. Charts: plotly.js, inlined.</footer></body></html>"
    )


def _chart(divs: dict[str, str], key: str) -> str:
    return f'<div class="chart" data-chart="{key}">{divs[key]}</div>' if key in divs else ""


def render_html(report: Report, source: ChartData | Trace) -> str:
    """The whole report page for ``report``, drawn from the chart data made with its analysis
    (``analyzer.api.report_parts``), or from the trace in memory it was analysed from."""
    require_plotly()
    from analyzer.render import html_charts as charts
    from analyzer.render.chart_data import ChartData, chart_data

    data = source if isinstance(source, ChartData) else chart_data(source, report)
    divs = {k: charts.div(fig, k) for k, fig in charts.figures(report, data).items()}
    sections = [
        ("run", "The run", panel.run_facts(report) + panel.breakdown_table(report)),
        (
            "steps",
            "Step time",
            _chart(divs, "steps")
            + _chart(divs, "memory")
            + _chart(divs, "distribution")
            + panel.outlier_table(data.distribution),
        ),
    ]
    gpu = _chart(divs, "gpu") + _chart(divs, "owners") + _chart(divs, "kernels")
    kernel_facts = panel.kernel_table(report)
    if "gpu" in divs or "owners" in divs or kernel_facts:
        sections.append(("gpu", "GPU", gpu + kernel_facts))
    if data.heatmap is not None:
        sections.append(
            ("ranks", "Ranks", _chart(divs, "heat-step") + _chart(divs, "heat-wait") + panel.rank_table(report))
        )
    cost = panel.cost_tables(report)
    if cost:
        sections.append(("cost", "Cost", cost + _chart(divs, "savings")))
    ceilings = panel.ceiling_table(report)
    if ceilings:
        sections.append(("ceilings", "Against this machine's ceilings", ceilings))
    return _page(report, sections, f"<script>{charts.plotly_js()}</script>")


def render_panel_only(report: Report, why: str) -> str:
    """The page without charts (the verdict panel and the tables), saying why."""
    sections = [
        ("run", "The run", panel.run_facts(report) + panel.breakdown_table(report)),
        ("charts", "Charts", f'<p class="muted">{h(why)}</p>'),
    ]
    if report.metrics.distributed is not None:
        sections.append(("ranks", "Ranks", panel.rank_table(report)))
    cost = panel.cost_tables(report)
    if cost:
        sections.append(("cost", "Cost", cost))
    return _page(report, sections)


def iframe(document: str) -> str:
    """``document`` in an iframe, for notebooks: its scripts and styles cannot touch the notebook's."""
    return (
        f'<iframe srcdoc="{_html.escape(document, quote=True)}" style="width:100%;height:900px;border:0" '
        "onload=\"try{this.style.height=(this.contentDocument.documentElement.scrollHeight+24)+'px'}catch(e){}\">"
        "</iframe>"
    )


def notebook_html(report: Report, charts: Callable[[Report], ChartData]) -> str:
    """What a notebook shows for a Report: the page with charts when ``charts`` can draw them (it reads
    the trace again from ``report.path``) and plotly is installed, else the verdict panel and tables."""
    try:
        require_plotly()
        document = render_html(report, charts(report))
    except GpuAnalyzeError as exc:
        document = render_panel_only(report, f"No charts: {exc}")
    return iframe(document)


@dataclass(frozen=True, slots=True)
class HtmlReport:
    """A rendered report: shows itself in a notebook, saves itself as one HTML file."""

    report: Report
    html: str

    def _repr_html_(self) -> str:
        return iframe(self.html)

    def save(self, path: str | Path, *, force: bool = False) -> Path:
        """Write the page to ``path``; an existing file is replaced only with ``force``."""
        from analyzer.files import write_bytes

        path = Path(path)
        write_bytes(path, self.html.encode(), force=force)
        return path

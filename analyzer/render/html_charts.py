"""The HTML report's charts, drawn with plotly (the optional ``report`` extra).

Each function turns already-aggregated data (``chart_data``, the report) into one figure; every
string from a trace is HTML-escaped because plotly.js reads tags and entities in labels.
Arrays go to the page as base64 typed arrays (plotly >= 6), float32 where precision allows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from analyzer.analysis.owners import OWNER_WORDS
from analyzer.planning.outcome import Report
from analyzer.render import words
from analyzer.render.chart_data import ChartData, Distribution, Heatmap, StepSeries
from analyzer.render.safe import html as h
from gpuanalyze.ingest.trace import schema as S

if TYPE_CHECKING:
    pass

PART_COLORS = {
    S.DATA_WAIT_MS: "#f28e2b",
    S.H2D_MS: "#edc948",
    S.FORWARD_MS: "#4e79a7",
    S.BACKWARD_MS: "#59a14f",
    S.OPTIMIZER_MS: "#b07aa1",
    S.SYNC_MS: "#e15759",
    S.OTHER_MS: "#bab0ac",
}
CONFIG: dict[str, Any] = {
    "displaylogo": False,
    "responsive": True,
    "modeBarButtonsToRemove": ["lasso2d", "select2d"],
    "toImageButtonOptions": {"format": "png", "scale": 2},
}
#: One colour per idle owner (schema.IDLE_OWNERS): start-up work in greys, the class owners in their parts' colours.
OWNER_COLORS = {
    "graph_capture": "#d4d4d4",
    "compilation": "#9d9d9d",
    "module_loading": "#7f7f7f",
    "device_setup": "#5f5f5f",
    "allocator": "#ff9da7",
    "data_loader": "#f28e2b",
    "sync": "#e15759",
    "collective": "#b6403f",
    "launch": "#4e79a7",
    "cpu_ops": "#76b7b2",
    "host_idle": "#edc948",
    "queued": "#bab0ac",
}
_END_COLOR = {"ok": "#59a14f", "imported": "#79706e", "live": "#f28e2b"}
#: Stragglers outlined on a heatmap (the table lists all of them).
MAX_MARKED = 20
#: Runs with at most this many bins are drawn as stacked bars, longer ones as stacked areas.
MAX_BARS = 120


def _layout(fig: go.Figure, title: str, height: int, **kw: Any) -> go.Figure:
    layout: dict[str, Any] = {
        "title": {"text": title, "x": 0.01, "font": {"size": 15}},
        "height": height,
        "margin": {"l": 60, "r": 20, "t": 50, "b": 45},
        "template": "plotly_white",
        "legend": {"orientation": "h", "y": -0.18},
        "yaxis": {"automargin": True},
    }
    fig.update_layout(**(layout | kw))
    return fig


def _stacked(s: StepSeries, values: np.ndarray, label: str, color: str, unit: str, group: str) -> go.Bar | go.Scatter:
    """One layer of a stack over the run: bars while there are few bins (one point has no area), else areas."""
    hover = f"{label}: %{{y:.2f}} {unit}<extra></extra>"
    if len(s.step) <= MAX_BARS:
        return go.Bar(x=s.step, y=values, width=s.width, name=label, marker_color=color, hovertemplate=hover)
    return go.Scatter(
        x=s.step,
        y=values,
        name=label,
        mode="lines",
        stackgroup=group,
        line={"width": 0.5, "color": color},
        hovertemplate=hover,
    )


def _bins(s: StepSeries) -> str:
    return "per step" if s.width == 1 else f"mean per step over bins of {s.width:,} steps"


def step_time(s: StepSeries, report: Report) -> go.Figure:
    fig = go.Figure()
    ranks = " (mean over ranks)" if report.metrics.ranks > 1 else ""
    series = s.parts or {S.WALL_MS: s.wall}
    for part, values in series.items():
        label = words.PART_LABELS.get(part, "step")
        fig.add_trace(_stacked(s, values, label, PART_COLORS.get(part, "#4e79a7"), "ms", "parts"))
    lo = s.first_step - 0.5
    if s.warmup_last_step is not None:
        fig.add_vrect(
            x0=lo,
            x1=s.warmup_last_step + 0.5,
            fillcolor="#888",
            opacity=0.18,
            line_width=0,
            # drawn, but off the y axis's scale when it would flatten the run (chart_data.StepSeries.y_max)
            annotation_text="warm-up" if s.warmup_max is None else f"warm-up (clipped: up to {s.warmup_max:,.0f} ms)",
            annotation_position="top left",
        )
    for i, (a, b) in enumerate(s.windows):
        fig.add_vrect(
            x0=a - 0.5,
            x1=b + 0.5,
            fillcolor="#9467bd",
            opacity=0.18,
            line_width=0,
            annotation_text="profiler window" if i == 0 else None,
            annotation_position="top right",
        )
    state, sentence = words.run_state(report)
    color = _END_COLOR.get(state, "#d62728")
    fig.add_vline(x=s.last_step, line={"color": color, "width": 2, "dash": "dot"})
    fig.add_annotation(
        x=s.last_step,
        y=1,
        yref="paper",
        text=f"end: {h(state)}",
        hovertext=h(sentence),
        showarrow=False,
        xanchor="right",
        yanchor="bottom",
        font={"color": color},
    )
    return _layout(
        fig,
        f"Step time over the run, by phase{ranks}: {_bins(s)}",
        400,
        hovermode="x unified",
        barmode="stack",
        bargap=0.05,
        xaxis_title="step",
        yaxis={"title": "ms per step", "range": [0, s.y_max], "automargin": True},
    )


def distribution(d: Distribution) -> go.Figure:
    centers = (d.edges[:-1] + d.edges[1:]) / 2
    fig = go.Figure(
        go.Bar(
            x=centers.astype(np.float32),
            y=d.counts,
            width=float(d.edges[1] - d.edges[0]),
            marker_color="#4e79a7",
            name="steps",
            hovertemplate="%{x:.2f} ms: %{y} step(s)<extra></extra>",
        )
    )
    for x, label, dash, color, y in (
        (d.median_ms, f"median {d.median_ms:.2f} ms", "solid", "#222", 1.0),
        (d.p90_ms, f"p90 {d.p90_ms:.2f} ms", "dash", "#222", 0.9),
        (d.fence_ms, f"outliers above {d.fence_ms:.2f} ms", "dot", "#d62728", 0.8),
    ):
        if d.edges[0] <= x <= d.edges[-1]:
            fig.add_vline(x=x, line={"dash": dash, "color": color, "width": 1.5})
            fig.add_annotation(
                x=x, y=y, yref="paper", text=label, showarrow=False, xanchor="left", xshift=4, font={"color": color}
            )
    beyond = f"; {d.beyond:,} beyond the axis, up to {d.max_ms:.2f} ms" if d.beyond else ""
    return _layout(
        fig,
        f"Step-time distribution (analysed steps): {d.outliers:,} outlier(s) above {d.fence_ms:.2f} ms{beyond}",
        330,
        xaxis_title="ms per step",
        yaxis_title="steps",
        bargap=0.02,
        showlegend=False,
    )


def gpu_busy(s: StepSeries) -> go.Figure | None:
    if s.busy_share is None:
        return None
    busy = s.busy_share * 100
    fig = go.Figure()
    fig.add_trace(_stacked(s, busy, "busy", "#59a14f", "%", "gpu"))
    fig.add_trace(_stacked(s, 100 - busy, "idle", "#e15759", "%", "gpu"))
    return _layout(
        fig,
        f"GPU busy and idle, % of step time: {_bins(s)}",
        300,
        hovermode="x unified",
        barmode="stack",
        bargap=0.05,
        xaxis_title="step",
        yaxis={"title": "% of step time", "range": [0, 100]},
    )


def memory(s: StepSeries, report: Report) -> go.Figure | None:
    """Memory per step beside the phases: its peak and what it starts with (what persists)."""
    if not s.memory:
        return None
    fig = go.Figure()
    for key, label in (("peak", "peak"), ("start", "at step start")):
        if key in s.memory:
            fig.add_trace(go.Scatter(x=s.step, y=s.memory[key], name=label, mode="lines+markers"))
    mem = report.metrics.memory
    if mem is not None and mem.total:
        fig.add_hline(y=mem.total / 1e9, line={"dash": "dot", "color": "#e15759"}, annotation_text="device")
    what = "resident memory" if mem is not None and mem.host else "memory"
    return _layout(fig, f"{what.capitalize()}, GB: {_bins(s)}", 300, hovermode="x unified", xaxis_title="step")


def idle_owners(report: Report) -> go.Figure | None:
    """Who owned the GPU's idle time, step by step (the first MAX_STEP_OWNERS steps and ranks), stacked."""
    km = report.metrics.kernels
    rows = km.step_owners if km is not None else ()
    if not rows:
        return None
    ranks = len({r.rank for r in rows}) > 1
    x = [f"#{r.step} r{r.rank}" if ranks else f"#{r.step}" for r in rows]
    fig = go.Figure()
    for i, owner in enumerate(S.IDLE_OWNERS):
        y = [r.ms[i] for r in rows]
        if any(v > 0 for v in y):
            fig.add_trace(
                go.Bar(
                    x=x,
                    y=y,
                    name=owner,
                    marker_color=OWNER_COLORS[owner],
                    hovertemplate=f"{h(OWNER_WORDS[owner])}: %{{y:.3f}} ms<extra>%{{x}}</extra>",
                )
            )
    if not fig.data:
        return None
    title = f"Who owned the GPU's idle time, per step (ms; {len(rows):,} step(s){' and rank(s)' if ranks else ''})"
    return _layout(fig, title, 340, barmode="stack", xaxis={"type": "category"}, yaxis_title="idle ms")


def kernel_categories(report: Report) -> go.Figure | None:
    km = report.metrics.kernels
    if km is None:
        return None
    shares = sorted(((km.share_of_kernel_time(c), c) for c in S.KERNEL_CATEGORIES), reverse=True)
    shown = [(v * 100, c) for v, c in shares if v >= 0.001]
    if not shown:
        return None
    fig = go.Figure(
        go.Bar(
            x=[v for v, _ in shown],
            y=[c for _, c in shown],
            orientation="h",
            marker_color="#4e79a7",
            hovertemplate="%{y}: %{x:.1f}% of kernel time<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, "Kernel time by category (% of kernel time)", 80 + 28 * len(shown), xaxis_title="%")


def _robust_range(z: np.ndarray) -> tuple[float, float]:
    finite = z[np.isfinite(z)]
    if finite.size == 0:
        return 0.0, 1.0
    lo, hi = np.percentile(finite, [1, 99])
    return float(lo), float(max(hi, lo + 1e-6))


def heatmap(m: Heatmap, z: np.ndarray, what: str, colorscale: str) -> go.Figure:
    zmin, zmax = _robust_range(z[:, m.warmup_columns :])  # warm-up drawn, clipped to the analysed steps' scale
    width = "" if m.width == 1 else f" ({m.width:,} steps per cell, mean)"
    clipped = "; warm-up columns clipped to this scale" if m.warmup_columns else ""
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=m.step,
            y=m.ranks,
            zmin=zmin,
            zmax=zmax,
            colorscale=colorscale,
            colorbar={"title": {"text": "ms"}},
            hovertemplate=f"rank %{{y}}<br>steps from %{{x}}{width}<br>{what} %{{z:.2f}} ms<extra></extra>",
        )
    )
    marked = m.stragglers[:MAX_MARKED]
    for r in marked:
        fig.add_shape(
            type="rect",
            x0=float(m.step[0]) - 0.5,
            x1=float(m.step[-1] + m.width) - 0.5,
            y0=r - 0.5,
            y1=r + 0.5,
            line={"color": "#ff2d55", "width": 2},
        )
    if marked:
        fig.add_trace(
            go.Scatter(
                x=[float(m.step[-1] + m.width)] * len(marked),
                y=list(marked),
                mode="markers+text",
                marker={"symbol": "triangle-left", "color": "#ff2d55", "size": 11},
                text=[f"straggler {r}" for r in marked],
                textposition="middle right",
                hovertemplate="rank %{y} is a straggler<extra></extra>",
                showlegend=False,
                cliponaxis=False,
            )
        )
    n = m.ranks.size
    return _layout(
        fig,
        f"{what.capitalize()} per rank and step{width}; stragglers outlined{clipped}",
        int(min(820, max(340, 140 + 3 * n))),
        xaxis_title="step",
        yaxis={"title": "rank", "autorange": "reversed", "dtick": 1 if n <= 32 else None},
        margin={"l": 60, "r": 110, "t": 50, "b": 45},
    )


def savings(report: Report) -> go.Figure | None:
    """Cost of a run now and after each finding's fix (USD with a price, else hours)."""
    c = report.cost
    saved = [f for f in report.findings if f.savings is not None]
    if c is None or not saved:
        return None
    usd = c.per_run_usd is not None
    now = (c.per_run_usd if usd else c.hours_per_run) or 0.0
    unit = "USD" if usd else "hours"
    labels, values = ["now"], [now]
    for f in saved:
        assert f.savings is not None
        labels.append(f"after fixing {h(f.bottleneck)}: {h(f.cause)}")
        values.append(max(0.0, now - ((f.savings.usd_per_run or 0.0) if usd else f.savings.hours_per_run)))
    fig = go.Figure(
        go.Bar(
            x=values,
            y=labels,
            orientation="h",
            marker_color=["#79706e"] + ["#59a14f"] * len(saved),
            hovertemplate=f"%{{y}}: %{{x:,.2f}} {unit} per run<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed")
    return _layout(
        fig, f"Cost of one completed run ({unit}), now and after each fix", 110 + 36 * len(labels), xaxis_title=unit
    )


def figures(report: Report, data: ChartData) -> dict[str, go.Figure]:
    """Every chart that applies to this report, by section id."""
    out: dict[str, go.Figure | None] = {
        "steps": step_time(data.steps, report),
        "memory": memory(data.steps, report),
        "distribution": distribution(data.distribution),
        "gpu": gpu_busy(data.steps),
        "owners": idle_owners(report),
        "kernels": kernel_categories(report),
    }
    if data.heatmap is not None:
        out["heat-step"] = heatmap(data.heatmap, data.heatmap.wall, "step time", "Viridis")
        if data.heatmap.wait is not None:
            out["heat-wait"] = heatmap(data.heatmap, data.heatmap.wait, "waiting on other ranks (sync)", "Magma")
    out["savings"] = savings(report)
    return {k: v for k, v in out.items() if v is not None}


def div(fig: go.Figure, chart_id: str) -> str:
    """The figure as a <div> and its plotting <script> (plotly.js itself is inlined once per page)."""
    return str(
        pio.to_html(
            fig,
            include_plotlyjs=False,
            full_html=False,
            config=CONFIG,
            div_id=f"chart-{chart_id}",
            default_width="100%",
            default_height=f"{fig.layout.height}px",
            validate=False,
        )
    )


def plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())

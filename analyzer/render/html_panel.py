"""The HTML report's text parts: verdict panel, run facts, tables. Plain HTML, no plotting library.

Every string from a trace, a config or a path goes through ``analyzer.render.safe.html``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from analyzer.analysis.findings import Evidence, Finding
from analyzer.analysis.kernel_metrics import gpu_breakdown
from analyzer.planning.outcome import Report
from analyzer.planning.settling_trial import measure_line
from analyzer.render import words
from analyzer.render.chart_data import Distribution
from analyzer.render.safe import html as h
from analyzer.render.safe import shorten
from gpuanalyze.ingest.trace import schema as S

#: Evidence metrics that compare an achieved number with a ceiling measured by `gpuanalyze bench`.
CEILING_METRICS = {
    "allreduce_busbw_gbps": "gradient all-reduce: bus GB/s vs `bench allreduce`",
}
_BAD_STATES = {"exception", "interrupted", "incomplete", "disk_full", "profiler_error"}


def table(header: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """An HTML table; ``header`` is trusted text, cells are HTML already escaped by the caller."""
    head = "".join(f"<th>{c}</th>" for c in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def facts(rows: Iterable[tuple[str, str]]) -> str:
    """A definition list of (trusted label, escaped value)."""
    return '<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def _evidence_table(items: tuple[Evidence, ...]) -> str:
    if not items:
        return '<p class="muted">none</p>'
    rows = [
        (
            f"<code>{h(e.metric)}</code>",
            f"{e.value:.4g}",
            h(e.comparison),
            f"{e.threshold:.4g}",
            h(e.unit),
            '<span class="pass">holds</span>' if e.passed else '<span class="fail">fails</span>',
            f'<span class="source">{h(e.source)}</span>',
        )
        for e in items
    ]
    return table(("metric", "value", "test", "threshold", "unit", "result", "threshold source"), rows, "evidence")


def _finding(f: Finding, rank: int, report: Report) -> str:
    p = f.projection
    parts = [
        f'<p class="summary">{h(f.summary)}</p>',
        facts(
            [
                ("cause", f"<code>{h(f.cause)}</code> ({h(f.severity)} severity; ~{f.share:.0%} of the step)"),
                ("confidence", _confidence(f.confidence.level, f.confidence.value, f.confidence.reason)),
                ("if fixed", f"<strong>{h(words.projection(p))}</strong>"),
                ("bound", h(p.bound)),
                ("rule", h(p.rule)),
            ]
            + (
                [
                    (
                        "saves",
                        f"<strong>~{f.savings.hours_per_run:,.2f} h</strong> "
                        f"({h(words.device_hours(report, f.savings.gpu_hours_per_run))}"
                        + ("" if f.savings.usd_per_run is None else f", {h(words.usd(f.savings.usd_per_run))}")
                        + ") per run",
                    )
                ]
                if f.savings is not None
                else []
            )
        ),
        f"<h4>Supporting evidence ({len(f.supporting)})</h4>",
        _evidence_table(f.supporting),
        f"<h4>Contrary evidence ({len(f.contrary)})</h4>",
        _evidence_table(f.contrary),
    ]
    if f.recommendations:
        parts.append("<h4>What to change</h4><ul class='recs'>")
        parts.extend(f"<li>{h(r)}</li>" for r in f.recommendations)
        parts.append("</ul>")
    measure = measure_line(report, rank)
    if measure is not None:
        parts.append(f"<p class='measure'>Measure it: <code>{h(measure)}</code></p>")
    body = "".join(parts)
    title = f"{rank}. {h(f.bottleneck)}: {h(f.cause)}"
    if rank == 1:
        return f'<div class="finding top" data-finding="{h(f.bottleneck)}"><h3>{title}</h3>{body}</div>'
    return (
        f'<details class="finding" data-finding="{h(f.bottleneck)}"><summary>{title} '
        f'<span class="muted">saves {p.saved_ms:.2f} ms per step</span></summary>{body}</details>'
    )


def _confidence(level: str, value: float, reason: str) -> str:
    return f'<span class="level level-{h(level)}">{h(level)}</span> {value:.2f}: {h(reason)}'


def _health(report: Report) -> str:
    healthy = report.bottleneck == "none"
    intro = (
        "Every test of a healthy run holds (docs/thresholds.md, 'Healthy')."
        if healthy
        else "These tests define a healthy run. The ones that fail say what is wrong, but no rule can "
        "attribute the time (the trace records no phases it could be charged to) or project a fix."
    )
    extra = (
        '<p class="muted">No GPU timings in this trace, so the GPU tests were not evaluated.</p>'
        if report.metrics.gpu_util is None
        else ""
    )
    return f'<div class="health"><h3>The health tests</h3><p>{intro}</p>{_evidence_table(report.health)}{extra}</div>'


def verdict_panel(report: Report) -> str:
    """Bottleneck, confidence, the top finding in full (evidence for and against, advice,
    projection, savings), the other findings folded, or the health tests."""
    c = report.confidence
    head = (
        f'<div class="verdict-head"><span class="badge">{h(report.bottleneck)}</span>'
        f"<h2>{h(words.verdict_line(report))}</h2></div>"
        f'<p class="confidence">confidence {_confidence(c.level, c.value, c.reason)}</p>'
        + (f'<p class="stability">stability {h(st)}</p>' if (st := words.stability(report)) else "")
    )
    if report.findings:
        body = _finding(report.findings[0], 1, report)
        if len(report.findings) > 1:
            body += f"<h3 class='others'>Other findings</h3><p>{h(words.ranking(report.findings) or '')}</p>"
            body += "".join(_finding(f, i, report) for i, f in enumerate(report.findings[1:], 2))
    else:
        body = _health(report) if report.health else ""
    return f'<section class="verdict v-{h(report.bottleneck)}" id="verdict">{head}{body}</section>'


def run_facts(report: Report) -> str:
    m = report.metrics
    run = report.run
    state, sentence = words.run_state(report)
    cls = "fail" if state in _BAD_STATES else ("warn" if state == "live" else "")
    rows = [
        ("trace", f"<code>{h(report.path)}</code>"),
        ("run", f'<span class="{cls}">{h(sentence)}</span>'),
        ("steps", h(words.accounting(report))),
        ("step time", h(words.step_time(report))),
        *((label, h(line)) for label, line in words.outside(report)),
    ]
    if m.samples_per_s:
        rows.append(("throughput", f"{m.samples_per_s:,.0f} samples/s"))
    if m.gpu_util is not None:
        rows.append(("GPU busy", f"{m.gpu_util:.1%} of step time"))
    rows += [(label, h(line)) for label, line in words.memory(m.memory)] if m.memory is not None else []
    machine = ", ".join(
        h(x)
        for x in (
            run.gpu_name,
            f"world size {run.world_size}" if run.world_size else None,
            run.host,
            f"torch {run.torch}" if run.torch else None,
            run.source,
        )
        if x
    )
    if machine:
        rows.append(("machine", machine))
    out = facts(rows)
    if report.notes:
        out += "<ul class='notes'>" + "".join(f"<li>{h(n)}</li>" for n in report.notes) + "</ul>"
    return out


def breakdown_table(report: Report) -> str:
    m = report.metrics

    def ms(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f}"

    rows = [
        (
            words.PART_LABELS[p],
            ms(m.breakdown_ms[p]),
            ms(m.mean_ms[p]),
            "n/a" if m.share[p] is None else f"{m.share[p]:.1%}",
        )
        for p in S.PARTS
    ]
    return table(("part", "median ms/step", "mean ms/step", "share of time"), rows, "num")


def outlier_table(d: Distribution) -> str:
    if not d.top:
        return ""
    rows = [(str(r), str(s), f"{ms:.2f}") for r, s, ms in d.top]
    return f"<h4>Slowest outlier steps (of {d.outliers:,})</h4>" + table(("rank", "step", "ms"), rows, "num")


def kernel_table(report: Report) -> str:
    km = report.metrics.kernels
    gpu = gpu_breakdown(report.run, km)
    rows: list[tuple[str, str]] = []
    if gpu:
        rows.append(("busy / idle (HTA definition)", f"{gpu.busy_pct:.1f}% / {gpu.idle_pct:.1f}%"))
        rows.append(("compute / non-compute", f"{gpu.compute_pct:.1f}% / {gpu.non_compute_pct:.1f}%"))
    if km is not None:
        rows.append(("kernels (median duration)", f"{km.kernel_count:,} ({km.kernel_median_us or 0:.1f} us)"))
        rows.append(("steps with kernel statistics", f"{km.steps:,}"))
        rows += [(f"idle: {h(owner)}", h(line)) for owner, line in words.idle_owners(report)]
    out = facts(rows) if rows else ""
    if km is not None and km.top_kernels:
        out += "<h4>Top kernels</h4>" + table(
            ("kernel", "total ms", "count"),
            (
                (f'<code title="{h(n)}">{h(shorten(n, 160))}</code>', f"{t:.2f}", f"{c:,}")
                for n, t, c in km.top_kernels[:10]
            ),
            "num",
        )
    return out


def rank_table(report: Report) -> str:
    d = report.metrics.distributed
    if d is None:
        return ""
    stragglers = {s.rank: s for s in d.stragglers}
    out = ""
    if d.stragglers:
        out += table(
            ("straggler rank", "slow steps", "excess ms per slow step", "phase", "phase excess ms"),
            (
                (
                    str(s.rank),
                    f"{s.steps_slow} of {s.steps}",
                    f"{s.excess_ms:.2f}",
                    h(s.phase),
                    f"{s.phase_excess_ms:.2f}",
                )
                for s in d.stragglers
            ),
            "num",
        )
    rows = d.per_rank if len(d.per_rank) <= 16 else sorted(d.per_rank, key=lambda r: -r.work_median_ms)[:16]
    title = "Ranks" if len(d.per_rank) <= 16 else f"The 16 ranks with the most work (of {len(d.per_rank):,})"
    out += f"<h4>{title}</h4>" + table(
        ("rank", "steps", "step median ms", "work median ms", "waiting (sync)", "data wait"),
        (
            (
                f"{r.rank}{' (straggler)' if r.rank in stragglers else ''}",
                f"{r.steps:,}",
                f"{r.step_median_ms:.2f}",
                f"{r.work_median_ms:.2f}",
                f"{r.sync_share:.0%}",
                f"{r.data_share:.0%}",
            )
            for r in rows
        ),
        "num",
    )
    return out


def cost_tables(report: Report) -> str:
    out = ""
    c = report.cost
    if c is not None:
        out += facts(
            [
                ("run", words.run_length(c)),
                (
                    "GPU time" if words.accelerated(report) else "CPU time",
                    h(words.device_hours(report, c.gpu_hours, c.gpus)),
                ),
                ("cost per run", h(words.usd(c.per_run_usd)) + ("" if c.per_run_usd is not None else " (no price)")),
            ]
        )
        saved = [f for f in report.findings if f.savings is not None]
        if saved:
            out += "<h4>What each fix saves per run</h4>" + table(
                ("finding", "ms per step", "hours", "GPU-hours", "USD"),
                (
                    (
                        f"{h(f.bottleneck)}: {h(f.cause)}",
                        f"{f.projection.saved_ms:.2f}",
                        f"{f.savings.hours_per_run:,.2f}",
                        f"{f.savings.gpu_hours_per_run:,.2f}",
                        h(words.usd(f.savings.usd_per_run)),
                    )
                    for f in saved
                    if f.savings is not None
                ),
                "num",
            )
    return out


def ceiling_items(report: Report) -> list[tuple[str, float, float, str, str]]:
    """(label, achieved, ceiling, unit, source) for each comparison with a measured ceiling."""
    seen: dict[str, tuple[str, float, float, str, str]] = {}
    for e in (*[e for f in report.findings for e in f.evidence], *report.health):
        if e.metric in CEILING_METRICS or "gpuanalyze bench" in e.source:
            seen.setdefault(e.metric, (CEILING_METRICS.get(e.metric, e.metric), e.value, e.threshold, e.unit, e.source))
    u = report.mfu
    if u is not None and u.measured_tflops:
        seen["mfu"] = (
            f"model FLOP/s vs the measured {u.precision} matmul",
            u.achieved_tflops,
            u.measured_tflops,
            "TFLOP/s",
            u.source,
        )
    return list(seen.values())


def ceiling_table(report: Report) -> str:
    items = ceiling_items(report)
    if not items:
        return ""
    return table(
        ("comparison", "achieved", "measured ceiling", "unit", "share", "source"),
        (
            (
                h(label),
                f"{a:,.4g}",
                f"{c:,.4g}",
                h(unit),
                f"{a / c:.0%}" if c else "n/a",
                f'<span class="source">{h(src)}</span>',
            )
            for label, a, c, unit, src in items
        ),
        "num",
    )

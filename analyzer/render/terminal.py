"""Rich terminal rendering of a report: verdict, breakdown table, evidence, recommendations."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from analyzer.analysis.findings import Report
from analyzer.analysis.kernel_metrics import gpu_breakdown
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.kernel_names import short_name

_LABELS = {
    S.DATA_WAIT_MS: "data wait",
    S.H2D_MS: "host->device copy",
    S.FORWARD_MS: "forward",
    S.BACKWARD_MS: "backward",
    S.OPTIMIZER_MS: "optimizer",
    S.SYNC_MS: "sync",
    S.OTHER_MS: "other",
}
_VERDICT = {
    "data_loading": "DATA LOADING: each step waits for its input batch",
    "batch_size": "BATCH SIZE: too little work per step keeps the GPU idle",
    "kernels": "KERNELS: the GPU code itself sets the pace",
    "sync": "SYNC: the host waits on the device or on other ranks",
    "host": "HOST: host work no phase accounts for takes the step",
    "none": "HEALTHY: no bottleneck by the definition in docs/thresholds.md",
    "unknown": "UNKNOWN: not healthy, but the trace does not show where the time goes",
}


def render_terminal(report: Report) -> RenderableType:
    m = report.metrics
    parts: list[RenderableType] = []
    head = Text()
    head.append(_VERDICT[report.bottleneck], style="bold")
    head.append(
        f"   (confidence {report.confidence.level}, {report.confidence.value:.0%}: {report.confidence.reason})\n"
    )
    head.append(f"{m.steps} steps analysed ({m.warmup_steps} warm-up skipped), {m.ranks} rank(s); ")
    head.append(f"step time median {m.step_median_ms:.2f} ms, p90 {m.step_p90_ms:.2f} ms")
    if m.samples_per_s:
        head.append(f"; {m.samples_per_s:,.0f} samples/s")
    if m.gpu_util is not None:
        head.append(f"; GPU busy {m.gpu_util:.0%}")
    if report.cost is not None:
        c = report.cost
        usd = "" if c.per_run_usd is None else f" = ${c.per_run_usd:,.2f} per run"
        head.append(
            f"\nrun: {c.steps_per_run:,.0f} steps x {c.step_time_s * 1e3:.2f} ms = {c.hours_per_run:,.2f} h on "
            f"{c.gpus} GPU(s) = {c.gpu_hours:,.2f} GPU-h{usd}"
        )
    if report.mfu is not None:
        u = report.mfu
        head.append(
            f"\nMFU: {u.achieved_tflops:.1f} TFLOP/s per GPU"
            + (f" = {u.mfu_datasheet:.0%} of the {u.precision} datasheet peak" if u.mfu_datasheet else "")
            + (f", {u.mfu_measured:.0%} of the measured matmul ceiling" if u.mfu_measured else "")
        )
    parts.append(Panel(head, title=f"gpuanalyze: {report.path}", expand=False))
    for note in report.notes:
        parts.append(Text(f"note: {note}", style="yellow"))

    table = Table(title="Step time breakdown", title_justify="left")
    table.add_column("part")
    table.add_column("median ms/step", justify="right")
    table.add_column("share of time", justify="right")
    for part in S.PARTS:
        median = m.breakdown_ms[part]
        share = m.share[part]
        table.add_row(
            _LABELS[part], "n/a" if median is None else f"{median:.2f}", "n/a" if share is None else f"{share:.1%}"
        )
    parts.append(table)

    ranks = _rank_section(report)
    if ranks is not None:
        parts.append(ranks)
    kernels = _kernel_section(report)
    if kernels is not None:
        parts.append(kernels)

    for i, f in enumerate(report.findings, 1):
        body = Text(f.summary + "\n")
        for title, items in (("evidence", f.supporting), ("against", f.contrary)):
            for e in items:
                mark = "holds" if e.passed else "fails"
                body.append(
                    f"  {title}: {e.metric} = {e.value:.4g} {e.comparison} {e.threshold:.4g} ({e.unit}; {mark})\n",
                    style="dim",
                )
                body.append(f"            threshold source: {e.source}\n", style="dim")
        body.append(f"  confidence {f.confidence.level} ({f.confidence.reason}); share of step ~{f.share:.0%}\n")
        p = f.projection
        per = f" per batch of {p.per_batch_of:.0f} samples" if p.per_batch_of else " per step"
        body.append(
            f"  if fixed: ~{p.step_ms:.2f} ms{per} (mean now {p.current_ms:.2f} ms; limit: {p.bound})\n", style="cyan"
        )
        body.append(f"            {p.rule}\n", style="dim")
        if f.savings is not None:
            s = f.savings
            usd = "" if s.usd_per_run is None else f", ${s.usd_per_run:,.2f}"
            body.append(
                f"  saves ~{s.hours_per_run:,.2f} h ({s.gpu_hours_per_run:,.2f} GPU-h{usd}) per run\n",
                style="bold cyan",
            )
        for r in f.recommendations:
            body.append(f"  -> {r}\n")
        parts.append(Panel(body, title=f"{i}. {f.bottleneck}: {f.cause} ({f.severity})", title_align="left"))
    if not report.findings:
        body = Text()
        for e in report.health:
            body.append(
                f"  {e.metric} = {e.value:.4g} {e.comparison} {e.threshold:.4g} ({e.unit}; "
                f"{'holds' if e.passed else 'fails'})\n"
            )
        if m.gpu_util is None:
            body.append("  no GPU timings in this trace, so GPU tests were not evaluated\n", style="dim")
        parts.append(Panel(body, title="healthy run: the tests", title_align="left"))
    return Group(*parts)


def _kernel_section(report: Report) -> RenderableType | None:
    km = report.metrics.kernels
    gpu = gpu_breakdown(report.run, km)
    if km is None and gpu is None:
        return None
    table = Table(title="GPU kernels", title_justify="left")
    table.add_column("")
    table.add_column("value", justify="right")
    if gpu:
        table.add_row("busy / idle (HTA)", f"{gpu.busy_pct:.1f}% / {gpu.idle_pct:.1f}%")
        table.add_row("compute / non-compute (HTA)", f"{gpu.compute_pct:.1f}% / {gpu.non_compute_pct:.1f}%")
    if km is not None:
        t = km.totals_ms
        table.add_row(
            "idle: host wait / launch / other",
            f"{t['idle_host_wait_ms']:.2f} / {t['idle_launch_ms']:.2f} / {t['idle_other_ms']:.2f} ms",
        )
        table.add_row("kernels (median duration)", f"{km.kernel_count} ({km.kernel_median_us or 0:.1f} us)")
        shares = sorted(((c, km.share_of_kernel_time(c)) for c in S.KERNEL_CATEGORIES), key=lambda x: -x[1])
        table.add_row("kernel time by category", ", ".join(f"{c} {v:.0%}" for c, v in shares if v >= 0.01))
        table.add_row("blocking sync API time", f"{t['sync_api_ms']:.2f} ms")
        for name, total, count in km.top_kernels[:3]:
            table.add_row(f"top: {short_name(name, 40)}", f"{total:.2f} ms x{count}")
    return table


def _rank_section(report: Report) -> RenderableType | None:
    d = report.metrics.distributed
    if d is None:
        return None
    table = Table(
        title=f"Ranks ({d.ranks}; median skew {d.skew_median_ms:.2f} ms per step)",
        title_justify="left",
        caption="* straggler; work = step time minus time waiting on other ranks" if d.stragglers else None,
    )
    for col in ("rank", "steps", "step median ms", "work median ms", "waiting (sync)", "data wait"):
        table.add_column(col, justify="right")
    stragglers = {s.rank for s in d.stragglers}
    rows = d.per_rank if len(d.per_rank) <= 16 else sorted(d.per_rank, key=lambda r: -r.work_median_ms)[:16]
    for r in rows:
        table.add_row(
            f"{r.rank}{' *' if r.rank in stragglers else ''}",
            str(r.steps),
            f"{r.step_median_ms:.2f}",
            f"{r.work_median_ms:.2f}",
            f"{r.sync_share:.0%}",
            f"{r.data_share:.0%}",
        )
    return table

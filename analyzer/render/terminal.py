"""Rich terminal rendering of a report: verdict, breakdown table, evidence, recommendations.

Laid out for 80 columns: every labelled block is a two-column grid, so wrapped lines hang under
their text instead of under the label; paths are shortened in the middle to the width they get;
every string from a trace goes through ``analyzer.render.safe``.
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from analyzer.analysis.findings import Evidence, Finding
from analyzer.analysis.host_facts import HostFacts
from analyzer.analysis.kernel_metrics import gpu_breakdown
from analyzer.planning.outcome import Report
from analyzer.planning.settling_trial import measure_line
from analyzer.render import words
from analyzer.render.layout import bullets, labelled
from analyzer.render.safe import clean, shorten, text
from gpuanalyze.ingest.timeline.kernel_names import short_name
from gpuanalyze.ingest.trace import schema as S

_STATE_STYLE = {"ok": "", "imported": "", "live": "yellow"}


class TitledPanel:
    """A panel whose title ends in an untrusted name (a path), shortened in the middle to fit."""

    def __init__(self, body: RenderableType, prefix: str, name: str, *, style: str = "") -> None:
        self.body, self.prefix, self.name, self.style = body, prefix, name, style

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        room = max(8, options.max_width - 6 - len(self.prefix))
        title = Text(self.prefix) + Text(shorten(self.name, room))
        yield Panel(self.body, title=title, title_align="left", border_style=self.style)


def _evidence(items: tuple[Evidence, ...]) -> RenderableType:
    if not items:
        return Text("none", style="dim")
    out = []
    for e in items:
        line = text(words.evidence(e), style="" if e.passed else "red")
        line.append("\n")
        line.append_text(text(e.source, style="dim"))
        out.append(line)
    return bullets(out, "+" if items[0].supports else "x")


def render_terminal(report: Report) -> RenderableType:
    m = report.metrics
    parts: list[RenderableType] = [_header(report)]
    if report.notes:
        parts.append(labelled((("note", text(n, style="yellow")) for n in report.notes), label_width=4))

    table = Table(title="Step time breakdown", title_justify="left")
    table.add_column("part")
    table.add_column("median ms/step", justify="right")
    table.add_column("mean ms/step", justify="right")
    table.add_column("share of time", justify="right")
    for part in S.PARTS:
        median, mean, share = m.breakdown_ms[part], m.mean_ms[part], m.share[part]
        table.add_row(
            words.PART_LABELS[part],
            "n/a" if median is None else f"{median:.2f}",
            "n/a" if mean is None else f"{mean:.2f}",
            "n/a" if share is None else f"{share:.1%}",
        )
    parts.append(table)

    ranks = _rank_section(report)
    if ranks is not None:
        parts.append(ranks)
    kernels = _kernel_section(report)
    if kernels is not None:
        parts.append(kernels)
    if ranked := words.ranking(report.findings):
        parts.append(Text(ranked, style="dim"))
    for i, f in enumerate(report.findings, 1):
        parts.append(_finding(i, f, report))
    if not report.findings and report.health:
        parts.append(_health(report))
    return Group(*parts)


def _header(report: Report) -> RenderableType:
    m = report.metrics
    rows: list[tuple[str, RenderableType]] = [
        ("confidence", text(words.confidence(report.confidence))),
        *((("stability", text(st)),) if (st := words.stability(report)) else ()),
        ("steps", Text(words.accounting(report))),
        ("step time", Text(words.step_time(report))),
        *((label, text(line)) for label, line in words.outside(report)),
    ]
    rate = []
    if m.samples_per_s:
        rate.append(f"{m.samples_per_s:,.0f} samples/s")
    if m.gpu_util is not None:
        rate.append(f"GPU busy {m.gpu_util:.0%}")
    if rate:
        rows.append(("throughput", Text("; ".join(rate))))
    state, sentence = words.run_state(report)
    rows.append(("run", text(sentence, style=_STATE_STYLE.get(state, "bold red"))))
    if report.run.gpu_name:
        caps = sorted(set(report.run.compute_capabilities or ()))
        cap = f" (compute capability {', '.join(caps)})" if caps else ""
        rows.append(("GPU", text(report.run.gpu_name + cap)))
    rows += _memory_rows(report)
    if report.host is not None and report.host.sampled:
        rows.append(("host", Text(host_line(report.host), style="yellow" if report.host.oversubscribed else "")))
    if report.cost is not None:
        c = report.cost
        usd = "" if c.per_run_usd is None else f" = {words.usd(c.per_run_usd)} per run"
        rows.append(
            ("run cost", Text(clean(f"{words.run_length(c)} = {words.device_hours(report, c.gpu_hours, c.gpus)}{usd}")))
        )
    if report.mfu is not None:
        u = report.mfu
        rows.append(
            (
                "MFU",
                Text(
                    f"{u.achieved_tflops:.1f} TFLOP/s per GPU"
                    + (f" = {u.mfu_datasheet:.0%} of the {u.precision} datasheet peak" if u.mfu_datasheet else "")
                    + (f", {u.mfu_measured:.0%} of the measured matmul ceiling" if u.mfu_measured else "")
                ),
            )
        )
    if report.ceilings:
        rows.append(("ceilings", text(report.ceilings)))
    body = Group(Text(words.verdict_line(report), style="bold"), labelled(rows))
    return TitledPanel(body, "gpuanalyze: ", report.path)


def _memory_rows(report: Report) -> list[tuple[str, RenderableType]]:
    """The memory line, and a creep's in red (words.memory)."""
    mem = report.metrics.memory
    lines = [] if mem is None else words.memory(mem)
    return [(label, text(line, style="" if label == "memory" else "bold red")) for label, line in lines]


def host_line(h: HostFacts) -> str:
    """One line of what the system sampler saw: cores, load, CPU, memory, GPU telemetry."""
    rss_gib = None if h.rss_bytes is None else h.rss_bytes / 2**30
    parts = [
        f"{h.cores_available:g} cores available, {h.cores_free:.1f} free",
        *_known(("load {:.1f}", h.load_avg), ("CPU {:.0f}%", h.cpu_util_pct), ("RSS {:.1f} GiB", rss_gib)),
    ]
    gpu = _known(("{:.0f}%", h.gpu_util_pct), ("{:.0f} W", h.gpu_power_w), ("{:.0f} C", h.gpu_temp_c))
    if gpu:
        parts.append("GPU " + ", ".join(gpu))
    if h.oversubscribed:
        parts.append("oversubscribed")
    return "; ".join(parts)


def _known(*facts: tuple[str, float | None]) -> list[str]:
    """Each (format, value) written, in order, where the value was measured."""
    return [form.format(value) for form, value in facts if value is not None]


def _finding(i: int, f: Finding, report: Report) -> RenderableType:
    p = f.projection
    rows: list[tuple[str, RenderableType]] = [
        ("supporting", _evidence(f.supporting)),
        ("contrary", _evidence(f.contrary)),
        ("confidence", text(words.confidence(f.confidence))),
        ("share", Text(f"~{f.share:.0%} of the step")),
        ("if fixed", Text(words.projection(p), style="cyan")),
        ("bound", text(p.bound)),
        ("rule", text(p.rule, style="dim")),
    ]
    if f.savings is not None:
        rows.append(("saves", Text(clean(words.saves(report, f.savings)), "bold cyan")))
    if f.recommendations:
        rows.append(("do", bullets((text(r) for r in f.recommendations), "->")))
    measure = measure_line(report, i)
    if measure is not None:
        rows.append(("measure", text(measure)))
    body = Group(text(f.summary), Text(""), labelled(rows))
    title = text(f"{i}. {f.bottleneck}: {f.cause} ({f.severity} severity)")  # never read as the confidence
    return Panel(body, title=title, title_align="left")


def _health(report: Report) -> RenderableType:
    healthy = report.bottleneck == "none"
    rows: list[tuple[str, RenderableType]] = [
        ("holds" if e.passed else "fails", text(words.test(e)) + Text("\n") + text(e.source, style="dim"))
        for e in report.health
    ]
    intro = (
        "Every test of a healthy run holds:"
        if healthy
        else "These tests define a healthy run; the ones that fail say what is wrong, but no rule can attribute "
        "the time (the trace records no phases it could be charged to) or project a fix:"
    )
    extra: list[RenderableType] = []
    if report.metrics.gpu_util is None:
        extra.append(Text("no GPU timings in this trace, so GPU tests were not evaluated", style="dim"))
    title = "healthy run: the tests" if healthy else "not healthy, cause unknown: the tests"
    return Panel(
        Group(Text(intro), labelled(rows, label_width=5), *extra),
        title=Text(title),
        title_align="left",
        border_style="green" if healthy else "red",
    )


def _kernel_section(report: Report) -> RenderableType | None:
    km = report.metrics.kernels
    gpu = gpu_breakdown(report.run, km)
    if km is not None and not km.kernel_count:
        km = None  # a CPU run's profiled steps: CPU op times, no GPU kernels
    if km is None and gpu is None:
        return None
    table = Table(title="GPU kernels", title_justify="left")
    table.add_column("", overflow="fold")
    table.add_column("value", justify="right", overflow="fold")
    if gpu:
        table.add_row("busy / idle (HTA)", f"{gpu.busy_pct:.1f}% / {gpu.idle_pct:.1f}%")
        table.add_row("compute / non-compute (HTA)", f"{gpu.compute_pct:.1f}% / {gpu.non_compute_pct:.1f}%")
    if km is not None:
        t = km.totals_ms
        for owner, line in words.idle_owners(report):
            table.add_row(text("idle: " + owner), text(line))
        split = f"{t['compute_ms']:.2f} / {t['comm_exposed_ms']:.2f} / {t['copy_busy_ms']:.2f} ms"
        table.add_row("busy: compute / communication alone / copies alone", split)
        table.add_row("kernels (median duration)", f"{km.kernel_count} ({km.kernel_median_us or 0:.1f} us)")
        shares = sorted(((c, km.share_of_kernel_time(c)) for c in S.KERNEL_CATEGORIES), key=lambda x: -x[1])
        table.add_row("kernel time by category", ", ".join(f"{c} {v:.0%}" for c, v in shares if v >= 0.01))
        for name, total, count in km.top_kernels[:3]:
            table.add_row(Text("top: ") + text(shorten(short_name(name, 1 << 16), 40)), f"{total:.2f} ms x{count}")
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

"""The orchestrator: the stages in order, for one run (load -> metrics -> rules -> planning).

It sits above the stages it calls (scale, analysis, planning, render), so none of them imports
another stage to its right; ``analyzer.analyze`` and ``analyzer.report`` are these functions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from analyzer.analysis.contention import assumed_host_note
from analyzer.analysis.host_facts import host_facts
from analyzer.analysis.judge import cpu_side, judge
from analyzer.analysis.rules import Context
from analyzer.machine.ceilings import Ceilings, ceilings_for
from analyzer.planning.cost import CostInputs, run_cost, savings
from analyzer.planning.mfu import mfu
from analyzer.planning.outcome import Report
from gpuanalyze.ingest.trace.reader import Trace

if TYPE_CHECKING:
    from analyzer.measure.inputs import Measured
    from analyzer.planning.compare import Loaded
    from analyzer.planning.step_series import StepSeries
    from analyzer.render.chart_data import ChartData
    from analyzer.render.html_report import HtmlReport

__all__ = ["ReadOptions", "analyze", "chart_data_for", "load_compared", "report", "report_parts"]

OVERSUBSCRIBED_NOTE = "recorded on an oversubscribed host: CPU-side projections have wider ranges and lower confidence"


@dataclass(frozen=True, kw_only=True, slots=True)
class ReadOptions:
    """How ``analyze``, ``report_parts`` and ``report`` read and judge a trace.

    ``machine_ceilings`` (True: the ceilings `gpuanalyze bench` saved; a path: that file) applies the ceilings
    measured on the machine the trace was recorded on, and notes why when none apply; ``ceilings`` applies the
    given ones as they are (findings quote achieved numbers against them). ``cost`` (run length, price) adds cost
    per run and savings; ``flops_per_step`` adds model FLOPs utilisation. A directory of rank files (or a URL of
    one) is measured out of core on ``engine`` ('local': a process pool of ``workers``, default the cores; 'ray':
    Ray tasks), docs/large-runs.md; ``max_bytes`` caps the decompressed JSON read from a Kineto trace (default: a
    gzip ratio guard).
    """

    ceilings: Ceilings | None = None
    machine_ceilings: bool | Path = False
    cost: CostInputs | None = None
    flops_per_step: float | None = None
    engine: str = "local"
    workers: int | None = None
    max_bytes: int | None = None


DEFAULT = ReadOptions()


def analyze(trace: str | Path | Trace, options: ReadOptions = DEFAULT) -> Report:
    """Analyse a trace (.arrow, Kineto .json[.gz], an Nsight Systems export, a directory of per-rank traces, or a
    loaded Trace) as ``options`` say. Raises GpuAnalyzeError on bad input."""
    return _judged(_measured(trace, options, charts=False), options)


def _measured(trace: str | Path | Trace, options: ReadOptions, *, charts: bool) -> Measured:
    """Load and measure: a trace in memory in this process, a file or directory (or URL) on ``options.engine``."""
    from analyzer.measure.inputs import measure, measure_trace
    from gpuanalyze.ingest.trace.byte_source import ReadLimits

    if isinstance(trace, Trace):
        return measure_trace(trace, charts=charts)
    limits = ReadLimits(max_bytes=options.max_bytes)
    return measure(trace, engine=options.engine, workers=options.workers, limits=limits, charts=charts)


def _judged(loaded: Measured, options: ReadOptions) -> Report:
    """The stages after loading (whose steady state and rules' metrics came with it): rules and verdict,
    cost, MFU."""
    metrics, notes = loaded.metrics, loaded.notes
    ceilings, machine_ceilings, cost = options.ceilings, options.machine_ceilings, options.cost
    if machine_ceilings is not False and ceilings is None:
        ceilings, note = ceilings_for(loaded.run, None if machine_ceilings is True else Path(machine_ceilings))
        notes = notes if note is None else (*notes, note)
    steady = loaded.steady
    host = host_facts(loaded.run, loaded.samples)
    ctx = Context(m=loaded.judged, run=loaded.run, end=loaded.end, ceilings=ceilings, host=host)
    judged = judge(ctx, metrics, steady)
    verdict = judged.verdict
    notes = (*notes, *judged.notes)
    cost_ = None
    if cost is not None and cost.has_length:
        cost_ = run_cost(metrics.step_mean_ms, cost, batch_samples=metrics.batch_samples, world_size=loaded.run.world)
    findings = verdict.findings
    if cost_ is not None:
        findings = tuple(dataclasses.replace(f, savings=savings(f.projection.saved_ms, cost_)) for f in findings)
    if host.oversubscribed:
        notes = (*notes, OVERSUBSCRIBED_NOTE)
    if host.priority is not None:
        notes = (*notes, host.priority)
    assumed = assumed_host_note(host, loaded.run)
    if assumed is not None and any(cpu_side(f, ctx.gpu) for f in findings):
        notes = (*notes, assumed)  # the advice names cores free: say they were not measured
    if metrics.sampled_steps and (metrics.kernels is None or not metrics.kernels.kernel_count):
        said = "kernel-level evidence is empty" if metrics.kernels is None else "their CPU op times are the evidence"
        notes = (
            *notes,
            f"{metrics.sampled_steps} step(s) ran under sampled torch.profiler windows but recorded no "
            f"GPU kernels (a CPU run): {said}",
        )
    return Report(
        path=loaded.path,
        bottleneck=verdict.bottleneck,
        confidence=verdict.confidence,
        findings=findings,
        health=verdict.health,
        metrics=metrics,
        complete=loaded.complete,
        notes=notes,
        run=loaded.run,
        end=loaded.end,
        ceilings=ceilings.path if ceilings else None,
        cost=cost_,
        mfu=mfu(options.flops_per_step, metrics, loaded.run, ceilings) if options.flops_per_step else None,
        stability=judged.stability,
        steady=steady,
        host=host,
    )


def report_parts(trace: str | Path | Trace, options: ReadOptions = DEFAULT) -> tuple[Report, ChartData]:
    """The report of ``trace`` (as ``analyze``) and what its charts draw, made in the same passes: a
    directory of ranks out of core on ``options.engine`` (the workers reduce each rank to chart sums too), a
    trace in memory rank by rank in this process."""
    from analyzer.render.chart_data import chart_data_from

    loaded = _measured(trace, options, charts=True)
    result = _judged(loaded, options)
    assert loaded.charts is not None
    return result, chart_data_from(loaded.charts, result)


def report(
    trace: str | Path | Trace,
    options: ReadOptions = DEFAULT,
    *,
    out: str | Path | None = None,
    force: bool = False,
) -> HtmlReport:
    """Analyse ``trace`` and render the HTML report (``analyzer.report``); with ``out``, also save it.

    A directory of ranks is analysed and drawn out of core on ``options.engine`` (as ``analyze``). In a
    notebook the returned object shows the report inline. Needs the ``report`` extra (plotly).
    """
    from analyzer.render.html_report import HtmlReport, render_html, require_plotly

    require_plotly()
    result, data = report_parts(trace, options)
    page = HtmlReport(result, render_html(result, data))
    if out is not None:
        page.save(out, force=force)
    return page


def chart_data_for(report: Report) -> ChartData:
    """What the charts of ``report`` draw, from its trace read again at ``report.path`` (a notebook's
    view, a tracker's artifact); refused when the trace no longer holds the steps it was analysed from."""
    from analyzer.errors import TraceError
    from analyzer.measure.inputs import measure
    from analyzer.render.chart_data import chart_data_from

    again = measure(report.path, charts=True)
    if again.metrics.accounting != report.metrics.accounting:
        raise TraceError(
            f"{report.path}: the trace holds {again.metrics.accounting.analysed:,} analysable steps, the report "
            f"{report.metrics.accounting.analysed:,}: it changed since it was analysed; analyse it again"
        )
    assert again.charts is not None
    return chart_data_from(again.charts, report)


def load_compared(path: Path, defaults: CostInputs, ceilings: Ceilings | None) -> Loaded:
    """One run or server for ``compare``: a config file, or a trace analysed here."""
    from analyzer.planning.compare import load_option

    return load_option(path, defaults, ceilings, analyze_trace=_analyze_for_compare)


def _analyze_for_compare(
    trace: Path, cost: CostInputs | None, ceilings: Ceilings | None
) -> tuple[Report, StepSeries, dict[str, str]]:
    """The trace's report, its analysed steps one by one, and its tags. A .arrow file or a run's rank
    files: the steps from their columns (only the step series' are kept, and only until the series
    is made), then the report as ``analyze`` makes it (from the columns again, in bounded memory):
    nothing of the run is held twice. Anything else (a directory, a Kineto or Nsight file) is loaded
    once, in memory, and both come from that."""
    from analyzer.measure.file_rows import arrow_input, rows_of, trace_rank_rows
    from analyzer.planning.step_series import COLUMNS, step_series
    from gpuanalyze.ingest.sources import load_any
    from gpuanalyze.ingest.timeline.free_memory import return_freed_memory

    if arrow_input(trace):
        rows, tags = trace_rank_rows(trace, COLUMNS)
        steps = step_series(rows)
        del rows
        return_freed_memory()  # the columns read for the series, before the analysis reads them again
        result = analyze(trace, ReadOptions(ceilings=ceilings, cost=cost))
        return_freed_memory()  # what the rules and the bootstrap freed, before the next run is read
        return result, steps, tags
    loaded = load_any(trace)
    result = analyze(loaded, ReadOptions(ceilings=ceilings, cost=cost))
    return result, step_series(rows_of(loaded, COLUMNS)), loaded.tags


def _notebook_view(self: Report) -> str:
    """The HTML report inline in a notebook (charts need the trace at ``path`` and the report extra)."""
    from analyzer.render.html_report import notebook_html

    return notebook_html(self, chart_data_for)


# Registered here, above render, so that the result type never imports its renderer.
Report._repr_html_ = _notebook_view  # type: ignore[attr-defined]

"""The analysis pipeline: load -> metrics -> classify -> project and cost, returning a frozen Report."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from analyzer.analysis.findings import Finding, Report
from analyzer.analysis.metrics import StepMetrics, step_metrics
from analyzer.analysis.projections import project
from analyzer.analysis.rules import classify
from analyzer.machine.ceilings import Ceilings
from analyzer.planning.cost import CostInputs, RunCost, run_cost, run_hours
from analyzer.planning.mfu import mfu
from gpuanalyze.ingest.reader import Trace
from gpuanalyze.ingest.sources import load_any


def analyze(
    trace: str | Path | Trace,
    *,
    ceilings: Ceilings | None = None,
    cost: CostInputs | None = None,
    flops_per_step: float | None = None,
) -> Report:
    """Analyse a trace (.arrow, Kineto .json[.gz], a directory of per-rank traces, or a loaded Trace).

    ``ceilings`` (from ``analyzer.machine.ceilings.find_ceilings``) lets findings quote achieved numbers
    against what `gpuanalyze bench` measured; ``cost`` (run length, price) adds cost per run and
    savings; ``flops_per_step`` adds model FLOPs utilisation. Raises GpuAnalyzeError on bad input.
    """
    loaded = trace if isinstance(trace, Trace) else load_any(trace)
    metrics = step_metrics(loaded)
    bottleneck, confidence, findings = classify(metrics, loaded.run, ceilings)
    run_cost_ = None
    if cost is not None and cost.has_length:
        run_cost_ = run_cost(
            metrics.step_mean_ms, cost, batch_samples=metrics.batch_samples, world_size=loaded.run.world
        )
    findings = _projected(findings, metrics, loaded, ceilings, run_cost_)
    if findings:
        bottleneck, confidence = findings[0].bottleneck, round(findings[0].consistency, 3)
    notes = loaded.notes
    if metrics.sampled_steps and metrics.kernels is None:
        notes = (
            *notes,
            f"{metrics.sampled_steps} step(s) ran under sampled torch.profiler windows but recorded no GPU kernels "
            "(a CPU run): kernel-level evidence is empty",
        )
    return Report(
        path=str(loaded.path),
        bottleneck=bottleneck,
        confidence=confidence,
        findings=findings,
        metrics=metrics,
        complete=loaded.complete,
        notes=notes,
        run=loaded.run,
        end=loaded.end,
        ceilings=ceilings.path if ceilings else None,
        cost=run_cost_,
        mfu=mfu(flops_per_step, metrics, loaded.run, ceilings) if flops_per_step else None,
    )


def _projected(
    findings: tuple[Finding, ...], m: StepMetrics, trace: Trace, ceilings: Ceilings | None, cost: RunCost | None
) -> tuple[Finding, ...]:
    """Attach projections and savings; rank by time saved (findings without a projection keep
    their recoverable-share order after those with one)."""
    wall = m.step_mean_ms
    out = []
    for f in findings:
        p = project(f, m, trace.run, ceilings, trace.end)
        if p is None:
            out.append(f)
            continue
        step = min(p.step_ms, wall)
        extra = {}
        if cost is not None:
            hours = run_hours(wall - step, cost.steps_per_run)
            price = cost.inputs.price_per_gpu_hour
            extra = {
                "savings_hours_per_run": hours,
                "savings_gpu_hours_per_run": hours * cost.gpus,
                "savings_usd_per_run": None if price is None else hours * cost.gpus * price,
            }
        out.append(
            dataclasses.replace(
                f, projected_step_time_ms=step, projection_rule=p.rule, projection_params=p.params, **extra
            )
        )
    with_p = sorted((f for f in out if f.projected_step_time_ms is not None), key=lambda f: f.projected_step_time_ms)
    return tuple(with_p + [f for f in out if f.projected_step_time_ms is None])

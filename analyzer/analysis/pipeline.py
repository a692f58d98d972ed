"""The analysis pipeline: load -> metrics -> rules (projections) -> cost, returning a frozen Report."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from analyzer.analysis.findings import Finding, Report, Savings
from analyzer.analysis.rules import Context, classify
from analyzer.machine.ceilings import Ceilings, ceilings_for
from analyzer.planning.cost import CostInputs, RunCost, run_cost, run_hours
from analyzer.planning.mfu import mfu
from gpuanalyze.ingest.reader import Trace


def analyze(
    trace: str | Path | Trace,
    *,
    ceilings: Ceilings | None = None,
    machine_ceilings: bool | Path = False,
    cost: CostInputs | None = None,
    flops_per_step: float | None = None,
    engine: str = "local",
    workers: int | None = None,
    max_bytes: int | None = None,
) -> Report:
    """Analyse a trace (.arrow, Kineto .json[.gz], a directory of per-rank traces, or a loaded Trace).

    ``machine_ceilings`` (True: the ceilings `gpuanalyze bench` saved; a path: that file) applies
    the ceilings measured on the machine the trace was recorded on, and notes why when none apply;
    ``ceilings`` applies the given ones as they are. Findings quote achieved numbers against them.
    ``cost`` (run length, price) adds cost per run and savings; ``flops_per_step`` adds model FLOPs
    utilisation. Raises GpuAnalyzeError on bad input.

    A directory of rank files (or a URL of one) is measured out of core on ``engine`` ('local': a
    process pool of ``workers``, default the cores; 'ray': Ray tasks), docs/large-runs.md;
    ``max_bytes`` caps the decompressed JSON read from a Kineto trace (default: a gzip ratio guard).
    """
    from analyzer.scale.measure import measure, measure_trace
    from gpuanalyze.ingest.stream import ReadLimits

    if isinstance(trace, Trace):
        loaded = measure_trace(trace)
    else:
        loaded = measure(trace, engine=engine, workers=workers, limits=ReadLimits(max_bytes=max_bytes))
    metrics = loaded.metrics
    notes = loaded.notes
    if machine_ceilings is not False and ceilings is None:
        ceilings, note = ceilings_for(loaded.run, None if machine_ceilings is True else Path(machine_ceilings))
        notes = notes if note is None else (*notes, note)
    verdict = classify(Context(m=metrics, run=loaded.run, end=loaded.end, ceilings=ceilings))
    cost_ = None
    if cost is not None and cost.has_length:
        cost_ = run_cost(metrics.step_mean_ms, cost, batch_samples=metrics.batch_samples, world_size=loaded.run.world)
    findings = verdict.findings if cost_ is None else tuple(_with_savings(f, cost_) for f in verdict.findings)
    if metrics.sampled_steps and metrics.kernels is None:
        notes = (
            *notes,
            f"{metrics.sampled_steps} step(s) ran under sampled torch.profiler windows but recorded no "
            "GPU kernels (a CPU run): kernel-level evidence is empty",
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
        mfu=mfu(flops_per_step, metrics, loaded.run, ceilings) if flops_per_step else None,
    )


def _with_savings(f: Finding, cost: RunCost) -> Finding:
    """What the finding's fix saves per completed run, from the steps the run has."""
    # A larger-batch projection is per current batch worth of samples, so the current step count applies.
    hours = run_hours(f.projection.saved_ms, cost.steps_per_run)
    price = cost.inputs.price_per_gpu_hour
    return dataclasses.replace(
        f,
        savings=Savings(
            hours_per_run=hours,
            gpu_hours_per_run=hours * cost.gpus,
            usd_per_run=None if price is None else hours * cost.gpus * price,
        ),
    )

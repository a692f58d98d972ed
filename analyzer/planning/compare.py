"""Compare runs or servers by what a *completed run* costs, not by hourly price; and, for two
traces of the same job, check the projection: when AFTER applied a fix BEFORE's report
recommended (DataLoader workers, batch size, precision), put the projected step time beside the
measured one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from analyzer.analysis.findings import Report
from analyzer.analysis.pipeline import analyze
from analyzer.analysis.rules import Context
from analyzer.analysis.rules.batch_size import batch_projection
from analyzer.analysis.rules.data_loading import worker_plan
from analyzer.errors import GpuAnalyzeError
from analyzer.machine.ceilings import Ceilings
from analyzer.planning.config import read_toml
from analyzer.planning.cost import CostInputs, cost_inputs
from analyzer.planning.mfu import tensor_core_share
from analyzer.planning.run_differences import different_jobs, run_differences
from gpuanalyze.ingest import schema as S


@dataclass(frozen=True, slots=True)
class RunOption:
    name: str
    hours_per_run: float | None
    """None for a trace compared without a run length (step times only)."""
    gpus: int
    price_per_gpu_hour: float | None
    per_run_usd: float | None
    step_time_ms: float | None = None
    samples_per_s: float | None = None
    breakdown_ms: dict[str, float | None] | None = None
    bottleneck: str | None = None


@dataclass(frozen=True, slots=True)
class ProjectionCheck:
    """A fix BEFORE's analysis projected, applied in AFTER: the projection against the measurement."""

    fix: str
    """What changed, e.g. 'num_workers 0 -> 2'."""
    bottleneck: str
    """The finding of BEFORE whose fix it is."""
    recommended: bool
    """AFTER applied exactly what the finding recommended (else the projection is redone for what it applied)."""
    projected_ms: float
    measured_ms: float
    per: str
    """'per step', or 'per batch of N samples' for a batch-size change (AFTER's step time rescaled)."""
    rule: str

    @property
    def error(self) -> float:
        """(projected - measured) / measured."""
        return (self.projected_ms - self.measured_ms) / self.measured_ms


@dataclass(frozen=True, slots=True)
class Comparison:
    options: tuple[RunOption, ...]
    cheapest: str | None
    """Name of the option with the lowest cost per completed run (None without prices)."""
    saving_usd: float | None
    """How much the cheapest saves per run against the next cheapest."""
    checks: tuple[ProjectionCheck, ...] = ()
    """For two traces: the projections of BEFORE's findings that AFTER put to the test."""
    differences: tuple[str, ...] = ()
    """For two traces: how the runs differ (run_differences.py); with another model or world size
    they are two jobs, and no projection is checked."""


@dataclass(frozen=True, slots=True)
class Loaded:
    option: RunOption
    report: Report | None
    """The analysis, when the option is a trace."""


def load_option(path: str | Path, defaults: CostInputs, ceilings: Ceilings | None = None) -> Loaded:
    """A trace (analysed with ``defaults``), or a TOML file naming price and run length
    (``hours_per_run``, or ``trace`` plus ``steps_per_run``/``samples_per_run``)."""
    path = Path(path)
    if path.suffix == ".toml":
        cfg = read_toml(path, "run option")
        inputs = cost_inputs(cfg, path)
        name, trace, hours = cfg.get("name", path.stem), cfg.get("trace"), cfg.get("hours_per_run")
        if not isinstance(name, str) or not isinstance(trace, str | None):
            raise GpuAnalyzeError(f"{path}: name and trace must be strings")
        if hours is not None:
            if isinstance(hours, bool) or not isinstance(hours, int | float) or not 0 < hours < math.inf:
                raise GpuAnalyzeError(f"{path}: hours_per_run must be a positive number, not {hours!r}")
            gpus = int(inputs.gpus or 1)
            return Loaded(
                RunOption(name, float(hours), gpus, inputs.price_per_gpu_hour, _usd(hours, gpus, inputs)), None
            )
        if trace is None:
            raise GpuAnalyzeError(f"{path}: needs hours_per_run, or trace plus a run length")
        return _from_trace(path.parent / trace, name, inputs, ceilings)
    return _from_trace(path, path.name, defaults, ceilings)


def _usd(hours: float, gpus: int, inputs: CostInputs) -> float | None:
    if inputs.price_per_gpu_hour is None:
        return None
    return hours * gpus * inputs.price_per_gpu_hour + inputs.other_usd


def _from_trace(trace: Path, name: str, inputs: CostInputs, ceilings: Ceilings | None) -> Loaded:
    report = analyze(trace, ceilings=ceilings, cost=inputs if inputs.has_length else None)
    c = report.cost
    m = report.metrics
    option = RunOption(
        name,
        c.hours_per_run if c else None,
        c.gpus if c else report.run.world,
        inputs.price_per_gpu_hour,
        c.per_run_usd if c else None,
        m.step_mean_ms,
        m.samples_per_s,
        {k: v for k, v in m.mean_ms.items() if k in S.PARTS},
        report.bottleneck,
    )
    return Loaded(option, report)


def compare(loaded: list[Loaded]) -> Comparison:
    if len(loaded) < 2:
        raise GpuAnalyzeError("compare needs at least two runs or servers")
    options = tuple(x.option for x in loaded)
    reports = [x.report for x in loaded]
    checks: tuple[ProjectionCheck, ...] = ()
    differences: tuple[str, ...] = ()
    if len(reports) == 2 and reports[0] is not None and reports[1] is not None:
        differences = tuple(run_differences(reports[0], reports[1]))
        if not different_jobs(list(differences)):
            checks = projection_checks(reports[0], reports[1])
    priced = sorted((o.per_run_usd, o.name) for o in options if o.per_run_usd is not None)
    if len(priced) < 2:
        return Comparison(options, None, None, checks, differences)
    return Comparison(options, priced[0][1], priced[1][0] - priced[0][0], checks, differences)


def projection_checks(before: Report, after: Report) -> tuple[ProjectionCheck, ...]:
    """Each recognised fix AFTER applied, with BEFORE's projection for it (redone for the value applied)."""
    ctx = Context(m=before.metrics, run=before.run, end=before.end, ceilings=None)
    found = {f.bottleneck: f for f in before.findings}
    measured = after.metrics.step_mean_ms
    checks = []
    w0 = before.end.loader_workers if before.end else None
    w1 = after.end.loader_workers if after.end else None
    if w0 is not None and w1 is not None and w1 != w0 and w1 > 0:
        data = ctx.ms(before.metrics.effective[S.DATA_WAIT_MS])
        plan = worker_plan(ctx, data, workers=w1)
        f = found.get("data_loading")
        if plan is not None and plan.workers > 0:
            recommended = f is not None and dict(f.projection.params).get("num_workers") == w1
            step = max(plan.step_ms, ctx.busy)
            checks.append(
                ProjectionCheck(
                    f"num_workers {w0} -> {w1}", "data_loading", recommended, step, measured, "per step", plan.rule
                )
            )
    b0, b1 = before.metrics.batch_samples, after.metrics.batch_samples
    if b0 and b1 and b1 > b0:
        k = b1 / b0
        p = batch_projection(ctx, k, f"batch {b0:.0f} -> {b1:.0f} (x{k:g}, as applied)")
        f = found.get("batch_size")
        recommended = f is not None and dict(f.projection.params).get("batch_multiplier") == k
        checks.append(
            ProjectionCheck(
                f"batch {b0:.0f} -> {b1:.0f}",
                "batch_size",
                recommended,
                p.step_ms,
                measured / k,
                f"per batch of {b0:.0f} samples",
                p.rule,
            )
        )
    tc0, tc1 = tensor_core_share(before.metrics.kernels), tensor_core_share(after.metrics.kernels)
    d0, d1 = before.run.param_dtype, after.run.param_dtype
    to_tensor_cores = (tc0 is not None and tc1 is not None and tc0 < 0.5 <= tc1) or (
        d0 == "float32" and d1 in ("bfloat16", "float16")
    )
    if to_tensor_cores and "kernels" in found:
        p = found["kernels"].projection
        checks.append(
            ProjectionCheck("fp32 -> tensor-core precision", "kernels", True, p.step_ms, measured, "per step", p.rule)
        )
    return tuple(checks)

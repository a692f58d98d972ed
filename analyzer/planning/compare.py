"""Compare runs or servers by what a *completed run* costs, not by hourly price; for two traces of
the same job, check BEFORE's projections against AFTER (``projection_check``) and, when asked,
gate on a slowdown beyond noise (``gate``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from analyzer.analysis.owners import OwnerMove, owner_moves, ownership
from analyzer.errors import GpuAnalyzeError
from analyzer.machine.ceilings import Ceilings
from analyzer.planning.cost import CostInputs, cost_inputs, gpu_hours_usd
from analyzer.planning.gate import GateOptions, GateResult, regression_gate
from analyzer.planning.host_difference import host_lines, unchanged_phases
from analyzer.planning.outcome import Report
from analyzer.planning.projection_check import ProjectionCheck, projection_checks
from analyzer.planning.run_differences import changes, different_jobs, gate_refusal, run_differences
from analyzer.planning.run_label import run_label, unique_labels
from analyzer.planning.step_series import StepSeries
from analyzer.planning.toml_config import read_toml
from gpuanalyze.ingest.trace import schema as S

__all__ = ["Comparison", "Loaded", "ProjectionCheck", "RunOption", "compare", "load_option"]


@dataclass(frozen=True, slots=True)
class RunOption:
    name: str
    hours_per_run: float | None
    """None for a trace compared without a run length (step times only)."""
    gpus: int
    price_per_gpu_hour: float | None
    per_run_usd: float | None
    step_time_mean_ms: float | None = None
    samples_per_s: float | None = None
    breakdown_ms: dict[str, float | None] | None = None
    bottleneck: str | None = None
    peak_mem_bytes: int | None = None
    persistent_mem_bytes: int | None = None
    """Memory at the start of a step (analysis.memory_fit): what persists across steps."""

    @classmethod
    def from_report(cls, name: str, report: Report, price_per_gpu_hour: float | None) -> RunOption:
        """A trace's option from its analysis: the run's cost when it has a length, its step time and breakdown."""
        c = report.cost
        m = report.metrics
        return cls(
            name=name,
            hours_per_run=c.hours_per_run if c else None,
            gpus=c.gpus if c else report.run.world,
            price_per_gpu_hour=price_per_gpu_hour,
            per_run_usd=c.per_run_usd if c else None,
            step_time_mean_ms=m.step_mean_ms,
            samples_per_s=m.samples_per_s,
            breakdown_ms={k: v for k, v in m.mean_ms.items() if k in S.PARTS},
            bottleneck=report.bottleneck,
            peak_mem_bytes=m.peak_mem_bytes,
            persistent_mem_bytes=None if m.memory is None else m.memory.persistent,
        )


@dataclass(frozen=True, slots=True)
class Comparison:
    options: tuple[RunOption, ...]
    cheapest: str | None
    """Name of the option with the lowest cost per completed run (None without prices)."""
    saving_usd: float | None
    """How much the cheapest saves per run against the next cheapest."""
    checks: tuple[ProjectionCheck, ...] = ()
    """For two traces: the projections of BEFORE's findings that AFTER put to the test."""
    gate: GateResult | None = None
    """For two traces with a tolerance given: the regression gate's verdict."""
    differences: tuple[str, ...] = ()
    """For two traces: how the runs differ (run_differences.py); with another model or world size
    they are two jobs, and no projection is checked."""
    owners_moved: tuple[OwnerMove, ...] = ()
    """For two traces whose idle owners were measured: how each owner's idle ms per step moved (BEFORE to
    AFTER), the largest move first."""


@dataclass(frozen=True, slots=True)
class Loaded:
    option: RunOption
    report: Report | None
    """The analysis, when the option is a trace."""
    steps: StepSeries | None = None
    """The trace's analysed steps, one by one (for the gate and the lead-time check)."""
    path: Path | None = None
    """What was given on the command line (labels are made unique by it)."""


AnalyzeTrace = Callable[[Path, "CostInputs | None", "Ceilings | None"], tuple[Report, StepSeries, dict[str, str]]]
"""How a trace becomes a Report, with its analysed steps (step_series.step_series of its rows) and its
user tags: given by the caller (``analyzer.api``), which sits above planning."""


def load_option(
    path: str | Path, defaults: CostInputs, ceilings: Ceilings | None = None, *, analyze_trace: AnalyzeTrace
) -> Loaded:
    """A trace (analysed with ``defaults`` by ``analyze_trace``), or a TOML file naming price and run
    length (``hours_per_run``, or ``trace`` plus ``steps_per_run``/``samples_per_run``)."""
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
                RunOption(
                    name=name,
                    hours_per_run=float(hours),
                    gpus=gpus,
                    price_per_gpu_hour=inputs.price_per_gpu_hour,
                    per_run_usd=_usd(hours, gpus, inputs),
                ),
                None,
                path=path,
            )
        if trace is None:
            raise GpuAnalyzeError(f"{path}: needs hours_per_run, or trace plus a run length")
        return _from_trace(path.parent / trace, name, inputs, ceilings, analyze_trace)
    return _from_trace(path, None, defaults, ceilings, analyze_trace)


def _usd(hours: float, gpus: int, inputs: CostInputs) -> float | None:
    usd = gpu_hours_usd(hours * gpus, inputs.price_per_gpu_hour)
    return None if usd is None else usd + inputs.other_usd


def _from_trace(
    trace: Path, name: str | None, inputs: CostInputs, ceilings: Ceilings | None, analyze_trace: AnalyzeTrace
) -> Loaded:
    """``name``: the config file's; None labels the run from its tags or path (``run_label``)."""
    report, steps, tags = analyze_trace(trace, inputs if inputs.has_length else None, ceilings)
    option = RunOption.from_report(name or run_label(trace, tags), report, inputs.price_per_gpu_hour)
    return Loaded(option, report, steps, trace)


def compare(loaded: list[Loaded], gate: GateOptions | None = None) -> Comparison:
    """The options side by side, cheapest first when priced; for two traces how they differ, the projection
    checks and, with ``gate``, the regression gate (AFTER = the second)."""
    if len(loaded) < 2:
        raise GpuAnalyzeError("compare needs at least two runs or servers")
    labels = unique_labels([x.option.name for x in loaded], [x.path or Path(x.option.name) for x in loaded])
    options = tuple(dataclasses.replace(x.option, name=n) for x, n in zip(loaded, labels, strict=True))
    a, b = (loaded[0].report, loaded[1].report) if len(loaded) == 2 else (None, None)
    differences = (*run_differences(a, b), *changes(a, b)) if a is not None and b is not None else ()
    refusal = gate_refusal(list(differences)) if gate is not None and gate.active else None
    if refusal is not None:
        raise GpuAnalyzeError(refusal)
    checks, verdict = _pair_checks(loaded, gate, check_projections=not different_jobs(list(differences)))
    moved: tuple[OwnerMove, ...] = ()
    if a is not None and b is not None:
        phases = unchanged_phases(a, b, [*differences, *(k.kind for k in checks)])
        differences = (*differences, *host_lines(a.host, b.host, verdict, (a.run, b.run)), *filter(None, [phases]))
        before, after = ownership(a.metrics.kernels), ownership(b.metrics.kernels)
        moved = () if before is None or after is None else owner_moves(before, after)
    priced = sorted((o.per_run_usd, o.name) for o in options if o.per_run_usd is not None)
    cheapest, saving = (priced[0][1], priced[1][0] - priced[0][0]) if len(priced) > 1 else (None, None)
    return Comparison(options, cheapest, saving, checks, verdict, differences, moved)


def _pair_checks(
    loaded: list[Loaded], gate: GateOptions | None, *, check_projections: bool = True
) -> tuple[tuple[ProjectionCheck, ...], GateResult | None]:
    """For exactly two traces: BEFORE's projections checked against AFTER (not across two different
    jobs), and the gate when asked."""
    active = gate is not None and gate.active
    before, after = (loaded[0], loaded[1]) if len(loaded) == 2 else (None, None)
    if before is None or after is None or before.report is None or after.report is None:
        if active:
            raise GpuAnalyzeError("the regression gate compares exactly two traces: BEFORE AFTER")
        return (), None
    checks = projection_checks(before.report, after.report, (before.steps, after.steps)) if check_projections else ()
    if gate is None or not active:
        return checks, None
    if before.steps is None or after.steps is None:
        raise GpuAnalyzeError("the regression gate needs the steps of both traces")
    return checks, regression_gate(before.steps, after.steps, gate)

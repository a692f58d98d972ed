"""The regression gate of `gpuanalyze compare BEFORE AFTER --fail-if-slower PCT`: is AFTER slower
(or its throughput lower) by more than PCT, beyond the two runs' step-to-step noise?

Noise: a seeded bootstrap over the analysed steps of both runs. Each resample draws BEFORE's and
AFTER's steps with replacement and computes the relative change of the mean step time (of
samples/s: samples over time); the central ``confidence`` interval (95% by default, the 2.5th to
97.5th percentile of the resamples) of that change is the range the noise allows. The gate fails
only when the interval's lower end is above PCT: even the most favourable reading the noise allows
is slower than the tolerance. Steps are treated as independent draws (slow phases that last many
steps make the interval too narrow; record enough steps to span them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from analyzer.errors import GpuAnalyzeError
from analyzer.planning.step_series import StepSeries

#: Fewest analysed steps per run the gate accepts: fewer say nothing about the noise.
MIN_STEPS = 5
#: Largest tolerance accepted, in percent.
MAX_PCT = 1000.0
#: Resampled values held in memory at once (the draws are made in blocks of resamples).
_BLOCK = 4_000_000

Metric = Literal["step_time", "throughput"]


def _pct(name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_PCT:
        raise GpuAnalyzeError(f"{name} takes a percentage from 0 to {MAX_PCT:g}, not {value!r} (e.g. {name} 5)")


@dataclass(kw_only=True, slots=True)
class GateOptions:
    """What makes `compare` exit 1."""

    fail_if_slower_pct: float | None = None
    """Fail when AFTER's mean step time is more than this many percent above BEFORE's, beyond noise."""
    fail_if_throughput_drops_pct: float | None = None
    """Fail when AFTER's samples/s are more than this many percent below BEFORE's, beyond noise."""
    confidence: float = 0.95
    """Central bootstrap interval of the change that the noise allows (0.95: 2.5th to 97.5th percentile)."""
    resamples: int = 2000
    """Bootstrap resamples of both runs' steps."""
    seed: int = 0
    """Seed of the bootstrap's generator: the same traces always give the same verdict."""

    def __post_init__(self) -> None:
        _pct("--fail-if-slower", self.fail_if_slower_pct)
        _pct("--fail-if-throughput-drops", self.fail_if_throughput_drops_pct)
        if not 0.5 <= self.confidence < 1:
            raise GpuAnalyzeError(f"gate confidence must be in [0.5, 1), not {self.confidence!r}")
        if not 100 <= self.resamples <= 100_000:
            raise GpuAnalyzeError(f"gate resamples must be 100 to 100000, not {self.resamples!r}")

    @property
    def active(self) -> bool:
        return self.fail_if_slower_pct is not None or self.fail_if_throughput_drops_pct is not None


@dataclass(frozen=True, slots=True)
class GateCheck:
    """One tolerance against the measured change and the range the noise allows."""

    metric: Metric
    """'step_time' (mean ms per step) or 'throughput' (samples/s)."""
    tolerance_pct: float
    before: float
    after: float
    change_pct: float
    """How much worse AFTER is, in percent: slower step time, or lower throughput (negative: better)."""
    low_pct: float
    """Low end of the bootstrap interval of ``change_pct``."""
    high_pct: float
    confidence: float
    steps: tuple[int, int]
    """Analysed steps of BEFORE and AFTER."""

    @property
    def failed(self) -> bool:
        """Worse by more than the tolerance even at the interval's low end."""
        return self.low_pct > self.tolerance_pct


@dataclass(frozen=True, slots=True)
class GateResult:
    checks: tuple[GateCheck, ...]

    @property
    def failed(self) -> bool:
        return any(c.failed for c in self.checks)


def regression_gate(before: StepSeries, after: StepSeries, options: GateOptions) -> GateResult:
    """Each tolerance ``options`` sets, checked on the two runs' analysed steps."""
    for name, s in (("BEFORE", before), ("AFTER", after)):
        if s.steps < MIN_STEPS:
            raise GpuAnalyzeError(
                f"{name} has {s.steps} analysed step(s); the gate needs at least {MIN_STEPS} per run to tell a "
                "change from noise (record more steps)"
            )
    checks = []
    if options.fail_if_slower_pct is not None:
        checks.append(_check("step_time", options.fail_if_slower_pct, before, after, options))
    if options.fail_if_throughput_drops_pct is not None:
        if before.samples is None or after.samples is None:
            raise GpuAnalyzeError(
                "--fail-if-throughput-drops needs batch sizes in both traces (record with analyzer.profile's "
                "batch size, or use --fail-if-slower)"
            )
        checks.append(_check("throughput", options.fail_if_throughput_drops_pct, before, after, options))
    return GateResult(tuple(checks))


def _check(metric: Metric, tolerance: float, before: StepSeries, after: StepSeries, o: GateOptions) -> GateCheck:
    rng = np.random.default_rng(o.seed)
    b, a = _value(metric, before), _value(metric, after)
    if not (b > 0 and a > 0 and math.isfinite(a) and math.isfinite(b)):
        raise GpuAnalyzeError(f"the runs' {metric.replace('_', ' ')} is not positive: nothing to compare")
    rb, ra = _resampled(metric, before, o.resamples, rng), _resampled(metric, after, o.resamples, rng)
    changes = _change(metric, rb, ra)
    tail = 100 * (1 - o.confidence) / 2
    low, high = np.percentile(changes, [tail, 100 - tail])
    return GateCheck(
        metric=metric,
        tolerance_pct=float(tolerance),
        before=b,
        after=a,
        change_pct=float(_change(metric, np.array([b]), np.array([a]))[0]),
        low_pct=float(low),
        high_pct=float(high),
        confidence=o.confidence,
        steps=(before.steps, after.steps),
    )


def _change(metric: Metric, before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Percent worse: a longer step, or fewer samples/s."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return 100 * (after / before - 1) if metric == "step_time" else 100 * (1 - after / before)


def _value(metric: Metric, s: StepSeries) -> float:
    """The run's mean step time (ms), or its samples/s (samples over time)."""
    if metric == "step_time":
        return float(s.step_ms.mean())
    assert s.samples is not None
    return float(1e3 * s.samples.sum() / s.step_ms.sum())


def _resampled(metric: Metric, s: StepSeries, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` bootstrap values of the run's mean step time (or samples/s), drawn in memory-bounded blocks."""
    per_block = max(1, _BLOCK // s.steps)
    out = np.empty(n)
    for start in range(0, n, per_block):
        rows = min(per_block, n - start)
        idx = rng.integers(0, s.steps, size=(rows, s.steps))
        step = s.step_ms[idx].sum(axis=1)
        if metric == "step_time":
            out[start : start + rows] = step / s.steps
        else:
            assert s.samples is not None
            out[start : start + rows] = 1e3 * s.samples[idx].sum(axis=1) / step
    return out

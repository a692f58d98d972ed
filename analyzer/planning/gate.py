"""The regression gate of `gpuanalyze compare BEFORE AFTER --fail-if-slower PCT`: is AFTER slower
(or its throughput lower) by more than PCT, beyond the two runs' own step-to-step noise?

Statistic: the *median* step time (samples/s: the median of the steps' samples/s), so one 8 s
checkpoint step does not move it; the spike steps (far above the median, the steady-state rule of
analysis/steady.py) are counted and timed apart (``Spikes``), never hidden and never the verdict.

Noise: a seeded *moving-block* bootstrap of the median on at most ``MAX_STEPS`` steps of each run
(evenly spaced over the whole run, so a run of 1M steps costs what one of 4,096 does). Each resample
strings together blocks of consecutive steps drawn with replacement; blocks keep a run's slow phases
and drift together, so a run that drifts widens its own interval instead of passing for a change
(independent draws of single steps made the interval too narrow: identical code failed). The gate
fails only when the interval's low end is above PCT: even the most favourable reading the noise
allows is slower than the tolerance. A run whose median moves over the run (first against last
third: thermal throttling, a growing cache, a neighbour) cannot pin its level better than half that
move, so the interval is widened by the runs' drift (``drift_allowance_pct``), which is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from analyzer.analysis import thresholds as T
from analyzer.errors import GpuAnalyzeError
from analyzer.planning.step_series import StepSeries

#: Fewest analysed steps per run the gate accepts: fewer say nothing about the noise.
MIN_STEPS = 5
#: Largest tolerance accepted, in percent.
MAX_PCT = 1000.0
#: Most steps of one run the bootstrap resamples (evenly spaced over the run): bounds its time and memory.
MAX_STEPS = 4096
#: Blocks of consecutive steps per bootstrap resample (fewer for short runs: blocks of at least one step).
BLOCKS = 32
#: Resampled values held in memory at once (the draws are made in chunks of resamples).
_CHUNK = 4_000_000
#: A robust standard deviation is this many median absolute deviations (normal distribution).
_MAD_SD = 1.4826

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
    """Fail when AFTER's median step time is more than this many percent above BEFORE's, beyond noise."""
    fail_if_throughput_drops_pct: float | None = None
    """Fail when AFTER's median samples/s are more than this many percent below BEFORE's, beyond noise."""
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
class Spikes:
    """One run's steps far above its median step time, reported apart from the median."""

    steps: int
    """How many."""
    mean_ms: float
    """Their mean step time (0 when there are none)."""
    share: float
    """Their share of the run's total step time."""


@dataclass(frozen=True, slots=True)
class GateCheck:
    """One tolerance against the measured change and the range the noise allows."""

    metric: Metric
    """'step_time' (median ms per step) or 'throughput' (median samples/s)."""
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
    resampled: tuple[int, int] = (0, 0)
    """Of those, the steps the bootstrap resampled (at most MAX_STEPS each)."""
    spikes: tuple[Spikes, Spikes] | None = None
    """BEFORE's and AFTER's spike steps (not in the statistic)."""
    drift_pct: tuple[float, float] = (0.0, 0.0)
    """How much each run's median step time moved from its first to its last third, in percent."""
    drift_allowance_pct: float = 0.0
    """Widening of the interval (each side) for the runs' drift: a run whose level moves by d% over the
    run pins its level to no better than +-d/2 (the two runs' combined in quadrature)."""

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
    vb, va = _per_step(metric, before), _per_step(metric, after)
    b, a = float(np.median(vb)), float(np.median(va))
    if not (b > 0 and a > 0 and math.isfinite(a) and math.isfinite(b)):
        raise GpuAnalyzeError(f"the runs' {metric.replace('_', ' ')} is not positive: nothing to compare")
    sb, sa = _bounded(vb), _bounded(va)
    changes = _change(metric, _resampled(sb, o.resamples, rng), _resampled(sa, o.resamples, rng))
    tail = 100 * (1 - o.confidence) / 2
    low, high = np.percentile(changes, [tail, 100 - tail])
    drift = (drift_pct(before.step_ms), drift_pct(after.step_ms))
    allowance = math.hypot(*drift) / 2
    floor, ceiling = (-100.0, math.inf) if metric == "step_time" else (-math.inf, 100.0)  # no step faster than 0 ms
    return GateCheck(
        metric=metric,
        tolerance_pct=float(tolerance),
        before=b,
        after=a,
        change_pct=float(_change(metric, np.array([b]), np.array([a]))[0]),
        low_pct=max(floor, float(low) - allowance),
        high_pct=min(ceiling, float(high) + allowance),
        confidence=o.confidence,
        steps=(before.steps, after.steps),
        resampled=(sb.size, sa.size),
        spikes=(spikes(before.step_ms), spikes(after.step_ms)),
        drift_pct=drift,
        drift_allowance_pct=allowance,
    )


def change_words(pct: float, metric: Metric) -> str:
    """A change in words for a CI log: 'slower by 12.0%', 'faster by 90.0%' ('lower/higher throughput by')."""
    worse, better = ("slower", "faster") if metric == "step_time" else ("lower throughput", "higher throughput")
    return f"{worse if pct > 0 else better} by {abs(pct):.1f}%" if round(pct, 1) else "unchanged"


def _change(metric: Metric, before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Percent worse: a longer step, or fewer samples/s."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return 100 * (after / before - 1) if metric == "step_time" else 100 * (1 - after / before)


def _per_step(metric: Metric, s: StepSeries) -> np.ndarray:
    """Each step's time (ms), or its samples/s."""
    if metric == "step_time":
        return s.step_ms
    assert s.samples is not None
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1e3 * s.samples / s.step_ms


def _bounded(values: np.ndarray) -> np.ndarray:
    """At most MAX_STEPS of ``values``, evenly spaced over the run (in order: blocks stay consecutive)."""
    if values.size <= MAX_STEPS:
        return values
    return values[np.linspace(0, values.size - 1, MAX_STEPS).astype(np.int64)]


def _resampled(values: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` moving-block bootstrap values of the median of ``values``, drawn in memory-bounded chunks."""
    size = values.size
    length = max(1, math.ceil(size / BLOCKS))
    blocks = math.ceil(size / length)
    offsets = np.arange(length)
    per_chunk = max(1, _CHUNK // (blocks * length))
    out = np.empty(n)
    for start in range(0, n, per_chunk):
        rows = min(per_chunk, n - start)
        starts = rng.integers(0, size - length + 1, size=(rows, blocks))
        idx = (starts[:, :, None] + offsets).reshape(rows, blocks * length)[:, :size]
        out[start : start + rows] = np.median(values[idx], axis=1)
    return out


def spikes(step_ms: np.ndarray) -> Spikes:
    """The steps far above the median: by more than OUTLIER_MADS robust deviations and OUTLIER_MIN_EXCESS
    of the median (the steady-state rule, analysis/steady.py)."""
    median = float(np.median(step_ms))
    mad = float(np.median(np.abs(step_ms - median)))
    cut = median + max(T.OUTLIER_MADS * _MAD_SD * mad, T.OUTLIER_MIN_EXCESS * median)
    far = step_ms[step_ms > cut]
    total = float(step_ms.sum())
    if far.size == 0 or total <= 0:
        return Spikes(steps=0, mean_ms=0.0, share=0.0)
    return Spikes(steps=int(far.size), mean_ms=float(far.mean()), share=float(far.sum()) / total)


def drift_pct(step_ms: np.ndarray) -> float:
    """Median of the last third of the steps against the first third, in percent (0 under 3 steps)."""
    third = step_ms.size // 3
    if third == 0:
        return 0.0
    first = float(np.median(step_ms[:third]))
    return 100 * (float(np.median(step_ms[-third:])) / first - 1) if first > 0 else 0.0

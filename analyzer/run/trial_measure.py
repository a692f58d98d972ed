"""What a trial measured: its steady-state step time (warm-up excluded) from the traces it wrote,
and whether a candidate beats the baseline beyond noise.

Noise is measured, not assumed: the command runs as the baseline at least twice, and a candidate
beats it only when it is faster than the baselines' mean by more than the spread between the
baselines' own means (run-to-run noise: a different process start, page cache, host load) and
by more than NOISE_SE standard errors of the steps (within-trial noise), and by MIN_GAIN. A
trial that changes the batch is compared per sample (its time scaled to the baseline's samples
per step)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from analyzer.errors import TraceError
from gpuanalyze.ingest.sources import load_any
from gpuanalyze.ingest.trace import schema as S

#: A candidate beats the baseline when its mean is lower by more than this many standard errors
#: of the difference of the two means ...
NOISE_SE = 2.0
#: ... and by at least this fraction of the baseline's mean (below that a gain is not worth a change).
MIN_GAIN = 0.03


@dataclass(frozen=True, slots=True)
class Measured:
    """A trial's steady-state steps."""

    steps: int
    """Steps measured (after the warm-up)."""
    mean_ms: float
    stdev_ms: float
    """Sample standard deviation of the measured steps' time."""
    loader_workers: int | None
    """The largest DataLoader num_workers the trial's trace saw (EndInfo.loader_workers)."""
    end_status: str | None
    """The trace's end status ('trial_stop' for a trial stopped after its steps; None: no end marker)."""
    samples: float | None = None
    """Median samples per measured step (None: the trace did not count them)."""

    @property
    def stderr_ms(self) -> float:
        return self.stdev_ms / math.sqrt(self.steps)


def measure(path: Path, warmup: int) -> Measured | None:
    """The steady-state steps of the trace at ``path`` (all ranks: a step takes its slowest rank),
    or None when it cannot be read or holds fewer than 2 steps after the warm-up."""
    try:
        trace = load_any(path)
    except TraceError:
        return None
    per_step = trace.frame.group_by(S.STEP).agg(pl.col(S.WALL_MS).max(), pl.col(S.BATCH_SAMPLES).max()).sort(S.STEP)
    per_step = per_step.filter(pl.col(S.WALL_MS).is_not_null())
    walls = per_step.get_column(S.WALL_MS).to_list()
    steady = [float(w) for w in walls[warmup:]]
    counted = per_step.get_column(S.BATCH_SAMPLES).slice(warmup).drop_nulls()
    samples = float(counted.median()) if len(counted) else None  # type: ignore[arg-type]
    if len(steady) < 2:
        return None
    mean = sum(steady) / len(steady)
    stdev = math.sqrt(sum((w - mean) ** 2 for w in steady) / (len(steady) - 1))
    end = trace.end
    return Measured(
        steps=len(steady),
        mean_ms=mean,
        stdev_ms=stdev,
        loader_workers=None if end is None else end.loader_workers,
        end_status=None if end is None else end.status,
        samples=samples if samples is not None and samples > 0 else None,
    )


@dataclass(frozen=True, slots=True)
class Baselines:
    """The baseline trials (at least one; two or more measure the run-to-run noise)."""

    runs: tuple[Measured, ...]

    def __post_init__(self) -> None:
        assert self.runs, "at least one baseline"

    @property
    def mean_ms(self) -> float:
        return sum(m.mean_ms for m in self.runs) / len(self.runs)

    @property
    def spread_ms(self) -> float:
        """Largest minus smallest of the baselines' means (0 with one baseline: unknown)."""
        means = [m.mean_ms for m in self.runs]
        return max(means) - min(means)

    @property
    def stderr_ms(self) -> float:
        """Standard error of the pooled mean, from the steps' variation."""
        return math.sqrt(sum(m.stderr_ms**2 for m in self.runs)) / len(self.runs)

    @property
    def samples(self) -> float | None:
        return next((m.samples for m in self.runs if m.samples is not None), None)


def comparable_ms(samples: float | None, candidate: Measured) -> float:
    """The candidate's mean step time per ``samples`` samples (its own mean when either count is
    unknown or they are equal): a batch twice as large is compared per sample."""
    if samples is None or candidate.samples is None or candidate.samples == samples:
        return candidate.mean_ms
    return candidate.mean_ms * samples / candidate.samples


def vs_baseline(baseline: Measured | Baselines, candidate: Measured) -> float:
    """Candidate's mean (per the baseline's samples) relative to the baseline's, in percent (negative: faster)."""
    base = baseline if isinstance(baseline, Baselines) else Baselines((baseline,))
    mean = base.mean_ms
    return 100.0 * (comparable_ms(base.samples, candidate) / mean - 1.0) if mean > 0 else 0.0


def beats(baseline: Measured | Sequence[Measured], candidate: Measured, spread_ms: float | None = None) -> bool:
    """``candidate`` faster than the baselines' mean (per their samples) beyond noise, the larger of their
    spread (or ``spread_ms``: the run-to-run noise measured elsewhere) and NOISE_SE standard errors of
    the difference of the means, and by at least MIN_GAIN of it."""
    base = Baselines((baseline,) if isinstance(baseline, Measured) else tuple(baseline))
    gain = base.mean_ms - comparable_ms(base.samples, candidate)
    within = NOISE_SE * math.hypot(base.stderr_ms, candidate.stderr_ms)
    return gain > max(base.spread_ms if spread_ms is None else spread_ms, within) and gain >= MIN_GAIN * base.mean_ms

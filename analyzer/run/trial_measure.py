"""What a trial measured: its steady-state step time (warm-up excluded) from the traces it wrote,
and whether a candidate beats the baseline beyond the steps' variation."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from analyzer.errors import TraceError
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.sources import load_any

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
    recorded: int
    """Steps the trace holds, warm-up included."""
    loader_workers: int | None
    """The largest DataLoader num_workers the trial's trace saw (EndInfo.loader_workers)."""
    end_status: str | None
    """The trace's end status ('trial_stop' for a trial stopped after its steps; None: no end marker)."""

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
    per_step = trace.frame.group_by(S.STEP).agg(pl.col(S.WALL_MS).max()).sort(S.STEP)
    walls = per_step.get_column(S.WALL_MS).drop_nulls().to_list()
    steady = [float(w) for w in walls[warmup:]]
    if len(steady) < 2:
        return None
    mean = sum(steady) / len(steady)
    stdev = math.sqrt(sum((w - mean) ** 2 for w in steady) / (len(steady) - 1))
    end = trace.end
    return Measured(
        steps=len(steady),
        mean_ms=mean,
        stdev_ms=stdev,
        recorded=len(walls),
        loader_workers=None if end is None else end.loader_workers,
        end_status=None if end is None else end.status,
    )


def vs_baseline(baseline: Measured, candidate: Measured) -> float:
    """Candidate's mean relative to the baseline's, in percent (negative: faster)."""
    return 100.0 * (candidate.mean_ms / baseline.mean_ms - 1.0) if baseline.mean_ms > 0 else 0.0


def beats(baseline: Measured, candidate: Measured) -> bool:
    """Faster than the baseline beyond noise: by more than NOISE_SE standard errors of the
    difference of the means, and by at least MIN_GAIN of the baseline."""
    gain = baseline.mean_ms - candidate.mean_ms
    noise = NOISE_SE * math.hypot(baseline.stderr_ms, candidate.stderr_ms)
    return gain > noise and gain >= MIN_GAIN * baseline.mean_ms

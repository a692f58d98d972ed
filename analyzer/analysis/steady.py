"""The steady state of a run: steps still settling, outlier steps, periodic spikes and drift.

Rules judge the steady steps (robust estimates: a few stalled steps must not decide a verdict);
run time and cost still come from the mean of every analysed step, with the steps left out
counted explicitly (``analysis.judge`` adds them back to every projection). Periodic spikes (every
Nth step: checkpoint, evaluation, logging) are a finding of their own with their period and cost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzer.analysis import thresholds as T
from analyzer.analysis.metrics import STEP_RANKS, STEP_WALL, StepMetrics
from gpuanalyze.ingest.trace import schema as S

#: 1.4826 x the median absolute deviation estimates a normal distribution's standard deviation.
MAD_TO_SD = 1.4826
#: Candidate periods tried (the most common gaps between outliers and sums of consecutive gaps).
_CANDIDATES = 16


@dataclass(frozen=True, slots=True)
class SteadyState:
    """Which analysed steps are typical, and what the others cost."""

    steps: int
    """Analysed steps looked at."""
    median_ms: float
    """Median step time (per rank) of the analysed steps."""
    settling: tuple[int, ...] = ()
    """Leading step numbers still far above the median, or made of start-up work the trace names: warm-up
    beyond the fixed one."""
    outliers: tuple[int, ...] = ()
    """Later step numbers far above the median (stalls, spikes)."""
    period: int | None = None
    """Every ``period``-th step spikes (None: the outliers do not recur regularly)."""
    period_match: float = 0.0
    """Share of the steps on the period (from its first spike to its last) that spiked, in [0, 1]."""
    periodic: tuple[int, ...] = ()
    """The outliers on the period (a few others, stalls off it, do not break it)."""
    spike_ms: float = 0.0
    """Mean excess over the median of a periodic spike (of an outlier step when there is no period), ms."""
    left_out_ms: float = 0.0
    """Excess over the median of every step left out (settling and outliers), summed, ms per rank."""
    outlier_ms: float = 0.0
    """Of left_out_ms, the outliers' (stalls and spikes paid per step, unlike the run's settling)."""
    drift: float = 0.0
    """Median step time of the last third of the steady steps over the first third, minus 1."""
    spread: float = 0.0
    """Robust coefficient of variation of the steady steps (1.4826 x MAD / median): how much the step
    time moves step to step; a loaded host shows it, and a projection's range is at least this wide."""

    @property
    def left_out(self) -> frozenset[int]:
        return frozenset(self.settling) | frozenset(self.outliers)

    @property
    def spikes(self) -> tuple[int, ...]:
        """The periodic spikes when there is a period, else every outlier."""
        return self.periodic if self.period is not None else self.outliers

    @property
    def spike_share(self) -> float:
        """Share of run time the spikes' excess takes."""
        total = self.steps * self.median_ms + self.left_out_ms
        return len(self.spikes) * self.spike_ms / total if total > 0 else 0.0


def steady_state(m: StepMetrics) -> SteadyState:
    """Settling steps, outliers, their period and drift, from the per-step wall times."""
    ps = m.per_step
    if ps.height == 0 or STEP_WALL not in ps.columns:
        return SteadyState(steps=ps.height, median_ms=m.step_median_ms)
    steps = ps.get_column(S.STEP).to_numpy()
    wall = ps.get_column(STEP_WALL).to_numpy() / np.maximum(ps.get_column(STEP_RANKS).to_numpy(), 1)
    med = float(np.median(wall))
    startup = _startup_lead(m, steps)
    if ps.height < T.FEW_STEPS:
        if not startup:
            return SteadyState(steps=ps.height, median_ms=med)
        med = float(np.median(wall[startup:]))
        return SteadyState(
            steps=ps.height,
            median_ms=med,
            settling=tuple(int(s) for s in steps[:startup]),
            left_out_ms=float(np.sum(wall[:startup] - med)),
            spread=_spread(wall[startup:]),
        )
    flagged = _outliers(wall, med)
    lead = max(int(np.argmin(flagged)) if not flagged.all() else flagged.size, startup)
    settling = steps[:lead]
    later = np.flatnonzero(flagged[lead:]) + lead
    outliers = steps[later]
    period, match, on = _period(outliers)
    spiking = later[np.isin(outliers, on)] if period is not None else later
    kept = np.ones(wall.size, dtype=bool)
    kept[:lead] = False
    kept[later] = False
    return SteadyState(
        steps=ps.height,
        median_ms=med,
        settling=tuple(int(s) for s in settling),
        outliers=tuple(int(s) for s in outliers),
        period=period,
        period_match=match,
        periodic=tuple(int(s) for s in on),
        spike_ms=float(np.mean(wall[spiking] - med)) if spiking.size else 0.0,
        left_out_ms=float(np.sum(wall[~kept] - med)),
        outlier_ms=float(np.sum(wall[later] - med)),
        drift=_drift(wall[kept]),
        spread=_spread(wall[kept]),
    )


def _startup_lead(m: StepMetrics, steps: np.ndarray) -> int:
    """How many leading analysed steps are made of start-up work the trace names (compilation, first
    allocations, module loading: KernelMetrics.startup_detail), when steps without it follow; 0 otherwise
    (every step start-up is the warm-up-only verdict's case, rules/warmup.py)."""
    km = m.kernels
    if km is None or not km.startup_detail or km.startup_steps >= km.steps:
        return 0  # none, or every step: start-up work repeated each step is judged, not left out
    marked = {s.step for s in km.startup_detail}
    lead = 0
    while lead < steps.size and int(steps[lead]) in marked:
        lead += 1
    return lead if lead < steps.size else 0


def _outliers(wall: np.ndarray, med: float) -> np.ndarray:
    """Steps far above the median; none when too many are (the step time then has two modes)."""
    mad = float(np.median(np.abs(wall - med)))
    limit = med + max(T.OUTLIER_MADS * MAD_TO_SD * mad, T.OUTLIER_MIN_EXCESS * med)
    flagged = wall > limit
    if flagged.sum() > T.OUTLIER_MAX_FRACTION * wall.size:
        return np.zeros(wall.size, dtype=bool)
    return flagged


def _period(outliers: np.ndarray) -> tuple[int | None, float, np.ndarray]:
    """(period, match, the outliers on it): the N and phase most outliers recur at, robust to a few stalls
    off it. Of every N >= 2 and phase, the one holding the most outliers (then the best match, then the
    shortest N), when at least PERIODIC_MIN_SPIKES are on it, at least PERIODIC_MATCH of the steps on the
    period between its first and last spike spiked, and at most PERIODIC_EXTRA (or a quarter as many as
    on it) are off it; else (None, best match seen, none)."""
    none = np.empty(0, dtype=outliers.dtype)
    if outliers.size < T.PERIODIC_MIN_SPIKES:
        return None, 0.0, none
    best: tuple[int, float, int] | None = None
    best_on = none
    seen = 0.0
    for n in _candidate_periods(outliers):
        phases, counts = np.unique(outliers % n, return_counts=True)
        phase = int(phases[int(np.argmax(counts))])
        on = outliers[outliers % n == phase]
        expected = int(on.max() - on.min()) // n + 1
        match = on.size / expected
        seen = max(seen, match if on.size >= T.PERIODIC_MIN_SPIKES else 0.0)
        extra = outliers.size - on.size
        if on.size < T.PERIODIC_MIN_SPIKES or match < T.PERIODIC_MATCH:
            continue
        if extra > max(T.PERIODIC_EXTRA, on.size // 4):
            continue
        key = (on.size, match, -n)
        if best is None or key > best:
            best, best_on = key, on
    if best is None:
        return None, seen, none
    return -best[2], best[1], best_on


def _candidate_periods(outliers: np.ndarray) -> list[int]:
    """Periods worth trying: the gaps between outliers and the sums of two or three consecutive gaps (a stall
    between two spikes splits their gap), the most common _CANDIDATES of them."""
    gaps = np.diff(np.sort(outliers))
    sums = [gaps, gaps[:-1] + gaps[1:], gaps[:-2] + gaps[1:-1] + gaps[2:]]
    values, counts = np.unique(np.concatenate([g for g in sums if g.size]), return_counts=True)
    order = np.argsort(-counts, kind="stable")[:_CANDIDATES]
    return sorted(int(v) for v in values[order] if v >= 2)


def _spread(wall: np.ndarray) -> float:
    if wall.size == 0:
        return 0.0
    med = float(np.median(wall))
    return MAD_TO_SD * float(np.median(np.abs(wall - med))) / med if med > 0 else 0.0


def _drift(wall: np.ndarray) -> float:
    third = wall.size // 3
    if third < 2:
        return 0.0
    first, last = float(np.median(wall[:third])), float(np.median(wall[-third:]))
    return last / first - 1.0 if first > 0 else 0.0

"""Cross-rank analysis: per-step skew, stragglers and the phase that makes them slow.

A rank's *work* on a step is its wall time minus the time it spent waiting on collectives or
syncs (sync_ms). On each step the baseline is the median work over ranks (with two ranks: the
faster one). A rank is slow on a step when it has the most work and exceeds the baseline by
more than SLOW_STEP_MIN_MS and SLOW_STEP_FRACTION of the median step; it is a straggler when
that happens on at least STRAGGLER_FRACTION of steps.

A straggler's excess is attributed to the phase whose median on that rank exceeds the other
ranks' by the most, among data, forward, backward, optimizer and ``other``: the rest of its work
that no phase accounts for (un-instrumented host work). ``other`` is named when it holds most.

Memory: the per-step baselines need every rank's work on a step at once, so ranks' work vectors
are kept in a ``WorkStore`` (spilled to a temporary directory past a budget) and read back in
blocks of steps: a block of B steps x R ranks, never all steps x all ranks.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from analyzer.analysis.thresholds import SLOW_STEP_FRACTION, SLOW_STEP_MIN_MS, STRAGGLER_FRACTION
from gpuanalyze.ingest import schema as S

#: Columns whose per-rank medians are compared (null counts as 0).
RANK_PHASES: tuple[str, ...] = (S.DATA_WAIT_MS, S.FORWARD_MS, S.BACKWARD_MS, S.OPTIMIZER_MS)
REST = "other"
"""The un-instrumented rest of a rank's work: work minus the RANK_PHASES."""

#: Phases a straggler's excess is attributed to, in tie-break order; names as Straggler.phase gives them.
PHASE_NAMES: dict[str, str] = {
    **{c: c.removesuffix("_ms").replace("data_wait", "data") for c in RANK_PHASES},
    REST: REST,
}
#: Bytes of work vectors kept in memory before they go to a temporary directory.
STORE_BUDGET = 256 << 20
#: Bytes of one block of the step x rank matrix.
BLOCK_BUDGET = 256 << 20


@dataclass(frozen=True, slots=True)
class RankSummary:
    rank: int
    steps: int
    step_median_ms: float
    work_median_ms: float
    sync_share: float
    data_share: float


@dataclass(frozen=True, slots=True)
class Straggler:
    rank: int
    steps_slow: int
    steps: int
    excess_ms: float
    """Median, over its slow steps, of its work beyond the step's baseline."""
    phase: str
    """data, forward, backward, optimizer, or other (work no phase accounts for)."""
    phase_excess_ms: float
    phase_diffs: tuple[tuple[str, float], ...] = ()
    """Every compared phase's median on this rank minus the other ranks' (ms per step), largest first."""


@dataclass(frozen=True, slots=True)
class RankAnalysis:
    ranks: int
    per_rank: tuple[RankSummary, ...]
    stragglers: tuple[Straggler, ...]
    skew_median_ms: float
    """Median over steps of (max - min) work across ranks."""
    step_median_ms: float


@dataclass(frozen=True, slots=True)
class RankStats:
    """What the cross-rank analysis needs of one rank besides its work vector."""

    summary: RankSummary
    phase_medians: dict[str, float]
    """Median per step of each attributed phase (null as 0) and of the rest of the work."""


@dataclass(slots=True)
class WorkStore:
    """Each rank's work per step; in memory up to a budget, then in a temporary directory.

    Steps that are a run (n, n+1, ...) are kept as their first number only."""

    budget: int = STORE_BUDGET
    _mem: dict[int, tuple[int | np.ndarray, np.ndarray]] = field(default_factory=dict)
    _files: dict[int, tuple[int | None, Path]] = field(default_factory=dict)
    _dir: tempfile.TemporaryDirectory[str] | None = None
    _bytes: int = 0

    def add(self, rank: int, steps: np.ndarray, work: np.ndarray) -> None:
        run = steps.size > 0 and int(steps[-1]) - int(steps[0]) + 1 == steps.size
        first: int | np.ndarray = int(steps[0]) if run else steps
        size = work.nbytes + (0 if run else steps.nbytes)
        if self._bytes + size <= self.budget:
            self._mem[rank] = (first, work)
            self._bytes += size
            return
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="gpuanalyze-work-")
        path = Path(self._dir.name) / str(rank)
        np.save(path.with_suffix(".work.npy"), work)
        if not run:
            np.save(path.with_suffix(".steps.npy"), steps)
        self._files[rank] = (int(steps[0]) if run else None, path)

    def drop(self, ranks: list[int]) -> None:
        for r in ranks:
            self._mem.pop(r, None)
            self._files.pop(r, None)

    def window(self, rank: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(steps, work) of ``rank`` for step numbers in [lo, hi] (a copy: nothing stays mapped)."""
        if rank in self._mem:
            first, work = self._mem[rank]
            steps = None if isinstance(first, int) else first
        else:
            start, path = self._files[rank]
            work = np.load(path.with_suffix(".work.npy"), mmap_mode="r")
            first = start if start is not None else 0
            steps = None if start is not None else np.load(path.with_suffix(".steps.npy"), mmap_mode="r")
        if steps is None:
            assert isinstance(first, int)
            i0, i1 = max(0, lo - first), min(work.size, hi - first + 1)
            if i1 <= i0:
                return np.empty(0, np.int64), np.empty(0)
            return np.arange(first + i0, first + i1, dtype=np.int64), np.array(work[i0:i1])
        i0 = int(np.searchsorted(steps, lo, side="left"))
        i1 = int(np.searchsorted(steps, hi, side="right"))
        return np.array(steps[i0:i1]), np.array(work[i0:i1])

    def close(self) -> None:
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


def polars_median(values: np.ndarray) -> float:
    """polars' median of a 1-d array (NaN-free), for results that must match the in-memory path."""
    return float(pl.Series(values, dtype=pl.Float64).median())  # type: ignore[arg-type]


def _blocks(steps: np.ndarray, ranks: int) -> Iterator[tuple[int, int]]:
    size = max(1, BLOCK_BUDGET // (8 * max(ranks, 1) * 4))  # the block, its partition copy, masks
    for a in range(0, steps.size, size):
        yield a, min(a + size, steps.size)


def _baselines(m: np.ndarray, count: np.ndarray, ranks: int) -> np.ndarray:
    """Per row of ``m`` (steps x ranks, NaN where a rank has no such step): the median (polars'
    definition) of the present values, from a two-element partition where every rank is present."""
    out = np.empty(m.shape[0])
    full = count == m.shape[1]
    if full.any():
        k_lo, k_hi = (ranks - 1) // 2, ranks // 2
        part = np.partition(m[full], [k_lo, k_hi], axis=1)
        a, b = part[:, k_lo], part[:, k_hi]
        out[full] = a if ranks % 2 else a + 0.5 * (b - a)
    rest = ~full
    if rest.any():
        srt = np.sort(m[rest], axis=1)  # NaN last
        c = count[rest]
        idx = np.arange(srt.shape[0])
        a, b = srt[idx, (c - 1) // 2], srt[idx, c // 2]
        out[rest] = np.where(c % 2 == 1, a, a + 0.5 * (b - a))
    return out


def rank_analysis_from(
    stats: dict[int, RankStats], store: WorkStore, steps: np.ndarray, step_median: float
) -> RankAnalysis | None:
    """RankAnalysis from per-rank statistics and work vectors; ``steps``: every analysed step number,
    sorted; ``step_median``: the median step time over all analysed rows. None for one rank."""
    ranks = sorted(stats)
    if len(ranks) < 2:
        return None
    threshold = max(SLOW_STEP_MIN_MS, SLOW_STEP_FRACTION * step_median)
    slow_count = dict.fromkeys(ranks, 0)
    excess: dict[int, list[np.ndarray]] = {r: [] for r in ranks}
    skews = []
    for a, b in _blocks(steps, len(ranks)):
        block_steps = steps[a:b]
        m = np.full((b - a, len(ranks)), np.nan)
        for c, r in enumerate(ranks):
            s, w = store.window(r, int(block_steps[0]), int(block_steps[-1]))
            if s.size:
                m[np.searchsorted(block_steps, s), c] = w
        count = np.count_nonzero(~np.isnan(m), axis=1)
        have = count > 0
        if not have.all():
            m, count = m[have], count[have]
        hi = np.fmax.reduce(m, axis=1)
        lo = np.fmin.reduce(m, axis=1)
        baseline = _baselines(m, count, len(ranks)) if len(ranks) >= 3 else lo
        skews.append(hi - lo)
        with np.errstate(invalid="ignore"):
            slow = (m == hi[:, None]) & (m - baseline[:, None] > threshold)
        rows_, cols_ = np.nonzero(slow)
        if rows_.size:
            gap = m[rows_, cols_] - baseline[rows_]
            for c in np.unique(cols_):
                r = ranks[int(c)]
                sel = cols_ == c
                slow_count[r] += int(sel.sum())
                excess[r].append(gap[sel])
    summaries = tuple(stats[r].summary for r in ranks)
    by_slow = sorted((r for r in ranks if slow_count[r]), key=lambda r: (-slow_count[r], r))
    stragglers = []
    for r in by_slow:
        steps_r = stats[r].summary.steps
        if slow_count[r] < STRAGGLER_FRACTION * steps_r:
            continue
        phase, phase_excess = slow_phase(stats, r)
        diffs = phase_differences(stats, r)
        stragglers.append(
            Straggler(r, slow_count[r], steps_r, polars_median(np.concatenate(excess[r])), phase, phase_excess, diffs)
        )
    skew = polars_median(np.concatenate(skews)) if skews else 0.0
    return RankAnalysis(len(ranks), summaries, tuple(stragglers), skew, step_median)


def _excess(stats: dict[int, RankStats], rank: int) -> dict[str, float]:
    """Per compared phase: its median on ``rank`` minus the median of the other ranks' medians."""
    mine = stats[rank].phase_medians
    excess = {}
    for column in PHASE_NAMES:
        others = np.array([s.phase_medians[column] for r, s in stats.items() if r != rank], dtype=np.float64)
        others = others[~np.isnan(others)]
        if math.isnan(mine[column]) or others.size == 0:
            continue
        excess[column] = mine[column] - polars_median(others)
    return excess


def phase_differences(stats: dict[int, RankStats], rank: int) -> tuple[tuple[str, float], ...]:
    """(phase name, ms per step beyond the other ranks), largest first: the numbers behind slow_phase."""
    excess = _excess(stats, rank)
    return tuple(sorted(((PHASE_NAMES[c], float(v)) for c, v in excess.items()), key=lambda kv: -kv[1]))


def slow_phase(stats: dict[int, RankStats], rank: int) -> tuple[str, float]:
    """The phase (or the un-instrumented rest) whose median on ``rank`` exceeds the median of the
    other ranks' medians by the most."""
    excess = _excess(stats, rank)
    if not excess:
        return REST, 0.0
    phase = max(excess, key=excess.__getitem__)
    return PHASE_NAMES[phase], float(excess[phase])


def _median_or_nan(values: np.ndarray) -> float:
    return polars_median(values) if values.size else math.nan


def rank_stats(rows: pl.DataFrame, rank: int) -> RankStats:
    """The statistics of one rank's analysed rows (all of them one rank's)."""
    wall = rows.get_column(S.WALL_MS).cast(pl.Float64).to_numpy()
    sync = rows.get_column(S.SYNC_MS).fill_null(0.0).cast(pl.Float64).to_numpy()
    work = wall - sync
    phases = {c: rows.get_column(c).fill_null(0.0).cast(pl.Float64).to_numpy() for c in RANK_PHASES}
    rest = np.maximum(work - sum(phases.values(), np.zeros(rows.height)), 0.0)
    wall_sum = float(wall.sum())
    data = float(rows.get_column(S.DATA_WAIT_MS).fill_null(0.0).sum())
    return RankStats(
        RankSummary(
            rank=rank,
            steps=rows.height,
            step_median_ms=_median_or_nan(wall),
            work_median_ms=_median_or_nan(work),
            sync_share=float(sync.sum()) / wall_sum if wall_sum else 0.0,
            data_share=data / wall_sum if wall_sum else 0.0,
        ),
        {**{c: _median_or_nan(v) for c, v in phases.items()}, REST: _median_or_nan(rest)},
    )


def rank_analysis(frame: pl.DataFrame) -> RankAnalysis | None:
    """RankAnalysis of analysed rows held in memory (every rank); None for single-rank traces."""
    parts = frame.partition_by(S.RANK, as_dict=True)
    if len(parts) < 2:
        return None
    store = WorkStore()
    stats = {}
    try:
        for key, rows in parts.items():
            rank = int(key[0])
            rows = rows.sort(S.STEP)
            stats[rank] = rank_stats(rows, rank)
            wall = rows.get_column(S.WALL_MS).cast(pl.Float64).to_numpy()
            sync = rows.get_column(S.SYNC_MS).fill_null(0.0).cast(pl.Float64).to_numpy()
            store.add(rank, rows.get_column(S.STEP).to_numpy(), wall - sync)
        steps = np.unique(frame.get_column(S.STEP).to_numpy())
        median = polars_median(frame.get_column(S.WALL_MS).cast(pl.Float64).to_numpy())
        return rank_analysis_from(stats, store, steps, median)
    finally:
        store.close()

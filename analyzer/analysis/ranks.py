"""Cross-rank analysis: per-step skew, stragglers and the phase that makes them slow.

A rank's *work* on a step is its wall time minus the time it spent waiting on collectives or
syncs (sync_ms). Its *arrival* at the step's collective is its step start (START_UNIX_NS, relative
to the earliest rank's start of that step) plus its work: everything it does itself comes before
the wait. A rank that starts late arrives late although its step looks short. On each step the
baseline is the median arrival over ranks (with two ranks: the earlier one). A rank is late on a
step (a culprit the others wait for) when it arrives more than SLOW_STEP_MIN_MS and
SLOW_STEP_FRACTION of the median step after the baseline and no rank arrives that much after it;
it is a straggler when late on at least STRAGGLER_FRACTION of steps, whatever its own sync share.
The others are victims: each waits the last arrival minus its own (``RankSummary.waits_ms``).
Starts more than START_SPREAD_MAX_STEPS median steps apart on a step are not one clock (ranks
recorded apart): there the starts count as equal and arrival is work alone.

A straggler's lateness is attributed to the phase whose median on that rank exceeds the other
ranks' by the most, among ``start`` (its median late start on its late steps: time lost before
the step, in the previous step's tail or host work between steps), data, forward, backward,
optimizer and ``other``: the rest of its work that no phase accounts for (un-instrumented host work).

Memory: the per-step baselines need every rank's work on a step at once, so ranks' work vectors
are kept in a ``WorkStore`` (spilled to a temporary directory past a budget) and read back in
blocks of steps: a block of B steps x R ranks, never all steps x all ranks.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

import numpy as np
import polars as pl

from analyzer.analysis.quantiles import sorted_median
from analyzer.analysis.thresholds import (
    SLOW_STEP_FRACTION,
    SLOW_STEP_MIN_MS,
    START_SPREAD_MAX_STEPS,
    STRAGGLER_FRACTION,
)
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.columns import Column

#: Columns whose per-rank medians are compared (null counts as 0).
RANK_PHASES: tuple[str, ...] = (S.DATA_WAIT_MS, S.FORWARD_MS, S.BACKWARD_MS, S.OPTIMIZER_MS)
REST = "other"
"""The un-instrumented rest of a rank's work: work minus the RANK_PHASES."""

START = "start"
"""A straggler's lateness is a late start: time lost before the step."""
#: Phases a straggler's excess is attributed to, in tie-break order; names as Straggler.phase gives them.
PHASE_NAMES: dict[str, str] = {
    **{c: c.removesuffix("_ms").replace("data_wait", "data") for c in RANK_PHASES},
    REST: REST,
}
#: Bytes of work vectors kept in memory before they go to a temporary directory.
STORE_BUDGET = 128 << 20
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
    sync_median_ms: float = 0.0
    """Median per step of its own waiting (sync_ms)."""
    waits_ms: float = 0.0
    """Mean per step of the last rank's arrival at the collective minus its own: what it waits for the others."""


@dataclass(frozen=True, slots=True)
class Straggler:
    rank: int
    steps_slow: int
    steps: int
    excess_ms: float
    """Median, over its late steps, of its arrival at the collective beyond the step's baseline."""
    phase: str
    """start (a late start: time lost before the step), data, forward, backward, optimizer, or other
    (work no phase accounts for)."""
    phase_excess_ms: float
    phase_diffs: tuple[tuple[str, float], ...] = ()
    """Every compared phase's median on this rank minus the other ranks' (ms per step), largest first."""
    start_late_ms: float = 0.0
    """Median, over its late steps, of its step start after the step's baseline start."""


@dataclass(frozen=True, slots=True)
class RankAnalysis:
    ranks: int
    per_rank: tuple[RankSummary, ...]
    stragglers: tuple[Straggler, ...]
    skew_median_ms: float
    """Median over steps of (last - first) arrival at the collective across ranks."""
    step_median_ms: float

    @property
    def victims(self) -> tuple[RankSummary, ...]:
        """The ranks, not stragglers, that wait for the last arrival more than SLOW_STEP_MIN_MS per step, most first."""
        late = {s.rank for s in self.stragglers}
        out = [r for r in self.per_rank if r.rank not in late and r.waits_ms > SLOW_STEP_MIN_MS]
        return tuple(sorted(out, key=lambda r: (-r.waits_ms, r.rank)))


@dataclass(frozen=True, slots=True)
class RankStats:
    """What the cross-rank analysis needs of one rank besides its work vector."""

    summary: RankSummary
    phase_medians: dict[str, float]
    """Median per step of each attributed phase (null as 0) and of the rest of the work."""


@dataclass(frozen=True, slots=True)
class _Spilled:
    first: int | None
    """The first step number when the steps are a run; None: they are in the file too."""
    n: int
    work_at: int
    """Byte offset of the work values in the spill file (the steps, when kept, follow them)."""


def store_budget() -> int:
    return STORE_BUDGET


@dataclass(slots=True)
class WorkStore:
    """Each rank's work per step; in memory up to a budget, then appended to one temporary file.

    Steps that are a run (n, n+1, ...) are kept as their first number only. Blocks of steps are read
    back with one positioned read per rank (``fill``): nothing stays mapped, so the resident memory
    is the budget and one block, whatever the ranks."""

    budget: int = field(default_factory=store_budget)
    _mem: dict[int, tuple[int | np.ndarray, np.ndarray]] = field(default_factory=dict)
    _spilled: dict[int, _Spilled] = field(default_factory=dict)
    _file: IO[bytes] | None = None
    _bytes: int = 0

    def add(self, rank: int, steps: int | np.ndarray, work: np.ndarray) -> None:
        """``steps``: the rank's step numbers, or the first of a run of ``work.size`` ones."""
        if isinstance(steps, np.ndarray) and steps.size and int(steps[-1]) - int(steps[0]) + 1 == steps.size:
            steps = int(steps[0])
        size = work.nbytes + (0 if isinstance(steps, int) else steps.nbytes)
        if self._bytes + size <= self.budget:
            self._mem[rank] = (steps, work)
            self._bytes += size
            return
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="gpuanalyze-work-")  # noqa: SIM115 - closed by close()
        at = self._file.seek(0, os.SEEK_END)
        self._file.write(np.ascontiguousarray(work, dtype=np.float64).tobytes())
        if not isinstance(steps, int):
            self._file.write(np.ascontiguousarray(steps, dtype=np.int64).tobytes())
        self._spilled[rank] = _Spilled(steps if isinstance(steps, int) else None, int(work.size), at)

    def drop(self, ranks: list[int]) -> None:
        for r in ranks:
            self._mem.pop(r, None)
            self._spilled.pop(r, None)

    def _read(self, at: int, out: np.ndarray) -> None:
        assert self._file is not None and out.flags.c_contiguous
        self._file.flush()
        got = os.preadv(self._file.fileno(), [memoryview(out).cast("B")], at)  # type: ignore[arg-type]
        assert got == out.nbytes, "the work store's file is shorter than written"

    def _steps(self, rank: int) -> tuple[int, int | None, np.ndarray | None]:
        """(values, first step of a run, the steps otherwise) of a rank."""
        if rank in self._mem:
            first, work = self._mem[rank]
            return int(work.size), first if isinstance(first, int) else None, None if isinstance(first, int) else first
        sp = self._spilled[rank]
        if sp.first is not None:
            return sp.n, sp.first, None
        steps = np.empty(sp.n, dtype=np.int64)
        self._read(sp.work_at + 8 * sp.n, steps)
        return sp.n, None, steps

    def _copy(self, rank: int, i0: int, out: np.ndarray) -> None:
        """Work values i0 .. i0 + out.size of ``rank`` into ``out``."""
        if rank in self._mem:
            out[:] = self._mem[rank][1][i0 : i0 + out.size]
        else:
            self._read(self._spilled[rank].work_at + 8 * i0, out)

    def fill(self, rank: int, block: np.ndarray, out: np.ndarray) -> bool:
        """``rank``'s work on the (sorted) steps ``block`` into ``out`` (NaN where it has none); True
        when it has every one of them."""
        n, first, steps = self._steps(rank)
        lo, hi = int(block[0]), int(block[-1])
        if first is not None and hi - lo + 1 == block.size:  # runs on both sides: one slice
            i0, i1 = max(0, lo - first), min(n, hi - first + 1)
            j0 = first + i0 - lo
            if i1 <= i0:
                out[:] = np.nan
                return False
            self._copy(rank, i0, out[j0 : j0 + i1 - i0])
            out[:j0] = np.nan
            out[j0 + i1 - i0 :] = np.nan
            return j0 == 0 and i1 - i0 == block.size
        if steps is None:
            assert first is not None
            steps = np.arange(first, first + n, dtype=np.int64)
        s = steps
        i0, i1 = int(np.searchsorted(s, lo, side="left")), int(np.searchsorted(s, hi, side="right"))
        w = np.empty(i1 - i0)
        if w.size:
            self._copy(rank, i0, w)
        out[:] = np.nan
        out[np.searchsorted(block, s[i0:i1])] = w
        return i1 - i0 == block.size

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


#: Ranks copied together into a block (a slab of them fits a core's cache, so the transposition is cheap).
_SLAB = 32


def block_matrix(store: WorkStore, ranks: list[int], block: np.ndarray) -> tuple[np.ndarray, bool]:
    """(steps x ranks matrix of work, NaN where a rank has no such step; whether none is missing)."""
    m = np.empty((block.size, len(ranks)))
    slab = np.empty((min(_SLAB, len(ranks)), block.size))
    full = True
    for c0 in range(0, len(ranks), _SLAB):
        group = ranks[c0 : c0 + _SLAB]
        for k, r in enumerate(group):
            full &= store.fill(r, block, slab[k])
        m[:, c0 : c0 + len(group)] = slab[: len(group)].T
    return m, full


def polars_median(values: np.ndarray) -> float:
    """polars' median of a 1-d array (NaN-free), for results that must match the in-memory path."""
    return float(pl.Series(values, dtype=pl.Float64).median())  # type: ignore[arg-type]


def _blocks(steps: np.ndarray, ranks: int) -> Iterator[tuple[int, int]]:
    size = max(1, BLOCK_BUDGET // (8 * max(ranks, 1) * 16))  # work, starts, arrivals, waits, sorted copies, masks
    for a in range(0, steps.size, size):
        yield a, min(a + size, steps.size)


def _baselines(srt: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Per row of ``srt`` (each row sorted, NaN last; ``count`` values present): the median of the
    present values, polars' definition."""
    idx = np.arange(srt.shape[0])
    a, b = srt[idx, (count - 1) // 2], srt[idx, count // 2]
    return np.where(count % 2 == 1, a, a + 0.5 * (b - a))


def start_ms(start_unix_ns: np.ndarray) -> np.ndarray:
    """Step starts in ms since the epoch (to 0.25 us; equal starts stay equal)."""
    return start_unix_ns.astype(np.float64) / 1e6


def start_offsets(starts: np.ndarray, present: np.ndarray, spread_ms: float) -> tuple[np.ndarray, np.ndarray]:
    """(each rank's start after the step's earliest, ms; 0 on steps whose starts are not one clock) of a
    steps x ranks matrix of starts in ms since the epoch; ``present``: where a rank has the step."""
    big = np.where(present, starts, np.inf)
    first = big.min(axis=1)
    last = np.where(present, starts, -np.inf).max(axis=1)
    rel = np.where(present, starts - first[:, None], np.nan)
    one_clock = (last - first) <= spread_ms
    rel[~one_clock] = np.where(present[~one_clock], 0.0, np.nan)
    return rel, one_clock


@dataclass(slots=True)
class _Slow:
    """Per rank: its late steps so far, their lateness and late start, and its waits."""

    count: dict[int, int]
    excess: dict[int, list[np.ndarray]]
    start: dict[int, list[np.ndarray]]
    waits: np.ndarray
    present: np.ndarray
    skews: list[np.ndarray] = field(default_factory=list)

    def block(self, m: np.ndarray, st: np.ndarray, full: bool, ranks: list[int], threshold: float) -> None:
        """One block of steps x ranks arrivals ``m`` and start offsets ``st`` (NaN: no such step on that rank)."""
        count = np.full(m.shape[0], m.shape[1]) if full else np.count_nonzero(~np.isnan(m), axis=1)
        if not full and not (have := count > 0).all():
            m, st, count = m[have], st[have], count[have]
        hi = np.fmax.reduce(m, axis=1)
        behind = hi[:, None] - m
        self.waits += np.nansum(behind, axis=0)
        self.present += np.count_nonzero(~np.isnan(m), axis=0)
        rows_, cols_ = np.nonzero(behind <= threshold)  # among the last to arrive (NaN compares False)
        srt = np.sort(m, axis=1)  # NaN last; numpy's SIMD sort beats a partition for the medians
        lo = srt[:, 0]
        three = len(ranks) >= 3
        baseline = _baselines(srt, count) if three else lo
        st_srt = np.sort(st, axis=1)
        st_base = _baselines(st_srt, count) if three else st_srt[:, 0]
        self.skews.append(hi - lo)
        gap = m[rows_, cols_] - baseline[rows_]
        keep = gap > threshold
        rows_, cols_, gap = rows_[keep], cols_[keep], gap[keep]
        late_start = st[rows_, cols_] - st_base[rows_]
        for c in np.unique(cols_):
            r = ranks[int(c)]
            sel = cols_ == c
            self.count[r] += int(np.count_nonzero(sel))
            self.excess[r].append(gap[sel])
            self.start[r].append(late_start[sel])


def rank_analysis_from(
    stats: dict[int, RankStats],
    store: WorkStore,
    steps: np.ndarray,
    step_median: float,
    starts: WorkStore | None = None,
) -> RankAnalysis | None:
    """RankAnalysis from per-rank statistics and work vectors; ``steps``: every analysed step number,
    sorted; ``step_median``: the median step time over all analysed rows; ``starts``: the ranks' step
    starts in ms since the epoch (None: every rank starts each step together). None for one rank."""
    ranks = sorted(stats)
    if len(ranks) < 2:
        return None
    threshold = max(SLOW_STEP_MIN_MS, SLOW_STEP_FRACTION * step_median)
    spread = START_SPREAD_MAX_STEPS * step_median
    n = len(ranks)
    slow = _Slow(dict.fromkeys(ranks, 0), {r: [] for r in ranks}, {r: [] for r in ranks}, np.zeros(n), np.zeros(n))
    for a, b in _blocks(steps, n):
        m, full = block_matrix(store, ranks, steps[a:b])
        if starts is None:
            st = np.where(np.isnan(m), np.nan, 0.0)
        else:
            t, _ = block_matrix(starts, ranks, steps[a:b])
            st, _ = start_offsets(t, ~np.isnan(m), spread)
            del t
        slow.block(m + st, st, full, ranks, threshold)
        del m, st
    waits = np.divide(slow.waits, slow.present, out=np.zeros(n), where=slow.present > 0)
    summaries = tuple(dataclasses.replace(stats[r].summary, waits_ms=float(waits[i])) for i, r in enumerate(ranks))
    stragglers = []
    for r in ranks:
        steps_r = stats[r].summary.steps
        if not slow.count[r] or slow.count[r] < STRAGGLER_FRACTION * steps_r:
            continue
        start_late = polars_median(np.concatenate(slow.start[r]))
        diffs = phase_differences(stats, r, start_late)
        phase, phase_excess = diffs[0] if diffs else (REST, 0.0)
        excess = polars_median(np.concatenate(slow.excess[r]))
        stragglers.append(Straggler(r, slow.count[r], steps_r, excess, phase, phase_excess, diffs, start_late))
    stragglers.sort(key=lambda s: (-s.steps_slow, -s.excess_ms, s.rank))
    skew = polars_median(np.concatenate(slow.skews)) if slow.skews else 0.0
    return RankAnalysis(n, summaries, tuple(stragglers), skew, step_median)


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


def phase_differences(
    stats: dict[int, RankStats], rank: int, start_late: float | None = None
) -> tuple[tuple[str, float], ...]:
    """(phase name, ms per step beyond the other ranks), largest first (ties: a late start, then
    PHASE_NAMES' order); ``start_late``: the rank's late start, when known."""
    excess = [(PHASE_NAMES[c], float(v)) for c, v in _excess(stats, rank).items()]
    if start_late is not None:
        excess.insert(0, (START, float(start_late)))
    return tuple(sorted(excess, key=lambda kv: -kv[1]))


def rank_stats_of(rows: dict[str, Column], rank: int, medians: dict[str, tuple[int, float]]) -> RankStats:
    """The statistics of one rank's analysed rows, as numpy columns (ingest.columns); ``medians``: (count, median)
    of the known values of any of their columns, when the caller has them (a column without unknown values need not
    be sorted again)."""

    def median(column: str, values: np.ndarray) -> float:
        have = medians.get(column)
        return have[1] if have is not None and have[0] == values.size else sorted_median(np.sort(values))

    wall = rows[S.WALL_MS].filled(0.0)
    sync = rows[S.SYNC_MS].filled(0.0)
    work = wall - sync
    phases = {c: rows[c].filled(0.0) for c in RANK_PHASES}
    rest = np.maximum(work - sum(phases.values(), np.zeros(wall.size)), 0.0)
    wall_sum = float(wall.sum())
    data = float(phases[S.DATA_WAIT_MS].sum())
    return RankStats(
        RankSummary(
            rank=rank,
            steps=int(wall.size),
            step_median_ms=median(S.WALL_MS, wall),
            work_median_ms=sorted_median(np.sort(work)),
            sync_share=float(sync.sum()) / wall_sum if wall_sum else 0.0,
            data_share=data / wall_sum if wall_sum else 0.0,
            sync_median_ms=sorted_median(np.sort(sync)),
        ),
        {**{c: median(c, v) for c, v in phases.items()}, REST: sorted_median(np.sort(rest))},
    )

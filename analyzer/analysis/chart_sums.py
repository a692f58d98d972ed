"""What the report's charts draw, as sums that merge over ranks: one rank's rows reduced alone.

The charts never get one point per (rank, step): the step series is binned to at most
``MAX_POINTS`` bins of consecutive step numbers and the rank x step heatmaps to at most
``MAX_CELLS`` cells. Both are means, kept here as sums and counts per bin, so a rank's rows can be
reduced by a worker (``rank_chart``) and the ranks merged by the driver (``ChartSums``) without
any process holding more than one rank's rows; a trace in memory runs the same two functions
(``trace_chart_sums``). The grid (bin widths, the histogram's range) needs the whole run's step
span, rank count and wall-time quartiles: those come from the analysis (``chart_grid``). The
distribution counts the rows the step metrics use (``partial.used_rows``), so the histogram's
total is the analysed step count by construction. render/chart_data.py turns the sums into arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from analyzer.analysis.partial import Rows, analysed_columns, used_rows
from analyzer.analysis.quantiles import combine_linear, order_stats
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.columns import Column, frame_columns

MAX_POINTS = 1500
"""Most bins of the step-time and GPU-busy series."""
MAX_CELLS = 200_000
"""Most cells of one rank x step heatmap (float32, base64: ~1.1 MB of HTML)."""
MAX_COLUMNS = 600
"""Most step bins of a heatmap, however few ranks."""
HIST_BINS = 60
TOP_OUTLIERS = 10

#: Per series bin: rows, and the sums the means and the GPU busy share are made of.
_SERIES = ("n", "wall", "wall_n", "busy", "busy_wall", *S.PARTS, *S.MEMORY_COLUMNS[:2], "peak_n", "start_n")
#: Per heatmap cell: step time and sync wait, each a sum and a count of non-null values.
_HEAT = ("wall", "wall_n", "wait", "wait_n")
#: Columns the charts read.
CHART_COLUMNS = (S.STEP, S.RANK, S.WALL_MS, *S.PARTS, S.GPU_BUSY_MS, S.KERNEL_STATS, *S.MEMORY_COLUMNS[:2])


def bin_width(span: int, most: int) -> int:
    return max(1, math.ceil(span / most))


@dataclass(frozen=True, slots=True)
class ChartGrid:
    """Where every rank's rows fall: the series and heatmap bins, the histogram's range."""

    first: int
    last: int
    width: int
    """Steps per series bin."""
    ranks: tuple[int, ...]
    heat_width: int
    heat_columns: int
    skip: int
    """Warm-up rows per rank."""
    drop_all_sampled: bool
    """Steps under profiler windows are left out of the analysis (partial.used_rows)."""
    fence: float
    """Analysed steps above this are outliers: Q3 + 1.5 IQR, and at least 10% above the median."""
    lo: float
    top_edge: float
    max_ms: float

    @property
    def bins(self) -> int:
        return bin_width(self.last - self.first + 1, self.width)


def chart_grid(
    *,
    first: int,
    last: int,
    ranks: tuple[int, ...],
    skip: int,
    drop_all_sampled: bool,
    median_ms: float,
    quartiles: tuple[float, float],
    wall_range: tuple[float, float] | None,
) -> ChartGrid:
    """The grid of a run spanning steps ``first``..``last`` on ``ranks``; ``quartiles`` and
    ``wall_range`` (min, max) of the analysed steps' wall time, None when none was analysed."""
    span = last - first + 1
    columns = max(1, min(span, MAX_COLUMNS, MAX_CELLS // max(1, len(ranks))))
    heat_width = bin_width(span, columns)
    q1, q3 = quartiles
    fence = float(max(q3 + 1.5 * (q3 - q1), 1.1 * median_ms))
    lo, hi = wall_range if wall_range is not None else (0.0, 1.0)
    # Far outliers (a checkpoint, an evaluation) would squash the histogram into one bar: stop it
    # at twice the fence and count those beyond.
    top_edge = 2 * fence if hi > 2 * fence else hi
    if top_edge - lo < 0.02 * max(lo, 1e-3):  # (nearly) one value: a readable axis around it
        lo, top_edge = lo * 0.97, max(top_edge, lo) * 1.03 + 1e-3
    return ChartGrid(
        first=first,
        last=last,
        width=bin_width(span, MAX_POINTS),
        ranks=ranks,
        heat_width=heat_width,
        heat_columns=bin_width(span, heat_width),
        skip=skip,
        drop_all_sampled=drop_all_sampled,
        fence=fence,
        lo=lo,
        top_edge=top_edge,
        max_ms=hi,
    )


@dataclass(frozen=True, slots=True)
class RankChart:
    """One rank's chart sums (``rank_chart``)."""

    rank: int
    bins: np.ndarray
    """Series bins this rank has rows in."""
    series: dict[str, np.ndarray]
    """_SERIES sums per bin of ``bins`` (parts with nulls as zero)."""
    heat_bins: np.ndarray
    heat: dict[str, np.ndarray]
    known: dict[str, int]
    """Non-null values over all rows: per part, GPU busy."""
    warmup_last: int | None
    """This rank's last warm-up step (None without warm-up)."""
    sampled: tuple[tuple[int, int], ...]
    """Runs of steps that ran under a profiler window (first, last)."""
    counts: np.ndarray
    outliers: int
    beyond: int
    top: tuple[tuple[float, int, int], ...]
    """The slowest outliers: (ms, rank, step)."""


def ranges(steps: list[int]) -> list[tuple[int, int]]:
    """Consecutive runs of sorted step numbers as (first, last)."""
    out: list[tuple[int, int]] = []
    for s in steps:
        if out and s == out[-1][1] + 1:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


def rank_chart(frame: pl.DataFrame, rank: int, grid: ChartGrid) -> RankChart:
    """The chart sums of one rank's rows (``frame``: that rank only, sorted by step, as the reader gives it)."""
    return rank_chart_of(frame_columns(frame, CHART_COLUMNS), rank, grid)


class _Bins:
    """Sums over runs of consecutive rows that fall into one bin (a rank's rows are sorted by step)."""

    def __init__(self, steps: np.ndarray, first: int, width: int) -> None:
        b = (steps - first) // width
        self.starts = np.flatnonzero(np.concatenate([[True], b[1:] != b[:-1]])) if b.size else np.empty(0, np.int64)
        self.ids = b[self.starts]
        self.rows = np.diff(np.append(self.starts, b.size)).astype(np.float64)

    def sum(self, values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values, self.starts) if self.starts.size else np.empty(0)

    def count(self, col: Column) -> np.ndarray:
        return self.rows if col.valid is None else self.sum(col.valid.astype(np.float64))


def rank_chart_of(rows: Rows, rank: int, grid: ChartGrid) -> RankChart:
    """rank_chart of numpy columns (ingest.columns: CHART_COLUMNS; one rank's, sorted by step)."""
    steps = rows[S.STEP].values
    n = int(steps.size)
    wall, busy, sync = rows[S.WALL_MS], rows[S.GPU_BUSY_MS], rows[S.SYNC_MS]
    series, heat = _Bins(steps, grid.first, grid.width), _Bins(steps, grid.first, grid.heat_width)
    wall_v = wall.filled(0.0)
    busy_wall = wall_v if busy.valid is None else np.where(busy.valid, wall_v, 0.0)
    sampled = steps[rows[S.KERNEL_STATS].valid] if rows[S.KERNEL_STATS].valid is not None else steps
    _, f, all_sampled = analysed_columns(rows, grid.skip)  # the rows the step metrics use (used_rows)
    if all_sampled and grid.drop_all_sampled:
        analysed, used_steps = np.empty(0), np.empty(0, np.int64)
    else:
        w = f[S.WALL_MS]
        analysed = w.known().astype(np.float64, copy=False)
        used_steps = f[S.STEP].values if w.valid is None else f[S.STEP].values[w.valid]
    counts, _ = np.histogram(analysed, bins=HIST_BINS, range=(grid.lo, grid.top_edge))
    out = analysed > grid.fence
    order = np.lexsort((used_steps[out], -analysed[out]))[:TOP_OUTLIERS]
    return RankChart(
        rank=rank,
        bins=series.ids,
        series={
            "n": series.rows,
            "wall": series.sum(wall_v),
            "wall_n": series.count(wall),
            "busy": series.sum(busy.filled(0.0)),
            "busy_wall": series.sum(busy_wall),
            **{p: series.sum(rows[p].filled(0.0)) for p in (*S.PARTS, *S.MEMORY_COLUMNS[:2])},
            "peak_n": series.count(rows[S.PEAK_MEM_BYTES]),
            "start_n": series.count(rows[S.MEM_START_BYTES]),
        },
        heat_bins=heat.ids,
        heat={
            "wall": heat.sum(wall_v),
            "wall_n": heat.count(wall),
            "wait": heat.sum(sync.filled(0.0)),
            "wait_n": heat.count(sync),
        },
        known={c: rows[c].count() for c in (*S.PARTS, S.GPU_BUSY_MS)},
        warmup_last=int(steps[min(grid.skip, n) - 1]) if grid.skip and n else None,
        sampled=tuple(ranges(sampled.tolist())),
        counts=counts.astype(np.int64),
        outliers=int(out.sum()),
        beyond=int((analysed > grid.top_edge).sum()),
        top=tuple((float(w), rank, int(s)) for w, s in zip(analysed[out][order], used_steps[out][order], strict=True)),
    )


@dataclass(slots=True)
class ChartSums:
    """Ranks' chart sums merged (any order); O(bins + cells), whatever the rows."""

    grid: ChartGrid
    series: dict[str, np.ndarray] = field(init=False)
    heat: dict[str, np.ndarray] = field(init=False)
    known: dict[str, int] = field(init=False)
    warmup_last: int | None = None
    sampled: set[int] = field(default_factory=set)
    """Steps under a profiler window (kept as steps: ranks' runs may join into one)."""
    counts: np.ndarray = field(init=False)
    outliers: int = 0
    beyond: int = 0
    top: list[tuple[float, int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        g = self.grid
        self.series = {k: np.zeros(g.bins) for k in _SERIES}
        self.heat = {k: np.zeros((len(g.ranks), g.heat_columns)) for k in _HEAT}
        self.known = dict.fromkeys((*S.PARTS, S.GPU_BUSY_MS), 0)
        self.counts = np.zeros(HIST_BINS, dtype=np.int64)

    def add(self, r: RankChart) -> None:
        for k, v in r.series.items():
            self.series[k][r.bins] += v
        row = self.grid.ranks.index(r.rank)
        for k, v in r.heat.items():
            self.heat[k][row, r.heat_bins] += v
        for c, n in r.known.items():
            self.known[c] += n
        if r.warmup_last is not None:
            self.warmup_last = max(self.warmup_last if self.warmup_last is not None else r.warmup_last, r.warmup_last)
        for a, b in r.sampled:
            self.sampled.update(range(a, b + 1))
        self.counts += r.counts
        self.outliers += r.outliers
        self.beyond += r.beyond
        self.top = sorted([*self.top, *r.top], key=lambda t: (-t[0], t[2], t[1]))[:TOP_OUTLIERS]


def trace_chart_sums(frame: pl.DataFrame, *, skip: int, drop_all_sampled: bool, median_ms: float) -> ChartSums:
    """The chart sums of a trace held in memory (every rank's rows in ``frame``), rank by rank."""
    parts = {int(k[0]): v.sort(S.STEP) for k, v in frame.partition_by(S.RANK, as_dict=True).items()}
    used = [used_rows(parts[r], skip, drop_all_sampled).get_column(S.WALL_MS).drop_nulls() for r in sorted(parts)]
    wall = pl.concat(used).cast(pl.Float64).sort().to_numpy() if used else np.empty(0)
    grid = chart_grid(
        first=int(frame.get_column(S.STEP).min()),  # type: ignore[arg-type]
        last=int(frame.get_column(S.STEP).max()),  # type: ignore[arg-type]
        ranks=tuple(sorted(parts)),
        skip=skip,
        drop_all_sampled=drop_all_sampled,
        median_ms=median_ms,
        quartiles=exact_quartiles(wall),
        wall_range=(float(wall[0]), float(wall[-1])) if wall.size else None,
    )
    sums = ChartSums(grid)
    for r in sorted(parts):
        sums.add(rank_chart(parts[r], r, grid))
    return sums


def exact_quartiles(sorted_values: np.ndarray) -> tuple[float, float]:
    """Q1 and Q3 of sorted values, the linear quantiles of combine.py's exact path; (0, 0) for none."""
    n = sorted_values.size
    if n == 0:
        return 0.0, 0.0
    out = []
    for q in (0.25, 0.75):
        i, j, frac = order_stats(n, q)
        out.append(combine_linear(float(sorted_values[i]), float(sorted_values[j]), frac))
    return out[0], out[1]

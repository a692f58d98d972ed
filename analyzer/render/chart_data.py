"""What the HTML report's charts draw, from the chart sums merged over ranks (analysis/chart_sums.py).

A chart never receives one point per (rank, step): the step series is binned to at most
``MAX_POINTS`` bins and the rank x step heatmaps to at most ``MAX_CELLS`` cells, so a report of
1024 ranks x 10,000 steps stays small and opens fast. Bins are runs of consecutive step numbers;
each value is the mean over the rows in the bin (all ranks, all its steps). The sums are made rank
by rank, in the workers of the analysis for a directory of ranks (out of core) or in this process
for a trace in memory: the same functions either way. Nothing here judges the run: it summarises
the trace for drawing (docs/report.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzer.analysis.chart_sums import (
    HIST_BINS,
    MAX_CELLS,
    MAX_COLUMNS,
    MAX_POINTS,
    TOP_OUTLIERS,
    ChartSums,
    ranges,
    trace_chart_sums,
)
from analyzer.planning.outcome import Report
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import Trace

__all__ = [
    "HIST_BINS",
    "MAX_CELLS",
    "MAX_COLUMNS",
    "MAX_POINTS",
    "MAX_WINDOWS",
    "TOP_OUTLIERS",
    "ChartData",
    "Distribution",
    "Heatmap",
    "StepSeries",
    "chart_data",
    "chart_data_from",
]

MAX_WINDOWS = 200
"""Most profiler-window bands marked on the step chart."""


@dataclass(frozen=True, slots=True)
class StepSeries:
    """Step time over the run, stacked by part (means over ranks and the steps of each bin)."""

    step: np.ndarray
    """First step number of each bin."""
    width: int
    """Steps per bin (1: no binning)."""
    parts: dict[str, np.ndarray]
    """Mean ms per step of each part the trace knows (S.PARTS order)."""
    wall: np.ndarray
    busy_share: np.ndarray | None
    """GPU busy / wall time per bin, in [0, 1]; None without GPU timings."""
    memory: dict[str, np.ndarray]
    """Mean GB per step at its peak and at its start (``peak``, ``start``: those the trace has)."""
    first_step: int
    last_step: int
    warmup_last_step: int | None
    """Last step skipped as warm-up (on any rank); None without warm-up."""
    windows: tuple[tuple[int, int], ...]
    """Step ranges that ran under a sampled profiler window (kernel evidence only)."""
    y_max: float
    """Top of the y axis: the tallest stack of the bins without a warm-up step (+8%), so a warm-up
    step (a 28 s compile before 1 s steps) is drawn but clipped instead of flattening the run."""
    warmup_max: float | None
    """The tallest warm-up bin when it is above ``y_max`` (clipped: the chart says so); else None."""


@dataclass(frozen=True, slots=True)
class Distribution:
    """Histogram of the analysed steps' wall time (all ranks), with Tukey outliers."""

    edges: np.ndarray
    counts: np.ndarray
    median_ms: float
    p90_ms: float
    fence_ms: float
    """Steps above this are outliers: Q3 + 1.5 IQR, and at least 10% above the median."""
    outliers: int
    beyond: int
    """Outliers beyond the histogram's last edge (the histogram stops at the fence when they would squash it)."""
    max_ms: float
    top: tuple[tuple[int, int, float], ...]
    """The slowest outliers: (rank, step, ms)."""


@dataclass(frozen=True, slots=True)
class Heatmap:
    """Rank x step-bin means of step time and of time waiting on other ranks (sync)."""

    ranks: np.ndarray
    step: np.ndarray
    """First step of each column."""
    width: int
    wall: np.ndarray
    """float32 [ranks, bins]; NaN where a rank has no step in the bin."""
    wait: np.ndarray | None
    stragglers: tuple[int, ...]
    warmup_columns: int = 0
    """Leading columns that hold a warm-up step: drawn, but left out of the colour scale."""


@dataclass(frozen=True, slots=True)
class ChartData:
    steps: StepSeries
    distribution: Distribution
    heatmap: Heatmap | None


def _means(total: np.ndarray, count: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(count > 0, total / np.where(count > 0, count, 1.0), np.nan)


def _series(sums: ChartSums, report: Report) -> StepSeries:
    g, s = sums.grid, sums.series
    at = np.flatnonzero(s["n"] > 0)
    n = s["n"][at]
    parts = {p: (s[p][at] / n).astype(np.float32) for p in S.PARTS if sums.known[p]}
    wall = _means(s["wall"][at], s["wall_n"][at]).astype(np.float32)
    memory = {
        k: _means(s[c][at], s[f"{k}_n"][at]) / 1e9 for k, c in zip(("peak", "start"), S.MEMORY_COLUMNS[:2], strict=True)
    }
    busy = None
    if sums.known[S.GPU_BUSY_MS]:
        with np.errstate(divide="ignore", invalid="ignore"):
            busy = np.clip(s["busy"][at] / s["busy_wall"][at], 0.0, 1.0).astype(np.float32)
    warmup_last = sums.warmup_last if report.metrics.warmup_steps else None
    windows = ranges(sorted(sums.sampled))[:MAX_WINDOWS] if report.metrics.accounting.profiler_windows else []
    steps = (at * g.width + g.first).astype(np.int64)
    y_max, warmup_max = _y_scale(steps, parts, wall, warmup_last)
    return StepSeries(
        step=steps,
        width=g.width,
        parts=parts,
        wall=wall,
        busy_share=busy,
        memory={k: v.astype(np.float32) for k, v in memory.items() if np.isfinite(v).any()},
        first_step=g.first,
        last_step=g.last,
        warmup_last_step=warmup_last,
        windows=tuple(windows),
        y_max=y_max,
        warmup_max=warmup_max,
    )


def _y_scale(
    steps: np.ndarray, parts: dict[str, np.ndarray], wall: np.ndarray, warmup_last: int | None
) -> tuple[float, float | None]:
    """(top of the y axis from the bins past warm-up, the tallest warm-up bin when it is clipped)."""
    height = np.nansum(np.vstack(list(parts.values())), axis=0) if parts else wall.astype(np.float64)
    height = np.maximum(height, np.nan_to_num(wall))  # a stack never hides a taller wall time
    warm = steps <= warmup_last if warmup_last is not None else np.zeros(steps.size, dtype=bool)
    rest = height[~warm]
    top = float(np.nanmax(rest)) if rest.size and np.isfinite(rest).any() else float(np.nanmax(height, initial=0.0))
    y_max = max(top, 1e-3) * 1.08
    warm_top = float(np.nanmax(height[warm], initial=0.0)) if warm.any() else 0.0
    return y_max, (warm_top if warm_top > y_max else None)


def _distribution(sums: ChartSums, report: Report) -> Distribution:
    g = sums.grid
    m = report.metrics
    return Distribution(
        edges=np.linspace(g.lo, g.top_edge, HIST_BINS + 1),
        counts=sums.counts.copy(),
        median_ms=m.step_median_ms,
        p90_ms=m.step_p90_ms,
        fence_ms=g.fence,
        outliers=sums.outliers,
        beyond=sums.beyond,
        max_ms=g.max_ms,
        top=tuple((rank, step, ms) for ms, rank, step in sums.top),
    )


def _heatmap(sums: ChartSums, report: Report) -> Heatmap | None:
    g, h = sums.grid, sums.heat
    if len(g.ranks) < 2:
        return None
    wait = _means(h["wait"], h["wait_n"]).astype(np.float32) if sums.known[S.SYNC_MS] else None
    d = report.metrics.distributed
    return Heatmap(
        ranks=np.asarray(g.ranks, dtype=np.int32),
        step=(np.arange(g.heat_columns) * g.heat_width + g.first).astype(np.int64),
        width=g.heat_width,
        wall=_means(h["wall"], h["wall_n"]).astype(np.float32),
        wait=wait,
        stragglers=tuple(s.rank for s in d.stragglers) if d else (),
        warmup_columns=_warmup_columns(sums, report),
    )


def _warmup_columns(sums: ChartSums, report: Report) -> int:
    """Columns from the left that hold a warm-up step of some rank (none when all would be)."""
    g = sums.grid
    if not report.metrics.warmup_steps or sums.warmup_last is None:
        return 0
    n = (sums.warmup_last - g.first) // g.heat_width + 1
    return n if n < g.heat_columns else 0


def chart_data_from(sums: ChartSums, report: Report) -> ChartData:
    """Everything the charts draw, from the chart sums made with the analysis of ``report``."""
    return ChartData(
        steps=_series(sums, report), distribution=_distribution(sums, report), heatmap=_heatmap(sums, report)
    )


def chart_data(trace: Trace, report: Report) -> ChartData:
    """Everything the charts draw, from a trace in memory and the report made from it."""
    m = report.metrics
    sums = trace_chart_sums(
        trace.frame,
        skip=m.warmup_steps,
        drop_all_sampled=m.accounting.profiler_windows > 0,
        median_ms=m.step_median_ms,
    )
    return chart_data_from(sums, report)

"""What the HTML report's charts draw, aggregated server-side with polars.

A chart never receives one point per (rank, step): the step series is binned to at most
``MAX_POINTS`` bins and the rank x step heatmaps to at most ``MAX_CELLS`` cells, so a report of
1024 ranks x 10,000 steps stays small and opens fast. Bins are runs of consecutive step numbers;
each value is the mean over the rows in the bin (all ranks, all its steps). Nothing here judges the
run: it summarises the trace for drawing (docs/report.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from analyzer.analysis.aggregate import number
from analyzer.errors import TraceError
from analyzer.planning.outcome import Report
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.reader import Trace

MAX_POINTS = 1500
"""Most bins of the step-time and GPU-busy series."""
MAX_CELLS = 200_000
"""Most cells of one rank x step heatmap (float32, base64: ~1.1 MB of HTML)."""
MAX_COLUMNS = 600
"""Most step bins of a heatmap, however few ranks."""
HIST_BINS = 60
MAX_WINDOWS = 200
"""Most profiler-window bands marked on the step chart."""
TOP_OUTLIERS = 10


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


def _bin_width(span: int, most: int) -> int:
    return max(1, math.ceil(span / most))


def _ranges(steps: list[int]) -> list[tuple[int, int]]:
    """Consecutive runs of sorted step numbers as (first, last)."""
    out: list[tuple[int, int]] = []
    for s in steps:
        if out and s == out[-1][1] + 1:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


def _series(frame: pl.DataFrame, report: Report) -> StepSeries:
    first = int(number(frame.get_column(S.STEP).min()))
    last = int(number(frame.get_column(S.STEP).max()))
    width = _bin_width(last - first + 1, MAX_POINTS)
    known = [p for p in S.PARTS if frame.get_column(p).null_count() < frame.height]
    has_gpu = frame.get_column(S.GPU_BUSY_MS).null_count() < frame.height
    binned = (
        frame.lazy()
        .with_columns(((pl.col(S.STEP) - first) // width).alias("bin"))
        .group_by("bin")
        .agg(
            *[pl.col(p).fill_null(0.0).mean().alias(p) for p in known],
            pl.col(S.WALL_MS).mean().alias(S.WALL_MS),
            (pl.col(S.GPU_BUSY_MS).sum() / pl.col(S.WALL_MS).filter(pl.col(S.GPU_BUSY_MS).is_not_null()).sum()).alias(
                "busy"
            ),
        )
        .sort("bin")
        .collect()
    )
    skip = report.metrics.warmup_steps
    warmup_last = None
    if skip:
        warmup_last = int(
            number(frame.group_by(S.RANK).agg(pl.col(S.STEP).bottom_k(skip).max()).get_column(S.STEP).max())
        )
    windows: list[tuple[int, int]] = []
    if report.metrics.accounting.profiler_windows:
        sampled = frame.filter(pl.col(S.KERNEL_STATS).is_not_null()).get_column(S.STEP).unique().sort().to_list()
        windows = _ranges(sampled)[:MAX_WINDOWS]
    busy = binned.get_column("busy").fill_null(float("nan")).clip(0.0, 1.0).to_numpy() if has_gpu else None
    steps = (binned.get_column("bin").to_numpy() * width + first).astype(np.int64)
    parts = {p: binned.get_column(p).to_numpy().astype(np.float32) for p in known}
    wall = binned.get_column(S.WALL_MS).to_numpy().astype(np.float32)
    y_max, warmup_max = _y_scale(steps, parts, wall, warmup_last)
    return StepSeries(
        step=steps,
        width=width,
        parts=parts,
        wall=wall,
        busy_share=None if busy is None else busy.astype(np.float32),
        first_step=first,
        last_step=last,
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


def analysed_rows(frame: pl.DataFrame, report: Report) -> pl.DataFrame:
    """The rows the analysis used: past each rank's warm-up, not under a profiler window."""
    skip = report.metrics.warmup_steps
    rows = frame.filter(pl.col(S.STEP).rank("ordinal").over(S.RANK) > skip)
    if report.metrics.accounting.profiler_windows:
        rows = rows.filter(pl.col(S.KERNEL_STATS).is_null())
    expected = report.metrics.accounting.analysed
    if rows.height != expected:
        raise TraceError(
            f"{report.path}: the trace holds {rows.height:,} analysable steps, the report {expected:,}: "
            "it changed since it was analysed; analyse it again"
        )
    return rows


def _distribution(rows: pl.DataFrame, report: Report) -> Distribution:
    wall = rows.get_column(S.WALL_MS).to_numpy()
    m = report.metrics
    q1, q3 = np.quantile(wall, [0.25, 0.75]) if wall.size else (0.0, 0.0)
    fence = float(max(q3 + 1.5 * (q3 - q1), 1.1 * m.step_median_ms))
    outlier_mask = wall > fence
    lo, hi = (float(wall.min()), float(wall.max())) if wall.size else (0.0, 1.0)
    top_edge = hi
    # Far outliers (a checkpoint, an evaluation) would squash the histogram into one bar: stop it
    # at twice the fence and count those beyond.
    if hi > 2 * fence:
        top_edge = 2 * fence
    if top_edge - lo < 0.02 * max(lo, 1e-3):  # (nearly) one value: a readable axis around it
        lo, top_edge = lo * 0.97, max(top_edge, lo) * 1.03 + 1e-3
    counts, edges = np.histogram(wall, bins=HIST_BINS, range=(lo, top_edge))
    out = rows.filter(pl.col(S.WALL_MS) > fence).sort(S.WALL_MS, descending=True).head(TOP_OUTLIERS)
    return Distribution(
        edges=edges,
        counts=counts,
        median_ms=m.step_median_ms,
        p90_ms=m.step_p90_ms,
        fence_ms=fence,
        outliers=int(outlier_mask.sum()),
        beyond=int((wall > top_edge).sum()),
        max_ms=hi,
        top=tuple(
            (int(r), int(s), float(w))
            for r, s, w in zip(
                out.get_column(S.RANK).to_list(),
                out.get_column(S.STEP).to_list(),
                out.get_column(S.WALL_MS).to_list(),
                strict=True,
            )
        ),
    )


def _heatmap(frame: pl.DataFrame, report: Report) -> Heatmap | None:
    ranks = frame.get_column(S.RANK).unique().sort().to_numpy()
    if ranks.size < 2:
        return None
    first = int(number(frame.get_column(S.STEP).min()))
    span = int(number(frame.get_column(S.STEP).max())) - first + 1
    columns = max(1, min(span, MAX_COLUMNS, MAX_CELLS // ranks.size))
    width = _bin_width(span, columns)
    columns = _bin_width(span, width)
    has_wait = frame.get_column(S.SYNC_MS).null_count() < frame.height
    cells = (
        frame.lazy()
        .with_columns(((pl.col(S.STEP) - first) // width).alias("bin"))
        .group_by(S.RANK, "bin")
        .agg(pl.col(S.WALL_MS).mean().alias("wall"), pl.col(S.SYNC_MS).mean().alias("wait"))
        .collect()
    )
    row = np.searchsorted(ranks, cells.get_column(S.RANK).to_numpy())
    col = cells.get_column("bin").to_numpy()
    wall = np.full((ranks.size, columns), np.nan, dtype=np.float32)
    wall[row, col] = cells.get_column("wall").to_numpy()
    wait = None
    if has_wait:
        wait = np.full((ranks.size, columns), np.nan, dtype=np.float32)
        wait[row, col] = cells.get_column("wait").fill_null(float("nan")).to_numpy()
    d = report.metrics.distributed
    return Heatmap(
        ranks=ranks,
        step=(np.arange(columns) * width + first).astype(np.int64),
        width=width,
        wall=wall,
        wait=wait,
        stragglers=tuple(s.rank for s in d.stragglers) if d else (),
        warmup_columns=_warmup_columns(frame, report, first, width, columns),
    )


def _warmup_columns(frame: pl.DataFrame, report: Report, first: int, width: int, columns: int) -> int:
    """Columns from the left that hold a warm-up step of some rank (none when all would be)."""
    skip = report.metrics.warmup_steps
    if not skip:
        return 0
    last = int(number(frame.group_by(S.RANK).agg(pl.col(S.STEP).bottom_k(skip).max()).get_column(S.STEP).max()))
    n = (last - first) // width + 1
    return n if n < columns else 0


def chart_data(trace: Trace, report: Report) -> ChartData:
    """Everything the charts draw, from the trace the report was made from."""
    frame = trace.frame
    return ChartData(
        steps=_series(frame, report),
        distribution=_distribution(analysed_rows(frame, report), report),
        heatmap=_heatmap(frame, report),
    )

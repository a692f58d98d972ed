"""One rank's contribution to the step metrics, computed from that rank's rows alone.

The analysis is split so that no process ever holds more than one rank's rows: ``rank_partial``
reduces a rank to a ``RankPartial`` (counts, sums, quantile sketches, per-rank medians, kernel
totals, and one float per step for the few columns the cross-rank and per-step parts need),
and ``analyzer.analysis.combine`` merges partials into StepMetrics. The same code runs for an
in-memory trace (its frame split by rank) and for per-rank files read by worker processes or Ray
tasks, so both paths give the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from analyzer.analysis.kernel_metrics import KernelPartial, kernel_partial, step_kernel_medians
from analyzer.analysis.quantiles import Answer, Bracket, Sketch, in_bracket, sketch
from analyzer.analysis.ranks import RankStats, rank_stats
from gpuanalyze.ingest import schema as S

#: Columns whose quantiles StepMetrics reports (wall: median and p90; parts and batch: median).
#: Key of ``RankPartial.sums``: data wait of the rows that recorded their data CPU time.
DATA_WAIT_WITH_CPU = "data_wait_ms__rows_with_cpu"
QUANTILE_COLUMNS: tuple[str, ...] = (S.WALL_MS, *S.PARTS, S.BATCH_SAMPLES)
#: The per-step kernel medians (kernel_metrics), a quantile column of the post-warm-up rows.
KERNEL_MEDIAN = "kernel_median_us"


@dataclass(frozen=True, slots=True)
class StepVectors:
    """One value per analysed step of one rank (row-aligned; unknown GPU busy is NaN)."""

    steps: np.ndarray
    wall: np.ndarray
    data: np.ndarray
    sync: np.ndarray
    other: np.ndarray
    busy: np.ndarray

    @property
    def work(self) -> np.ndarray:
        """Wall time minus time waiting on other ranks or the device (ranks.py)."""
        return self.wall - self.sync


@dataclass(frozen=True, slots=True)
class RankPartial:
    rank: int
    rows: int
    """This rank's rows (after the reader dropped unusable ones), before warm-up."""
    warmup: int
    sampled: int
    """Post-warm-up rows with kernel statistics (steps under a sampled torch.profiler window)."""
    all_sampled: bool
    """Every post-warm-up row is sampled: the analysed rows are these (or none, when other ranks
    have unsampled rows and sampled steps are left out run-wide)."""
    n: int
    """Analysed rows: post-warm-up, without sampled rows unless every row is sampled."""
    known: dict[str, int]
    """Non-null values per part, GPU busy, batch samples and peak memory."""
    sums: dict[str, float]
    """Sum of non-null values per part, wall, GPU busy and batch samples."""
    peak_mem: int | None
    sketches: dict[str, Sketch]
    """Quantile sketches of QUANTILE_COLUMNS (non-null values)."""
    stats: RankStats
    """Per-rank medians and shares for the cross-rank analysis."""
    vectors: StepVectors
    kernels: KernelPartial | None
    """Kernel statistics of the post-warm-up rows (sampled ones included)."""


def analysed_rows(frame: pl.DataFrame, skip: int) -> tuple[pl.DataFrame, pl.DataFrame, bool]:
    """(rows after warm-up, the analysed rows, every post-warm-up row sampled) of one rank's sorted frame."""
    post = frame.slice(skip)
    sampled = post.get_column(S.KERNEL_STATS).is_not_null()
    n_sampled = int(sampled.sum())
    all_sampled = n_sampled == post.height and post.height > 0
    analysed = post if all_sampled or n_sampled == 0 else post.filter(~sampled)
    return post, analysed, all_sampled


def used_rows(frame: pl.DataFrame, skip: int, drop_all_sampled: bool) -> pl.DataFrame:
    """The rows of one rank's sorted frame that the step metrics use: its analysed rows, or none for a
    rank whose every post-warm-up row is sampled when sampled steps are left out run-wide (combine.py)."""
    _, analysed, all_sampled = analysed_rows(frame, skip)
    return analysed.clear() if all_sampled and drop_all_sampled else analysed


def _values(frame: pl.DataFrame, column: str) -> np.ndarray:
    return frame.get_column(column).drop_nulls().cast(pl.Float64).to_numpy()


def _filled(frame: pl.DataFrame, column: str) -> np.ndarray:
    return frame.get_column(column).fill_null(0.0).cast(pl.Float64).to_numpy()


def rank_partial(frame: pl.DataFrame, rank: int, skip: int) -> RankPartial:
    """The partial of one rank's rows (``frame``: that rank only, sorted by step, as the reader gives it)."""
    post, f, all_sampled = analysed_rows(frame, skip)
    sampled = int(post.get_column(S.KERNEL_STATS).is_not_null().sum())
    known = {
        c: f.height - f.get_column(c).null_count() for c in (*S.PARTS, S.GPU_BUSY_MS, S.BATCH_SAMPLES, S.PEAK_MEM_BYTES)
    }
    sums = {
        c: float(f.get_column(c).cast(pl.Float64).sum() or 0.0)
        for c in (S.WALL_MS, *S.PARTS, S.GPU_BUSY_MS, S.BATCH_SAMPLES, S.DATA_CPU_MS)
    }
    with_cpu = f.filter(pl.col(S.DATA_CPU_MS).is_not_null())
    sums[DATA_WAIT_WITH_CPU] = float(with_cpu.get_column(S.DATA_WAIT_MS).cast(pl.Float64).sum() or 0.0)
    mem = f.get_column(S.PEAK_MEM_BYTES).max() if known[S.PEAK_MEM_BYTES] else None
    wall = _filled(f, S.WALL_MS)
    data, sync, other = (_filled(f, c) for c in (S.DATA_WAIT_MS, S.SYNC_MS, S.OTHER_MS))
    busy = f.get_column(S.GPU_BUSY_MS).cast(pl.Float64).fill_null(float("nan")).to_numpy()
    vectors = StepVectors(f.get_column(S.STEP).to_numpy(), wall, data, sync, other, busy)
    return RankPartial(
        rank=rank,
        rows=frame.height,
        warmup=frame.height - post.height,
        sampled=sampled,
        all_sampled=all_sampled,
        n=f.height,
        known=known,
        sums=sums,
        peak_mem=None if mem is None else int(mem),  # type: ignore[arg-type]
        sketches={c: sketch(_values(f, c)) for c in QUANTILE_COLUMNS},
        stats=rank_stats(f, rank),
        vectors=vectors,
        kernels=kernel_partial(post),
    )


def bracket_answers(
    frame: pl.DataFrame, skip: int, drop_all_sampled: bool, wanted: dict[str, list[Bracket]]
) -> dict[str, list[Answer]]:
    """One rank's answers for the quantile brackets (second pass; same rows as rank_partial)."""
    post = frame.slice(skip)
    f = used_rows(frame, skip, drop_all_sampled)
    out = {}
    for column, brackets in wanted.items():
        values = step_kernel_medians(post) if column == KERNEL_MEDIAN else _values(f, column)
        out[column] = [in_bracket(values, b) for b in brackets]
    return out

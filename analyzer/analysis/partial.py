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

from analyzer.analysis.batch_split import BatchSplit, batch_split
from analyzer.analysis.kernel_metrics import KernelPartial, kernel_partial, step_kernel_medians
from analyzer.analysis.memory_fit import RankMemory, rank_memory
from analyzer.analysis.quantiles import Answer, Bracket, Sketch, in_bracket, sketch_sorted, sorted_median
from analyzer.analysis.ranks import RankStats, rank_stats_of, start_ms
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.columns import Column, frame_columns

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
    start: np.ndarray
    """Step starts in ms since the epoch (ranks.start_ms)."""

    @property
    def work(self) -> np.ndarray:
        """Wall time minus time waiting on other ranks or the device (ranks.py)."""
        return self.wall - self.sync


@dataclass(frozen=True, slots=True)
class RankPartial:
    rank: int
    rows: int
    """This rank's rows (after the reader dropped unusable ones), before warm-up, without left-out steps."""
    warmup: int
    sampled: int
    """Post-warm-up rows with kernel statistics (steps under a sampled torch.profiler window)."""
    all_sampled: bool
    """Every post-warm-up row is sampled: the analysed rows are these (or none, when other ranks
    have unsampled rows and sampled steps are left out run-wide)."""
    n: int
    """Analysed rows: post-warm-up, without sampled rows unless every row is sampled."""
    known: dict[str, int]
    """Non-null values per part, GPU busy and batch samples."""
    sums: dict[str, float]
    """Sum of non-null values per part, wall, GPU busy and batch samples."""
    memory: RankMemory | None
    sketches: dict[str, Sketch]
    """Quantile sketches of QUANTILE_COLUMNS (non-null values)."""
    stats: RankStats
    """Per-rank medians and shares for the cross-rank analysis."""
    vectors: StepVectors
    kernels: KernelPartial | None
    """Kernel statistics of the post-warm-up rows (sampled ones included)."""
    lead: tuple[float, int] = (0.0, 0)
    """(sum, count) of the analysed rows' known lead_ms."""
    split: BatchSplit | None = None
    """The forward + backward split this rank's post-warm-up rows measure (analysis.batch_split)."""


Without = frozenset[int]
"""Post-warm-up step numbers left out of the analysed rows (the steady state's outliers, analysis.road)."""


def _pick(
    sampled: np.ndarray, steps: np.ndarray, skip: int, without: Without
) -> tuple[slice | np.ndarray, slice | np.ndarray, bool]:
    """The one selection of one rank's sorted rows: (rows after warm-up and not left out, the analysed
    rows, every such row sampled). The analysed rows are those rows without the ones under a sampled
    profiler window, unless every one of them is sampled. Slices where no row is picked out (no copy)."""
    post: slice | np.ndarray = slice(skip, None)
    if without:
        mask = np.zeros(sampled.size, dtype=bool)
        mask[skip:] = ~np.isin(steps[skip:], np.fromiter(without, dtype=np.int64, count=len(without)))
        post = mask
    in_post = sampled[post]
    n_sampled = int(np.count_nonzero(in_post))
    all_sampled = n_sampled == in_post.size and in_post.size > 0
    if all_sampled or n_sampled == 0:
        return post, post, all_sampled
    kept = np.zeros(sampled.size, dtype=bool)
    kept[post] = True
    return post, kept & ~sampled, all_sampled


def analysed_rows(
    frame: pl.DataFrame, skip: int, without: Without = frozenset()
) -> tuple[pl.DataFrame, pl.DataFrame, bool]:
    """(rows after warm-up, the analysed rows, every post-warm-up row sampled) of one rank's sorted frame:
    the numpy selection (analysed_columns) applied to a polars frame."""
    sampled = frame.get_column(S.KERNEL_STATS).is_not_null().to_numpy()
    post, analysed, all_sampled = _pick(sampled, frame.get_column(S.STEP).to_numpy(), skip, without)

    def take(at: slice | np.ndarray) -> pl.DataFrame:
        return frame.slice(skip) if isinstance(at, slice) else frame.filter(pl.Series(at))

    return take(post), take(analysed), all_sampled


def used_rows(frame: pl.DataFrame, skip: int, drop_all_sampled: bool) -> pl.DataFrame:
    """The rows of one rank's sorted frame that the step metrics use: its analysed rows, or none for a
    rank whose every post-warm-up row is sampled when sampled steps are left out run-wide (combine.py)."""
    _, analysed, all_sampled = analysed_rows(frame, skip)
    return analysed.clear() if all_sampled and drop_all_sampled else analysed


Rows = dict[str, Column]
"""One rank's rows as numpy columns, sorted by step (ingest.columns: NUMERIC's columns and KERNEL_STATS)."""


def _sampled(rows: Rows) -> np.ndarray:
    ks = rows[S.KERNEL_STATS]
    return np.ones(len(ks), dtype=bool) if ks.valid is None else ks.valid


def _select(rows: Rows, at: slice | np.ndarray) -> Rows:
    return {c: col.rows(at) for c, col in rows.items()}


def analysed_columns(rows: Rows, skip: int, without: Without = frozenset()) -> tuple[Rows, Rows, bool]:
    """(rows after warm-up and not left out, the analysed rows, every such row sampled) of numpy columns."""
    post, analysed, all_sampled = _pick(_sampled(rows), rows[S.STEP].values, skip, without)
    return _select(rows, post), _select(rows, analysed), all_sampled


def _sum(col: Column) -> float:
    return float(col.known().astype(np.float64, copy=False).sum())


def partial_of(rows: Rows, rank: int, skip: int, without: Without = frozenset()) -> RankPartial:
    """The partial of one rank's rows as numpy columns (sorted by step; load_columns or frame_columns),
    without the post-warm-up steps ``without``."""
    post, f, all_sampled = analysed_columns(rows, skip, without)
    known = {c: f[c].count() for c in (*S.PARTS, S.GPU_BUSY_MS, S.BATCH_SAMPLES)}
    sums = {c: _sum(f[c]) for c in (S.WALL_MS, *S.PARTS, S.GPU_BUSY_MS, S.BATCH_SAMPLES, S.DATA_CPU_MS)}
    cpu = f[S.DATA_CPU_MS].valid
    data = f[S.DATA_WAIT_MS]
    sums[DATA_WAIT_WITH_CPU] = _sum(data) if cpu is None else _sum(data.rows(cpu))
    sketches, medians = {}, {}
    for c in QUANTILE_COLUMNS:  # one column sorted at a time (1M steps: 8 MB each)
        ordered = np.sort(f[c].known().astype(np.float64, copy=False))
        sketches[c], medians[c] = sketch_sorted(ordered), (ordered.size, sorted_median(ordered))
        del ordered
    wall = f[S.WALL_MS].filled(0.0)
    data_v, sync, other = (f[c].filled(0.0) for c in (S.DATA_WAIT_MS, S.SYNC_MS, S.OTHER_MS))
    start = start_ms(f[S.START_UNIX_NS].values)
    vectors = StepVectors(f[S.STEP].values, wall, data_v, sync, other, f[S.GPU_BUSY_MS].filled(float("nan")), start)
    lead = f[S.LEAD_MS].known()
    lead = lead[np.isfinite(lead)]
    compute = post[S.FORWARD_MS].filled(0.0) + post[S.BACKWARD_MS].filled(0.0)
    return RankPartial(
        rank=rank,
        rows=min(skip, len(rows[S.STEP])) + len(post[S.STEP]),  # without the left-out steps' rows
        warmup=min(skip, len(rows[S.STEP])),
        sampled=int(np.count_nonzero(_sampled(post))),
        all_sampled=all_sampled,
        n=len(f[S.STEP]),
        known=known,
        sums=sums,
        memory=rank_memory(f, rank),
        sketches=sketches,
        stats=rank_stats_of(f, rank, medians),
        vectors=vectors,
        kernels=kernel_partial(*_kernel_rows(post), rank),
        lead=(float(lead.sum()), int(lead.size)),
        split=batch_split(post[S.BATCH_SAMPLES].filled(float("nan")), compute),
    )


def _kernel_rows(post: Rows) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The kernel statistics (JSON) of the sampled post-warm-up rows, those rows' wall times (NaN where
    unknown) and their step numbers."""
    sampled = _sampled(post)
    if not sampled.any():
        return [], np.empty(0), np.empty(0, dtype=np.int64)
    walls = post[S.WALL_MS].rows(sampled).filled(float("nan"))
    return list(post[S.KERNEL_STATS].values[sampled]), walls, post[S.STEP].values[sampled]


def bracket_answers(
    frame: pl.DataFrame,
    skip: int,
    drop_all_sampled: bool,
    wanted: dict[str, list[Bracket]],
    without: Without = frozenset(),
) -> dict[str, list[Answer]]:
    """One rank's answers for the quantile brackets (second pass; same rows as rank_partial)."""
    return bracket_answers_of(frame_columns(frame), skip, drop_all_sampled, wanted, without)


def bracket_answers_of(
    rows: Rows,
    skip: int,
    drop_all_sampled: bool,
    wanted: dict[str, list[Bracket]],
    without: Without = frozenset(),
) -> dict[str, list[Answer]]:
    """bracket_answers of numpy columns."""
    post, f, all_sampled = analysed_columns(rows, skip, without)
    out = {}
    for column, brackets in wanted.items():
        if column == KERNEL_MEDIAN:
            values = step_kernel_medians(_kernel_rows(post)[0])
        elif all_sampled and drop_all_sampled:
            values = np.empty(0)
        else:
            values = f[column].known().astype(np.float64, copy=False)
        out[column] = [in_bracket(values, b) for b in brackets]
    return out

"""Cross-rank analysis: per-step skew, stragglers and the phase that makes them slow.

A rank's *work* on a step is its wall time minus the time it spent waiting on collectives or
syncs (sync_ms). On each step the baseline is the median work over ranks (with two ranks: the
faster one). A rank is slow on a step when it has the most work and exceeds the baseline by
more than SLOW_STEP_MIN_MS and SLOW_STEP_FRACTION of the median step; it is a straggler when
that happens on at least STRAGGLER_FRACTION of steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from analyzer.analysis.aggregate import number
from analyzer.analysis.thresholds import SLOW_STEP_FRACTION, SLOW_STEP_MIN_MS, STRAGGLER_FRACTION
from gpuanalyze.ingest import schema as S

PHASES = (S.DATA_WAIT_MS, S.FORWARD_MS, S.BACKWARD_MS, S.OPTIMIZER_MS)


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
    phase_excess_ms: float


@dataclass(frozen=True, slots=True)
class RankAnalysis:
    ranks: int
    per_rank: tuple[RankSummary, ...]
    stragglers: tuple[Straggler, ...]
    skew_median_ms: float
    """Median over steps of (max - min) work across ranks."""
    step_median_ms: float


def rank_analysis(frame: pl.DataFrame) -> RankAnalysis | None:
    """None for single-rank traces. Runs as one lazy polars query over all ranks' rows."""
    if frame.get_column(S.RANK).n_unique() < 2:
        return None
    lf = frame.lazy().with_columns(work=pl.col(S.WALL_MS) - pl.col(S.SYNC_MS).fill_null(0.0))
    n_ranks = frame.get_column(S.RANK).n_unique()
    baseline = pl.col("work").median() if n_ranks >= 3 else pl.col("work").min()
    per_step = lf.group_by(S.STEP).agg(
        baseline.alias("baseline"),
        pl.col("work").max().alias("max_work"),
        (pl.col("work").max() - pl.col("work").min()).alias("skew"),
        pl.col(S.WALL_MS).median().alias("wall"),
    )
    step_median = number(frame.get_column(S.WALL_MS).median())
    threshold = max(SLOW_STEP_MIN_MS, SLOW_STEP_FRACTION * step_median)
    slow = (
        lf.join(per_step, on=S.STEP)
        .filter((pl.col("work") == pl.col("max_work")) & (pl.col("work") - pl.col("baseline") > threshold))
        .group_by(S.RANK)
        .agg(pl.len().alias("steps_slow"), (pl.col("work") - pl.col("baseline")).median().alias("excess"))
    )
    per_rank = lf.group_by(S.RANK).agg(
        pl.len().alias("steps"),
        pl.col(S.WALL_MS).median().alias("step"),
        pl.col("work").median().alias("work"),
        (pl.col(S.SYNC_MS).fill_null(0).sum() / pl.col(S.WALL_MS).sum()).alias("sync_share"),
        (pl.col(S.DATA_WAIT_MS).fill_null(0).sum() / pl.col(S.WALL_MS).sum()).alias("data_share"),
        *[pl.col(p).fill_null(0.0).median().alias(p) for p in PHASES],
    )
    per_rank_df, slow_df, per_step_df = pl.collect_all([per_rank.sort(S.RANK), slow, per_step])
    summaries = tuple(
        RankSummary(r[S.RANK], r["steps"], r["step"], r["work"], r["sync_share"], r["data_share"])
        for r in per_rank_df.iter_rows(named=True)
    )
    stragglers = []
    for row in slow_df.sort("steps_slow", descending=True).iter_rows(named=True):
        steps = per_rank_df.filter(pl.col(S.RANK) == row[S.RANK]).get_column("steps").item()
        if row["steps_slow"] < STRAGGLER_FRACTION * steps:
            continue
        phase, phase_excess = _slow_phase(per_rank_df, row[S.RANK])
        stragglers.append(Straggler(row[S.RANK], row["steps_slow"], steps, row["excess"], phase, phase_excess))
    return RankAnalysis(
        n_ranks, summaries, tuple(stragglers), number(per_step_df.get_column("skew").median()), step_median
    )


def _slow_phase(per_rank: pl.DataFrame, rank: int) -> tuple[str, float]:
    """The phase whose median on ``rank`` exceeds the median of the other ranks by the most."""
    mine = per_rank.filter(pl.col(S.RANK) == rank)
    others = per_rank.filter(pl.col(S.RANK) != rank)
    excess = {p: mine.get_column(p).item() - others.get_column(p).median() for p in PHASES}
    phase = max(excess, key=excess.__getitem__)
    return phase.removesuffix("_ms").replace("data_wait", "data"), float(excess[phase])

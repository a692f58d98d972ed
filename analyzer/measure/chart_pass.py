"""The report's chart pass: every rank file reduced to chart sums by a worker, merged by the driver.

It runs after the analysis (the grid needs the run's step span, rank count and wall-time
quartiles), on the analysis's engine, one task per file; each task returns a few bins per rank
(analysis/chart_sums.py), never rows. Files the reader left untouched are read raw (only the
columns the charts use are paged in), the others through the reader, as for the quantile pass.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analyzer.analysis.chart_sums import CHART_COLUMNS, ChartGrid, ChartSums, RankChart, rank_chart, rank_chart_of
from analyzer.errors import GpuAnalyzeError
from analyzer.measure import storage
from analyzer.measure.engine import LocalEngine, RayEngine
from analyzer.measure.rank_tasks import by_step
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.columns import raw_columns
from gpuanalyze.ingest.trace.reader import load_trace


@dataclass(frozen=True, slots=True)
class ChartJob:
    arrow: str
    grid: ChartGrid
    fast: bool = False
    """The file's raw rows are its analysed rows' source (tasks.FileResult.fast)."""
    stamp: tuple[int, int] = (0, 0)


def chart_file(job: ChartJob) -> list[RankChart]:
    """Every rank's chart sums of one .arrow file (the rows run_file reduced)."""
    if job.fast:
        if storage.stat(job.arrow) != job.stamp:
            raise GpuAnalyzeError(f"{job.arrow}: the file changed during the analysis; run it again")
        cols = raw_columns(job.arrow, CHART_COLUMNS)  # a NaN duration unknown, as the reader makes it
        rank = cols[S.RANK].values
        bounds = [0, *(np.flatnonzero(np.diff(rank)) + 1).tolist(), rank.size]
        return [
            rank_chart_of({c: col.rows(slice(a, b)) for c, col in cols.items()}, int(rank[a]), job.grid)
            for a, b in itertools.pairwise(bounds)
        ]
    with storage.local_copy(job.arrow) as local:
        frame = load_trace(local).frame.select(CHART_COLUMNS)
    parts = frame.partition_by(S.RANK, as_dict=True)
    return [rank_chart(by_step(parts[key]), int(key[0]), job.grid) for key in sorted(parts)]


def chart_pass(engine: LocalEngine | RayEngine, jobs: Sequence[ChartJob], grid: ChartGrid) -> ChartSums:
    """The chart sums of a run's files, merged as they arrive."""
    sums = ChartSums(grid)
    for per_file in engine.map(chart_file, list(jobs)):
        for rank in per_file:
            sums.add(rank)
    return sums

"""The report's chart pass: every rank file reduced to chart sums by a worker, merged by the driver.

It runs after the analysis (the grid needs the run's step span, rank count and wall-time
quartiles), on the analysis's engine, one task per file; each task returns a few bins per rank
(analysis/chart_sums.py), never rows. Files the reader left untouched are read raw (only the
columns the charts use are paged in), the others through the reader, as for the quantile pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl
import pyarrow as pa

from analyzer.analysis.chart_sums import CHART_COLUMNS, ChartGrid, ChartSums, RankChart, rank_chart
from analyzer.errors import GpuAnalyzeError
from analyzer.scale import storage
from analyzer.scale.engine import LocalEngine, RayEngine
from analyzer.scale.tasks import by_step
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.columns import Column, raw_columns
from gpuanalyze.ingest.reader import load_trace


@dataclass(frozen=True, slots=True)
class ChartJob:
    arrow: str
    grid: ChartGrid
    fast: bool = False
    """The file's raw rows are its analysed rows' source (tasks.FileResult.fast)."""
    stamp: tuple[int, int] = (0, 0)


def _frame(job: ChartJob) -> pl.DataFrame:
    if job.fast:
        if storage.stat(job.arrow) != job.stamp:
            raise GpuAnalyzeError(f"{job.arrow}: the file changed during the analysis; run it again")
        arrays = {c: _arrow(c, col) for c, col in raw_columns(job.arrow, CHART_COLUMNS).items()}
        frame = pl.from_arrow(pa.table(arrays))  # a NaN duration null, as the reader makes it
        assert isinstance(frame, pl.DataFrame)
        return frame
    with storage.local_copy(job.arrow) as local:
        return load_trace(local).frame.select(CHART_COLUMNS)


def _arrow(name: str, col: Column) -> pa.Array:
    """One raw column as Arrow (unknown values null)."""
    if name == S.KERNEL_STATS:
        if col.valid is not None and not col.valid.any():
            return pa.nulls(len(col), pa.string())
        return pa.array(list(col.values), type=pa.string())
    return pa.array(col.values, mask=None if col.valid is None else ~col.valid)


def chart_file(job: ChartJob) -> list[RankChart]:
    """Every rank's chart sums of one .arrow file (the rows run_file reduced)."""
    parts = _frame(job).partition_by(S.RANK, as_dict=True)
    return [rank_chart(by_step(parts[key]), int(key[0]), job.grid) for key in sorted(parts)]


def chart_pass(engine: LocalEngine | RayEngine, jobs: Sequence[ChartJob], grid: ChartGrid) -> ChartSums:
    """The chart sums of a run's files, merged as they arrive."""
    sums = ChartSums(grid)
    for per_file in engine.map(chart_file, list(jobs)):
        for rank in per_file:
            sums.add(rank)
    return sums

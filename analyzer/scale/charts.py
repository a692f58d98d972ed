"""The report's chart pass: every rank file reduced to chart sums by a worker, merged by the driver.

It runs after the analysis (the grid needs the run's step span, rank count and wall-time
quartiles), on the analysis's engine, one task per file; each task returns a few bins per rank
(analysis/chart_sums.py), never rows. Files the reader left untouched are read raw (only the
columns the charts use, zero-copy), the others through the reader, as for the quantile pass.
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
from gpuanalyze.ingest.reader import load_trace

_DURATIONS = (S.WALL_MS, *S.PARTS, S.GPU_BUSY_MS)


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
        with pa.memory_map(job.arrow) as src:
            table = pa.ipc.open_stream(src).read_all().select(list(CHART_COLUMNS))
            frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame.with_columns(pl.col(c).fill_nan(None) for c in _DURATIONS)  # as the reader does
    with storage.local_copy(job.arrow) as local:
        return load_trace(local).frame.select(CHART_COLUMNS)


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

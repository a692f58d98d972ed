"""A gpuanalyze trace as Chrome trace events, laid out like a PyTorch profiler (Kineto) trace.

Opens in ui.perfetto.dev and chrome://tracing, loads in HTA, and imports back with
``gpuanalyze import``. One process per rank (pid = rank); thread 1 holds one
``ProfilerStep#<step>`` slice per step (args: the step number and its totals), threads 2-8 one
track per phase, with ``user_annotation`` slices named ``gpuanalyze:<phase>``
(``schema.EXPORT_PHASE_NAMES``) inside the step's slice; counters carry GPU busy % and peak
memory per step. The trace records how long each phase took, not when inside the step it ran,
so phases are laid out one after another in a fixed order (data wait, host->device copy,
forward, backward, sync, optimizer, other); their durations are exact. Timestamps are
microseconds after ``baseTimeNanoseconds`` (Unix ns), as Kineto writes them.

Events are formatted by polars, one rank (or 100,000 rows) at a time, so exporting a large
run needs memory for one chunk, not for every event.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import polars as pl

from analyzer.analysis.aggregate import number
from analyzer.render.words import PART_LABELS
from analyzer.version import __version__
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import Trace

#: Order of the phases inside a step's slice (durations are recorded, positions are not).
LAYOUT: tuple[str, ...] = (
    S.DATA_WAIT_MS,
    S.H2D_MS,
    S.FORWARD_MS,
    S.BACKWARD_MS,
    S.SYNC_MS,
    S.OPTIMIZER_MS,
    S.OTHER_MS,
)
STEP_TID = 1
PHASE_TID = {p: i for i, p in enumerate(LAYOUT, start=STEP_TID + 1)}
CHUNK_ROWS = 100_000
#: Smallest room left at a step's end, in us: a phase slice always starts inside its step.
_EPS_US = 0.001


def base_time_ns(trace: Trace) -> int:
    """Kineto's baseTimeNanoseconds: here the first step's start, rounded down to the second."""
    first = int(number(trace.frame.get_column(S.START_UNIX_NS).min()))
    return first - first % 1_000_000_000


def _header(trace: Trace, ranks: Sequence[int], base: int) -> str:
    run = trace.run
    meta = {
        # First, and with json's ": " separator: HTA finds the rank with the regex '"rank":\s+(\d+)'.
        "distributedInfo": {
            "backend": run.backend or "unknown",
            "rank": int(min(ranks)),
            "world_size": int(run.world_size or len(ranks)),
        },
        "schemaVersion": 1,
        "deviceProperties": (
            [{"id": 0, "name": run.gpu_name, "totalGlobalMem": run.gpu_memory_bytes or 0}] if run.gpu_name else []
        ),
        "baseTimeNanoseconds": base,
        "displayTimeUnit": "ms",
        "traceName": "gpuanalyze export",
        "gpuanalyze": {
            "version": __version__,
            "ranks": [int(r) for r in ranks],
            "phase_layout": "durations exact; phases laid out in order " + ", ".join(LAYOUT),
        },
    }
    body = json.dumps(meta, indent=None, ensure_ascii=True)
    return body[:-1] + ', "traceEvents": [\n'


def _metadata(rank: int) -> list[str]:
    events: list[dict[str, object]] = [
        {"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}},
        {"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}},
        {"name": "thread_name", "ph": "M", "pid": rank, "tid": STEP_TID, "args": {"name": "steps"}},
        {"name": "thread_sort_index", "ph": "M", "pid": rank, "tid": STEP_TID, "args": {"sort_index": STEP_TID}},
    ]
    for part, tid in PHASE_TID.items():
        events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": PART_LABELS[part]}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": rank, "tid": tid, "args": {"sort_index": tid}})
    return [json.dumps(e) for e in events]


def _num(expr: pl.Expr, digits: int = 3) -> pl.Expr:
    return expr.cast(pl.Float64).round(digits)


def _events(chunk: pl.DataFrame, base: int) -> pl.Series:
    """Every event of these rows as JSON text (one string per event)."""
    ts = _num((pl.col(S.START_UNIX_NS) - base) / 1e3).alias("ts")
    wall = pl.col(S.WALL_MS) * 1e3
    total = pl.sum_horizontal([pl.col(p).fill_null(0.0) for p in LAYOUT])
    factor = pl.when(total > pl.col(S.WALL_MS)).then(pl.col(S.WALL_MS) / total).otherwise(1.0)
    lf = chunk.lazy().with_columns(ts, factor.alias("factor"))
    exprs: list[pl.Expr] = [
        pl.format(
            '{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{}", "pid": {}, "tid": {}, "ts": {}, '
            '"dur": {}, "args": {{"step": {}, "wall_ms": {}, "gpu_busy_ms": {}, "batch_samples": {}}}}}',
            pl.col(S.STEP),
            pl.col(S.RANK),
            pl.lit(STEP_TID),
            pl.col("ts"),
            _num(wall),
            pl.col(S.STEP),
            _num(pl.col(S.WALL_MS), 6),
            pl.col(S.GPU_BUSY_MS).round(6).cast(pl.String).fill_null("null"),
            pl.col(S.BATCH_SAMPLES).cast(pl.String).fill_null("null"),
        )
    ]
    before = pl.lit(0.0)
    for part in LAYOUT:
        offset = pl.min_horizontal(before * pl.col("factor") * 1e3, (wall - _EPS_US).clip(lower_bound=0.0))
        exprs.append(
            pl.format(
                '{{"ph": "X", "cat": "user_annotation", "name": "{}", "pid": {}, "tid": {}, "ts": {}, "dur": {}, '
                '"args": {{"step": {}}}}}',
                pl.lit(S.EXPORT_PHASE_NAMES[part]),
                pl.col(S.RANK),
                pl.lit(PHASE_TID[part]),
                _num(pl.col("ts") + offset),
                _num(pl.col(part) * 1e3),
                pl.col(S.STEP),
            )
        )
        before = before + pl.col(part).fill_null(0.0)
    exprs.append(
        pl.format(
            '{{"ph": "C", "name": "GPU busy", "pid": {}, "tid": 0, "ts": {}, "args": {{"busy %": {}}}}}',
            pl.col(S.RANK),
            pl.col("ts"),
            _num(100 * pl.col(S.GPU_BUSY_MS) / pl.col(S.WALL_MS), 2),
        )
    )
    exprs.append(
        pl.format(
            '{{"ph": "C", "name": "Peak memory", "pid": {}, "tid": 0, "ts": {}, "args": {{"bytes": {}}}}}',
            pl.col(S.RANK),
            pl.col("ts"),
            pl.col(S.PEAK_MEM_BYTES),
        )
    )
    events = lf.select(pl.concat_list(exprs).alias("e")).explode("e").drop_nulls().collect()
    return events.get_column("e")


def chrome_trace_chunks(trace: Trace, ranks: Sequence[int] | None = None) -> Iterator[str]:
    """The export of ``ranks`` (default: all) as pieces of JSON text, in order."""
    frame = trace.frame
    present = frame.get_column(S.RANK).unique().sort().to_list()
    chosen = present if ranks is None else [r for r in present if r in set(ranks)]
    base = base_time_ns(trace)
    yield _header(trace, chosen or [0], base)
    first = True
    for rank in chosen:
        rows = frame.filter(pl.col(S.RANK) == rank)
        lines = _metadata(rank)
        yield ("" if first else ",\n") + ",\n".join(lines)
        first = False
        for start in range(0, rows.height, CHUNK_ROWS):
            events = _events(rows.slice(start, CHUNK_ROWS), base)
            if events.len():
                yield ",\n" + ",\n".join(events.to_list())
    yield "\n]}\n"


def write_chrome_trace(trace: Trace, fh: BinaryIO, *, ranks: Sequence[int] | None = None, compress: bool) -> None:
    """Write the export to ``fh`` (gzip-compressed when ``compress``; byte-identical for equal input)."""
    if compress:
        with gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=6, mtime=0) as gz:
            for piece in chrome_trace_chunks(trace, ranks):
                gz.write(piece.encode())
    else:
        for piece in chrome_trace_chunks(trace, ranks):
            fh.write(piece.encode())

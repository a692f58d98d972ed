"""One trace file's rows as numpy columns, per rank, without a polars frame: what the in-process
measurement of a single .arrow file and `compare`'s step series read (bounded memory on long runs:
a 1M-step file's frame and its normalisation held ~0.6 GiB, its columns hold ~0.1 GiB).

The column reader (ingest.columns.load_columns) gives a file's rows only when the reader would leave
them as they are; every other file (one to repair or sort, a Kineto or Nsight file) is loaded by the
reader, as before.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection
from pathlib import Path

import msgspec
import numpy as np
import pyarrow as pa

from analyzer.analysis.partial import Rows
from analyzer.analysis.road import trace_rows
from analyzer.errors import GpuAnalyzeError
from analyzer.measure import storage
from gpuanalyze.ingest.nsys.load import is_nsys_path
from gpuanalyze.ingest.sources import is_json_trace, load_any, rank_siblings
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.columns import Column, TraceColumns, load_columns
from gpuanalyze.ingest.trace.host_sample import HostSample, decode_host_sample
from gpuanalyze.ingest.trace.ipc_guard import IpcReader
from gpuanalyze.ingest.trace.reader import Trace


def rank_rows(cols: TraceColumns, names: Collection[str] = ()) -> dict[int, Rows]:
    """The columns of a file, split by rank (its rows are in (rank, step) order): views of the file's
    columns; with ``names``, copies of those columns only (the others are then freed with ``cols``)."""
    rank = cols.columns[S.RANK].values
    bounds = [0, *(np.flatnonzero(np.diff(rank)) + 1).tolist(), rank.size]
    if not names:
        return {
            int(rank[a]): {c: col.rows(slice(a, b)) for c, col in cols.columns.items()}
            for a, b in itertools.pairwise(bounds)
        }
    kept = {c: _copied(col) for c, col in cols.columns.items() if c in names}
    return {int(rank[a]): {c: col.rows(slice(a, b)) for c, col in kept.items()} for a, b in itertools.pairwise(bounds)}


def _copied(col: Column) -> Column:
    return Column(col.values.copy(), None if col.valid is None else col.valid.copy())


def plain_arrow(path: Path) -> bool:
    """A local file the column reader may read (not a Kineto or Nsight file: those are imported)."""
    return not is_json_trace(path) and not is_nsys_path(path)


def file_columns(path: Path) -> TraceColumns | None:
    """The columns of a local .arrow trace the reader would leave as it is; None otherwise."""
    return load_columns(path) if plain_arrow(path) else None


def run_files(path: Path) -> list[Path]:
    """The files a .arrow path names: a run's rank files (``trace.rank<N>.arrow``, the reader brings in
    the siblings), else the file itself."""
    if path.suffix == ".arrow" and (siblings := rank_siblings(path)) and (not path.exists() or path in siblings):
        return list(siblings)
    return [path]


def arrow_input(path: Path) -> bool:
    """A .arrow trace file, or a run's rank files: what the column reader may read."""
    return path.suffix == ".arrow" and all(f.is_file() for f in run_files(path))


def rows_of(trace: Trace, names: Collection[str]) -> dict[int, Rows]:
    """A loaded trace's rows per rank, ``names``' columns only."""
    return {r: {c: col for c, col in rows.items() if c in names} for r, rows in trace_rows(trace).items()}


def trace_rank_rows(path: Path, names: Collection[str]) -> tuple[dict[int, Rows], dict[str, str]]:
    """The rows per rank (``names``' columns) and the user tags of what `compare` is given: a file, or
    a run's rank files (``trace.rank<N>.arrow``), through the column reader when it reads every one;
    else (a directory, a file to repair, a Kineto or Nsight file) the reader's trace in memory."""
    read = _columns_of(run_files(path), names) if arrow_input(path) else None
    if read is not None:
        return read
    trace = load_any(path)
    return rows_of(trace, names), trace.tags


def _columns_of(files: list[Path], names: Collection[str]) -> tuple[dict[int, Rows], dict[str, str]] | None:
    """The rows per rank and the first file's tags when the column reader reads every file (and no
    rank is in two of them); None otherwise."""
    per_rank: dict[int, Rows] = {}
    tags: dict[str, str] | None = None
    for f in files:
        cols = file_columns(f)
        if cols is None:
            return None
        rows = rank_rows(cols, names)
        if per_rank.keys() & rows.keys():
            return None  # the reader says what is wrong (a rank in two files: another run)
        per_rank.update(rows)
        tags = cols.tags if tags is None else tags
    return (dict(sorted(per_rank.items())), tags) if tags is not None else None


def file_samples(path: str | None) -> tuple[HostSample, ...]:
    """The ``system`` readings of one local trace file, read column-wise through the reader's guard
    (each Arrow message checked before it is decoded); none when unreadable."""
    if path is None or storage.is_url(path):
        return ()
    texts: list[str] = []
    try:
        with open(path, "rb") as fh:
            reader = IpcReader(Path(path), fh)
            if S.SYSTEM not in reader.schema.names:
                return ()
            if reader.schema.field(S.SYSTEM).type not in (pa.string(), pa.large_string()):
                return ()  # a list or struct where text is expected: the reader notes it as unknown
            for item in reader.batches():
                if item is None:  # cut short: the readings before the cut
                    break
                texts += [t for t in item[0].column(S.SYSTEM).to_pylist() if t is not None]
        return tuple(sorted((decode_host_sample(t) for t in texts), key=lambda h: h.unix_ns))
    except (OSError, ValueError, TypeError, pa.ArrowException, msgspec.MsgspecError, GpuAnalyzeError):
        return ()  # the reader reports bad files; here only facts

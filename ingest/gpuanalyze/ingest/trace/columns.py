"""A trace's columns as numpy arrays, for the files the reader would return as they are.

load_trace conforms, checks, repairs and sorts every file into a polars frame: about 40 ms per
100,000-row file, most of a many-rank analysis. Most files need none of it: their columns have the
format's types and every row is valid and in (rank, step) order. ``load_columns`` reads such a file
memory-mapped, through the same guard (ipc_guard) and the same batch validation as load_trace, checks
every row in one numpy pass against the same rules, and returns the columns the step metrics read:
columns nobody reads (and values of all-null columns) are never paged in. Each record batch is copied
into arrays preallocated for the rows the stream's headers declare and then dropped, so a compressed
file's decoded batches are never all held (a 1M-step zstd file: 0.13 GiB). Any other file gives None,
and the caller reads it with load_trace (which says what it repaired, or why it refuses the file).

When it gives columns, they are load_trace's rows exactly (a NaN duration unknown, as there), with the
same run information, end marker and notes.
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np
import polars as pl
import pyarrow as pa

from analyzer.errors import TraceError
from gpuanalyze.ingest.trace import reader as R
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.host_sample import decode_host_sample
from gpuanalyze.ingest.trace.ipc_guard import DEFAULT_LIMITS, ROW_COST, IpcReader
from gpuanalyze.ingest.trace.read_ahead import drop_pages, map_file, read_ahead
from gpuanalyze.ingest.trace.row_rules import DURATIONS, RULES, passes_numpy
from gpuanalyze.ingest.trace.trace_info import TraceInfo, info_fields

#: The numeric columns load_columns returns (every one load_trace checks, and lead_ms), with their numpy types.
NUMERIC: dict[str, type[np.generic]] = {
    S.STEP: np.int64,
    S.RANK: np.int32,
    S.START_UNIX_NS: np.int64,
    S.WALL_MS: np.float64,
    **dict.fromkeys(S.PARTS, np.float64),
    S.GPU_BUSY_MS: np.float64,
    S.BATCH_SAMPLES: np.int64,
    S.PEAK_MEM_BYTES: np.int64,
    S.MEM_START_BYTES: np.int64,
    S.MEM_RESERVED_BYTES: np.int64,
    S.DATA_CPU_MS: np.float64,
    S.LEAD_MS: np.float64,
}


@dataclass(frozen=True, slots=True)
class Column:
    """One column's values and which of them are known (``valid`` None: all of them)."""

    values: np.ndarray
    valid: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.values.size)

    def known(self) -> np.ndarray:
        """The known values, in row order."""
        return self.values if self.valid is None else self.values[self.valid]

    def count(self) -> int:
        return len(self) if self.valid is None else int(np.count_nonzero(self.valid))

    def filled(self, fill: float) -> np.ndarray:
        """The values as float64, unknown ones as ``fill``."""
        v = self.values.astype(np.float64, copy=False)
        return v if self.valid is None else np.where(self.valid, v, fill)

    def rows(self, at: slice | np.ndarray) -> Column:
        """The rows ``at`` (a slice is a view, a mask or index array a copy)."""
        return Column(self.values[at], None if self.valid is None else self.valid[at])


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceColumns(TraceInfo):
    """A trace load_trace would return unchanged, as numpy columns (``Trace`` without the frame)."""

    rows: int
    columns: dict[str, Column]
    """NUMERIC's columns, and KERNEL_STATS as an object array of str (None where null)."""
    absent: frozenset[str] = frozenset()
    """Columns of later minor versions the file does not have (unknown, without a note)."""


#: The columns whose values load_columns reads (read_ahead asks the disk for these).
READ = (*NUMERIC, S.KERNEL_STATS, S.SYSTEM)


def load_columns(path: str | Path) -> TraceColumns | None:
    """The columns of a trace the reader would leave as it is; None for every other file (read it
    with load_trace: it repairs, sorts, or says why it cannot read it). The file is read by page
    faults without read-around: call ``read_ahead(path, READ)`` first (or have a thread do it) when
    it may not be in the page cache."""
    path = Path(path)
    try:
        if not path.is_file() or path.stat().st_size == 0:
            return None
        mm = map_file(path)
        try:
            sink = _Sink(_declared_rows(path, mm), pages=mm)
            stream = R.read_stream(path, mm, keep=sink)
            return _columns(path, stream, sink)
        finally:
            with contextlib.suppress(BufferError):  # a view still alive (a traceback): unmapped with it
                mm.close()
    except (TraceError, pa.ArrowException, OSError, ValueError, TypeError, KeyError, IndexError):
        return None
    except (msgspec.MsgspecError, RecursionError):
        return None


def _exact(schema: pa.Schema) -> bool:
    """The format's columns with its types exactly: nothing to cast, nothing absent to note."""
    names = schema.names
    if len(set(names)) != len(names):
        return False
    return all(schema.field(f.name).type == f.type if f.name in names else f.name in S.ADDED_IN_MINOR for f in S.FIELDS)


def _declared_rows(path: Path, mm: mmap.mmap) -> int:
    """The rows the file's record batches declare (headers only), refused beyond what the reader's
    limits let its bytes decode to (the guard checks each batch again as it is read)."""
    n = IpcReader.mapped(path, mm).rows_ahead()
    if n * ROW_COST > DEFAULT_LIMITS.allowed(len(mm)):
        raise ValueError("more rows declared than the file may decode to")
    return n


class _Sink:
    """Copies each record batch's columns into the file's arrays as the reader reads it (read_stream's
    ``keep``), so a compressed file's decoded batches are never all held: the arrays, preallocated
    for the rows the headers declare, are all that grows."""

    def __init__(self, n: int, names: Collection[str] = READ, *, pages: mmap.mmap | None = None) -> None:
        self.n = n
        self.names = names
        self.pages = pages
        """The file's mapping: the pages each batch was read from are dropped once it is copied."""
        """The columns copied (READ's: what load_columns checks and returns)."""
        self.at = 0
        self.fits = True
        """Every batch had the format's exact schema and fitted the declared rows (else: None, load_trace)."""
        self.index: dict[str, int] | None = None
        self.values: dict[str, np.ndarray] = {}
        self.valid: dict[str, np.ndarray] = {}
        self.nulls: dict[str, int] = {}
        self.texts: dict[str, np.ndarray] = {}

    def _start(self, schema: pa.Schema) -> None:
        self.index = {name: i for i, name in enumerate(schema.names)}
        self.fits = self.names != READ or _exact(schema)
        kept = [c for c in NUMERIC if c in self.index and c in self.names]
        arena = _Arena(self.n, [NUMERIC[c] for c in kept])
        self.values = {c: arena.take(NUMERIC[c]) for c in kept}
        self.nulls = dict.fromkeys(self.values, 0)
        texts = [c for c in (S.KERNEL_STATS, S.SYSTEM) if c in self.index and c in self.names]
        self.texts = {c: np.full(self.n, None, dtype=object) for c in texts}
        self.nulls.update(dict.fromkeys(self.texts, 0))

    def __call__(self, schema: pa.Schema, batch: pa.RecordBatch) -> None:
        if self.index is None:
            self._start(schema)
        assert self.index is not None
        k = batch.num_rows
        if not self.fits or self.at + k > self.n:
            self.fits = False
            return
        at, index = self.at, self.index
        for c, out in self.values.items():
            arr = batch.column(index[c])
            if arr.null_count < k:
                out[at : at + k] = _values(arr, out.dtype.type)
            self._validity(c, arr)
        for c, texts in self.texts.items():
            arr = batch.column(index[c])
            if arr.null_count < k:
                texts[at : at + k] = arr.to_pylist()
            self._validity(c, arr)
        self.at += k
        if self.pages is not None:
            drop_pages(self.pages)

    def _validity(self, c: str, arr: pa.Array) -> None:
        """Which of one batch's values are known, held once any value of the column is null."""
        if arr.null_count:
            if c not in self.valid:
                self.valid[c] = np.ones(self.n, dtype=bool)
            self.valid[c][self.at : self.at + len(arr)] = _validity(arr)
            self.nulls[c] += arr.null_count

    def numeric(self, c: str, dtype: type[np.generic], m: int) -> Column:
        """Column ``c`` of the ``m`` rows read: all-null as unknown zeros, no validity when all known."""
        if c not in self.values or self.nulls[c] == m:
            return _unknown(m, dtype)
        values = self.values[c][:m]
        return Column(values) if self.nulls[c] == 0 else Column(values, self.valid[c][:m])

    def text(self, c: str, m: int) -> Column | None:
        """Text column ``c`` of the ``m`` rows read, an object array of str (None when every value is null)."""
        if c not in self.texts or self.nulls[c] == m:
            return None
        valid = self.valid[c][:m] if c in self.valid else np.ones(m, dtype=bool)
        return Column(self.texts[c][:m], valid)


def _columns(path: Path, stream: R.Stream, sink: _Sink) -> TraceColumns | None:
    n = stream.rows
    if n == 0 or not _exact(stream.schema) or not sink.fits or sink.at != n:
        return None
    index = {name: i for i, name in enumerate(stream.schema.names)}
    cols = {c: sink.numeric(c, t, n) for c, t in NUMERIC.items()}
    cols = {c: _nan_unknown(col) if c in DURATIONS else col for c, col in cols.items()}
    if not (_valid_rows(cols) and _in_order(cols[S.RANK].values, cols[S.STEP].values)):
        return None
    kernel = sink.text(S.KERNEL_STATS, n) if S.KERNEL_STATS in index else None
    system = sink.text(S.SYSTEM, n) if S.SYSTEM in index else None
    for texts, decode in ((kernel, S.decode_kernel_stats), (system, decode_host_sample)):
        for text in texts.known() if texts is not None else ():
            decode(text)  # raises on a malformed value: load_trace names it
    cols[S.KERNEL_STATS] = kernel or Column(np.full(n, None, dtype=object), np.zeros(n, dtype=bool))
    absent = frozenset(f.name for f in S.FIELDS if f.name not in index)
    meta = info_fields(R.stream_meta(path, stream, []))
    return TraceColumns(rows=n, columns=cols, absent=absent, **meta)


class _Arena:
    """One allocation for every column of a file: a few large pages (numpy asks for huge pages from
    4 MiB on) instead of a page fault per 4 KiB of every column."""

    def __init__(self, n: int, dtypes: list[type[np.generic]]) -> None:
        self.n = n
        self.buf = np.empty(sum(n * np.dtype(t).itemsize for t in dtypes) + 8 * len(dtypes), dtype=np.uint8)
        self.at = 0

    def take(self, dtype: type[np.generic]) -> np.ndarray:
        size = self.n * np.dtype(dtype).itemsize
        start = -(-self.at // 8) * 8  # aligned for every dtype here
        self.at = start + size
        return self.buf[start : start + size].view(dtype)


def _unknown(n: int, dtype: type[np.generic]) -> Column:
    return Column(np.zeros(n, dtype=dtype), np.zeros(n, dtype=bool))


def _values(c: pa.Array, dtype: type[np.generic]) -> np.ndarray:
    """The values buffer of one array (whatever it holds at null positions)."""
    if len(c) == 0:
        return np.empty(0, dtype)
    if c.null_count == 0:
        out: np.ndarray = c.to_numpy(zero_copy_only=True)
        return out
    buf = c.buffers()[1]
    assert buf is not None
    width = np.dtype(dtype).itemsize
    return np.frombuffer(buf, dtype=dtype, count=len(c), offset=c.offset * width)


def _validity(c: pa.Array) -> np.ndarray:
    if c.null_count == 0:
        return np.ones(len(c), dtype=bool)
    if c.null_count == len(c):
        return np.zeros(len(c), dtype=bool)
    out: np.ndarray = c.is_valid().to_numpy(zero_copy_only=False)
    return out


def _nan_unknown(col: Column) -> Column:
    """A NaN duration is unknown (the reader turns it into null)."""
    if col.valid is not None and not col.valid.any():
        return col
    nan = np.isnan(col.values)
    if not nan.any():
        return col
    return Column(col.values, ~nan if col.valid is None else col.valid & ~nan)


def _valid_rows(cols: dict[str, Column]) -> bool:
    """Every row passes the row rules (row_rules.RULES, as the reader checks them): nothing to drop, clamp or
    make unknown."""
    wall = cols[S.WALL_MS].values
    return all(passes_numpy(r, cols[r.column].values, wall, cols[r.column].valid) for r in RULES)


def _in_order(rank: np.ndarray, step: np.ndarray) -> bool:
    """Rows strictly increasing in (rank, step): nothing duplicated, nothing to sort."""
    if rank.size < 2:
        return True
    dr = np.diff(rank.astype(np.int64))
    return bool(((dr > 0) | ((dr == 0) & (np.diff(step) > 0))).all())


def frame_columns(frame: pl.DataFrame, names: Collection[str] = ()) -> dict[str, Column]:
    """NUMERIC's columns (those of them in ``names`` when given) and KERNEL_STATS of a reader's frame
    (the in-memory path's rows, in the form load_columns gives them; the reader's frame holds no NaN
    duration)."""
    out: dict[str, Column] = {}
    for c, dtype in NUMERIC.items():
        if names and c not in names:
            continue
        s = frame.get_column(c)
        nulls = s.null_count()
        values = (
            s.fill_null(0).to_numpy().astype(dtype, copy=False) if nulls else s.to_numpy().astype(dtype, copy=False)
        )
        out[c] = Column(values, s.is_not_null().to_numpy() if nulls else None)
    ks = frame.get_column(S.KERNEL_STATS)
    values = np.full(frame.height, None, dtype=object)
    if ks.null_count() < frame.height:
        values[:] = ks.to_list()
    out[S.KERNEL_STATS] = Column(values, ks.is_not_null().to_numpy())
    return out


def raw_columns(path: str | Path, names: Collection[str]) -> dict[str, Column]:
    """Columns of a file load_columns accepted (and unchanged since: the caller compares its size and
    modification time), read again without checking it again: only ``names`` are paged in and
    decoded, one record batch at a time into their arrays."""
    read_ahead(path, names)
    mm = map_file(Path(path))
    try:
        return _raw(Path(path), mm, names)
    finally:
        with contextlib.suppress(BufferError):
            mm.close()


def _raw(path: Path, mm: mmap.mmap, names: Collection[str]) -> dict[str, Column]:
    schema = pa.ipc.open_stream(pa.py_buffer(mm)).schema
    fields = sorted({i for i in (schema.get_field_index(c) for c in names) if i >= 0})
    # only these columns are decoded (a zstd file's other columns are never inflated)
    reader = pa.ipc.open_stream(pa.py_buffer(mm), options=pa.ipc.IpcReadOptions(included_fields=fields))
    sink = _Sink(IpcReader.mapped(path, mm).rows_ahead(), names, pages=mm)
    for batch in reader:
        if batch.num_rows:
            sink(batch.schema, batch)
    if not sink.fits:  # more rows than its headers declared when load_columns read it
        raise TraceError(f"{path}: the file changed during the analysis; run it again")
    n = sink.at
    out = {}
    for c in names:
        if c == S.KERNEL_STATS:
            out[c] = sink.text(c, n) or Column(np.full(n, None, dtype=object), np.zeros(n, dtype=bool))
        else:
            col = sink.numeric(c, NUMERIC[c], n)
            out[c] = _nan_unknown(col) if c in DURATIONS else col
    return out

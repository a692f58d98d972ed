"""Load a gpuanalyze trace into a polars frame, tolerating crashed runs, rejecting non-traces."""

from __future__ import annotations

import codecs
import mmap
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import msgspec
import polars as pl
import pyarrow as pa

from analyzer.errors import TraceError
from gpuanalyze.ingest.trace import runinfo
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.byte_source import require_regular
from gpuanalyze.ingest.trace.host_sample import decode_host_sample
from gpuanalyze.ingest.trace.ipc_guard import IpcReader
from gpuanalyze.ingest.trace.row_rules import normalise_frame
from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo
from gpuanalyze.ingest.trace.trace_info import TraceInfo, info_fields
from gpuanalyze.ingest.trace.writer import DISK_FULL, is_being_written

_T = TypeVar("_T")
_R = TypeVar("_R", str, bytes)

_GZIP_MAGIC = b"\x1f\x8b"

#: Notes for a trace without an end marker: its writer is alive (holds the file's lock) or is gone.
LIVE_NOTE = "trace is still being written (the run is in progress); analysing the steps recorded so far"
DISK_NOTE = (
    "trace is incomplete: the disk filled (no space is left on its file system) and the run could not "
    "close it; analysing the steps it recorded"
)
#: Free bytes below which a trace without an end marker is taken to have been cut by a full disk.
DISK_FULL_BYTES = 1 << 20
ENDED_NOTE = (
    "trace is incomplete: the run ended without closing it (crash, kill or OOM); analysing the steps it recorded"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Trace(TraceInfo):
    """A loaded trace: the step rows and what the file says about its run."""

    frame: pl.DataFrame


def load_trace(path: str | Path) -> Trace:
    """Read a trace file; raises TraceError with a one-line reason when it cannot."""
    path = Path(path)
    _check_file(path)
    try:
        return _load(path)
    except (pa.ArrowException, pl.exceptions.PolarsError, ValueError, TypeError, KeyError, IndexError) as exc:
        raise TraceError(
            f"{path}: corrupt trace ({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})"
        ) from exc


@dataclass(frozen=True, slots=True)
class Stream:
    """What a trace file holds before its rows are conformed and checked (load_trace and
    columns.load_columns read it the same way)."""

    meta: dict[bytes, bytes]
    schema: pa.Schema
    version: str
    batches: list[pa.RecordBatch]
    end: EndInfo | None
    truncated: bool
    live: bool
    """A writer held the file when reading began (it has no end marker because the run goes on)."""
    run: RunInfo
    tags: dict[str, str]
    meta_notes: tuple[str, ...]
    """The metadata fields (run information, tags, end marker) dropped for their type or range."""
    handed: int = 0
    """Rows of the batches handed to ``read_stream``'s ``keep`` as they were read (not in ``batches``)."""

    @property
    def rows(self) -> int:
        return self.handed + sum(b.num_rows for b in self.batches)


Keep = Callable[[pa.Schema, pa.RecordBatch], None]
"""Takes each validated record batch as it is read (with the stream's schema), instead of the list."""


def read_stream(path: Path, mapped: mmap.mmap | None = None, keep: Keep | None = None) -> Stream:
    """The schema, metadata and validated record batches of a trace file; raises TraceError for a
    non-trace. ``mapped``: the file, memory-mapped (read_ahead.map_file): the batches are then views
    of it. ``keep``: hand it each batch as it is read, and hold none (``Stream.batches`` is empty):
    a compressed file's decoded batches are then never all in memory at once."""
    live = is_being_written(path)  # before reading: a writer that closes meanwhile wrote its end marker
    if mapped is not None:
        return _stream(path, lambda: IpcReader.mapped(path, mapped), live, keep)
    with open(path, "rb") as fh:
        return _stream(path, lambda: IpcReader(path, fh), live, keep)


def _stream(path: Path, open_reader: Callable[[], IpcReader], live: bool, keep: Keep | None = None) -> Stream:
    try:
        reader = open_reader()
    except TraceError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TraceError(f"{path}: not an Arrow IPC stream, so not a gpuanalyze trace{_hint(path)}") from exc
    meta = reader.schema.metadata or {}
    version = _check_format(path, meta)
    _check_columns(path, reader.schema)
    notes: list[str] = []
    run = _meta(path, meta, S.META_RUN, runinfo.read_run, RunInfo(), notes)
    tags: dict[str, str] = _meta(path, meta, S.META_TAGS, runinfo.read_tags, dict[str, str](), notes)
    stored: tuple[str, ...] = _meta(path, meta, S.META_NOTES, runinfo.read_notes, tuple[str, ...](), notes)
    notes[:0] = stored  # an import's own notes, first
    handed = [0]

    def hand(batch: pa.RecordBatch) -> None:
        assert keep is not None
        keep(reader.schema, batch)
        handed[0] += batch.num_rows

    batches, end, truncated = _read_batches(path, reader, notes, None if keep is None else hand)
    return Stream(meta, reader.schema, version, batches, end, truncated, live, run, tags, tuple(notes), handed[0])


def stream_notes(path: Path, stream: Stream, more: list[str]) -> tuple[str, ...]:
    """The notes of a loaded trace: a cut-off batch, ``more`` (casts, repairs), how it ended."""
    notes: list[str] = []
    if stream.truncated:
        notes.append(
            f"the file ends inside a record batch (cut off while being written); kept the first {stream.rows} rows"
        )
    notes.extend(stream.meta_notes)
    notes.extend(more)
    if stream.end is None:
        notes.insert(0, LIVE_NOTE if stream.live else DISK_NOTE if _disk_is_full(path) else ENDED_NOTE)
    elif stream.end.status == DISK_FULL:
        notes.insert(0, "trace is incomplete: the disk filled while it was written; analysing the steps before that")
    return tuple(notes)


def stream_meta(path: Path, stream: Stream, more: list[str]) -> TraceInfo:
    """What the stream says about its run, with the reader's notes and ``more`` (both readers' metadata)."""
    return TraceInfo(
        path=path,
        run=stream.run,
        tags=stream.tags,
        version=stream.version,
        complete=stream.end is not None,
        end=stream.end,
        notes=stream_notes(path, stream, more),
    )


def _load(path: Path) -> Trace:
    stream = read_stream(path)
    batches, arrow_schema = stream.batches, stream.schema
    try:
        table = pa.Table.from_batches(batches, schema=arrow_schema) if batches else arrow_schema.empty_table()
        table, cast_notes = _conform(path, table)
        frame, repair_notes = normalise_frame(frame_of(table))
    except (pa.ArrowException, pl.exceptions.PolarsError, ValueError, TypeError) as exc:
        raise TraceError(f"{path}: corrupt trace data ({str(exc).splitlines()[0][:120]})") from exc
    except BaseException as exc:  # polars/pyo3 panics derive from BaseException
        if type(exc).__name__ != "PanicException":
            raise
        raise TraceError(f"{path}: corrupt trace data (the reader could not decode it)") from exc
    _check_kernel_stats(path, frame)
    return Trace(frame=frame, **info_fields(stream_meta(path, stream, cast_notes + repair_notes)))


def _disk_is_full(path: Path) -> bool:
    try:
        st = os.statvfs(path.parent)
    except (OSError, AttributeError):
        return False
    return st.f_bavail * st.f_frsize < DISK_FULL_BYTES


def _check_file(path: Path) -> None:
    require_regular(path)  # a FIFO or /dev/zero is not "empty"
    if path.stat().st_size == 0:
        raise TraceError(f"{path}: file is empty, so it holds no trace")


def _hint(path: Path) -> str:
    """What the file is instead, from its first bytes (torch.save writes a zip holding ``<name>/data.pkl``, or
    in its legacy format a pickle: protocol opcode 0x80 then the protocol number)."""
    with open(path, "rb") as fh:
        raw = fh.read(256)
    head = raw.lstrip()
    what = "give a .arrow trace, a PyTorch profiler .json(.gz) or an Nsight Systems .sqlite export"
    if (raw.startswith(b"PK\x03\x04") and b"data.pkl" in raw) or (raw[:1] == b"\x80" and 2 <= raw[1] <= 5):
        return " (it is a PyTorch checkpoint, torch.save's zip or pickle: record a trace with analyzer.profile)"
    if head.startswith(_GZIP_MAGIC) or re.match(rb"[{\[]\s*[\[{\"\d\-\]}tfn]", head):
        return " (it looks like JSON; for a PyTorch profiler trace use `gpuanalyze import`)"
    try:
        codecs.getincrementaldecoder("utf-8")().decode(raw)  # a character cut at byte 256 is still text
    except UnicodeDecodeError:
        return ""
    if b"\x00" in raw:
        return ""
    kind = "TOML or INI" if re.match(rb"\[[\w.\- \"]+\]\s*\n", head) else "text"
    return f" (it is a {kind} file: {what})"


def _check_format(path: Path, meta: dict[bytes, bytes]) -> str:
    if meta.get(S.META_FORMAT) != S.FORMAT_NAME.encode():
        raise TraceError(f"{path}: an Arrow stream but not a gpuanalyze trace (no '{S.FORMAT_NAME}' metadata)")
    version = meta.get(S.META_VERSION, b"").decode(errors="replace")
    try:
        major = int(version.split(".")[0])
    except ValueError as exc:
        raise TraceError(f"{path}: unreadable trace format version {version!r}") from exc
    if major > S.FORMAT_MAJOR:
        raise TraceError(
            f"{path}: trace format {version} is newer than this gpuanalyze reads ({S.FORMAT_VERSION}); "
            "upgrade gpuanalyze"
        )
    return version


def _check_columns(path: Path, arrow_schema: pa.Schema) -> None:
    missing = [c for c in S.REQUIRED if c not in arrow_schema.names]
    if missing:
        raise TraceError(f"{path}: not a valid trace, missing column(s) {', '.join(missing)}")


def _read_batches(
    path: Path, reader: IpcReader, notes: list[str], hand: Callable[[pa.RecordBatch], None] | None = None
) -> tuple[list[pa.RecordBatch], EndInfo | None, bool]:
    """The record batches (each checked against the limits before it is decoded: ipc_guard.py), the
    end marker, and whether the stream was cut inside a batch; with ``hand``, each batch goes to it
    as it is read and none is returned."""
    batches: list[pa.RecordBatch] = []
    end: EndInfo | None = None
    items = reader.batches()
    while True:
        try:
            item = next(items)
            if item is None:
                return batches, None, True
            batch, custom = item
            batch.validate(full=True)  # corrupt offsets or buffers must not reach polars (it can crash)
        except StopIteration:
            return batches, end, False
        except (pa.ArrowException, OSError, ValueError):
            return batches, None, True
        if custom is not None and S.END_KEY in custom:
            end, dropped = _decode(path, "end marker", custom[S.END_KEY], runinfo.read_end)
            notes.extend(dropped)
        if batch.num_rows and hand is not None:
            hand(batch)
        elif batch.num_rows:
            batches.append(batch)


def _conform(path: Path, table: pa.Table) -> tuple[pa.Table, list[str]]:
    """Exactly the format's columns and types: extra columns dropped, optional ones that cannot be
    read as their type become null (with a note), required ones that cannot are an error."""
    columns, notes = [], []
    for f in S.FIELDS:
        if f.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, f.type))
            continue
        col = table.column(f.name)
        if pa.types.is_null(col.type):  # declared without values: never cast (it would materialise)
            if f.name in S.REQUIRED:
                raise TraceError(f"{path}: column {f.name} is declared null-typed (it holds no values)")
            notes.append(f"column {f.name} is declared null-typed; treated as unknown")
            columns.append(pa.nulls(table.num_rows, f.type))
            continue
        try:
            col = col if col.type == f.type else col.cast(f.type)
        except (pa.ArrowException, ValueError) as exc:
            if f.name in S.REQUIRED:
                raise TraceError(f"{path}: column {f.name} has type {col.type}, expected {f.type}") from exc
            notes.append(f"column {f.name} has an unexpected type ({col.type}); treated as unknown")
            col = pa.nulls(table.num_rows, f.type)
        columns.append(col)
    conformed = pa.Table.from_arrays(columns, schema=pa.schema(list(S.FIELDS)))
    missing = [
        f.name
        for f in S.FIELDS
        if f.name not in table.column_names and f.name not in S.REQUIRED and f.name not in S.ADDED_IN_MINOR
    ]
    return conformed, notes + [f"column {name} is absent; treated as unknown" for name in missing]


def _check_kernel_stats(path: Path, frame: pl.DataFrame) -> None:
    """Every kernel_stats value must decode as a KernelStats (the analysis then trusts them)."""
    for text in frame.get_column(S.KERNEL_STATS).drop_nulls():
        _decode(path, "kernel_stats", text, S.decode_kernel_stats)
    for text in frame.get_column(S.SYSTEM).drop_nulls():
        _decode(path, "system", text, decode_host_sample)


def _meta(
    path: Path,
    meta: dict[bytes, bytes],
    key: bytes,
    read: Callable[[bytes], tuple[_T, list[str]]],
    default: _T,
    notes: list[str],
) -> _T:
    """A metadata value whose ill-typed fields are dropped (their notes added to ``notes``)."""
    raw = meta.get(key)
    if raw is None:
        return default
    value, dropped = _decode(path, key.decode(), raw, read)
    notes.extend(dropped)
    return value


def _decode(path: Path, what: str, raw: _R, decode: Callable[[_R], _T]) -> _T:
    """Typed metadata, or a TraceError that names the bad field (msgspec's message has its path)."""
    try:
        return decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise TraceError(f"{path}: corrupt {what} metadata ({str(exc)[:160]})") from exc
    except RecursionError as exc:
        raise TraceError(f"{path}: corrupt {what} metadata (nested too deeply)") from exc


def frame_of(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame

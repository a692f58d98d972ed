"""Load a gpuanalyze trace into a polars frame, tolerating crashed runs, rejecting non-traces."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import polars as pl
import pyarrow as pa

from analyzer.errors import TraceError
from gpuanalyze.ingest import runinfo
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.host_sample import decode_host_sample
from gpuanalyze.ingest.runinfo import MAX_WORLD_SIZE, EndInfo, RunInfo
from gpuanalyze.ingest.writer import is_being_written

_T = TypeVar("_T")
_R = TypeVar("_R", str, bytes)

_GZIP_MAGIC = b"\x1f\x8b"

#: Notes for a trace without an end marker: its writer is alive (holds the file's lock) or is gone.
LIVE_NOTE = "trace is still being written (the run is in progress); analysing the steps recorded so far"
ENDED_NOTE = (
    "trace is incomplete: the run ended without closing it (crash, kill or OOM); analysing the steps it recorded"
)


@dataclass(frozen=True, slots=True)
class Trace:
    """A loaded trace: the step rows and what the file says about its run."""

    path: Path
    frame: pl.DataFrame
    run: RunInfo
    tags: dict[str, str]
    version: str
    complete: bool
    """True when the writer closed the file cleanly (the end marker is present)."""
    end: EndInfo | None
    """The end marker's content: status, exception (if the loop raised), step count."""
    notes: tuple[str, ...]
    """What the reader skipped or repaired, in words for the report."""


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


def _load(path: Path) -> Trace:
    live = is_being_written(path)  # before reading: a writer that closes meanwhile wrote its end marker
    try:
        reader = pa.ipc.open_stream(pa.OSFile(str(path), "rb"))
        arrow_schema = reader.schema
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TraceError(f"{path}: not an Arrow IPC stream, so not a gpuanalyze trace{_hint(path)}") from exc
    meta = arrow_schema.metadata or {}
    version = _check_format(path, meta)
    _check_columns(path, arrow_schema)
    batches, end, truncated = _read_batches(path, reader)
    notes: list[str] = []
    if truncated:
        notes.append(
            "the file ends inside a record batch (cut off while being written); "
            f"kept the first {sum(b.num_rows for b in batches)} rows"
        )
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
    notes.extend(cast_notes)
    notes.extend(repair_notes)
    if end is None:
        notes.insert(0, LIVE_NOTE if live else ENDED_NOTE)
    return Trace(
        path=path,
        frame=frame,
        run=_meta(path, meta, S.META_RUN, runinfo.decode_run, RunInfo()),
        tags=_meta(path, meta, S.META_TAGS, runinfo.decode_tags, {}),
        version=version,
        complete=end is not None,
        end=end,
        notes=tuple(notes),
    )


def _check_file(path: Path) -> None:
    if not path.exists():
        raise TraceError(f"{path}: no such file")
    if path.is_dir():
        raise TraceError(f"{path}: is a directory; pass one trace file")
    if path.stat().st_size == 0:
        raise TraceError(f"{path}: file is empty, so it holds no trace")


def _hint(path: Path) -> str:
    with open(path, "rb") as fh:
        head = fh.read(64).lstrip()
    if head.startswith(_GZIP_MAGIC) or head.startswith(b"{") or head.startswith(b"["):
        return " (it looks like JSON; for a PyTorch profiler trace use `gpuanalyze import`)"
    return ""


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


def _read_batches(path: Path, reader: Any) -> tuple[list[pa.RecordBatch], EndInfo | None, bool]:
    batches: list[pa.RecordBatch] = []
    end: EndInfo | None = None
    while True:
        try:
            batch, custom = reader.read_next_batch_with_custom_metadata()
            batch.validate(full=True)  # corrupt offsets or buffers must not reach polars (it can crash)
        except StopIteration:
            return batches, end, False
        except (pa.ArrowException, OSError, ValueError):
            return batches, None, True
        if custom is not None and S.END_KEY in custom:
            end = _decode(path, "end marker", custom[S.END_KEY], runinfo.decode_end)
        if batch.num_rows:
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


def _meta(path: Path, meta: dict[bytes, bytes], key: bytes, decode: Callable[[bytes], _T], default: _T) -> _T:
    raw = meta.get(key)
    return default if raw is None else _decode(path, key.decode(), raw, decode)


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


#: Longest step a trace may record (11.6 days): longer ones are corrupt or hostile, not slow.
MAX_STEP_MS = 1e9
#: Largest plausible batch (samples) and peak memory (bytes): beyond them a value is treated as unknown.
MAX_BATCH_SAMPLES = 1 << 40
MAX_MEMORY_BYTES = 1 << 50
#: Largest rank a trace may carry (runinfo.MAX_WORLD_SIZE).
MAX_RANK = MAX_WORLD_SIZE - 1


def normalise_frame(frame: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Make every row physically possible or drop it, deduplicate, sort; say what was done.

    Rows whose step time is missing, non-positive, non-finite or implausibly long, or whose step
    or rank is missing or out of range, are dropped. A phase or GPU-busy time longer than its step
    is clamped to the step (timers can overlap a little; more is corruption), and counts out of
    range become unknown. The analysis can then rely on 0 <= part <= wall for every row.
    """
    notes: list[str] = []
    durations = [S.WALL_MS, *S.PARTS, S.GPU_BUSY_MS, S.DATA_CPU_MS]
    frame = frame.with_columns(pl.when(pl.col(c).is_nan()).then(None).otherwise(pl.col(c)).alias(c) for c in durations)
    bad = (
        pl.col(S.WALL_MS).is_null()
        | (pl.col(S.WALL_MS) <= 0)
        | (pl.col(S.WALL_MS) > MAX_STEP_MS)
        | pl.col(S.STEP).is_null()
        | (pl.col(S.STEP) < 0)
        | pl.col(S.RANK).is_null()
        | (pl.col(S.RANK) < 0)
        | (pl.col(S.RANK) > MAX_RANK)
        | pl.any_horizontal([((pl.col(c) < 0) | (pl.col(c) == math.inf)).fill_null(False) for c in durations])
    ).fill_null(True)
    n_bad = frame.filter(bad).height
    if n_bad:
        notes.append(
            f"skipped {n_bad} row(s) with a missing, negative, non-finite or implausible step, rank or duration"
        )
        frame = frame.filter(~bad)
    over = pl.any_horizontal([(pl.col(c) > pl.col(S.WALL_MS) * 1.001).fill_null(False) for c in durations[1:]])
    n_over = frame.filter(over).height
    if n_over:
        notes.append(f"{n_over} row(s) had a phase or GPU-busy time longer than the step itself; clamped to the step")
        frame = frame.with_columns(
            pl.when(pl.col(c) > pl.col(S.WALL_MS)).then(pl.col(S.WALL_MS)).otherwise(pl.col(c)).alias(c)
            for c in durations[1:]
        )
    for col, limit, what in (
        (S.BATCH_SAMPLES, MAX_BATCH_SAMPLES, "batch sizes"),
        (S.PEAK_MEM_BYTES, MAX_MEMORY_BYTES, "peak memory values"),
    ):
        out = (pl.col(col) < 0) | (pl.col(col) > limit)
        n_out = frame.filter(out.fill_null(False)).height
        if n_out:
            notes.append(f"{n_out} implausible {what} treated as unknown")
            frame = frame.with_columns(pl.when(out).then(None).otherwise(pl.col(col)).alias(col))
    n_dup = frame.height - frame.unique([S.RANK, S.STEP]).height
    if n_dup:
        notes.append(f"skipped {n_dup} duplicated (rank, step) row(s), keeping the first of each")
        frame = frame.unique([S.RANK, S.STEP], keep="first", maintain_order=True)
    if not frame.select((pl.col(S.STEP).diff().over(S.RANK).fill_null(1) > 0).all()).item():
        notes.append("steps were out of order; sorted them")
    return frame.sort([S.RANK, S.STEP]), notes

"""Open an Nsight Systems SQLite export read-only and stream rows out of it.

The file is opened through a read-only, immutable SQLite URI (``file:...?mode=ro&immutable=1``): SQLite
never writes to it, never takes a lock on it and never creates a journal beside it. An export with a write-ahead log
or rollback journal beside it is read as SQLite would read it, with the log, from a private copy (nothing is created
beside the user's file). Before SQLite sees
the file, it must be a regular file (never a FIFO or a link to ``/dev/zero``) starting with the SQLite
header. Tables and their columns are read from ``sqlite_master`` and ``PRAGMA table_info``: any table
may be missing and every release adds columns (the NVIDIA Nsight Systems user guide, "SQLite schema
reference"), so nothing is assumed. Rows come out in batches of ``BATCH_ROWS`` (``fetchmany``), so
memory is bounded whatever the export's size; strings are cut to ``MAX_NAME_CHARS`` in SQL, so a
hostile ``StringIds`` value never reaches Python whole, and SQLite's own heap is capped at
``SQLITE_HEAP_LIMIT`` while the export is open (SQLite reads a value whole before cutting it): a larger
value is one TraceError, not a process that runs out of memory. The cap is process-wide, so it is set and
put back through ``sqlite3_hard_heap_limit64`` (the pragma can only lower it); where that function cannot
be reached there is no cap.
"""

from __future__ import annotations

import ctypes
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from analyzer.errors import TraceError
from gpuanalyze.ingest.timeline.kernel_names import MAX_NAME_CHARS
from gpuanalyze.ingest.trace.byte_source import require_regular

SQLITE_HEADER = b"SQLite format 3\x00"
BATCH_ROWS = 8192
#: Tables an Nsight Systems export holds whatever was traced; one of them tells an export from another database.
EXPORT_MARKERS = ("StringIds", "META_DATA_EXPORT", "EXPORT_META_DATA", "TARGET_INFO_SESSION_START_TIME")
#: Largest SQLite page cache (KiB, as a negative cache_size) the importer allows itself.
_CACHE_KIB = 16 * 1024
#: SQLite's heap while an export is open (process-wide; the previous limit is put back on close).
SQLITE_HEAP_LIMIT = 256 << 20


def is_sqlite_file(path: Path) -> bool:
    """Whether ``path`` is a regular file that starts with the SQLite header (a FIFO or device is never read)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return False
        with open(path, "rb") as fh:
            return fh.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def _heap_limit(limit: int) -> int | None:
    """Set SQLite's process-wide hard heap limit (0: none, -1: only ask); the previous one, or None when
    ``sqlite3_hard_heap_limit64`` cannot be reached."""
    try:
        import _sqlite3

        fn = ctypes.CDLL(_sqlite3.__file__).sqlite3_hard_heap_limit64
    except (ImportError, OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_int64, [ctypes.c_int64]
    return int(fn(limit))


def _uri(path: Path) -> str:
    return path.absolute().as_uri() + "?mode=ro&immutable=1"


def _private_copy(path: Path) -> tempfile.TemporaryDirectory[str] | None:
    """The export and its non-empty write-ahead log or rollback journal copied to a private directory (SQLite reads
    such a file only with its log: an immutable open ignores it, a read-only one creates ``-shm`` beside it)."""
    logs = [s for s in ("-wal", "-journal") if Path(f"{path}{s}").is_file() and Path(f"{path}{s}").stat().st_size]
    if not logs:
        return None
    tmp = tempfile.TemporaryDirectory(prefix="gpuanalyze-nsys-")
    try:
        for suffix in ("", *logs):
            shutil.copyfile(f"{path}{suffix}", Path(tmp.name) / f"export.sqlite{suffix}")
    except OSError as exc:
        tmp.cleanup()
        raise TraceError(f"{path}: cannot copy it and its {logs[0]} file to read them ({exc.strerror or exc})") from exc
    return tmp


class NsysDb:
    """One export, open read-only: its tables and columns, and row streams (``close`` when done)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        require_regular(path)
        if not is_sqlite_file(path):
            raise TraceError(f"{path}: not an SQLite file (an Nsight Systems export is: nsys export --type sqlite)")
        self._copy = _private_copy(path)
        self._heap = _heap_limit(SQLITE_HEAP_LIMIT)
        uri = _uri(path) if self._copy is None else (Path(self._copy.name) / "export.sqlite").as_uri()
        try:
            self.conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
            self.conn.execute("PRAGMA query_only = 1")
            self.conn.execute(f"PRAGMA cache_size = {-_CACHE_KIB}")
            self.conn.execute("PRAGMA temp_store = FILE")  # sorts for DISTINCT spill to a temporary file, not RAM
            self.tables = {name for (name,) in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except (sqlite3.Error, MemoryError) as exc:
            if hasattr(self, "conn"):
                self.close()
            elif self._heap is not None:
                _heap_limit(self._heap)
            if self._copy is not None:
                self._copy.cleanup()
            raise TraceError(f"{path}: not a readable SQLite database ({_reason(exc)})") from exc
        self._columns: dict[str, frozenset[str]] = {}
        if not any(t in self.tables for t in EXPORT_MARKERS):
            self.close()
            raise TraceError(
                f"{path}: an SQLite database but not an Nsight Systems export (no StringIds or export metadata table)"
            )

    def close(self) -> None:
        self.conn.close()
        if self._heap is not None:
            _heap_limit(self._heap)
            self._heap = None
        if self._copy is not None:
            self._copy.cleanup()
            self._copy = None

    def __enter__(self) -> NsysDb:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def columns(self, table: str) -> frozenset[str]:
        """The columns of ``table`` (empty when the export has no such table)."""
        if table not in self.tables:
            return frozenset()
        got = self._columns.get(table)
        if got is None:
            rows = self._run(f"PRAGMA table_info({quote(table)})", ())
            got = self._columns[table] = frozenset(str(r[1]) for r in rows)
        return got

    def has(self, table: str, *columns: str) -> bool:
        cols = self.columns(table)
        return bool(cols) and all(c in cols for c in columns)

    def _run(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        try:
            return self.conn.execute(sql, params).fetchall()
        except (sqlite3.Error, MemoryError) as exc:
            raise TraceError(f"{self.path}: cannot read the export ({_reason(exc)})") from exc

    def small(self, sql: str, params: tuple[Any, ...] = (), limit: int = 4096) -> list[Any]:
        """The rows of a query expected to be small (metadata, distinct ids), at most ``limit`` of them."""
        try:
            return self.conn.execute(sql, params).fetchmany(limit)
        except (sqlite3.Error, MemoryError) as exc:
            raise TraceError(f"{self.path}: cannot read the export ({_reason(exc)})") from exc

    def batches(self, sql: str, params: tuple[Any, ...] = ()) -> Iterator[list[Any]]:
        """The rows of a query, BATCH_ROWS at a time (a corrupt page mid-way is one TraceError)."""
        try:
            cur = self.conn.execute(sql, params)
            while rows := cur.fetchmany(BATCH_ROWS):
                yield rows
        except (sqlite3.Error, MemoryError) as exc:
            raise TraceError(f"{self.path}: cannot read the export ({_reason(exc)})") from exc

    def string_sql(self, expr: str, *, ids: bool = True) -> str:
        """SQL for the text of a StringIds id (or a text value) in ``expr``, cut to MAX_NAME_CHARS; ``ids=False``:
        a text column, never looked up (an NVTX range named ``12`` is not string 12)."""
        direct = f"CASE WHEN typeof({expr}) = 'text' THEN substr({expr}, 1, {MAX_NAME_CHARS}) END"
        if not ids or not self.has("StringIds", "id", "value"):
            return direct
        cut = f"substr(value, 1, {MAX_NAME_CHARS})"
        lookup = f"(SELECT {cut} FROM StringIds WHERE id = {expr} AND typeof({expr}) = 'integer')"
        return f"COALESCE({lookup}, {direct})"

    def id_or_text(self, expr: str) -> str:
        """SQL for a name column as stored (a StringIds id, or text cut to MAX_NAME_CHARS; rows.strings)."""
        return f"CASE WHEN typeof({expr}) = 'text' THEN substr({expr}, 1, {MAX_NAME_CHARS}) ELSE {expr} END"


def quote(name: str) -> str:
    """An SQL identifier, quoted (names come from the export's own catalogue)."""
    return '"' + name.replace('"', '""') + '"'


def _reason(exc: Exception) -> str:
    if isinstance(exc, MemoryError):
        return f"a value needs more than SQLite's {SQLITE_HEAP_LIMIT >> 20} MiB while the export is read"
    return str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__

"""Crash-safe streaming trace writer.

Rows are buffered in memory and written as Arrow record batches by a background thread at
least every ``flush_interval_s`` and whenever ``flush_every_steps`` rows are pending, so a
process killed with SIGKILL loses at most the last interval. The writer never raises into
the caller after ``open``: the first failure is stored in ``error`` and writing stops. Rows may be
queued as items that ``to_row`` turns into rows on the writer's thread (``add_later``), so that the
training thread only appends; a failure there is ``row_error``.

While it writes, the writer holds an exclusive ``flock`` on the file. The kernel drops the lock
when the file is closed or the process dies (SIGKILL and OOM included), so a reader that finds
no end marker tells a run still in progress (the lock is held) from one that ended without
closing its trace (``is_being_written``). No pid is compared, so pid reuse cannot fool it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import pyarrow as pa

from analyzer.errors import GpuAnalyzeError
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no liveness check, unclosed traces read as ended
    fcntl = None  # type: ignore[assignment]


@dataclass(kw_only=True, slots=True)
class WriterOptions:
    """How often buffered rows reach the disk."""

    flush_interval_s: float = 1.0
    """Longest time a finished step waits in memory before it is written."""
    flush_every_steps: int = 1000
    """Write as soon as this many rows are pending, even within the interval."""
    fsync: bool = True
    """Also ask the OS to put the data on the disk (survives power loss, not only kills)."""

    def __post_init__(self) -> None:
        if not 0 < self.flush_interval_s <= 60:
            raise GpuAnalyzeError("flush_interval_s must be in (0, 60] seconds")
        if self.flush_every_steps < 1:
            raise GpuAnalyzeError("flush_every_steps must be at least 1")


@dataclass(slots=True)
class TraceWriter:
    """Appends step rows to an Arrow IPC stream file that is readable at every moment."""

    path: Path
    run: RunInfo
    tags: dict[str, str] = field(default_factory=dict)
    options: WriterOptions = field(default_factory=WriterOptions)
    error: BaseException | None = None
    """The first failure to write (writing then stopped)."""
    row_error: BaseException | None = None
    """The first failure of ``to_row``: no row from that one on is written, but the file stays
    whole, so that the end marker can still say how the run ended."""
    to_row: Callable[[Any], dict[str, Any]] | None = None
    """Turns what ``add_later`` queued into a row, on the writer's thread."""
    _file: BinaryIO | None = None
    _stream: Any = None
    _schema: pa.Schema | None = None
    _pending: deque[Any] = field(default_factory=deque)
    """Rows (dicts) and ``add_later`` items. Appended by the training thread and popped under the I/O
    lock, both single deque operations (atomic), so ``add`` takes no lock."""
    _io_lock: threading.Lock = field(default_factory=threading.Lock)
    _wake: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    rows_written: int = 0
    _good_offset: int = 0
    """File offset just past the last batch written whole (where a disk-full close cuts the file)."""

    def open(self) -> None:
        """Create the file (never an existing one) and write the schema; raises OSError."""
        self._schema = S.arrow_schema(self.run, self.tags)
        self._file = open(self.path, "xb")  # noqa: SIM115 - closed in close()
        _lock(self._file.fileno())
        self._stream = pa.ipc.new_stream(self._file, self._schema)
        self._stream.write_batch(pa.RecordBatch.from_pylist([], schema=self._schema))
        self._file.flush()
        self._good_offset = self._file.tell()
        self._thread = threading.Thread(target=self._loop, name="gpuanalyze-writer", daemon=True)
        self._thread.start()

    def add(self, row: dict[str, Any]) -> None:
        """Queue one finished step; cheap, never blocks on I/O, never raises."""
        self.add_later(row)

    def add_later(self, item: Any) -> None:
        """Queue one finished step as ``item``, turned into its row by ``to_row`` on the writer's
        thread (a dict is a row already): the training thread only appends. Never raises."""
        if self.error is not None:
            return
        pending = self._pending
        pending.append(item)
        if len(pending) >= self.options.flush_every_steps and not self._wake.is_set():
            self._wake.set()  # once woken, the thread takes every pending row

    def close(self, end: EndInfo) -> None:
        """Write what is pending and the end marker; the trace is then complete.

        When the disk filled (ENOSPC, EDQUOT), the file is cut back to the last whole batch, which
        frees the space the failed write took, and an end marker with status ``disk_full`` is
        written there: the reader then says the disk filled, not that the run was killed."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.flush()
        if _disk_full(self.error) and self._file is not None and self._schema is not None:
            self._close_after_disk_full(end)
            return
        if self.error is None and self._stream is not None:
            try:
                with self._io_lock:
                    S.write_end_marker(self._stream, self._schema, end)
                    self._stream.close()
            except Exception as exc:  # noqa: BLE001 - kept in self.error for the caller
                self._fail(exc)
        if self._file is not None:
            try:
                self._file.close()
            except OSError as exc:
                self._fail(exc)

    def _close_after_disk_full(self, end: EndInfo) -> None:
        assert self._file is not None and self._schema is not None
        marker = _end_marker_bytes(self._schema, msgspec.structs.replace(end, status=DISK_FULL, error=str(self.error)))
        try:
            with self._io_lock:
                fd = self._file.fileno()
                os.ftruncate(fd, self._good_offset)
                os.pwrite(fd, marker, self._good_offset)
                if self.options.fsync:
                    os.fsync(fd)
        except OSError:
            pass  # no room even for the marker: the reader tells a full disk by the free space left
        self._release_lock()
        with contextlib.suppress(OSError, ValueError, pa.ArrowException):
            self._file.close()

    def flush(self) -> None:
        """Write pending rows now (called by the background thread and by close).

        The rows are taken under the I/O lock, so when ``flush`` returns every row queued before
        the call is on disk, in order, even if the background thread was writing at that moment;
        ``add`` takes no lock and never waits for the disk. A row that ``to_row`` fails to build
        fails the writer like a failed write."""
        with self._io_lock:
            pending = self._pending
            items = [pending.popleft() for _ in range(len(pending))]
            if not items or self.error is not None or self.row_error is not None:
                return
            rows = self._rows(items)
            if not rows:
                return
            try:
                assert self._file is not None and self._stream is not None  # open() ran before add()
                batch = pa.RecordBatch.from_pylist(rows, schema=self._schema)
                self._stream.write_batch(batch)
                self._file.flush()
                if self.options.fsync:
                    os.fsync(self._file.fileno())
                self.rows_written += len(rows)
                self._good_offset = self._file.tell()
            except Exception as exc:  # noqa: BLE001 - kept in self.error for the caller
                self._fail(exc)

    def _rows(self, items: list[Any]) -> list[dict[str, Any]]:
        """The rows of the queued items, up to the first one ``to_row`` fails on (kept in ``row_error``)."""
        to_row = self.to_row
        if to_row is None:
            return items
        rows = []
        try:
            for item in items:
                rows.append(item if type(item) is dict else to_row(item))
        except Exception as exc:  # noqa: BLE001 - kept in self.row_error for the caller
            self.row_error = exc
        return rows

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.options.flush_interval_s)
            self._wake.clear()
            self.flush()

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc

    def _release_lock(self) -> None:
        """Let readers see the file as no longer written (tests simulating a dead writer)."""
        if self._file is not None and fcntl is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)


#: End status of a trace whose disk filled while it was written.
DISK_FULL = "disk_full"


def _disk_full(exc: BaseException | None) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _end_marker_bytes(schema: pa.Schema, end: EndInfo) -> bytes:
    """The end-marker batch and end-of-stream, as bytes to append to a stream whose writer failed."""
    head, full = pa.BufferOutputStream(), pa.BufferOutputStream()
    with pa.ipc.new_stream(head, schema):
        pass
    with pa.ipc.new_stream(full, schema) as writer:
        S.write_end_marker(writer, schema, end)
    schema_only = head.getvalue().to_pybytes()[:-8]  # less its end-of-stream
    return full.getvalue().to_pybytes()[len(schema_only) :]


def _lock(fd: int) -> None:
    """Hold the writer's lock; a reader probing at this very moment only delays it a little."""
    if fcntl is None:
        return
    for _ in range(50):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(0.001)
        except OSError:  # a file system without flock: no liveness information
            return


def is_being_written(path: Path) -> bool:
    """True while a live writer holds ``path`` open (see the module docstring); never raises."""
    if fcntl is None:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)

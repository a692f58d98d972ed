"""The trace file of one profile, from its creation at the first step boundary to its end marker.

Owns the writer's lifecycle: the rank's file name (never an existing file unless ``overwrite``),
the rows held back while a kernel window runs (they get their kernel statistics when it ends),
the system sampler's readings stamped on the rows, and the close with the run's ``EndInfo``.
Writer errors are kept, never raised: the profiler reads ``error`` and switches itself off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analyzer.record.memory_reader import Memory
from analyzer.record.notify import warn
from analyzer.record.paths import create_new, rank_path
from analyzer.record.steps import StepTimes, closed_row
from analyzer.record.system_sampler import SystemSampler
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo
from gpuanalyze.ingest.trace.schema import KernelStats
from gpuanalyze.ingest.trace.writer import TraceWriter, WriterOptions


class TraceOutput:
    """Rows in, a complete trace out."""

    def __init__(self, out: Path, *, tags: dict[str, str], writer_options: WriterOptions, overwrite: bool) -> None:
        self._out = out
        self._tags = tags
        self._writer_options = writer_options
        self._overwrite = overwrite
        self.path: Path | None = None
        """The file actually written (differs from ``out`` when that already existed)."""
        self.opened = False
        self.writer: TraceWriter | None = None
        self.sampler: SystemSampler | None = None
        self.rows = 0
        """Rows emitted (written or held)."""
        self._rank = 0
        self._held: dict[int, dict[str, Any]] = {}
        self._window_stats: dict[int, KernelStats] = {}

    @property
    def error(self) -> BaseException | None:
        """The writer's first failure to write or to build a row (writing then stopped)."""
        writer = self.writer
        return None if writer is None else writer.error or writer.row_error

    def flush(self) -> BaseException | None:
        """Build and write the queued rows now; the error of a row that could not be built, if any."""
        if self.writer is None:
            return None
        self.writer.flush()
        return self.writer.row_error

    def open(self, run: RunInfo, *, rank: int, world_size: int, sampler: SystemSampler | None) -> None:
        """Create the rank's trace file and start the sampler; raises OSError when it cannot."""
        self.opened = True
        self._rank = rank
        target = rank_path(self._out, rank, world_size)

        def create(path: Path) -> None:
            writer = TraceWriter(
                path=path, run=run, tags=dict(self._tags), options=self._writer_options, to_row=closed_row
            )
            writer.open()
            self.writer = writer

        self.path = create_new(target, create, overwrite=self._overwrite)
        if self.path != target:
            why = "is not a regular file (never replaced)" if self._overwrite else "exists and overwrite=False"
            warn(f"gpuanalyze: {target} {why}; writing {self.path} instead", stacklevel=5)
        if sampler is not None:
            self.sampler = sampler
            sampler.start()

    def emit(
        self, step: StepTimes, end_ns: int, device_ms: dict[str, float] | None, memory: Memory, *, hold: bool
    ) -> None:
        """A closed step's row: written now, or held until the kernel window it ran in ends."""
        self.rows += 1
        writer = self.writer
        if not hold and not self._window_stats and writer is not None:  # every step: _write's common case
            sampler = self.sampler  # the row itself is built on the writer's thread (closed_row)
            system = sampler.take() if sampler is not None else None
            writer.add_later((step, end_ns, self._rank, device_ms, memory, system))
            return
        row = closed_row((step, end_ns, self._rank, device_ms, memory, None))
        if hold:
            self._held[step.index] = row
        else:
            self._write(row)

    def window_ended(self, stats: dict[int, KernelStats]) -> None:
        """A kernel window's statistics arrived: the rows held for it are written with them."""
        self._window_stats.update(stats)
        self.release_held()

    def release_held(self) -> None:
        for index in sorted(self._held):
            self._write(self._held.pop(index))

    def _write(self, row: dict[str, Any]) -> None:
        stats = self._window_stats.pop(row[S.STEP], None)
        if stats is not None:
            row[S.KERNEL_STATS] = S.encode_kernel_stats(stats)
        sampler = self.sampler
        if sampler is not None:
            row[S.SYSTEM] = sampler.take()
        if self.writer is not None:
            self.writer.add(row)

    def close(self, end: EndInfo) -> BaseException | None:
        """Write the held rows (unless the writer failed), stop the sampler and write the end
        marker; returns the writer's error, if any."""
        if self.sampler is not None:
            self.sampler.stop()
        if self.writer is not None and self.writer.error is None:
            self.release_held()
        writer, self.writer = self.writer, None
        if writer is None:
            return None
        writer.close(end)
        return writer.error

    def forget(self, *, restart: bool) -> tuple[Any, ...]:
        """In a forked child: let go of the parent's file without closing it (returns what must
        stay alive so that nothing in the child ever writes to or closes the parent's trace);
        with ``restart`` the child may open a trace of its own."""
        kept = (self.writer, self.sampler)
        self.writer = None
        self.sampler = None
        if restart:
            self.opened = False
            self.path = None
            self.rows = 0
            self._held.clear()
            self._window_stats.clear()
        return kept

"""Memory per step, read at each step boundary on the training thread: (peak, at the step's start, peak reserved).

CUDA: one ``torch.cuda.memory_stats()`` (the caching allocator's counters, no device sync): allocated now (the next
step's start), the allocated and reserved peaks since ``reset_peak_memory_stats()``, called right after. CPU
(Linux): the resident set at each boundary (/proc/self/statm through a descriptor kept open) and the high-water
mark (``ru_maxrss``, never reset): a step that raised the mark peaked at it, another at the larger of its boundary
readings (docs/memory.md).
"""

from __future__ import annotations

import os
import resource
from typing import Any

Memory = tuple[int | None, int | None, int | None] | None
"""(peak, at the step's start, peak reserved) in bytes: the trace's memory columns (schema.MEMORY_COLUMNS)."""
STATM = "/proc/self/statm"


class MemoryReader:
    """The allocator's counters on a CUDA run (``use_cuda``), else the process's resident memory where Linux
    reports it (``open``); nothing elsewhere."""

    def __init__(self) -> None:
        self.cuda: Any = None
        self.fd: int | None = None
        self.pid = self.start = self.high = 0
        self.page = 1

    def open(self) -> None:
        try:
            self.fd, self.pid, self.page = os.open(STATM, os.O_RDONLY), os.getpid(), os.sysconf("SC_PAGE_SIZE")
            self.start, self.high = self._rss(), _high_water()
        except (OSError, ValueError, IndexError):
            self.close()

    def use_cuda(self, cuda: Any) -> None:
        self.close()
        self.cuda = cuda
        cuda.reset_peak_memory_stats()
        self.start = int(cuda.memory_allocated())

    def take(self) -> Memory:
        if self.cuda is not None:
            stats = self.cuda.memory_stats()
            self.cuda.reset_peak_memory_stats()
            start, self.start = self.start, int(stats.get("allocated_bytes.all.current", 0))
            return int(stats.get("allocated_bytes.all.peak", 0)), start, int(stats.get("reserved_bytes.all.peak", 0))
        if self.fd is None:
            return None
        rss, high = self._rss(), _high_water()
        peak = high if high > self.high else max(self.start, rss)
        start, self.start, self.high = self.start, rss, high
        return peak, start, None

    def _rss(self) -> int:
        assert self.fd is not None
        if os.getpid() != self.pid:  # a forked child that records its own steps reads its own statm
            os.close(self.fd)
            self.fd, self.pid = os.open(STATM, os.O_RDONLY), os.getpid()
        return int(os.pread(self.fd, 128, 0).split()[1]) * self.page

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _high_water() -> int:
    """ru_maxrss in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

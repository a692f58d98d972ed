"""Give what a pass freed back to the system before the next pass allocates on top of it.

glibc serves numpy's arrays of a few MiB from its heap once its mmap threshold has risen (it rises to the largest
block freed); what freed arrays leave there stays resident until the heap is trimmed, and the next pass's arrays do
not always fit those holes: a 1 GB export's conversion held ~60 MiB of them at its peak. Arrow's pool (mimalloc)
keeps what a dropped table held the same way (~60 MiB between the ranks of that export). Fixing glibc's mmap
threshold instead (mallopt) saved as much, but it is process-wide and lasting, and ``analyze`` may run in a user's
process: trimming changes nothing after it returns.
"""

from __future__ import annotations

import ctypes

import pyarrow as pa


def return_freed_memory() -> None:
    """Hand the memory Arrow's pool and glibc's heap hold free back (milliseconds; elsewhere than glibc, Arrow's
    only)."""
    pa.default_memory_pool().release_unused()
    try:  # the symbols this process already has loaded (find_library would run ldconfig)
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc (musl, macOS, Windows)
        return
    trim(0)


#: A conversion of at least this many device events gives freed memory back between its passes: a trim costs ~1 ms
#: and the pages it returned are touched again after it, so below this (arrays of a few MiB) it costs more than it
#: returns (+2% of a 62 MB Kineto trace's import with 8k device events).
BETWEEN_PASSES_EVENTS = 1 << 18


def between_passes(events: int) -> None:
    """``return_freed_memory`` between two passes of a conversion of ``events`` device events, when that many."""
    if events >= BETWEEN_PASSES_EVENTS:
        return_freed_memory()

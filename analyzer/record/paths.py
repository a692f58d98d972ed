"""Choosing the trace file name so that nothing the user already has is overwritten.

Choosing a name and creating the file are one step: each candidate is created with O_EXCL, so
two processes that start together with the same ``out`` never pick the same file, and each
knows the name it really got.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

#: Candidates tried before giving up (``trace-1.arrow`` ... ``trace-9999.arrow``).
MAX_CANDIDATES = 10_000


def rank_path(out: Path, rank: int, world_size: int) -> Path:
    """One file per rank in multi-rank runs: ``trace.arrow`` -> ``trace.rank1.arrow``."""
    if world_size <= 1:
        return out
    return out.with_name(f"{out.stem}.rank{rank}{out.suffix}")


def replaceable(path: Path) -> bool:
    """True when ``path`` is a regular file (not followed through a link) that ``overwrite`` may replace."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def create_new(path: Path, create: Callable[[Path], None], *, overwrite: bool) -> Path:
    """Call ``create(candidate)`` (which must create the file with O_EXCL and raise FileExistsError
    when it exists) on ``path`` and then on free variants of it; returns the path it created.

    With ``overwrite`` an existing *regular file* at ``path`` is removed first (only that: a link,
    directory, FIFO, socket or device node is never removed, so ``out="/dev/null"`` as root cannot
    delete ``/dev/null``; the next free name is used instead, as without ``overwrite``); if another
    process creates it again in between, the next free name is used too."""
    if overwrite and replaceable(path):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    n = 0
    while n < MAX_CANDIDATES:
        candidate = path if n == 0 else path.with_name(f"{path.stem}-{n}{path.suffix}")
        try:
            create(candidate)
            return candidate
        except FileExistsError:
            n += 1
    raise FileExistsError(f"{path} and {MAX_CANDIDATES - 1} numbered variants of it exist")

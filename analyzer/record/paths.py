"""Choosing the trace file name so that nothing the user already has is overwritten.

Choosing a name and creating the file are one step: each candidate is created with O_EXCL, so
two processes that start together with the same ``out`` never pick the same file, and each
knows the name it really got.
"""

from __future__ import annotations

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


def create_new(path: Path, create: Callable[[Path], None], *, overwrite: bool) -> Path:
    """Call ``create(candidate)`` (which must create the file with O_EXCL and raise FileExistsError
    when it exists) on ``path`` and then on free variants of it; returns the path it created.

    With ``overwrite`` an existing regular file (or link) at ``path`` is removed first; if another
    process creates it again in between, the next free name is used as without ``overwrite``."""
    if overwrite:
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                path.unlink()
        except FileNotFoundError:
            pass
    n = 0
    while n < MAX_CANDIDATES:
        candidate = path if n == 0 else path.with_name(f"{path.stem}-{n}{path.suffix}")
        try:
            create(candidate)
            return candidate
        except FileExistsError:
            n += 1
    raise FileExistsError(f"{path} and {MAX_CANDIDATES - 1} numbered variants of it exist")

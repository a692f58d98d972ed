"""Choosing the trace file name so that nothing the user already has is overwritten."""

from __future__ import annotations

from pathlib import Path


def rank_path(out: Path, rank: int, world_size: int) -> Path:
    """One file per rank in multi-rank runs: ``trace.arrow`` -> ``trace.rank1.arrow``."""
    if world_size <= 1:
        return out
    return out.with_name(f"{out.stem}.rank{rank}{out.suffix}")


def free_path(path: Path) -> Path:
    """``path`` if it does not exist, else the first ``<stem>-N<suffix>`` that does not."""
    if not path.exists():
        return path
    n = 1
    while True:
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
        if not candidate.exists():
            return candidate
        n += 1

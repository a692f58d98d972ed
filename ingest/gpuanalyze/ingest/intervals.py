"""Interval arithmetic on numpy arrays of (start, end)."""

from __future__ import annotations

import numpy as np


def merge(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as disjoint, sorted (start, end) arrays."""
    if start.size == 0:
        return start, end
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    seg_start = s[idx]
    seg_end = np.maximum.reduceat(run_end, idx)
    return seg_start, seg_end


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    s, e = merge(start, end)
    return float((e - s).sum())

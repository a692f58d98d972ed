"""Interval arithmetic on numpy arrays of (start, end)."""

from __future__ import annotations

import numpy as np


def merge(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as disjoint, sorted (start, end) arrays."""
    if start.size == 0:
        return start, end
    if bool((start[1:] >= start[:-1]).all()):  # already in order (a stable sort would not move it): no copies
        return merge_sorted(start, end)
    order = np.argsort(start, kind="stable")
    return merge_sorted(start[order], end[order])


def merge_sorted(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``merge`` of intervals already sorted by start (stably, as ``merge`` sorts them): no sort, no copies."""
    if s.size == 0:
        return s, e
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


def subtract(
    a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray, b_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The parts of the union of A outside the union of B, as disjoint sorted segments."""
    a_s, a_e = merge(a_start, a_end)
    if a_s.size == 0 or b_start.size == 0:
        return a_s, a_e
    b_s, b_e = merge(b_start, b_end)
    # boundaries of both sets, in order; a point is kept when it is inside A and outside B
    points = np.unique(np.concatenate([a_s, a_e, b_s, b_e]))
    lo, hi = points[:-1], points[1:]
    mid = (lo + hi) / 2
    in_a = _inside(a_s, a_e, mid)
    in_b = _inside(b_s, b_e, mid)
    keep = in_a & ~in_b
    return merge(lo[keep], hi[keep]) if keep.any() else (np.empty(0), np.empty(0))


def _inside(seg_s: np.ndarray, seg_e: np.ndarray, x: np.ndarray) -> np.ndarray:
    """x lies inside one of the disjoint sorted segments."""
    i = np.searchsorted(seg_s, x, side="right") - 1
    ok = i >= 0
    return ok & (x < seg_e[np.clip(i, 0, None)])


class Clipper:
    """Length of disjoint sorted segments inside a window [lo, hi), in O(log n) per window."""

    def __init__(self, seg_start: np.ndarray, seg_end: np.ndarray) -> None:
        self.s, self.e = seg_start, seg_end
        self.cum = np.concatenate([[0.0], np.cumsum(seg_end - seg_start)])

    def length(self, lo: float, hi: float) -> float:
        s, e = self.s, self.e
        if s.size == 0 or hi <= lo:
            return 0.0
        i = int(np.searchsorted(e, lo, side="right"))  # first segment ending after lo
        j = int(np.searchsorted(s, hi, side="left"))  # segments starting before hi
        if i >= j:
            return 0.0
        total = float(self.cum[j] - self.cum[i])
        total -= max(0.0, lo - float(s[i]))
        total -= max(0.0, float(e[j - 1]) - hi)
        return max(0.0, total)

    def lengths(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """``length`` of each window [lo[k], hi[k]) at once."""
        s, e = self.s, self.e
        if s.size == 0 or lo.size == 0:
            return np.zeros(lo.size)
        i = np.searchsorted(e, lo, side="right")
        j = np.searchsorted(s, hi, side="left")
        some = (j > i) & (hi > lo)
        first, last = np.minimum(i, s.size - 1), np.maximum(j - 1, 0)
        total = self.cum[j] - self.cum[i] - np.maximum(0.0, lo - s[first]) - np.maximum(0.0, e[last] - hi)
        return np.where(some, np.maximum(total, 0.0), 0.0)

"""Interval arithmetic on numpy arrays of (start, end): the one module of it (issue #38).

A set of intervals is a pair ``(start, end)``; "segments" are disjoint and sorted (what ``merge`` returns), and the
set operations (``intersect``, ``minus``, ``union``, ``outside``) take and return segments.
"""

from __future__ import annotations

import numpy as np

Seg = tuple[np.ndarray, np.ndarray]
EMPTY: Seg = (np.empty(0), np.empty(0))


def merge(start: np.ndarray, end: np.ndarray) -> Seg:
    """The union of intervals as disjoint, sorted (start, end) arrays."""
    if bool((start[1:] >= start[:-1]).all()):  # already in order (a stable sort would not move it): no copies
        return merge_sorted(start, end)
    pairs = np.empty(start.size, np.complex128)
    pairs.real, pairs.imag = start, end
    return _merge_pairs(pairs)


def _merge_pairs(pairs: np.ndarray) -> Seg:
    """``merge`` of intervals held as start + i*end, sorted in place: numpy orders complex numbers by their real part,
    then their imaginary part, so one sort orders the pairs by start with no index array and no gathered copies
    (16 bytes an interval where an argsort and its copies take 32); how ties in start are ordered changes nothing
    ``merge_sorted`` returns."""
    if not bool((pairs.real[1:] >= pairs.real[:-1]).all()):
        pairs.sort()
    return merge_sorted(pairs.real, pairs.imag)


def merge_sorted(s: np.ndarray, e: np.ndarray) -> Seg:
    """``merge`` of intervals already sorted by start: no sort, no copies."""
    if s.size == 0:
        return np.ascontiguousarray(s), np.ascontiguousarray(e)
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    del new
    seg_start = s[idx]
    seg_end = np.maximum.reduceat(run_end, idx)
    return seg_start, seg_end


def segments(start: np.ndarray, end: np.ndarray) -> Seg:
    """The segments of intervals, empty ones left out."""
    keep = end > start
    return merge(start, end) if keep.all() else merge(start[keep], end[keep])


def union(*sets: Seg) -> Seg:
    """The union of sets of segments: their kept intervals written once, as pairs (``_merge_pairs``), and merged."""
    if sum(1 for s in sets if s[0].size) <= 1:  # one set: no copy of it before its merge (a sorted one: none at all)
        return next((segments(*s) for s in sets if s[0].size), EMPTY)
    keep = [s[1] > s[0] for s in sets]
    pairs = np.empty(sum(int(k.sum()) for k in keep), np.complex128)
    at = 0
    for (start, end), k in zip(sets, keep, strict=True):
        n = int(k.sum())
        pairs.real[at : at + n], pairs.imag[at : at + n] = start[k], end[k]
        at += n
    return _merge_pairs(pairs)


def outermost(start: np.ndarray, end: np.ndarray, reach: bool = False) -> np.ndarray:
    """Which intervals (sorted by start, the longer of two starting together first) no earlier one contains; ``reach``:
    and those ending after every earlier one (the rest change neither which are outermost nor the first and last)."""
    out = np.ones(start.size, dtype=bool)
    if start.size > 1:
        before = np.maximum.accumulate(end)[:-1]
        out[1:] = (start[1:] >= before) | (reach & (end[1:] > before))
    return out


def outermost_by_thread(start: np.ndarray, end: np.ndarray, tid: np.ndarray, reach: bool = False) -> np.ndarray:
    """``outermost`` within each thread, of intervals sorted by thread, then as ``outermost`` wants them."""
    cut = np.flatnonzero(tid[1:] != tid[:-1]) + 1
    parts = [outermost(s, e, reach) for s, e in zip(np.split(start, cut), np.split(end, cut), strict=True)]
    return np.concatenate(parts) if start.size else np.ones(0, dtype=bool)


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    s, e = merge(start, end)
    return float((e - s).sum())


def pairs(a: Seg, b: Seg) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The non-empty overlaps of segments ``a`` and ``b``: (start, end, index of the ``b`` segment of each)."""
    return _overlaps(a, b, index=True)


def intersect(a: Seg, b: Seg) -> Seg:
    """The intersection of two sets of segments."""
    s, e, _ = _overlaps(a, b, index=False)
    return s, e


def _overlaps(a: Seg, b: Seg, *, index: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``pairs``, with the ``b`` indices only where asked for (``intersect`` has no use for them). Indices are int32
    where they fit, and each temporary goes once used: this runs on every gap of a capture at once."""
    none = (np.empty(0), np.empty(0), np.empty(0, np.int64))
    if a[0].size == 0 or b[0].size == 0:
        return none
    i = np.searchsorted(b[1], a[0], side="right")  # first b segment ending after each a starts
    n = np.searchsorted(b[0], a[1], side="left")  # b segments starting before each a ends, less i
    n -= i
    np.maximum(n, 0, out=n)
    total = int(n.sum())
    if total == 0:
        return none
    dtype = np.int32 if max(a[0].size, b[0].size, total) < 2**31 else np.int64
    first = np.cumsum(n)  # b's index of each pair: i of its a segment, then on
    first -= n
    first -= i
    del i
    bi = np.arange(total, dtype=dtype)
    np.subtract(bi, np.repeat(first.astype(dtype), n), out=bi)
    del first
    ai = np.repeat(np.arange(a[0].size, dtype=dtype), n)
    del n
    s, e = a[0][ai], a[1][ai]
    del ai
    np.maximum(s, b[0][bi], out=s)
    np.minimum(e, b[1][bi], out=e)
    keep = e > s
    if not index:
        bi = none[2]
    if bool(keep.all()):
        return s, e, bi
    return s[keep], e[keep], bi[keep] if index else bi


def minus(a: Seg, b: Seg) -> Seg:
    """The parts of segments ``a`` outside segments ``b``."""
    if a[0].size == 0 or b[0].size == 0:
        return a
    lo, hi = min(a[0][0], b[0][0]) - 1.0, max(a[1][-1], b[1][-1]) + 1.0
    comp = (np.concatenate([[lo], b[1]]), np.concatenate([b[0], [hi]]))
    keep = comp[1] > comp[0]
    return intersect(a, (comp[0][keep], comp[1][keep]))


def outside(lo: float, hi: float, b: Seg) -> Seg:
    """``minus(([lo], [hi]), b)`` without intersect's index arrays (one segment less every gap of a capture): the
    gaps of ``b`` clipped to [lo, hi), in order."""
    if b[0].size == 0:
        return (np.array([lo]), np.array([hi])) if hi > lo else EMPTY
    cs = np.concatenate([[min(lo, b[0][0]) - 1.0], b[1]])
    ce = np.concatenate([b[0], [max(hi, b[1][-1]) + 1.0]])
    keep = ce > cs
    s, e = np.maximum(cs[keep], lo), np.minimum(ce[keep], hi)
    del cs, ce, keep
    keep = e > s
    return s[keep], e[keep]


def subtract(a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray, b_end: np.ndarray) -> Seg:
    """The parts of the union of A outside the union of B, as segments."""
    return minus(merge(a_start, a_end), merge(b_start, b_end))


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

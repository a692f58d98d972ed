"""The user's line of code that held the GPU idle: the innermost user frame active at each idle instant.

The frames are the user's Python frames of ``torch.profiler.profile(with_stack=True)`` (``train.py(42): step``;
which frames are the user's: blocking_calls.py), or, without Python stacks, ``record_function`` ranges
(``user_annotation``, NVTX ranges of an Nsight Systems capture; the loop's own marks left out). Python calls nest on
a thread, and a thread's frames overlap other threads' (the autograd thread runs while the main thread sits in
``loss.backward()``): the frame at an instant is the one entered last among those active then, on any thread.
"""

from __future__ import annotations

import numpy as np

from gpuanalyze.ingest.timeline.blocking_calls import HostOps
from gpuanalyze.ingest.timeline.intervals import Clipper, pairs
from gpuanalyze.ingest.trace.schema import IDLE_OWNERS, OwnerFrame

#: Frames named per owner in a step's KernelStats.owner_frames (12 owners: within the schema's 64).
MAX_PER_OWNER = 3
CHUNK = 1 << 16  # events a sweep takes at once: ~1 MiB of temporaries, not 10 x 3.5 MB (221k frames: import_memory.py)


def innermost(frames: HostOps) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint sorted (start, end, name id) of the frame entered last among those active at each instant, on any
    thread: each thread's innermost frames (``_nested``), and where threads overlap, the one that began last."""
    per = [
        _nested(frames.start[m], frames.end[m], frames.name[m])
        for m in (frames.tid == t for t in np.unique(frames.tid))
    ]
    if len(per) == 1:
        return per[0][0], per[0][1], per[0][2]
    bounds = np.concatenate([x for p in per for x in p[:2]])
    bounds.sort()  # np.unique in place: no other copy of the bounds
    bounds = bounds[np.concatenate([[True], bounds[1:] != bounds[:-1]])]
    began, name = np.full(bounds.size, -np.inf), np.full(bounds.size, -1, np.int32)
    for a, b, n, first in (p for p in per if p[0].size):
        for lo in range(0, bounds.size, CHUNK):
            x, was = bounds[lo : lo + CHUNK], began[lo : lo + CHUNK]
            i = np.maximum(np.searchsorted(a, x, side="right") - 1, 0)
            newer = (x >= a[i]) & (x < b[i]) & (first[i] > was)
            was[newer], name[lo : lo + CHUNK][newer] = first[i[newer]], n[i[newer]]
    del per, began, a, b, n, first  # the threads' frames are in bounds and name now
    keep = name[:-1] >= 0
    return bounds[:-1][keep], bounds[1:][keep], name[:-1][keep]


def _nested(start: np.ndarray, end: np.ndarray, names: np.ndarray) -> tuple[np.ndarray, ...]:
    """(start, end, name id, the frame's own start) of a thread's innermost frame at each instant: Python calls nest,
    so in time order of the frames' starts and ends (ends first at equal times, outer frames open first and close
    last) the frame at each depth is the last one opened at that depth, while it has not ended."""
    m = start.size
    order = np.lexsort((-end, start))
    s, e, name = start[order], end[order], names[order]
    del start, end, names, order  # the caller's copies: each temporary goes once used
    idx, step = np.arange(2 * m, dtype=np.int32) % max(m, 1), np.repeat(np.array([1, -1], np.int8), m)
    t = np.concatenate([s, e])
    ev = np.lexsort((idx * step, step, t))
    t, frame, step = t[ev], idx[ev], step[ev]
    del ev, idx
    depth, opens = np.cumsum(step, dtype=np.int32), np.flatnonzero(step > 0)
    keys = depth[opens].astype(np.int64) * (2 * m + 1) + opens  # by depth, then position
    by_key = np.argsort(keys, kind="stable")
    keys, opens = keys[by_key], opens[by_key]
    at, ok = np.empty(2 * m, np.int32), np.empty(2 * m, bool)
    for lo in range(0, 2 * m, CHUNK):  # the frame last opened at each event's depth
        d = depth[lo : lo + CHUNK]
        j = np.searchsorted(keys, d.astype(np.int64) * (2 * m + 1) + np.arange(lo, lo + d.size), side="right") - 1
        at[lo : lo + d.size] = frame[opens[np.maximum(j, 0)]]
        ok[lo : lo + d.size] = (j >= 0) & (keys[np.maximum(j, 0)] // (2 * m + 1) == d) & (d > 0)
    del depth, keys, opens, frame, by_key
    ok &= e[at] > t
    ok[-1:] = False
    ok[:-1] &= t[1:] > t[:-1]
    at = at[ok]
    return t[ok], np.minimum(t[1:][ok[:-1]], e[at]), name[at], s[at]


class OwnerFrames:
    """Each owner's idle time cut by the frame active then, ready to be summed per window in O(log n + pieces)."""

    def __init__(self, frames: HostOps, by_owner: dict[str, Clipper]) -> None:
        self.names = frames.names
        s, e, name = innermost(frames)
        parts = (pairs((c.s, c.e), (s, e)) for c in (by_owner[o] for o in IDLE_OWNERS))
        cols = [list(col) for col in zip(*parts, strict=True)]  # each owner's pieces: starts, ends, frame pieces
        del s, e
        cols[2] = [name[at] + np.int64(i * len(self.names)) for i, at in enumerate(cols[2])]  # owner and name: one key
        order = np.argsort(np.concatenate(cols[0]), kind="stable")  # disjoint owners: disjoint pieces
        self.start, self.end, self.key = (np.concatenate(cols.pop(0))[order] for _ in range(3))  # a column at a time

    def window(self, lo: float, hi: float) -> tuple[OwnerFrame, ...]:
        """The MAX_PER_OWNER frames that held each owner's idle time in [lo, hi) the longest, most first."""
        i, j = (int(x) for x in (np.searchsorted(self.end, lo, "right"), np.searchsorted(self.start, hi)))
        if i >= j:
            return ()
        length = np.minimum(self.end[i:j], hi) - np.maximum(self.start[i:j], lo)
        keys, inverse = np.unique(self.key[i:j], return_inverse=True)
        total = np.bincount(inverse.reshape(-1), weights=length)
        out: list[OwnerFrame] = []
        taken: dict[int, int] = {}
        for g in np.argsort(-total, kind="stable").tolist():
            owner, name = divmod(int(keys[g]), len(self.names))
            if total[g] > 0 and taken.setdefault(owner, 0) < MAX_PER_OWNER:
                taken[owner] += 1
                ms = float(total[g]) / 1e3
                out.append(OwnerFrame(owner=IDLE_OWNERS[owner], frame=self.names[name][:1024], ms=ms))
        return tuple(out)

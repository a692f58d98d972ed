"""The user's line of code that held the GPU idle: the innermost user frame active at each idle instant.

The frames are the user's Python frames of ``torch.profiler.profile(with_stack=True)`` (``train.py(42): step``;
which frames are the user's: blocking_calls.py), or, without Python stacks, ``record_function`` ranges
(``user_annotation``, NVTX ranges of an Nsight Systems capture; the loop's own marks left out). Python calls nest on
a thread, and a thread's frames overlap other threads' (the autograd thread runs while the main thread sits in
``loss.backward()``): the frame at an instant is the one entered last among those active then, on any thread.
"""

from __future__ import annotations

import heapq
from array import array

import numpy as np

from gpuanalyze.ingest.blocking_calls import HostOps
from gpuanalyze.ingest.intervals import Clipper, pairs
from gpuanalyze.ingest.schema import IDLE_OWNERS, OwnerFrame

#: Frames named per owner in a step's KernelStats.owner_frames (12 owners: within the schema's 64).
MAX_PER_OWNER = 3


def innermost(frames: HostOps) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint sorted (start, end, name id) of the frame entered last among those active at each instant."""
    order = np.lexsort((-frames.end, frames.start))
    starts, ends, names = (frames.start[order].tolist(), frames.end[order].tolist(), frames.name[order].tolist())
    out_s, out_e, out_n = array("d"), array("d"), array("i")
    heap: list[tuple[float, float, int]] = []
    for k, (s, e, n) in enumerate(zip(starts, ends, names, strict=True)):
        heapq.heappush(heap, (-s, e, n))
        cur, nxt = s, starts[k + 1] if k + 1 < len(starts) else np.inf
        while heap and cur < nxt:
            _, end, name = heap[0]
            if end <= cur:
                heapq.heappop(heap)
                continue
            stop = min(end, nxt)
            out_s.append(cur)
            out_e.append(stop)
            out_n.append(name)
            cur = stop
    return (np.frombuffer(out_s, np.float64), np.frombuffer(out_e, np.float64), np.frombuffer(out_n, np.int32))


class OwnerFrames:
    """Each owner's idle time cut by the frame active then, ready to be summed per window in O(log n + pieces)."""

    def __init__(self, frames: HostOps, by_owner: dict[str, Clipper]) -> None:
        self.names = frames.names
        s, e, name = innermost(frames)
        parts = [(*pairs((c.s, c.e), (s, e)), i) for i, c in enumerate(by_owner[o] for o in IDLE_OWNERS)]
        start = np.concatenate([p[0] for p in parts])
        order = np.argsort(start, kind="stable")  # the owners are disjoint: so are their pieces
        self.start, self.end = start[order], np.concatenate([p[1] for p in parts])[order]
        owner = np.concatenate([np.full(p[0].size, p[3], np.int64) for p in parts])[order]
        self.key = owner * len(self.names) + name[np.concatenate([p[2] for p in parts])[order]]

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

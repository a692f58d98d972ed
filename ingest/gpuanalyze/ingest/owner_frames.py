"""The user's line of code that held the GPU idle: the innermost user frame active at each idle instant.

``torch.profiler.profile(with_stack=True)`` records each Python call as a ``python_function`` event named
``file(line): function`` (``train.py(42): step``), the file with every ``sys.path`` prefix taken off
(torch/profiler/python_tracer.py, ``_prefix_regex``: site-packages, the standard library, the script's own
directory), so ``threading.py(1030): _bootstrap`` is the standard library and ``torch/nn/modules/module.py(1501):
_call_impl`` PyTorch. A user frame is one that is none of: a ``<...>`` name (``<built-in method ...>``,
``<frozen runpy>``, ``<string>``), PyTorch and its domain libraries (``torch*``), the standard library
(``sys.stdlib_module_names``), a path still under site-packages, dist-packages or a Python installation.

Python calls nest on a thread, and a thread's frames overlap other threads' (the autograd thread runs while the
main thread sits in ``loss.backward()``): the frame at an instant is the user frame entered last among those
active then, on any thread. Without Python stacks, ``record_function`` ranges (``user_annotation``, NVTX ranges of
an Nsight Systems capture) stand in for frames, the loop's own marks (steps, DataLoader, phases) left out.
"""

from __future__ import annotations

import heapq
import re
import sys
from array import array

import numpy as np

from gpuanalyze.ingest.blocking_calls import HostOps
from gpuanalyze.ingest.intervals import Clipper, pairs
from gpuanalyze.ingest.name_table import NameTable
from gpuanalyze.ingest.schema import IDLE_OWNERS, OwnerFrame

#: Frames named per owner in a step's KernelStats.owner_frames (12 owners: within the schema's 64).
MAX_PER_OWNER = 3
MAX_NAMES = 1 << 14
OTHER_NAME = "(other frames)"
PYTHON, ANNOTATION = 1, 2
_FRAME = re.compile(r"(.+)\(\d+\): \S")
_LIBRARY_DIRS = ("site-packages/", "dist-packages/", "/lib/python")
_STDLIB = frozenset(sys.stdlib_module_names)


def frame_kind(name: str, cat: str, loop_mark: bool) -> int:
    """PYTHON for a user frame, ANNOTATION for a record_function range that is not one of the loop's marks
    (``loop_mark``), 0 for anything else."""
    if cat == "user_annotation":
        return 0 if loop_mark or name.startswith(("ProfilerStep#", "gpuanalyze:")) else ANNOTATION
    m = _FRAME.match(name) if cat == "python_function" and not name.startswith("<") else None
    if m is None:
        return 0
    path = m.group(1)
    if any(d in path for d in _LIBRARY_DIRS):
        return 0
    top = path.split("/", 1)[0].removesuffix(".py")
    return PYTHON if path.startswith("/") or not (top.startswith("torch") or top in _STDLIB) else 0


class FrameSink:
    """User frames and record_function ranges as they are parsed; ``len`` counts them."""

    def __init__(self) -> None:
        self.dropped = False
        self._reset()

    def _reset(self) -> None:
        self.ts, self.end, self.tid, self.name, self.kind = array("d"), array("d"), array("q"), array("i"), array("b")
        self._names = NameTable(MAX_NAMES, OTHER_NAME)

    def __len__(self) -> int:
        return len(self.ts)

    def add(self, name: str, kind: int, ts: float, dur: float, tid: int) -> None:
        if self.dropped:
            return
        self.ts.append(ts)
        self.end.append(ts + dur)
        self.tid.append(tid)
        self.name.append(self._names.id(name))
        self.kind.append(kind)

    def drop(self) -> None:
        """Keep nothing more (the trace has too many events to name frames)."""
        self._reset()
        self.dropped = True

    def finish(self) -> HostOps:
        """The Python user frames, or the record_function ranges where the capture has no Python stacks."""
        if not self.ts:
            return HostOps.empty()
        kind = np.frombuffer(self.kind, dtype=np.int8)
        sel = kind == (PYTHON if (kind == PYTHON).any() else ANNOTATION)
        return HostOps(
            np.frombuffer(self.ts, dtype=np.float64)[sel],
            np.frombuffer(self.end, dtype=np.float64)[sel],
            np.frombuffer(self.tid, dtype=np.int64)[sel],
            np.frombuffer(self.name, dtype=np.int32)[sel],
            tuple(self._names.names),
        )


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

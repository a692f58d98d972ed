"""Kernel-level statistics of a window of GPU activity (a step, or a whole trace).

Definitions follow HolisticTraceAnalysis (HTA) so numbers can be cross-checked:
span = first kernel start to last kernel end; busy = union of kernel intervals; idle = span - busy;
compute = union of kernels that are neither communication nor memcpy/memset; non-compute =
busy - compute; exposed communication = time when only communication kernels run; copy busy = time when only
copies and memsets run (the busy split: compute, communication = non-compute - copy busy, copies).

Idle gaps are found on the GPU timeline of the *whole trace* (the union of every kernel) and each
gap belongs to the step that launched the kernel ending it, so the gap between two steps counts
for the step that follows: the steps' idle times add up to the trace's idle time, as HTA counts
it. A gap is split like HTA's idle-time breakdown: host wait when the next kernel's launch call
started after the gap began, launch overhead when the gap is shorter than LAUNCH_GAP_US, other
otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec
import numpy as np

from gpuanalyze.ingest.timeline.cpu_ops import cpu_op_fields
from gpuanalyze.ingest.timeline.free_memory import between_passes
from gpuanalyze.ingest.timeline.idle_owners import IdleOwners, call_kinds, correlated
from gpuanalyze.ingest.timeline.intervals import Clipper, merge, merge_sorted, union_length
from gpuanalyze.ingest.timeline.model import Timeline
from gpuanalyze.ingest.timeline.owner_frames import OwnerFrames
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import GpuSummary
from gpuanalyze.ingest.trace.schema import BlockingOp, KernelStats, StartupOp, TopKernel

LAUNCH_GAP_US = 30.0
TOP_KERNELS = 5
TOP_BLOCKING = 5
TOP_STARTUP = 5
_CATEGORY_CODE = {c: i for i, c in enumerate(S.KERNEL_CATEGORIES)}
_MEMCPY_CODE = {"h2d": 0, "d2h": 1, "d2d": 2}
_NON_COMPUTE = np.array([c in ("communication", "memcpy", "memset") for c in S.KERNEL_CATEGORIES])
_COPY = np.array([c in ("memcpy", "memset") for c in S.KERNEL_CATEGORIES])
_COMM = _CATEGORY_CODE["communication"]


def hta_percentages(span: float, busy: float, compute: float) -> GpuSummary | None:
    """HTA's temporal breakdown (busy/idle, compute/non-compute) in percent of the GPU span."""
    if span <= 0:
        return None
    busy, compute = min(busy, span), min(compute, busy, span)
    return GpuSummary(
        busy_pct=100 * busy / span,
        idle_pct=100 * (span - busy) / span,
        compute_pct=100 * compute / span,
        non_compute_pct=100 * (busy - compute) / span,
    )


def hta_summary(start: np.ndarray, end: np.ndarray, computation: np.ndarray) -> GpuSummary | None:
    """HTA's temporal breakdown of a whole trace (``computation``: HTA counts the event as computation);
    None without GPU events."""
    if start.size == 0:
        return None
    return hta_percentages(
        float(end.max() - start.min()), union_length(start, end), union_length(start[computation], end[computation])
    )


def top_kernels(entries: Iterable[tuple[str, float, int]], n: int = TOP_KERNELS) -> list[tuple[str, float, int]]:
    """(name, total ms, count) summed by name, the ``n`` with the most time first."""
    totals: dict[str, list[float]] = {}
    for name, ms, count in entries:
        t = totals.setdefault(name, [0.0, 0])
        t[0] += ms
        t[1] += count
    ranked = sorted(totals.items(), key=lambda kv: kv[1][0], reverse=True)[:n]
    return [(name, ms, int(count)) for name, (ms, count) in ranked]


class StepKernels:
    """A Kineto trace's kernels and blocking syncs, ready to be cut into step windows.

    A kernel belongs to the window in which its launch call (matched by correlation id) started;
    kernels without a launch call go by their own start time. Windows are found by binary search
    over kernels sorted by that time, so cutting a trace into N steps costs O(N log n), not O(N n).
    """

    def __init__(
        self,
        k: Timeline,
        windows: list[tuple[int, float, float]] | None = None,
        launches: tuple[np.ndarray, np.ndarray] | None = None,
        kinds: np.ndarray | None = None,
    ) -> None:
        """``windows``: the (step, start, end) the trace is judged in (default: its ProfilerStep windows);
        ``launches``: ``launch_times(k)``, ``kinds``: ``call_kinds(k)``, where already known."""
        self.k = k
        start, end = k.gpu.start, k.gpu.end
        launch, launch_end = launches or launch_times(k)
        owner = np.where(launch >= 0, launch, start)
        order = np.argsort(owner, kind="stable")
        self._owner_sorted = owner[order]
        self._order = order.astype(np.int32) if order.size < 2**31 else order
        del order
        kind_cat = np.array([_CATEGORY_CODE[x.category] for x in k.kinds], dtype=np.int8)
        kind_mem = np.array([_MEMCPY_CODE.get(x.memcpy, -1) for x in k.kinds], dtype=np.int8)
        kind_page = np.array([x.pageable and x.category == "memcpy" for x in k.kinds] + [False], dtype=bool)
        self.category = kind_cat[k.gpu_kind] if k.kinds else np.empty(0, np.int8)
        self.memcpy = kind_mem[k.gpu_kind] if k.kinds else np.empty(0, np.int8)
        self.pageable = kind_page[k.gpu_kind]
        rt = k.runtime
        call_kind = call_kinds(k) if kinds is None else kinds
        # blocking: by API family, and asynchronous copies to or from pageable memory (the host waits in them: CUDA
        # runtime API, 'API synchronization behavior'; device-to-host returns once the copy is done)
        is_sync = k.runtime_sync | kind_page[call_kind]
        sync = np.flatnonzero(is_sync)
        order = sync[np.argsort(rt.start[sync], kind="stable")]
        self._sync_start = rt.start[order]
        self._sync_dur = rt.end[order] - rt.start[order]
        del order
        self._blocking(is_sync)
        # the device events by start, sorted once for the busy timeline, its gaps and their owners
        by_start = np.argsort(start, kind="stable")
        start_sorted = start[by_start]
        self.device_busy = Clipper(*merge_sorted(start_sorted, end[by_start]))
        """The union of device activity (every kernel, memcpy and memset)."""
        self._gaps(by_start, start_sorted, launch, owner)
        del owner
        steps = k.steps if windows is None else windows
        between_passes(start.size)  # each pass starts on what the last one left, not on the holes of its temporaries
        self.owners = (
            IdleOwners(k, (launch, launch_end, call_kind), sync, self.device_busy, (by_start, start_sorted), steps)
            if start.size
            else None
        )
        del call_kind, is_sync, sync, by_start, start_sorted  # the owners have what they need of them
        between_passes(start.size)
        self.frames = OwnerFrames(k.frames, self.owners.by_owner) if self.owners and k.frames.start.size else None
        self._b_idle = (
            self.owners.sync_owned_ms(self._b_start, self._b_start + self._b_dur)
            if self.owners is not None
            else np.zeros(self._b_start.size)
        )
        between_passes(start.size)

    def _gaps(self, by_start: np.ndarray, start_sorted: np.ndarray, launch: np.ndarray, owner: np.ndarray) -> None:
        """Idle gaps of the whole trace's GPU timeline, by class, sorted by the owner time of the kernel ending them."""
        seg_s, seg_e = self.device_busy.s, self.device_busy.e
        if seg_s.size < 2:
            self._gap_owner, self._gap_len, self._gap_class = np.empty(0), np.empty(0), np.empty(0, np.int8)
            return
        # each gap's temporaries go once used: this runs on every gap of the capture at once
        first = by_start[np.searchsorted(start_sorted, seg_s[1:], side="left")]
        launch = launch[first]
        host = (launch >= 0) & (launch > seg_e[:-1])
        del launch
        owner = owner[first]
        del first
        order = np.argsort(owner, kind="stable")
        self._gap_owner = owner[order]
        del owner
        gaps = seg_s[1:] - seg_e[:-1]
        # each gap's class: 0 host wait, 1 launch overhead, 2 other (a length and a byte, not three lengths)
        cls = np.full(gaps.size, 2, np.int8)
        cls[~host & (gaps < LAUNCH_GAP_US)] = 1
        cls[host] = 0
        del host
        self._gap_len = gaps[order]
        self._gap_class = cls[order]

    def _blocking(self, is_sync: np.ndarray) -> None:
        """The blocking calls that sync_us counts and blocking_calls.py named, sorted by start, with a
        group id per distinct (op, caller, call)."""
        b = self.k.blocking
        keep = is_sync[b.index] if b.index.size else np.zeros(0, bool)
        idx = b.index[keep]
        order = np.argsort(self.k.runtime.start[idx], kind="stable")
        idx = idx[order]
        self._b_start = self.k.runtime.start[idx]
        self._b_dur = self.k.runtime.end[idx] - self._b_start
        keys = np.stack([b.op[keep][order], b.caller[keep][order], b.call[keep][order]], axis=1)
        self._b_keys, self._b_group = np.empty((0, 3), np.int32), np.empty(0, np.int64)
        if idx.size:
            self._b_keys, group = np.unique(keys, axis=0, return_inverse=True)
            self._b_group = group.reshape(-1)

    def blocking_ops(self, lo: float, hi: float) -> tuple[BlockingOp, ...]:
        """The TOP_BLOCKING (op, caller, call) groups among the calls that started in [lo, hi): those that left
        the GPU idle longest first (IdleOwners.sync_owned_ms), then by blocked host time (a host waiting on a
        busy GPU costs no GPU time)."""
        i, j = np.searchsorted(self._b_start, (lo, hi), side="left")
        if i == j:
            return ()
        groups, inverse = np.unique(self._b_group[i:j], return_inverse=True)
        inverse = inverse.reshape(-1)
        total = np.bincount(inverse, weights=self._b_dur[i:j])
        idle = np.bincount(inverse, weights=self._b_idle[i:j])
        count = np.bincount(inverse)
        names = self.k.blocking.names
        out = []
        for g in np.lexsort((-total, -idle))[:TOP_BLOCKING]:
            op, caller, call = (names[int(x)][:300] if x >= 0 else "" for x in self._b_keys[groups[g]])
            out.append(
                BlockingOp(
                    op=op,
                    caller=caller,
                    call=call,
                    total_ms=float(total[g]) / 1e3,
                    count=int(count[g]),
                    idle_ms=float(idle[g]),
                )
            )
        return tuple(out)

    def startup(self, lo: float, hi: float) -> tuple[float, tuple[StartupOp, ...]]:
        """Host time (us) in the start-up work that started in [lo, hi), up to hi (the union: compile phases nest,
        a cudaMalloc runs inside one), and the TOP_STARTUP names of the outermost of it with the most time."""
        w = self.k.startup
        i, j = (int(x) for x in np.searchsorted(w.start, (lo, hi), side="left"))
        if i == j:
            return 0.0, ()
        end = np.minimum(w.end[i:j], hi)
        outer = np.flatnonzero(w.outermost[i:j])
        names, inverse = np.unique(w.name[i:j][outer], return_inverse=True)
        inverse = inverse.reshape(-1)
        total = np.bincount(inverse, weights=end[outer] - w.start[i:j][outer])
        count = np.bincount(inverse)
        ops = tuple(
            StartupOp(name=w.names[int(names[g])][:300], total_ms=float(total[g]) / 1e3, count=int(count[g]))
            for g in np.argsort(-total, kind="stable")[:TOP_STARTUP]
        )
        return union_length(w.start[i:j], end), ops

    def sync_us(self, lo: float, hi: float) -> float:
        """Host time in blocking sync calls that started in [lo, hi): synchronize calls, blocking copies and
        asynchronous copies to or from pageable memory (the host waits in them: CUDA runtime API, 'API
        synchronization behavior')."""
        i, j = np.searchsorted(self._sync_start, (lo, hi), side="left")
        return float(self._sync_dur[i:j].sum())

    def idle_us(self, lo: float, hi: float) -> tuple[float, float, float]:
        """(host wait, launch overhead, other) of the GPU idle gaps ended by kernels launched in [lo, hi)."""
        i, j = np.searchsorted(self._gap_owner, (lo, hi), side="left")
        length, cls = self._gap_len[i:j], self._gap_class[i:j]
        # the same sums as over three rows with zeros for the other classes (same values, same order)
        part = [float(np.where(cls == c, length, 0.0).sum()) for c in range(3)]
        return part[0], part[1], part[2]

    def first_launch(self, lo: float, hi: float) -> float | None:
        """When the first device work launched in [lo, hi) was launched (its owner time), if any."""
        i = int(np.searchsorted(self._owner_sorted, lo, side="left"))
        return float(self._owner_sorted[i]) if i < self._owner_sorted.size and self._owner_sorted[i] < hi else None

    def indices(self, lo: float, hi: float) -> np.ndarray:
        """Kernels launched in [lo, hi), in trace order."""
        i, j = np.searchsorted(self._owner_sorted, (lo, hi), side="left")
        return np.sort(self._order[i:j])

    def stats(self, lo: float, hi: float) -> KernelStats:
        """KERNEL_STATS of the kernels launched in [lo, hi)."""
        idx = self.indices(lo, hi)
        stats = self._window(idx, self.idle_us(lo, hi), self.sync_us(lo, hi))
        blocking = self.blocking_ops(lo, hi)
        startup_us, startup_ops = self.startup(lo, hi)
        owners: dict[str, Any] = self.owners.fields(lo, hi) if self.owners is not None else {}
        if self.frames is not None:
            owners["owner_frames"] = self.frames.window(lo, hi)
        cpu = cpu_op_fields(self.k.host_ops, lo, hi) if self.k.gpu.start.size == 0 else {}  # CPU run: ops are kernels
        if not blocking and not startup_us and not owners and not cpu:
            return stats
        return msgspec.structs.replace(
            stats, blocking_ops=blocking, startup_ms=startup_us / 1e3, startup_ops=startup_ops, **owners, **cpu
        )

    def _window(self, idx: np.ndarray, idle: tuple[float, float, float], sync_api_us: float) -> KernelStats:
        if idx.size == 0:
            return KernelStats(sync_api_ms=sync_api_us / 1e3)
        k = self.k
        start, end = k.gpu.start[idx], k.gpu.end[idx]
        cats = self.category[idx]
        dur = end - start
        stats: dict[str, Any] = dict.fromkeys(S.KERNEL_STAT_FIELDS, 0.0)
        stats["sync_api_ms"] = sync_api_us / 1e3
        seg_s, seg_e = merge(start, end)
        busy = float((seg_e - seg_s).sum())
        compute_mask = ~_NON_COMPUTE[cats]
        compute = union_length(start[compute_mask], end[compute_mask])
        non_comm = union_length(start[cats != _COMM], end[cats != _COMM])
        not_copy = ~_COPY[cats]
        stats.update(
            gpu_span_ms=float(seg_e[-1] - seg_s[0]) / 1e3,
            gpu_busy_ms=busy / 1e3,
            compute_ms=compute / 1e3,
            comm_exposed_ms=(busy - non_comm) / 1e3,
            non_compute_ms=(busy - compute) / 1e3,
            copy_busy_ms=(busy - union_length(start[not_copy], end[not_copy])) / 1e3,
            idle_host_wait_ms=idle[0] / 1e3,
            idle_launch_ms=idle[1] / 1e3,
            idle_other_ms=idle[2] / 1e3,
        )
        per_cat = np.bincount(cats, weights=dur, minlength=len(S.KERNEL_CATEGORIES))
        for code, cat in enumerate(S.KERNEL_CATEGORIES):
            stats[f"{cat}_ms"] = float(per_cat[code]) / 1e3
        mem = self.memcpy[idx]
        for kind, code in _MEMCPY_CODE.items():
            stats[f"memcpy_{kind}_ms"] = float(dur[mem == code].sum()) / 1e3
        stats["memcpy_pageable_ms"] = float(dur[self.pageable[idx]].sum()) / 1e3
        kinds = k.gpu_kind[idx]
        per_kind = np.bincount(kinds, weights=dur)
        counts = np.bincount(kinds)
        used = np.flatnonzero(counts)
        top = top_kernels((k.kinds[i].name, float(per_kind[i]) / 1e3, int(counts[i])) for i in used)
        return KernelStats(
            **stats,
            kernel_count=int(idx.size),
            kernel_median_us=float(np.median(dur)),
            top_kernels=tuple(TopKernel(name=n[:300], total_ms=ms, count=c) for n, ms, c in top),
        )


def launch_times(k: Timeline) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of each kernel's launch call (the last runtime call with its correlation id); -1 without
    one."""
    at = correlated(k.runtime_correlation, k.gpu_correlation)
    return np.append(k.runtime.start, -1.0)[at], np.append(k.runtime.end, -1.0)[at]

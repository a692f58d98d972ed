"""Kernel-level statistics of a window of GPU activity (a step, or a whole trace).

Definitions follow HolisticTraceAnalysis (HTA) so numbers can be cross-checked:
span = first kernel start to last kernel end; busy = union of kernel intervals; idle = span - busy;
compute = union of kernels that are neither communication nor memcpy/memset; non-compute =
busy - compute; exposed communication = time when only communication kernels run. Idle gaps on
the merged GPU timeline are split like HTA's idle-time breakdown:
host wait when the next kernel's launch call started after the gap began, launch overhead when
the gap is shorter than LAUNCH_GAP_US, other otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.intervals import merge, union_length
from gpuanalyze.ingest.kernel_names import hta_kernel_type, memcpy_kind
from gpuanalyze.ingest.kineto import KinetoTrace
from gpuanalyze.ingest.runinfo import GpuSummary
from gpuanalyze.ingest.schema import KernelStats, TopKernel

LAUNCH_GAP_US = 30.0
TOP_KERNELS = 5


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


def hta_summary(start: np.ndarray, end: np.ndarray, names: list[str]) -> GpuSummary | None:
    """HTA's temporal breakdown of a whole trace; None without GPU events."""
    if start.size == 0:
        return None
    comp = np.fromiter((hta_kernel_type(n) == "computation" for n in names), dtype=bool, count=len(names))
    return hta_percentages(
        float(end.max() - start.min()), union_length(start, end), union_length(start[comp], end[comp])
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


def window_stats(
    start: np.ndarray,
    end: np.ndarray,
    names: list[str],
    categories: list[str],
    launch_ts: np.ndarray,
    sync_api_us: float,
) -> KernelStats:
    """The KernelStats of the kernels of one window (arrays already selected)."""
    if start.size == 0:
        return KernelStats(sync_api_ms=sync_api_us / 1e3)
    stats: dict[str, float] = dict.fromkeys(S.KERNEL_STAT_FIELDS, 0.0)
    stats["sync_api_ms"] = sync_api_us / 1e3
    dur = end - start
    seg_s, seg_e = merge(start, end)
    busy = float((seg_e - seg_s).sum())
    span = float(seg_e[-1] - seg_s[0])
    cats = np.array(categories)
    compute_mask = np.isin(cats, ("communication", "memcpy", "memset"), invert=True)
    compute = union_length(start[compute_mask], end[compute_mask])
    non_comm = union_length(start[cats != "communication"], end[cats != "communication"])
    stats.update(
        gpu_span_ms=span / 1e3,
        gpu_busy_ms=busy / 1e3,
        compute_ms=compute / 1e3,
        comm_exposed_ms=(busy - non_comm) / 1e3,
        non_compute_ms=(busy - compute) / 1e3,
    )
    for cat in S.KERNEL_CATEGORIES:
        stats[f"{cat}_ms"] = float(dur[cats == cat].sum()) / 1e3
    for i in np.flatnonzero(cats == "memcpy"):
        kind = memcpy_kind(names[i])
        if kind != "other":
            stats[f"memcpy_{kind}_ms"] += float(dur[i]) / 1e3
        if "Pageable" in names[i]:
            stats["memcpy_pageable_ms"] += float(dur[i]) / 1e3
    stats.update(_idle_split(start, launch_ts, seg_s, seg_e))
    top = top_kernels((name, float(d) / 1e3, 1) for name, d in zip(names, dur, strict=True))
    return KernelStats(
        **stats,
        kernel_count=int(start.size),
        kernel_median_us=float(np.median(dur)),
        top_kernels=tuple(TopKernel(name=n[:300], total_ms=ms, count=c) for n, ms, c in top),
    )


def _idle_split(start: np.ndarray, launch_ts: np.ndarray, seg_s: np.ndarray, seg_e: np.ndarray) -> dict[str, float]:
    out = {"idle_host_wait_ms": 0.0, "idle_launch_ms": 0.0, "idle_other_ms": 0.0}
    if seg_s.size < 2:
        return out
    order = np.argsort(start, kind="stable")
    first_of_seg = order[np.searchsorted(start[order], seg_s[1:], side="left")]
    gaps = seg_s[1:] - seg_e[:-1]
    launch = launch_ts[first_of_seg]
    host_wait = (launch >= 0) & (launch > seg_e[:-1])
    short = ~host_wait & (gaps < LAUNCH_GAP_US)
    out["idle_host_wait_ms"] = float(gaps[host_wait].sum()) / 1e3
    out["idle_launch_ms"] = float(gaps[short].sum()) / 1e3
    out["idle_other_ms"] = float(gaps[~host_wait & ~short].sum()) / 1e3
    return out


class StepKernels:
    """A Kineto trace's kernels and blocking syncs, ready to be cut into step windows.

    A kernel belongs to the window in which its launch call (matched by correlation id) started;
    kernels without a launch call go by their own start time.
    """

    def __init__(self, k: KinetoTrace) -> None:
        self.k = k
        corr_ts = dict(zip(k.runtime_correlation.tolist(), k.runtime.start.tolist(), strict=False))
        self.launch = np.array([corr_ts.get(c, -1.0) for c in k.gpu_correlation.tolist()], dtype=np.float64)
        self.owner = np.where(self.launch >= 0, self.launch, k.gpu.start)
        # parse_kineto keeps runtime names only for blocking syncs
        self.sync = np.fromiter((bool(n) for n in k.runtime.names), dtype=bool, count=len(k.runtime.names))

    def sync_us(self, lo: float, hi: float) -> float:
        """Host time in blocking sync calls that started in [lo, hi)."""
        rt = self.k.runtime
        sel = self.sync & (rt.start >= lo) & (rt.start < hi)
        return float((rt.end[sel] - rt.start[sel]).sum())

    def stats(self, lo: float, hi: float) -> KernelStats:
        """KERNEL_STATS of the kernels launched in [lo, hi)."""
        k = self.k
        idx = np.flatnonzero((self.owner >= lo) & (self.owner < hi))
        return window_stats(
            k.gpu.start[idx],
            k.gpu.end[idx],
            [k.gpu.names[i] for i in idx],
            [k.gpu_category[i] for i in idx],
            self.launch[idx],
            self.sync_us(lo, hi),
        )

"""Kernel-level statistics of a window of GPU activity (a step, or a whole trace).

Definitions follow HolisticTraceAnalysis (HTA) so numbers can be cross-checked:
span = first kernel start to last kernel end; busy = union of kernel intervals; idle = span - busy;
compute = union of kernels that are neither communication nor memcpy/memset; non-compute =
busy - compute; exposed communication = time when only communication kernels run. Idle gaps on the merged GPU timeline are split like HTA's idle-time breakdown:
host wait when the next kernel's launch call started after the gap began, launch overhead when
the gap is shorter than LAUNCH_GAP_US, other otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ingest import schema as S
from ingest.intervals import merge, union_length
from ingest.kernel_names import hta_kernel_type, memcpy_kind
from ingest.kineto import KinetoTrace

LAUNCH_GAP_US = 30.0
TOP_KERNELS = 5


def hta_summary(start: np.ndarray, end: np.ndarray, names: list[str]) -> dict[str, float] | None:
    """HTA's temporal breakdown in percent of the GPU span; None without GPU events."""
    if start.size == 0:
        return None
    span = float(end.max() - start.min())
    if span <= 0:
        return None
    busy = union_length(start, end)
    comp = np.fromiter((hta_kernel_type(n) == "computation" for n in names), dtype=bool, count=len(names))
    compute = union_length(start[comp], end[comp])
    return {"busy_pct": 100 * busy / span, "idle_pct": 100 * (span - busy) / span,
            "compute_pct": 100 * compute / span, "non_compute_pct": 100 * (busy - compute) / span}


def window_stats(start: np.ndarray, end: np.ndarray, names: list[str], categories: list[str],
                 launch_ts: np.ndarray, sync_api_us: float) -> dict[str, Any]:
    """KERNEL_STATS for the kernels of one window (arrays already selected); times in ms."""
    stats: dict[str, Any] = dict.fromkeys(S.KERNEL_STAT_FIELDS, 0.0)
    stats["sync_api_ms"] = sync_api_us / 1e3
    stats["kernel_count"] = int(start.size)
    stats["top_kernels"] = []
    if start.size == 0:
        stats["kernel_median_us"] = None
        return stats
    dur = end - start
    seg_s, seg_e = merge(start, end)
    busy = float((seg_e - seg_s).sum())
    span = float(seg_e[-1] - seg_s[0])
    cats = np.array(categories)
    compute_mask = np.isin(cats, ("communication", "memcpy", "memset"), invert=True)
    compute = union_length(start[compute_mask], end[compute_mask])
    non_comm = union_length(start[cats != "communication"], end[cats != "communication"])
    stats.update(gpu_span_ms=span / 1e3, gpu_busy_ms=busy / 1e3, compute_ms=compute / 1e3,
                 comm_exposed_ms=(busy - non_comm) / 1e3,
                 non_compute_ms=(busy - compute) / 1e3, kernel_median_us=float(np.median(dur)))
    for cat in S.KERNEL_CATEGORIES:
        stats[f"{cat}_ms"] = float(dur[cats == cat].sum()) / 1e3
    for i in np.flatnonzero(cats == "memcpy"):
        kind = memcpy_kind(names[i])
        if kind != "other":
            stats[f"memcpy_{kind}_ms"] += float(dur[i]) / 1e3
        if "Pageable" in names[i]:
            stats["memcpy_pageable_ms"] += float(dur[i]) / 1e3
    stats.update(_idle_split(start, launch_ts, seg_s, seg_e))
    totals: dict[str, list[float]] = {}
    for name, d in zip(names, dur):
        t = totals.setdefault(name, [0.0, 0])
        t[0] += d
        t[1] += 1
    top = sorted(totals.items(), key=lambda kv: kv[1][0], reverse=True)[:TOP_KERNELS]
    stats["top_kernels"] = [{"name": n[:300], "total_ms": t / 1e3, "count": int(c)} for n, (t, c) in top]
    return stats


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
        corr_ts = dict(zip(k.runtime_correlation.tolist(), k.runtime.start.tolist()))
        self.launch = np.array([corr_ts.get(c, -1.0) for c in k.gpu_correlation.tolist()], dtype=np.float64)
        self.owner = np.where(self.launch >= 0, self.launch, k.gpu.start)
        # parse_kineto keeps runtime names only for blocking syncs
        self.sync = np.fromiter((bool(n) for n in k.runtime.names), dtype=bool, count=len(k.runtime.names))

    def sync_us(self, lo: float, hi: float) -> float:
        """Host time in blocking sync calls that started in [lo, hi)."""
        rt = self.k.runtime
        sel = self.sync & (rt.start >= lo) & (rt.start < hi)
        return float((rt.end[sel] - rt.start[sel]).sum())

    def stats(self, lo: float, hi: float) -> dict[str, Any]:
        """KERNEL_STATS of the kernels launched in [lo, hi)."""
        k = self.k
        idx = np.flatnonzero((self.owner >= lo) & (self.owner < hi))
        return window_stats(k.gpu.start[idx], k.gpu.end[idx], [k.gpu.names[i] for i in idx],
                            [k.gpu_category[i] for i in idx], self.launch[idx], self.sync_us(lo, hi))

"""Kernel-level evidence aggregated over the analysed steps that carry kernel statistics."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import polars as pl

from analyzer.analysis.aggregate import number
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.kernel_stats import hta_percentages, top_kernels
from gpuanalyze.ingest.runinfo import GpuSummary, RunInfo


@dataclass(frozen=True, slots=True)
class KernelMetrics:
    steps: int
    """Analysed steps with kernel statistics (sampled windows or an imported trace)."""
    totals_ms: dict[str, float]
    """Sums over those steps of every KERNEL_STATS time field."""
    wall_ms: float
    """Wall time of those steps."""
    kernel_count: int
    kernel_median_us: float | None
    top_kernels: tuple[tuple[str, float, int], ...]
    """(name, total ms, count), most time first."""

    def share_of_kernel_time(self, category: str) -> float:
        total = sum(self.totals_ms[f"{c}_ms"] for c in S.KERNEL_CATEGORIES)
        return self.totals_ms[f"{category}_ms"] / total if total else 0.0

    def share_of_wall(self, field: str) -> float:
        return self.totals_ms[field] / self.wall_ms if self.wall_ms else 0.0

    @property
    def idle_ms(self) -> float:
        return self.totals_ms["idle_host_wait_ms"] + self.totals_ms["idle_launch_ms"] + self.totals_ms["idle_other_ms"]


def kernel_metrics(frame: pl.DataFrame) -> KernelMetrics | None:
    """None when no analysed step has kernel statistics (e.g. CPU runs, no sampled window yet)."""
    rows = frame.filter(pl.col(S.KERNEL_STATS).is_not_null())
    if rows.height == 0:
        return None
    stats = [S.decode_kernel_stats(t) for t in rows.get_column(S.KERNEL_STATS).to_list()]
    if not any(st.kernel_count for st in stats):
        return None
    totals = {f: float(sum(getattr(st, f) for st in stats)) for f in S.KERNEL_STAT_FIELDS}
    medians = [st.kernel_median_us for st in stats if st.kernel_median_us is not None]
    ranked = top_kernels((k.name, k.total_ms, k.count) for st in stats for k in st.top_kernels)
    return KernelMetrics(
        steps=rows.height,
        totals_ms=totals,
        wall_ms=number(rows.get_column(S.WALL_MS).sum()),
        kernel_count=sum(st.kernel_count for st in stats),
        kernel_median_us=float(statistics.median(medians)) if medians else None,
        top_kernels=tuple(ranked),
    )


def gpu_breakdown(run: RunInfo, km: KernelMetrics | None) -> GpuSummary | None:
    """HTA-style percentages: the importer's whole-trace numbers, else the sampled windows' sums."""
    if run.gpu_summary is not None:
        return run.gpu_summary
    if km is None:
        return None
    return hta_percentages(km.totals_ms["gpu_span_ms"], km.totals_ms["gpu_busy_ms"], km.totals_ms["compute_ms"])

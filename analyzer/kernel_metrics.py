"""Kernel-level evidence aggregated over the analysed steps that carry kernel statistics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from ingest import schema as S


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
    if not any(st.get("kernel_count") for st in stats):
        return None
    fields = [f for f in S.KERNEL_STAT_FIELDS if f != "kernel_median_us"]
    totals = {f: float(sum(st.get(f) or 0.0 for st in stats)) for f in fields}
    medians = sorted(st["kernel_median_us"] for st in stats if st.get("kernel_median_us") is not None)
    top: dict[str, list[Any]] = {}
    for st in stats:
        for entry in st.get("top_kernels") or []:
            t = top.setdefault(entry["name"], [0.0, 0])
            t[0] += entry["total_ms"]
            t[1] += entry["count"]
    ranked = sorted(((n, t, c) for n, (t, c) in top.items()), key=lambda x: x[1], reverse=True)[:5]
    return KernelMetrics(
        steps=rows.height,
        totals_ms=totals,
        wall_ms=float(rows.get_column(S.WALL_MS).sum()),
        kernel_count=int(sum(st.get("kernel_count") or 0 for st in stats)),
        kernel_median_us=float(medians[len(medians) // 2]) if medians else None,
        top_kernels=tuple(ranked),
    )


def gpu_breakdown(run: dict[str, Any], km: KernelMetrics | None) -> dict[str, float] | None:
    """HTA-style percentages: the importer's whole-trace numbers, else the sampled windows' sums."""
    summary = run.get("gpu_summary")
    if isinstance(summary, dict):
        return {k: float(v) for k, v in summary.items()}
    if km is None or km.totals_ms["gpu_span_ms"] <= 0:
        return None
    span, busy, compute = km.totals_ms["gpu_span_ms"], km.totals_ms["gpu_busy_ms"], km.totals_ms["compute_ms"]
    return {"busy_pct": 100 * busy / span, "idle_pct": 100 * (span - busy) / span,
            "compute_pct": 100 * compute / span, "non_compute_pct": 100 * (busy - compute) / span}

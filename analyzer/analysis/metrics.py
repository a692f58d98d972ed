"""Per-step metrics: what a step costs and where its time goes. Pure functions over polars.

Host waits (data, sync, unattributed host time) cost GPU time only while the GPU is idle: on
traces with GPU timings their *effective* share is capped, step by step, by the GPU's idle
time (the PyTorch profiler TensorBoard plugin counts DataLoader time the same way). On CPU
traces the effective share is the share itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from analyzer.analysis.aggregate import number
from analyzer.analysis.kernel_metrics import KernelMetrics, kernel_metrics
from analyzer.analysis.ranks import RankAnalysis, rank_analysis
from analyzer.analysis.thresholds import WARMUP_FRACTION, WARMUP_MAX_STEPS
from analyzer.errors import TraceError
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.reader import Trace

#: Host waits whose effective share is capped by GPU idle time.
WAITS: tuple[str, ...] = (S.DATA_WAIT_MS, S.SYNC_MS, S.OTHER_MS)
IDLE = "gpu_idle"
"""Column of ``StepMetrics.per_step``: GPU idle share of the step."""
UNEXPLAINED_IDLE = "gpu_idle_unexplained"
"""Column of ``StepMetrics.per_step``: GPU idle share not covered by data wait or sync."""
RAW = "__raw"
"""Suffix of ``StepMetrics.per_step`` columns holding a wait's share before the GPU-idle cap."""


@dataclass(frozen=True, slots=True)
class StepAccounting:
    """Where every recorded step went: analysed, warm-up, or run under a profiler window."""

    rows: int
    """Step rows in the trace (after the reader dropped unusable ones; its notes say how many)."""
    warmup: int
    """Leading steps skipped per rank as warm-up."""
    profiler_windows: int
    """Steps that ran under a sampled torch.profiler window: kernel evidence only, not timings."""
    analysed: int


@dataclass(frozen=True, slots=True)
class StepMetrics:
    """Summary of the analysed (post-warm-up) steps of a trace."""

    steps: int
    ranks: int
    warmup_steps: int
    accounting: StepAccounting
    step_median_ms: float
    step_p90_ms: float
    breakdown_ms: dict[str, float | None]
    """Median per step of each part; None where the trace does not know the part."""
    step_mean_ms: float
    """Mean step time of the slowest rank: what run time and cost add up from."""
    busy_mean_ms: float | None
    """Mean GPU-busy time per step; None without a GPU."""
    mean_ms: dict[str, float | None]
    """Mean per step of each part; None where the trace does not know the part."""
    share: dict[str, float | None]
    """Each part's total over all analysed steps divided by total wall time, in [0, 1]; None where unknown."""
    effective: dict[str, float]
    """Share of step time each host wait (data, sync, other) costs: on GPU traces only while the GPU idles."""
    gpu_util: float | None
    """Sum of GPU-busy time over sum of wall time, in [0, 1]; None without GPU timings."""
    idle_unexplained: float | None
    """GPU idle share not covered by data wait or sync (launch and host overhead); None without a GPU."""
    data_cpu_fraction: float | None
    """CPU time of the training thread inside data fetches over the data wait, in [0, 1] (1: loading is
    CPU work that worker processes must share the cores for; 0: sleeping on I/O); None if not recorded."""
    peak_mem_bytes: int | None
    gpu_memory_bytes: int | None
    batch_samples: float | None
    samples_per_s: float | None
    per_step: pl.DataFrame
    """Per-step shares of wall time: the effective waits (columns named like the parts), the GPU busy
    share (gpu_busy_ms), idle and unexplained idle; for consistency across steps."""
    kernels: KernelMetrics | None = None
    """Kernel-level evidence, when steps carry kernel statistics."""
    distributed: RankAnalysis | None = None
    """Cross-rank skew and stragglers, for traces with several ranks."""

    @property
    def sampled_steps(self) -> int:
        return self.accounting.profiler_windows

    def consistency(self, column: str, threshold: float, *, below: bool = False) -> float:
        """Fraction of analysed steps whose per-step share crosses ``threshold``."""
        if column not in self.per_step.columns or self.per_step.height == 0:
            return 0.0
        values = self.per_step.get_column(column).fill_null(0.0)
        hits = (values < threshold) if below else (values >= threshold)
        return number(hits.mean() or 0.0)


def warmup_steps(n: int) -> int:
    """Leading steps excluded as warm-up: lazy init, autotuning, first DataLoader workers."""
    return min(WARMUP_MAX_STEPS, int(n * WARMUP_FRACTION))


def _clamp(x: float) -> float:
    return min(1.0, max(0.0, x))


def step_metrics(trace: Trace) -> StepMetrics:
    frame = trace.frame
    if frame.height == 0:
        raise TraceError(f"{trace.path}: the trace holds no steps (the run stopped before its first step ended)")
    rows = frame.height
    skip = warmup_steps(int(number(frame.group_by(S.RANK).len().get_column("len").min())))
    frame = frame.filter(pl.col(S.STEP).rank("ordinal").over(S.RANK) > skip)
    kernels = kernel_metrics(frame)
    sampled = frame.get_column(S.KERNEL_STATS).is_not_null()
    windows = 0
    if sampled.any() and not sampled.all():
        windows = int(sampled.sum())
        frame = frame.filter(~sampled)  # steps run under torch.profiler: kernel evidence only, not timings
    known = {c: frame.get_column(c).null_count() < frame.height for c in (S.GPU_BUSY_MS, *S.PARTS)}
    has_gpu = known[S.GPU_BUSY_MS]
    wall = pl.col(S.WALL_MS)
    idle = (wall - pl.col(S.GPU_BUSY_MS).fill_null(0.0)).clip(lower_bound=0.0)
    eff = {
        p: (pl.min_horizontal(pl.col(p).fill_null(0.0), idle) if has_gpu else pl.col(p).fill_null(0.0)).alias(p)
        for p in WAITS
    }
    frame = frame.with_columns(
        *[e.alias(f"{p}__eff") for p, e in eff.items()],
        idle.alias(IDLE),
    )
    unexplained = (pl.col(IDLE) - pl.col(f"{S.DATA_WAIT_MS}__eff") - pl.col(f"{S.SYNC_MS}__eff")).clip(lower_bound=0.0)
    frame = frame.with_columns(unexplained.alias(UNEXPLAINED_IDLE))
    wall_total = number(frame.get_column(S.WALL_MS).sum())
    total = {c: number(frame.get_column(c).sum()) for c in (*S.PARTS, IDLE, UNEXPLAINED_IDLE, S.GPU_BUSY_MS)}
    total.update({f"{p}__eff": number(frame.get_column(f"{p}__eff").sum()) for p in WAITS})
    breakdown = {p: number(frame.get_column(p).median()) if known[p] else None for p in S.PARTS}
    means = {p: number(frame.get_column(p).mean()) if known[p] else None for p in S.PARTS}
    share = {p: _clamp(total[p] / wall_total) if known[p] else None for p in S.PARTS}
    effective = {p: _clamp(total[f"{p}__eff"] / wall_total) for p in WAITS}
    per_rank = frame.group_by(S.RANK).agg(wall.mean().alias("mean"), wall.sum().alias("sum"))
    mem = frame.get_column(S.PEAK_MEM_BYTES)
    samples = frame.get_column(S.BATCH_SAMPLES)
    has_samples = samples.null_count() < samples.len()
    per_step = frame.select(
        S.STEP,
        S.RANK,
        *[(pl.col(f"{p}__eff") / wall).alias(p) for p in WAITS],
        *[(pl.col(p).fill_null(0.0) / wall).alias(p + RAW) for p in WAITS],
        (pl.col(S.GPU_BUSY_MS) / wall).alias(S.GPU_BUSY_MS),
        (pl.col(IDLE) / wall).alias(IDLE),
        (pl.col(UNEXPLAINED_IDLE) / wall).alias(UNEXPLAINED_IDLE),
    )
    return StepMetrics(
        steps=frame.height,
        ranks=frame.get_column(S.RANK).n_unique(),
        warmup_steps=skip,
        accounting=StepAccounting(
            rows=rows, warmup=rows - frame.height - windows, profiler_windows=windows, analysed=frame.height
        ),
        step_median_ms=number(frame.get_column(S.WALL_MS).median()),
        step_p90_ms=number(frame.get_column(S.WALL_MS).quantile(0.9, "linear")),
        breakdown_ms=breakdown,
        step_mean_ms=number(per_rank.get_column("mean").max()),  # a run lasts as long as its slowest rank
        busy_mean_ms=number(frame.get_column(S.GPU_BUSY_MS).mean()) if has_gpu else None,
        mean_ms=means,
        share=share,
        effective=effective,
        gpu_util=_clamp(total[S.GPU_BUSY_MS] / wall_total) if has_gpu else None,
        idle_unexplained=_clamp(total[UNEXPLAINED_IDLE] / wall_total) if has_gpu else None,
        data_cpu_fraction=_data_cpu_fraction(frame),
        peak_mem_bytes=None if mem.null_count() == mem.len() else int(number(mem.max())),
        gpu_memory_bytes=trace.run.gpu_memory_bytes,
        batch_samples=number(samples.median()) if has_samples else None,
        samples_per_s=1000.0 * number(samples.sum()) / number(per_rank.get_column("sum").max())
        if has_samples
        else None,
        per_step=per_step,
        kernels=kernels,
        distributed=rank_analysis(frame),
    )


def _data_cpu_fraction(frame: pl.DataFrame) -> float | None:
    rows = frame.filter(pl.col(S.DATA_CPU_MS).is_not_null())
    wait = number(rows.get_column(S.DATA_WAIT_MS).fill_null(0.0).sum()) if rows.height else 0.0
    if wait <= 0:
        return None
    return _clamp(number(rows.get_column(S.DATA_CPU_MS).sum()) / wait)

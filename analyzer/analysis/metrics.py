"""Per-step metrics: what a step costs and where its time goes. Pure functions over polars."""

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


@dataclass(frozen=True, slots=True)
class StepMetrics:
    """Summary of the analysed (post-warm-up) steps of a trace."""

    steps: int
    ranks: int
    warmup_steps: int
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
    """Each part's total over all analysed steps divided by total wall time; None where unknown."""
    gpu_util: float | None
    """Sum of GPU-busy time over sum of wall time; None without a GPU."""
    peak_mem_bytes: int | None
    gpu_memory_bytes: int | None
    batch_samples: float | None
    samples_per_s: float | None
    step_share: pl.DataFrame
    """Per-step shares (columns named like the parts), for consistency checks."""
    kernels: KernelMetrics | None = None
    """Kernel-level evidence, when steps carry kernel statistics."""
    sampled_steps: int = 0
    """Analysed steps that ran under a sampled torch.profiler window (kept out of the step timings)."""
    distributed: RankAnalysis | None = None
    """Cross-rank skew and stragglers, for traces with several ranks."""


def warmup_steps(n: int) -> int:
    """Leading steps excluded as warm-up: lazy init, autotuning, first DataLoader workers."""
    return min(WARMUP_MAX_STEPS, int(n * WARMUP_FRACTION))


def step_metrics(trace: Trace) -> StepMetrics:
    frame = trace.frame
    if frame.height == 0:
        raise TraceError(f"{trace.path}: the trace holds no steps (the run stopped before its first step ended)")
    skip = warmup_steps(int(number(frame.group_by(S.RANK).len().get_column("len").min())))
    frame = frame.filter(pl.col(S.STEP).rank("ordinal").over(S.RANK) > skip)
    kernels = kernel_metrics(frame)
    sampled = frame.get_column(S.KERNEL_STATS).is_not_null()
    if sampled.any() and not sampled.all():
        frame = frame.filter(~sampled)  # steps run under torch.profiler: kernel evidence only, not timings
    wall_total = number(frame.get_column(S.WALL_MS).sum())
    known = {c: frame.get_column(c).null_count() < frame.height for c in (S.GPU_BUSY_MS, *S.PARTS)}
    breakdown = {p: number(frame.get_column(p).median()) if known[p] else None for p in S.PARTS}
    means = {p: number(frame.get_column(p).mean()) if known[p] else None for p in S.PARTS}
    share = {p: number(frame.get_column(p).sum()) / wall_total if known[p] else None for p in S.PARTS}
    per_rank = frame.group_by(S.RANK).agg(pl.col(S.WALL_MS).mean().alias("mean"), pl.col(S.WALL_MS).sum().alias("sum"))
    busy = frame.get_column(S.GPU_BUSY_MS)
    gpu_util = number(busy.sum()) / wall_total if known[S.GPU_BUSY_MS] else None
    mem = frame.get_column(S.PEAK_MEM_BYTES)
    samples = frame.get_column(S.BATCH_SAMPLES)
    has_samples = samples.null_count() < samples.len()
    step_share = frame.select(
        S.STEP, S.RANK, *[(pl.col(p).fill_null(0.0) / pl.col(S.WALL_MS)).alias(p) for p in S.PARTS]
    )
    if gpu_util is not None:
        step_share = step_share.with_columns((busy / frame.get_column(S.WALL_MS)).alias(S.GPU_BUSY_MS))
    return StepMetrics(
        steps=frame.height,
        ranks=frame.get_column(S.RANK).n_unique(),
        warmup_steps=skip,
        step_median_ms=number(frame.get_column(S.WALL_MS).median()),
        step_p90_ms=number(frame.get_column(S.WALL_MS).quantile(0.9, "linear")),
        breakdown_ms=breakdown,
        step_mean_ms=number(per_rank.get_column("mean").max()),  # a run lasts as long as its slowest rank
        busy_mean_ms=number(busy.mean()) if gpu_util is not None else None,
        mean_ms=means,
        share=share,
        gpu_util=gpu_util,
        peak_mem_bytes=None if mem.null_count() == mem.len() else int(number(mem.max())),
        gpu_memory_bytes=trace.run.gpu_memory_bytes,
        batch_samples=number(samples.median()) if has_samples else None,
        samples_per_s=1000.0 * number(samples.sum()) / number(per_rank.get_column("sum").max())
        if has_samples
        else None,
        step_share=step_share,
        kernels=kernels,
        sampled_steps=int(sampled.sum()),
        distributed=rank_analysis(frame),
    )

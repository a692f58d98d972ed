"""Per-step metrics: what a step costs and where its time goes. Pure functions over polars."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from analyzer.distributed import RankAnalysis, rank_analysis
from analyzer.kernel_metrics import KernelMetrics, kernel_metrics
from analyzer.thresholds import WARMUP_FRACTION, WARMUP_MAX_STEPS
from ingest import schema as S
from ingest.errors import TraceError
from ingest.reader import Trace


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
    mean_ms: dict[str, float | None]
    """Mean per step of wall_ms, gpu_busy_ms and each part (what run time and cost add up from)."""
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
    skip = warmup_steps(frame.group_by(S.RANK).len().get_column("len").min())
    frame = frame.filter(pl.col(S.STEP).rank("ordinal").over(S.RANK) > skip)
    kernels = kernel_metrics(frame)
    sampled = frame.get_column(S.KERNEL_STATS).is_not_null()
    if sampled.any() and not sampled.all():
        frame = frame.filter(~sampled)  # steps run under torch.profiler: kernel evidence only, not timings
    wall_total = frame.get_column(S.WALL_MS).sum()
    breakdown = {part: _median_or_none(frame, part) for part in S.PARTS}
    means = {c: (None if frame.get_column(c).null_count() == frame.height else float(frame.get_column(c).mean()))
             for c in (S.WALL_MS, S.GPU_BUSY_MS, *S.PARTS)}
    per_rank_mean = frame.group_by(S.RANK).agg(pl.col(S.WALL_MS).mean()).get_column(S.WALL_MS).max()
    means[S.WALL_MS] = float(per_rank_mean)  # a run lasts as long as its slowest rank
    share = {part: None if breakdown[part] is None else float(frame.get_column(part).sum()) / wall_total for part in S.PARTS}
    busy = frame.get_column(S.GPU_BUSY_MS)
    gpu_util = None if busy.null_count() == busy.len() else float(busy.sum()) / wall_total
    mem = frame.get_column(S.PEAK_MEM_BYTES)
    samples = frame.get_column(S.BATCH_SAMPLES)
    per_rank_wall = frame.group_by(S.RANK).agg(pl.col(S.WALL_MS).sum()).get_column(S.WALL_MS).max()
    step_share = frame.select(S.STEP, S.RANK, *[(pl.col(p).fill_null(0.0) / pl.col(S.WALL_MS)).alias(p) for p in S.PARTS])
    if gpu_util is not None:
        step_share = step_share.with_columns((frame.get_column(S.GPU_BUSY_MS) / frame.get_column(S.WALL_MS)).alias(S.GPU_BUSY_MS))
    gpu_mem = trace.run.get("gpu_memory_bytes")
    return StepMetrics(
        steps=frame.height,
        ranks=frame.get_column(S.RANK).n_unique(),
        warmup_steps=skip,
        step_median_ms=float(frame.get_column(S.WALL_MS).median()),
        step_p90_ms=float(frame.get_column(S.WALL_MS).quantile(0.9, "linear")),
        breakdown_ms=breakdown,
        mean_ms=means,
        share=share,
        gpu_util=gpu_util,
        peak_mem_bytes=None if mem.null_count() == mem.len() else int(mem.max()),
        gpu_memory_bytes=int(gpu_mem) if isinstance(gpu_mem, (int, float)) else None,
        batch_samples=None if samples.null_count() == samples.len() else float(samples.median()),
        samples_per_s=None if samples.null_count() == samples.len() else 1000.0 * float(samples.sum()) / per_rank_wall,
        step_share=step_share,
        kernels=kernels,
        sampled_steps=int(sampled.sum()),
        distributed=rank_analysis(frame),
    )


def _median_or_none(frame: pl.DataFrame, col: str) -> float | None:
    series = frame.get_column(col)
    if series.null_count() == series.len():
        return None
    return float(series.median())

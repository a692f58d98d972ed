"""Per-step metrics: what a step costs and where its time goes. Pure functions over polars.

Host waits (data, sync, unattributed host time) cost GPU time only while the GPU is idle: on
traces with GPU timings their *effective* share is capped, step by step, by the GPU's idle
time (the PyTorch profiler TensorBoard plugin counts DataLoader time the same way). On CPU
traces the effective share is the share itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from analyzer.analysis.aggregate import clamp, number
from analyzer.analysis.batch_split import BatchSplit
from analyzer.analysis.combine import Combined, per_step_frame
from analyzer.analysis.kernel_metrics import KernelMetrics
from analyzer.analysis.memory_fit import Memory, run_memory
from analyzer.analysis.partial import DATA_WAIT_WITH_CPU
from analyzer.analysis.ranks import RankAnalysis
from analyzer.analysis.thresholds import WARMUP_FRACTION, WARMUP_MAX_STEPS
from gpuanalyze.ingest.trace import schema as S

#: Host waits whose effective share is capped by GPU idle time.
WAITS: tuple[str, ...] = (S.DATA_WAIT_MS, S.SYNC_MS, S.OTHER_MS)
IDLE = "gpu_idle"
"""Column of ``StepMetrics.per_step``: GPU idle share of the step."""
UNEXPLAINED_IDLE = "gpu_idle_unexplained"
"""Column of ``StepMetrics.per_step``: GPU idle share not covered by data wait or sync."""
STEP_WALL = "step_wall_ms"
"""Column of ``StepMetrics.per_step``: the step's wall time summed over the ranks that ran it."""
STEP_RANKS = "step_ranks"
"""Column of ``StepMetrics.per_step``: how many ranks ran the step."""
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
    memory: Memory | None
    """Peak, persistent and per-step memory, the device's total, a creep (analysis.memory_fit); None without figures."""
    gpu_memory_bytes: int | None
    batch_samples: float | None
    samples_per_s: float | None
    per_step: pl.DataFrame
    """Per-step shares of wall time, one row per step number: the effective waits (columns named like
    the parts), the waits before the GPU-idle cap (RAW suffix), the GPU busy share (gpu_busy_ms; null
    without GPU timings), idle and unexplained idle, the wall time and the ranks that ran the step; for
    consistency across steps, steady state and the bootstrap (analysis.steady, analysis.stability). On a multi-rank run
    each share is summed over the ranks that ran the step (their waits over their wall time), so the
    frame grows with steps, not ranks x steps."""
    kernels: KernelMetrics | None = None
    """Kernel-level evidence, when steps carry kernel statistics."""
    distributed: RankAnalysis | None = None
    """Cross-rank skew and stragglers, for traces with several ranks."""
    lead_mean_ms: float | None = None
    """Mean host time from a step's start to its first recorded phase (``lead_ms``, part of other_ms: in a
    DataLoader loop, work after the previous optimizer step); None when not recorded."""
    batch_split: BatchSplit | None = None
    """Forward + backward split into per-step and per-sample cost, when a smaller batch in the run
    measures it (the median rank's)."""

    @property
    def peak_mem_bytes(self) -> int | None:
        return None if self.memory is None else self.memory.peak

    @property
    def sampled_steps(self) -> int:
        return self.accounting.profiler_windows

    def consistency(self, column: str, threshold: float, *, below: bool = False) -> float:
        """Fraction of analysed steps whose per-step share crosses ``threshold``."""
        if column not in self.per_step.columns or self.per_step.height == 0:
            return 0.0
        # numpy, not polars Series ops: the stability resampling calls this tens of thousands of
        # times per fleet, and each polars op is a query of its own (~0.3 ms)
        series = self.per_step.get_column(column)
        values = series.to_numpy()
        if series.null_count():  # unknown shares count as 0 (to_numpy made them NaN)
            values = np.nan_to_num(values.astype(np.float64), nan=0.0)
        hits = (values < threshold) if below else (values >= threshold)
        return number(float(hits.mean()) if hits.size else 0.0)


def warmup_steps(n: int) -> int:
    """Leading steps excluded as warm-up: lazy init, autotuning, first DataLoader workers."""
    return min(WARMUP_MAX_STEPS, int(n * WARMUP_FRACTION))


_PER_STEP_COLUMNS = {
    "step": S.STEP,
    "data": S.DATA_WAIT_MS,
    "sync": S.SYNC_MS,
    "other": S.OTHER_MS,
    "data_raw": S.DATA_WAIT_MS + RAW,
    "sync_raw": S.SYNC_MS + RAW,
    "other_raw": S.OTHER_MS + RAW,
    "busy": S.GPU_BUSY_MS,
    "idle": IDLE,
    "unexplained": UNEXPLAINED_IDLE,
    "wall": STEP_WALL,
    "ranks": STEP_RANKS,
}


def metrics_from(c: Combined, skip: int, gpu_memory_bytes: int | None) -> StepMetrics:
    """StepMetrics from ranks' combined partials (combine.py)."""
    wall_total = c.wall_total
    sums = c.step_sums.sums
    v = "c" if c.has_gpu else "u"
    eff = {S.DATA_WAIT_MS: f"data_{v}", S.SYNC_MS: f"sync_{v}", S.OTHER_MS: f"other_{v}"}
    q = c.quantiles
    return StepMetrics(
        steps=c.analysed,
        ranks=c.ranks,
        warmup_steps=skip,
        accounting=StepAccounting(rows=c.rows, warmup=c.warmup, profiler_windows=c.windows, analysed=c.analysed),
        step_median_ms=q[(S.WALL_MS, 0.5)],
        step_p90_ms=q[(S.WALL_MS, 0.9)],
        breakdown_ms={p: q[(p, 0.5)] if c.known[p] else None for p in S.PARTS},
        step_mean_ms=c.step_mean_ms,
        busy_mean_ms=c.means[S.GPU_BUSY_MS] if c.has_gpu else None,
        mean_ms={p: c.means[p] if c.known[p] else None for p in S.PARTS},
        share={p: clamp(c.sums[p] / wall_total) if c.known[p] else None for p in S.PARTS},
        effective={p: clamp(float(sums[k].sum()) / wall_total) for p, k in eff.items()},
        gpu_util=clamp(c.sums[S.GPU_BUSY_MS] / wall_total) if c.has_gpu else None,
        idle_unexplained=clamp(float(sums[f"unexpl_{v}"].sum()) / wall_total) if c.has_gpu else None,
        data_cpu_fraction=_cpu_fraction(c.sums),
        memory=run_memory(c.memory, gpu_memory_bytes, host=not c.has_gpu),
        gpu_memory_bytes=gpu_memory_bytes,
        batch_samples=q[(S.BATCH_SAMPLES, 0.5)] if c.known[S.BATCH_SAMPLES] else None,
        samples_per_s=c.samples_per_s,
        per_step=per_step_frame(c.step_sums, c.has_gpu, _PER_STEP_COLUMNS),
        kernels=c.kernels,
        distributed=c.distributed,
        lead_mean_ms=c.lead_mean_ms,
        batch_split=c.batch_split,
    )


def _cpu_fraction(sums: dict[str, float]) -> float | None:
    with_cpu = sums[DATA_WAIT_WITH_CPU]
    return clamp(sums[S.DATA_CPU_MS] / with_cpu) if with_cpu > 0 else None

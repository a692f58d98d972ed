"""Projected step time if a finding were fixed, from measured parts only, with the bound that caps it.

Each rule is documented in docs/projections.md with its assumptions. Means (not medians) are
used because run time is the sum of step times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from analyzer.analysis.findings import Finding
from analyzer.analysis.metrics import StepMetrics
from analyzer.machine.ceilings import Ceilings
from analyzer.machine.datasheet import lookup
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.runinfo import EndInfo, RunInfo

MAX_BATCH_MULTIPLIER = 4
DEFAULT_BATCH_MULTIPLIER = 2


@dataclass(frozen=True, slots=True)
class Projection:
    step_ms: float
    rule: str
    """The arithmetic, with the measured numbers, in words."""
    params: dict[str, Any] | None = None
    """The concrete fix the projection assumes (e.g. {"num_workers": 4})."""


def recommended_workers(run: RunInfo) -> int:
    """DataLoader workers to recommend: the host's cores per GPU process, between 2 and 8."""
    cores = int(run.cpu_count or 4)
    return max(2, min(8, cores))


def project(
    f: Finding, m: StepMetrics, run: RunInfo, ceilings: Ceilings | None, end: EndInfo | None = None
) -> Projection | None:
    wall = m.step_mean_ms
    busy = m.busy_mean_ms
    if f.bottleneck == "data_loading":
        workers = end.loader_workers if end is not None else None
        return _data(m, wall, busy, ceilings, recommended_workers(run) if workers == 0 else None)
    if f.bottleneck == "sync":
        return _straggler(m, wall, busy) if m.distributed and m.distributed.stragglers else _sync(m, wall, busy)
    if f.bottleneck == "batch_size":
        return _batch(m, wall, busy)
    if f.bottleneck == "kernels":
        return _kernels(m, wall, busy, run, ceilings)
    return None


def _floor(step: float, busy: float | None, what: str) -> tuple[float, str]:
    if busy is not None and busy > step:
        return busy, f"{what}, but no faster than the GPU-busy time {busy:.2f} ms"
    return step, what


def _data(
    m: StepMetrics, wall: float, busy: float | None, ceilings: Ceilings | None, workers: int | None
) -> Projection:
    data = m.mean_ms[S.DATA_WAIT_MS] or 0.0
    compute = wall - data
    step, rule = _floor(
        compute, busy, f"step {wall:.2f} ms minus data wait {data:.2f} ms = {compute:.2f} ms (compute path)"
    )
    params = None
    if workers:
        params = {"num_workers": workers}
        loading = data / workers
        rule += (
            f"; the loader ran in the main process (num_workers=0): with num_workers={workers} loading overlaps "
            f"compute and takes ~{data:.2f}/{workers} = {loading:.2f} ms per batch"
        )
        if loading > step:
            step = loading
    if ceilings is not None and ceilings.loader_samples_per_s and m.batch_samples:
        loader = 1e3 * m.batch_samples / ceilings.loader_samples_per_s
        if loader > step:
            step = loader
        rule += (
            f"; bounded by the loader at the measured synthetic ceiling {ceilings.loader_samples_per_s:,.0f} samples/s "
            f"= {loader:.2f} ms per batch of {m.batch_samples:.0f}"
        )
    return Projection(step, rule, params)


def _sync(m: StepMetrics, wall: float, busy: float | None) -> Projection:
    sync = m.mean_ms[S.SYNC_MS] or 0.0
    step, rule = _floor(wall - sync, busy, f"step {wall:.2f} ms minus blocking sync {sync:.2f} ms")
    if m.kernels is not None:
        comm = m.kernels.totals_ms["comm_exposed_ms"] / max(m.kernels.steps, 1)
        if comm > 0:
            step = max(step - comm, busy - comm if busy else 0.0)
            rule += f"; minus exposed communication {comm:.2f} ms (if fully overlapped)"
    return Projection(step, rule)


def _straggler(m: StepMetrics, wall: float, busy: float | None) -> Projection:
    s = m.distributed.stragglers[0]
    step = max(wall - s.excess_ms, 0.0)
    return Projection(
        step,
        f"step {wall:.2f} ms minus rank {s.rank}'s median excess {s.excess_ms:.2f} ms "
        "(every rank then waits only for the others' normal pace)",
    )


def _batch(m: StepMetrics, wall: float, busy: float | None) -> Projection | None:
    if busy is None:
        return None
    k = DEFAULT_BATCH_MULTIPLIER
    why = f"batch x{k} (no memory figures in the trace; assumed)"
    if m.peak_mem_bytes and m.gpu_memory_bytes:
        k = max(1, min(MAX_BATCH_MULTIPLIER, math.floor(0.9 * m.gpu_memory_bytes / m.peak_mem_bytes)))
        why = (
            f"batch x{k} (peak memory {m.peak_mem_bytes / 1e9:.1f} of {m.gpu_memory_bytes / 1e9:.1f} GB, "
            f"capped at x{MAX_BATCH_MULTIPLIER})"
        )
    if k == 1:
        return None
    data = m.mean_ms[S.DATA_WAIT_MS] or 0.0
    fixed = max(0.0, wall - busy - data)
    step = busy + data + fixed / k
    return Projection(
        step,
        f"{why}: GPU work {busy:.2f} ms and data wait {data:.2f} ms scale with the batch, the "
        f"other {fixed:.2f} ms per step (launches, host, idle) does not, so per current-batch worth "
        f"of samples: {busy:.2f} + {data:.2f} + {fixed:.2f}/{k} = {step:.2f} ms",
    )


def _kernels(
    m: StepMetrics, wall: float, busy: float | None, run: RunInfo, ceilings: Ceilings | None
) -> Projection | None:
    if busy is None:
        return None
    ratio, source = None, ""
    if ceilings is not None and ceilings.matmul_tflops.get("float32") and ceilings.matmul_tflops.get("bfloat16"):
        ratio = ceilings.matmul_tflops["bfloat16"] / ceilings.matmul_tflops["float32"]
        source = f"measured matmul bf16/fp32 = {ratio:.1f}x ({ceilings.path})"
    elif (spec := lookup(run.gpu_name)) and spec.bf16_tflops:
        ratio = spec.bf16_tflops / spec.fp32_tflops
        source = f"{spec.name} datasheet bf16/fp32 = {ratio:.1f}x (no measured ceilings; an upper bound)"
    if ratio is None or ratio <= 1:
        return None
    if m.kernels is not None:
        share = m.kernels.share_of_kernel_time("gemm_simt_fp32") + m.kernels.share_of_kernel_time("conv")
        what = f"fp32 GEMM/conv share of kernel time {share:.0%}"
    else:
        share = 1.0
        what = "no kernel statistics: all GPU-busy time treated as fp32 matmul (an upper bound on the gain)"
    if share <= 0:
        return None
    step = wall - busy * share * (1 - 1 / ratio)
    return Projection(step, f"step {wall:.2f} ms minus GPU-busy {busy:.2f} ms x {what} x (1 - 1/{ratio:.1f}); {source}")

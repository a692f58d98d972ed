"""Project a run onto the GPUs of the datasheet table. Estimates, and they say what they rest on.

Each part of the step is scaled by what bounds it: tensor-core / compute kernels by the dense
FLOPS ratio at the precision used, memory-bound kernels (elementwise, reduction, memcpy, memset)
by the memory-bandwidth ratio, communication kernels by the NVLink (else PCIe) bandwidth ratio;
host time and data loading are unchanged. Without kernel statistics, all GPU-busy time is
treated as compute-bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from analyzer.analysis.metrics import StepMetrics
from analyzer.analysis.thresholds import MEMORY_USABLE
from analyzer.errors import GpuAnalyzeError
from analyzer.machine.datasheet import GPUS, PCIE_X16_GBPS, GpuSpec, compute_precision, lookup
from analyzer.planning.cost import gpu_hours_usd, run_hours
from analyzer.planning.mfu import tensor_core_share
from analyzer.planning.toml_config import read_toml
from gpuanalyze.ingest.trace.runinfo import RunInfo

_MEMORY_BOUND = ("elementwise", "reduction", "memcpy", "memset")


@dataclass(frozen=True, slots=True)
class GpuWhatIf:
    gpu: str
    step_time_mean_ms: float
    speedup: float
    fits: bool | None
    """Peak memory of the run fits the GPU's memory (None when the trace has no peak memory)."""
    cost_per_run_usd: float | None


@dataclass(frozen=True, slots=True)
class WhatIf:
    source_gpu: str
    precision: str
    basis: str
    """What the projection rests on, in words."""
    targets: tuple[GpuWhatIf, ...]


def _link(spec: GpuSpec) -> float:
    return spec.nvlink_gbps or 2 * PCIE_X16_GBPS[spec.pcie_gen]


def what_if(
    m: StepMetrics, run: RunInfo, *, prices: dict[str, float] | None = None, steps_per_run: float | None = None
) -> WhatIf:
    src = lookup(run.gpu_name)
    if src is None:
        raise GpuAnalyzeError(
            f"what-ifs need the trace's GPU in the datasheet table; this trace's GPU is "
            f"{run.gpu_name or 'unknown (a CPU run?)'}"
        )
    busy = m.busy_mean_ms
    if busy is None:
        raise GpuAnalyzeError("what-ifs need GPU timings (gpu_busy_ms); this trace has none")
    wall = m.step_mean_ms
    precision, precision_basis = compute_precision(run.param_dtype, tensor_core_share(m.kernels))
    km = m.kernels
    if km is not None:
        mem = sum(km.share_of_kernel_time(c) for c in _MEMORY_BOUND)
        comm = km.share_of_kernel_time("communication")
        basis = (
            f"kernel statistics of {km.steps} sampled step(s): {1 - mem - comm:.0%} compute, {mem:.0%} "
            f"memory-bound, {comm:.0%} communication"
        )
    else:
        mem, comm = 0.0, 0.0
        basis = "no kernel statistics: all GPU-busy time scaled by FLOPS (compute-bound assumption)"
    compute = 1.0 - mem - comm
    host = max(0.0, wall - busy)
    targets = []
    for tgt in GPUS:
        f_src, f_tgt = src.peak_tflops(precision), tgt.peak_tflops(precision)
        if not f_src or not f_tgt:
            continue
        step = host + busy * (
            compute * f_src / f_tgt + mem * src.memory_bw_gbps / tgt.memory_bw_gbps + comm * _link(src) / _link(tgt)
        )
        need = None if m.memory is None else m.memory.need(1)  # what the run needs, against the same margin
        fits = None if need is None else need <= MEMORY_USABLE.value * tgt.memory_gb * 1e9
        price = (prices or {}).get(tgt.name)
        cost = None
        if price is not None and steps_per_run:
            cost = gpu_hours_usd(run_hours(step, steps_per_run) * run.world, price)
        targets.append(GpuWhatIf(tgt.name, step, wall / step, fits, cost))
    basis += (
        f"; measured on {src.name} at {precision} ({precision_basis}); "
        f"host and data time ({host:.2f} ms/step) unchanged; "
        "datasheet ratios, not measurements"
    )
    return WhatIf(src.name, precision, basis, tuple(sorted(targets, key=lambda t: t.step_time_mean_ms)))


def load_prices(path: Path) -> dict[str, float]:
    """GPU name -> USD per GPU-hour from a TOML file (your prices; none ship with gpuanalyze)."""
    data = read_toml(path, "GPU prices")
    known = {g.name for g in GPUS}
    unknown = sorted(set(data) - known)
    if unknown:
        raise GpuAnalyzeError(f"{path}: unknown GPU name(s) {', '.join(unknown)}; use: {', '.join(sorted(known))}")
    bad = [k for k, v in data.items() if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < math.inf]
    if bad:
        raise GpuAnalyzeError(
            f"{path}: the price of {', '.join(bad)} must be a non-negative number of USD per GPU-hour"
        )
    return {k: float(v) for k, v in data.items()}

"""Model FLOPs utilisation: achieved model FLOP/s against the datasheet peak and the measured matmul ceiling."""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzer.analysis.kernel_metrics import KernelMetrics
from analyzer.analysis.metrics import StepMetrics
from analyzer.errors import GpuAnalyzeError
from analyzer.machine.ceilings import Ceilings
from analyzer.machine.datasheet import compute_precision, lookup
from gpuanalyze.ingest.trace.runinfo import RunInfo


@dataclass(frozen=True, slots=True)
class Mfu:
    flops_per_step: float
    achieved_tflops: float
    """Per GPU: flops_per_step / mean step time / GPUs."""
    precision: str
    datasheet_tflops: float | None
    mfu_datasheet: float | None
    measured_tflops: float | None
    mfu_measured: float | None
    source: str


def mfu(flops_per_step: float, m: StepMetrics, run: RunInfo, ceilings: Ceilings | None) -> Mfu:
    """``flops_per_step`` counts the whole model step over all GPUs (e.g. PaLM per token x tokens per step).

    Raises GpuAnalyzeError when the FLOPs imply more than the GPU's peak: the input is wrong.
    """
    if not 0 < flops_per_step < math.inf:
        raise GpuAnalyzeError(f"FLOPs per step must be a positive number, not {flops_per_step!r}")
    gpus = max(run.world, 1)
    achieved = flops_per_step / (m.step_mean_ms / 1e3) / gpus / 1e12
    precision, basis = compute_precision(run.param_dtype, tensor_core_share(m.kernels))
    spec = lookup(run.gpu_name)
    peak = spec.peak_tflops(precision) if spec else None
    measured = ceilings.matmul_tflops.get(precision) if ceilings else None
    for limit, what in ((peak, "datasheet peak"), (measured, "measured matmul ceiling")):
        if limit and achieved > limit:
            raise GpuAnalyzeError(
                f"{flops_per_step:.3g} FLOPs per step over {gpus} GPU(s) at {m.step_mean_ms:.2f} ms per step is "
                f"{achieved:.1f} TFLOP/s per GPU, {achieved / limit:.0%} of the {precision} {what} ({limit:.1f}): "
                "more than the GPU can do; check the FLOPs per step (for the whole step, over all GPUs)"
            )
    return Mfu(
        flops_per_step,
        achieved,
        precision,
        peak,
        achieved / peak if peak else None,
        measured,
        achieved / measured if measured else None,
        (f"{spec.name} datasheet ({spec.source})" if spec else "GPU not in the datasheet table")
        + (f"; measured matmul ceiling from {ceilings.path}" if ceilings is not None and measured else "")
        + f"; precision {precision}: {basis}",
    )


def tensor_core_share(km: KernelMetrics | None) -> float | None:
    """Tensor-core share of GEMM/convolution kernel time; None without kernel statistics or matmuls."""
    if km is None:
        return None
    tc = km.totals_ms["gemm_tensor_core_ms"] + km.totals_ms["conv_tensor_core_ms"]
    total = tc + km.totals_ms["gemm_simt_fp32_ms"] + km.totals_ms["conv_ms"]
    return tc / total if total > 0 else None

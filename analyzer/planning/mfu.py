"""Model FLOPs utilisation: achieved model FLOP/s against the datasheet peak and the measured matmul ceiling."""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.analysis.metrics import StepMetrics
from analyzer.machine.ceilings import Ceilings
from analyzer.machine.datasheet import lookup
from gpuanalyze.ingest.runinfo import RunInfo

_PRECISION = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


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


def palm_flops_per_token(params: float, layers: int, heads: int, head_dim: int, seq_len: int) -> float:
    """PaLM (Chowdhery et al. 2022, appendix B): 6N + 12 L H Q T training FLOPs per token."""
    return 6 * params + 12 * layers * heads * head_dim * seq_len


def mfu(
    flops_per_step: float, m: StepMetrics, run: RunInfo, ceilings: Ceilings | None, precision: str | None = None
) -> Mfu:
    """``flops_per_step`` counts the whole model step over all GPUs (e.g. PaLM per token x tokens per step)."""
    gpus = max(run.world, 1)
    achieved = flops_per_step / (m.step_mean_ms / 1e3) / gpus / 1e12
    precision = precision or _PRECISION.get(str(run.param_dtype), "bfloat16")
    spec = lookup(run.gpu_name)
    peak = spec.peak_tflops(precision) if spec else None
    measured = ceilings.matmul_tflops.get(precision) if ceilings else None
    return Mfu(
        flops_per_step,
        achieved,
        precision,
        peak,
        achieved / peak if peak else None,
        measured,
        achieved / measured if measured else None,
        (f"{spec.name} datasheet ({spec.source})" if spec else "GPU not in the datasheet table")
        + (f"; measured matmul ceiling from {ceilings.path}" if ceilings is not None and measured else ""),
    )

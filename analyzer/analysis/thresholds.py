"""Every threshold the classifier uses, with where it comes from. docs/thresholds.md explains them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Threshold:
    value: float
    source: str


XPROF = (
    "XProf input-pipeline analyzer (openxla/xprof): >=20% of step waiting for input is 'highly input-bound', "
    ">=5% 'moderately'"
)
TB_PLUGIN = "PyTorch profiler TensorBoard plugin performance recommendations (pytorch/kineto tb_plugin)"
OURS = "gpuanalyze default, see docs/thresholds.md"

DATA_WAIT_HIGH = Threshold(0.20, XPROF)
DATA_WAIT_MODERATE = Threshold(0.05, XPROF + "; " + TB_PLUGIN + " flags DataLoader time > 5% of step")
SYNC_HIGH = Threshold(0.20, OURS + " (same scale as input-bound)")
SYNC_MODERATE = Threshold(0.05, OURS + " (same scale as input-bound)")
GPU_UTIL_LOW = Threshold(0.50, TB_PLUGIN + " flags GPU utilization < 50%")
GPU_UTIL_BUSY = Threshold(0.80, OURS + ": GPU busy most of the step, so the kernels themselves set the pace")
MEM_HEADROOM = Threshold(0.50, OURS + ": peak memory under half the device leaves room for a larger batch")

SHORT_KERNEL_US = Threshold(
    20.0,
    OURS + ": kernels under ~20 us are of the order of launch overhead (5-13 us measured on H200, docs/gpu-results.md)",
)
SIMT_GEMM_SHARE = Threshold(
    0.30, OURS + ": fp32 SIMT GEMMs run ~7-15x below tensor-core rates (H200 datasheet 67 vs 989 TFLOPS)"
)
MEMORY_BOUND_SHARE = Threshold(0.50, OURS + ": more than half of kernel time in unfused elementwise/reduction kernels")

#: Fraction of a GPU-bound fp32 step expected to be recoverable by tensor-core precisions;
#: a conservative 2x speed-up (H100 datasheet: 67 fp32 vs 989 dense bf16 TFLOPS) applied to busy time.
KERNEL_RECOVERABLE = 0.5

WARMUP_FRACTION = 0.10
WARMUP_MAX_STEPS = 3

#: Straggler detection (analyzer/distributed.py): a rank is slow on a step when its work exceeds the
#: step's baseline by more than both of these; a straggler when slow on at least this fraction of steps.
SLOW_STEP_MIN_MS = 1.0
SLOW_STEP_FRACTION = 0.05
STRAGGLER_FRACTION = 0.5

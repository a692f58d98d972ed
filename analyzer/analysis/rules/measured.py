"""The share a CPU precision projection measures from the trace's sampled profiler windows instead of assuming it.

A CPU run recorded with kernel windows (``analyzer.profile(kernel_windows=True)``) stores per sampled step
what its ATen ops took (ingest/cpu_ops.py, KernelStats ``cpu_*_ms``):
the **matmul share** of forward + backward: matmul and convolution op time as a share of the sampled
steps' wall time, carried over to the mean step, over its forward + backward (what bf16 autocast speeds up).
It is None when the trace has no sampled CPU window (then the model's own constant is used, and the
projection's rule says so).
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.analysis.aggregate import clamp
from analyzer.analysis.rules.rule import Context


@dataclass(frozen=True, slots=True)
class Measured:
    """A share measured from the sampled windows, with what it came from (for the projection's rule)."""

    share: float
    steps: int
    """Sampled steps it comes from."""
    basis: str


def window_ms(ctx: Context, field: str) -> tuple[float, int] | None:
    """(ms per step of a KernelStats CPU field, sampled steps): its share of the sampled steps' wall time times
    the mean step (a profiled step runs slower, and the host's speed moves between the window and the rest:
    the share carries over, the milliseconds do not); None when no sampled CPU window recorded ATen op time
    (a GPU run, or a CPU run recorded without kernel windows)."""
    km = ctx.m.kernels
    if ctx.gpu or km is None or km.steps <= 0 or km.wall_ms <= 0 or km.totals_ms.get("cpu_op_ms", 0.0) <= 0:
        return None
    return km.totals_ms.get(field, 0.0) / km.wall_ms * ctx.wall, km.steps


def matmul_share(ctx: Context, compute_ms: float) -> Measured | None:
    """Share of ``compute_ms`` (mean forward + backward per step) in matmul/convolution ops."""
    got = window_ms(ctx, "cpu_matmul_ms")
    if got is None or compute_ms <= 0:
        return None
    mm, steps = got
    share = clamp(mm / compute_ms)
    return Measured(
        share, steps, f"matmul/convolution ops {mm:.2f} ms of the mean step (their share of {steps} profiled steps)"
    )

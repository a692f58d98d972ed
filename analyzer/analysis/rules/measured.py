"""Shares a CPU projection measures from the trace's sampled profiler windows instead of assuming them.

A CPU run recorded with kernel windows (``analyzer.profile(kernel_windows=True)``) stores per sampled step
what its ATen ops took (ingest/cpu_ops.py, KernelStats ``cpu_*_ms``):
- the **matmul share** of forward + backward: matmul and convolution op time as a share of the sampled
  steps' wall time, carried over to the mean step, over its forward + backward (what bf16 autocast
  speeds up);
- a **lower bound on the per-call share** of the work a larger batch or micro-batch spreads: Python between
  the ops (module calls, hooks, the loop) and each op's dispatch are per call; the rest of the op time
  (``cpu_op_ms - cpu_dispatch_ms``) may grow with the samples or not (a 2 x 8 and a 16 x 1 micro-batch
  loop spend the same op time per op: at a few samples an op's time is mostly fixed), so the range runs
  from the bound to all of it, the point in the middle.
Each is None when the trace has no sampled CPU window (then the model's own constant is used, and the
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


def per_call_share(ctx: Context, work_ms: float) -> Measured | None:
    """The least share of ``work_ms`` (mean ms per step of the work a larger batch or micro-batch spreads) that
    is per call: all of it but the op time beyond each op's dispatch (Python between the ops and the ops'
    dispatch do not grow with the samples; of the op time, how much does is not measured: at a few samples
    per op it is mostly fixed too). ``share`` is that lower bound; the range runs from it to all of it."""
    ops = window_ms(ctx, "cpu_op_ms")
    dispatch = window_ms(ctx, "cpu_dispatch_ms")
    if ops is None or dispatch is None or work_ms <= 0:
        return None
    growing = max(0.0, ops[0] - dispatch[0])
    share = clamp(1.0 - growing / work_ms)
    return Measured(
        share,
        ops[1],
        f"of the mean step's {work_ms:.2f} ms, {work_ms - min(growing, work_ms):.2f} ms is Python between ATen ops "
        f"and their dispatch (its share of {ops[1]} profiled steps): per call; the ops' other {growing:.2f} ms may "
        "or may not grow with the samples",
    )


def per_call_range(measured: Measured) -> tuple[float, float, float]:
    """(point, low, high) of a per-call share whose lower bound the windows measured: the range from it to all
    of it, the point in the middle (nothing measured says where in it)."""
    low = measured.share
    return (low + 1.0) / 2, low, 1.0

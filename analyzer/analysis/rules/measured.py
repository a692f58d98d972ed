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

import numpy as np

from analyzer.analysis import thresholds as T
from analyzer.analysis.aggregate import clamp
from analyzer.analysis.rules.rule import Context
from gpuanalyze.ingest import schema as S


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


def _op_ms_at(ctx: Context, k: float) -> tuple[float, float, int] | None:
    """(mean ms per step of the op time with ``k`` times the samples per forward, of the op time at 1 x, sampled
    steps), interpolated between the replayed multipliers (S.CPU_OP_GROWN) and beyond the largest along its last
    slope; None when the windows carry no replay (a GPU run, a trace recorded before it, a batch not seen)."""
    base = window_ms(ctx, "cpu_op_ms")
    grown = {m: window_ms(ctx, f) for m, f in S.CPU_OP_GROWN.items()}
    if base is None or any(g is None or g[0] <= 0 for g in grown.values()):
        return None
    return _at_multiplier(k, [base[0], *(g[0] for g in grown.values() if g is not None)]), base[0], base[1]


def _at_multiplier(k: float, ys: list[float]) -> float:
    """The value at ``k`` times the samples of ``ys`` (its value at 1 x, then at each S.CPU_OP_GROWN multiplier):
    interpolated between them, beyond the largest along the last slope."""
    xs = [1.0, *(float(m) for m in S.CPU_OP_GROWN)]
    if k <= xs[-1]:
        return float(np.interp(k, xs, ys))
    return ys[-1] + (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) * (k - xs[-1])


def has_replay(ctx: Context) -> bool:
    """The sampled windows carry the sample replay (record/sample_replay.py)."""
    return _op_ms_at(ctx, 2.0) is not None


def dataset_share(ctx: Context) -> tuple[float, float] | None:
    """Shares of the training fetches' time in the Dataset's ``__getitem__`` calls (one per sample: they grow with
    the samples per fetch) and in the collate (per call for a few small samples, growing when it copies large
    ones); the iterator and the sampler's call are per fetch. From the end marker; None when the Dataset ran in
    workers or the recorder did not time it."""
    end = ctx.end
    if end is None or end.loader_workers != 0 or not end.fetch_ms or end.fetch_dataset_ms is None:
        return None
    return clamp(end.fetch_dataset_ms / end.fetch_ms), clamp((end.fetch_collate_ms or 0.0) / end.fetch_ms)


def replayed_per_call(
    ctx: Context, work_ms: float, k: float, data_ms: float = 0.0
) -> tuple[float, float, float, str] | None:
    """(point, low, high) of the per-call share of ``work_ms`` (mean ms per step of the work a ``k`` times larger
    batch or micro-batch spreads; ``data_ms`` of it the data wait) from the sample replay (record/sample_replay.py:
    the ops that touched the batch replayed at larger batches), and what it measured: the work grows by the op
    time's replayed growth, plus or minus SAMPLE_REPLAY_SLACK of it, ops that did not replay by none of their time
    (the fast end) to k times it (the slow end), half at the point, the fetch's ``__getitem__`` part
    (dataset_share) k times, and its collate none (the fast end) to k times (the slow end), half at the point.
    Python between the ops,
    dispatch and the rest of the fetch are per call. None without a replay."""
    at = _op_ms_at(ctx, k)
    if at is None or work_ms <= 0 or k <= 1:
        return None
    grown, op, steps = at
    unknown = (window_ms(ctx, S.CPU_OP_UNREPLAYED) or (0.0, 0))[0] * (k - 1)
    growth = max(0.0, grown - op)
    shares = dataset_share(ctx)
    data_share, collate_share = shares or (0.0, 0.0)
    data = data_ms * data_share * (k - 1)
    replayed = _collate_at(ctx, k)
    collate = data_ms * collate_share * ((replayed or k) - 1)
    if replayed is None:  # not replayed: none of it grows (the fast end) to all of it (the slow end)
        low, high = (growth + data) * (1 - T.SAMPLE_REPLAY_SLACK), growth * (1 + T.SAMPLE_REPLAY_SLACK) + data
        high += unknown + collate
        point = growth + unknown / 2 + data + collate / 2
    else:
        low = (growth + data + collate) * (1 - T.SAMPLE_REPLAY_SLACK)
        high = (growth + data + collate) * (1 + T.SAMPLE_REPLAY_SLACK) + unknown
        point = growth + unknown / 2 + data + collate

    def share(g: float) -> float:
        return clamp(1.0 - g / (work_ms * (k - 1)))

    basis = (
        f"the ops that touched the batch, replayed on this machine at {k:g}x their samples, grow the mean step's "
        f"{op:.2f} ms of op time by {growth:.2f} ms (their share of {steps} profiled steps"
        + (f"; {unknown / (k - 1):.2f} ms of ops did not replay: grown by none to all of it" if unknown > 0 else "")
        + ")"
        + (
            f", and the fetch's {data_ms:.2f} ms by {data + collate / (1 if replayed else 2):.2f} ms ({data_share:.0%} "
            f"of it in the Dataset's __getitem__ calls: x{k:g}; {collate_share:.0%} in the collate: "
            + (f"x{replayed:.2f} replayed)" if replayed else f"half of x{k:g})")
            if shares is not None and data_ms > 0
            else ""
        )
        + f": {share(point):.0%} of the {work_ms:.2f} ms is per call"
    )
    return share(point), share(high), share(low), basis


def _collate_at(ctx: Context, k: float) -> float | None:
    """The collate's time with ``k`` times the samples over its time (the end marker's replay of default_collate,
    interpolated as the op time is), None when not replayed."""
    end = ctx.end
    got = None if end is None else end.fetch_collate_growth
    if not got or len(got) != len(S.CPU_OP_GROWN):
        return None
    return _at_multiplier(k, [1.0, *got])

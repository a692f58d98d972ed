"""Gradient accumulation as micro-batches x the cost of one micro-batch.

A step of ``A`` micro-batches (the trace's end marker: ``fetches`` over ``steps``, one fetch per
micro-batch) pays, per micro-batch, a fetch and a forward + backward; each of those is a fixed
per-call part (the DataLoader's call, launching or dispatching the ops, Python between them) plus a
part that grows with the micro-batch's samples. The same samples per optimizer step in ``A / k``
micro-batches ``k`` times larger keep the per-sample part and divide the per-call part by ``k``; the
optimizer step and the rest of the step stay. A smaller batch within the run (analysis.batch_split)
measures the per-call share; without it the range spans all of it growing with the samples (no saving:
the slow end) to none of it (the fast end), the point at MICRO_UNMEASURED_FIXED (this model's own
constant). The learning rate stays: the samples per optimizer step do not change.
"""

from __future__ import annotations

from analyzer.analysis import thresholds as T
from analyzer.analysis.findings import Projection
from analyzer.analysis.fixes import MicroBatchFix
from analyzer.analysis.rules.rule import Context, bounded, fixed_share_range, unmeasured_range
from gpuanalyze.ingest.trace import schema as S


def micro_batches(ctx: Context) -> int | None:
    """Micro-batches per optimizer step (fetches per recorded step, rounded), None when the trace does not
    say or there is one per step."""
    end = ctx.end
    if end is None or not end.fetches or not end.steps:
        return None
    a = round(end.fetches / end.steps)
    return a if a >= 2 else None


def micro_batch_samples(ctx: Context, a: int) -> int | None:
    """Samples of one micro-batch: the first batch fetched, else the step's samples over ``a``."""
    end = ctx.end
    if end is not None and end.fetch_samples:
        return end.fetch_samples
    b = ctx.m.batch_samples
    return max(1, round(b / a)) if b else None


def enlargement(ctx: Context, a: int) -> int:
    """How many times larger a micro-batch the fix assumes: the largest divisor of ``a`` that memory allows
    (analysis.memory_fit, as for a larger batch; a run without a device total assumed to fit ``a``)."""
    most = None if ctx.m.memory is None else ctx.m.memory.largest()
    cap = a if most is None else max(1, most)
    return max(d for d in range(1, a + 1) if a % d == 0 and d <= cap)


def per_micro_ms(ctx: Context) -> float:
    """Mean ms per step repeated once per micro-batch: the fetch (data wait), forward + backward, and the loop's
    own Python between them (unattributed host time below HOST_MIN_MS per micro-batch: the loss scaling, the
    backward call, the loop; more than that is the host rule's)."""
    m = ctx.m
    fb = (m.mean_ms.get(S.FORWARD_MS) or 0.0) + (m.mean_ms.get(S.BACKWARD_MS) or 0.0)
    other = ctx.ms(m.effective[S.OTHER_MS])
    loop = other if other < T.HOST_MIN_MS * (micro_batches(ctx) or 1) else 0.0
    return ctx.ms(m.effective[S.DATA_WAIT_MS]) + fb + loop


def per_call(ctx: Context, work: float) -> tuple[float, float, float, str | None]:
    """(point, low, high) of the per-call share of ``work`` (ms per step of fetch + forward + backward), and what
    measured it: a smaller batch in the run, else None (the point MICRO_UNMEASURED_FIXED, the range 0 to 1)."""
    split = ctx.m.batch_split
    if split is not None:
        f, lo, hi = fixed_share_range(split.fixed_fraction)
        return (
            f,
            lo,
            hi,
            (
                f"a smaller batch in the run measures {f:.0%} of forward + backward as per call "
                f"({split.fixed_ms:.2f} ms + {split.per_sample_ms:.3f} ms/sample)"
            ),
        )
    f, lo, hi = fixed_share_range(None, T.MICRO_UNMEASURED_FIXED)
    return f, lo, hi, None


def micro_projection(ctx: Context, a: int, k: int) -> Projection:
    """The step with the same samples in ``a / k`` micro-batches ``k`` times larger."""
    wall = ctx.wall
    work = min(per_micro_ms(ctx), wall)
    micro = micro_batch_samples(ctx, a)

    def at(f: float) -> float:
        """The step when a share ``f`` of the per-micro-batch work is per call (does not grow with samples)."""
        return wall - work * f * (1.0 - 1.0 / k)

    f, lo_f, hi_f, basis = per_call(ctx, work)
    basis = basis or unmeasured_range(
        at, f"{f:.0%} (MICRO_UNMEASURED_FIXED)", "the per-call share", "none of it", "all of it"
    )
    each = f"{micro} sample(s)" if micro else "its samples"
    fix = MicroBatchFix(micro_batch=(micro or 1) * k, accumulate=a // k)
    rule = (
        f"{a} micro-batches of {each} per optimizer step, each paying a fetch and a forward + backward: "
        f"{work:.2f} ms per step (micro-batches x cost of one); in {a // k} micro-batches {k}x larger the per-call "
        f"part is paid {a // k} time(s): {basis}; step {wall:.2f} - {work:.2f} x {f:.0%} x (1 - 1/{k}) = {at(f):.2f} ms"
    )
    return bounded(
        ctx,
        at(f),
        f"micro-batch x{k}",
        {"the work that grows with the samples": at(hi_f)},
        rule,
        fix=fix,
        model=(at(hi_f), at(lo_f)),
    )

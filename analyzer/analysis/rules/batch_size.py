"""batch_size: too little work per step, so fixed per-step costs dominate.

On a GPU it shows as idle time that neither data wait nor sync explains (kernel launches, Python
between ops): a larger batch gives every launch more work. On a CPU it shows as the optimizer,
small host time and, in a batch-1 loop, a fetch that workers cannot speed up (their hand-over
costs more). The projection is per current batch worth of samples: that per-step cost is divided
by the batch multiplier, the rest of the step stays.
"""

from __future__ import annotations

from typing import ClassVar

from analyzer.analysis import thresholds as T
from analyzer.analysis.findings import Evidence, Projection
from analyzer.analysis.fixes import BatchFix, MicroBatchFix
from analyzer.analysis.memory_fit import Memory
from analyzer.analysis.metrics import UNEXPLAINED_IDLE
from analyzer.analysis.rules.accumulation import (
    enlargement,
    micro_batch_samples,
    micro_batches,
    micro_projection,
    per_call,
    per_micro_ms,
)
from analyzer.analysis.rules.data_loading import fetch_is_a_step_cost, other_step_costs, worker_gain
from analyzer.analysis.rules.host import preprocessing_share
from analyzer.analysis.rules.rule import (
    Context,
    Detection,
    FixRunsOn,
    Rule,
    bounded,
    fixed_share_range,
    gpu_only,
    unmeasured_range,
)
from analyzer.analysis.rules.workers import worker_plan
from gpuanalyze.ingest.trace import schema as S


def batch_multiplier(ctx: Context) -> tuple[int, str]:
    """How much larger a batch the projection assumes, and why: the largest that fits the device
    (analysis.memory_fit), at most MAX_BATCH_MULTIPLIER; without memory figures DEFAULT_BATCH_MULTIPLIER, assumed."""
    mem = ctx.m.memory
    most = None if mem is None else mem.largest()
    if mem is None or most is None:
        k = T.DEFAULT_BATCH_MULTIPLIER
        return k, f"batch x{k} (no memory figures and device total in the trace; assumed)"
    k = max(1, min(T.MAX_BATCH_MULTIPLIER, most))
    return k, f"batch x{k} (memory {mem.words(k)}; at most x{most} fits, x{T.MAX_BATCH_MULTIPLIER} assumed at most)"


def accumulation_projection(ctx: Context, why: str) -> Projection | None:
    """Batch x2 does not fit: the same micro-batch twice per optimizer step (gradient accumulation), memory as now;
    per current batch worth of samples the optimizer step is paid half as often. None for inference."""
    m = ctx.m
    if ctx.forward_only:
        return None
    optimizer = m.mean_ms.get(S.OPTIMIZER_MS) or 0.0
    step = ctx.wall - optimizer / 2
    rule = f"{why}: 2 micro-batches per optimizer step, per current batch: {ctx.wall:.2f} - {optimizer:.2f} / 2 ms"
    fix = MicroBatchFix(micro_batch=int(m.batch_samples), accumulate=2) if m.batch_samples else None
    return bounded(ctx, step, "gradient accumulation x2", {}, rule, fix=fix, per_batch_of=m.batch_samples)


def per_step_fixed_share(ctx: Context) -> float:
    """CPU traces: share of the step that a larger batch spreads over more samples: the optimizer,
    small unattributed host time, and a fetch that is itself a per-step cost (fetch_is_a_step_cost)."""
    return other_step_costs(ctx) + _fixed_data_wait(ctx)


def _fixed_data_wait(ctx: Context) -> float:
    """Data wait share that is a per-step cost (fetch_is_a_step_cost); 0 otherwise."""
    return ctx.m.effective[S.DATA_WAIT_MS] if fetch_is_a_step_cost(ctx) else 0.0


def others_ms(ctx: Context) -> float:
    """Mean ms per step another rule names and a larger batch leaves as it is: syncs and unattributed
    host time of the host rule's size (CPU traces). A data wait stays in: a DataLoader's cost is partly
    per batch (sampler, collate, the hand-over), measured on in-memory loops here."""
    m = ctx.m
    out = ctx.ms(m.effective[S.SYNC_MS])
    if not ctx.gpu and ctx.ms(m.effective[S.OTHER_MS]) >= T.HOST_MIN_MS:
        out += ctx.ms(m.effective[S.OTHER_MS])
    return out


def unexplained_idle(ctx: Context) -> float:
    """The per-step idle a larger batch spreads: on a measured GPU timeline the idle the host's dispatch owns
    (``launch``: in launch calls and the ops that make them); otherwise the GPU idle share that data wait, sync
    and input preprocessing (host.preprocessing_share) do not explain."""
    owners = ctx.owners
    if owners is not None:
        return owners.share("launch")
    return max(0.0, (ctx.m.idle_unexplained or 0.0) - preprocessing_share(ctx))


def batch_projection(ctx: Context, k: float, why: str) -> Projection:
    """Step time per current batch worth of samples with a batch ``k`` times larger.

        The per-step cost this rule measures (GPU idle no data wait or sync explains; on a CPU the
        optimizer, small host time and a fetch that is a per-step cost) is divided by ``k``. Of the rest,
        a smaller batch within the run measures how much grows with the batch (analysis.batch_split: the
        step as fixed ms + ms per sample); without one the range spans "all of it grows" (the high end)
        to "none of it does" (the low end), and the point is the middle (BATCH_UNMEASURED_FIXED); findings
    rank by the slow end of their range, so the unmeasured half does not lift this finding's rank. Time another
        rule names (syncs, large host time) grows with neither."""
    m = ctx.m
    wall = ctx.wall
    fixed, fixed_what = _per_step_part(ctx)
    rest = wall - fixed
    # Time another rule names (a sync, large host time) stays as it is.
    work = max(0.0, rest - others_ms(ctx))

    def at(f: float) -> float:
        """The step when a share ``f`` of the work (compute) does not grow with the batch either."""
        return rest - work * f + (fixed + work * f) / k

    f, lo_f, hi_f, basis = _fixed_share(ctx, work)
    basis = basis or unmeasured_range(
        at,
        f"{f:.0%} (BATCH_UNMEASURED_FIXED)",
        f"the fixed share of the {work:.2f} ms compute",
        "all of it growing with the batch",
        "none of it",
    )
    step = at(f)
    rule = (
        f"{why}: {fixed:.2f} ms per step ({fixed_what}) does not grow with the batch; of the other {rest:.2f} ms, "
        f"{basis}; per current batch worth of samples: {step:.2f} ms"
    )
    return bounded(
        ctx,
        step,
        f"batch x{k:g}",
        {"the work that grows with the batch": at(hi_f)},
        rule,
        fix=BatchFix(k),
        per_batch_of=m.batch_samples,
        model=(at(hi_f), at(lo_f)),
    )


def _per_step_part(ctx: Context) -> tuple[float, str]:
    """(ms per step a larger batch divides by its multiplier, what it is)."""
    if ctx.gpu:
        fixed = ctx.ms(unexplained_idle(ctx))
        fixed_what = "GPU idle that data wait and sync do not explain (launches, host work)"
    else:
        fixed = ctx.ms(per_step_fixed_share(ctx))
        fixed_what = "optimizer, loop overhead" + (" and the fetch" if _fixed_data_wait(ctx) > 0 else "")
    return min(max(fixed, 0.0), ctx.wall), fixed_what


def _fixed_share(ctx: Context, work: float) -> tuple[float, float, float, str | None]:
    """(point, low, high) of the share of ``work`` that does not grow with the batch, and what measured it: a
    smaller batch in the run; None: nothing (the point BATCH_UNMEASURED_FIXED over the whole of [0, 1]; a CPU
    run's profiled windows do not bound it: out of sample the bound made projections worse,
    benchmarks/held_out_batch.py)."""
    split = ctx.m.batch_split
    if split is not None:
        f, lo_f, hi_f = fixed_share_range(min(1.0, max(0.0, split.fixed_ms / work)) if work > 0 else 0.0)
        return (
            f,
            lo_f,
            hi_f,
            f"forward + backward measured as {split.fixed_ms:.2f} ms + {split.per_sample_ms:.3f} ms/sample "
            f"(batches of {split.usual:g} and {split.smaller:g} samples in the run): {f:.0%} of the "
            f"{work:.2f} ms compute is fixed",
        )
    return (*fixed_share_range(None), None)


def memory_advice(ctx: Context, mem: Memory) -> tuple[str, ...]:
    """Batch x2 does not fit: gradient accumulation (the projection), and what would make x2 fit, with its own."""
    forward, batch = ctx.m.mean_ms.get(S.FORWARD_MS), ctx.m.batch_samples
    half = "fits" if (mem.largest(0.5) or 0) >= 2 else "does not fit either"
    recompute = f" (about {forward:.2f} ms more per step)" if forward else ""
    return (
        f"Batch x2 does not fit ({mem.words(2)}): accumulate gradients over 2 micro-batches of "
        f"{f'{batch:.0f}' if batch else 'this batch'} per optimizer step instead (memory as now; scale the learning "
        "rate with the samples).",
        f"To fit x2 itself: bf16 autocast halves fp32 activations ({mem.words(2, 0.5)}: {half}); activation "
        "checkpointing (torch.utils.checkpoint per block) keeps only each block's input and recomputes its forward "
        f"in backward{recompute}.",
    )


def inference_advice(k: float) -> list[str | tuple[str, bool]]:
    """A forward-only trace (serving, evaluation): more requests per forward, not a training batch and its
    learning rate."""
    return [
        f"Batch more requests per forward (about {k:g}x as many, or continuous batching in a serving engine such "
        "as vLLM or TGI): each launch then does more work.",
        (
            "Capture the forward in CUDA graphs (torch.compile(model, mode='reduce-overhead'), or "
            "torch.cuda.CUDAGraph for a fixed shape) so the host launches it once.",
            True,
        ),
        ("Keep per-request Python (tokenisation, post-processing) off the forward's path.", True),
    ]


class BatchSize(Rule):
    bottleneck = "batch_size"
    headline = "BATCH SIZE: too little work per step keeps the GPU idle"
    cpu_headline = "BATCH SIZE: fixed per-step costs (optimizer, loop overhead) dominate each CPU step"
    fix_runs_on = FixRunsOn.HOST_ON_CPU_RUNS
    high = T.Threshold(1 - T.GPU_UTIL_LOW.value, T.GPU_UTIL_LOW.source)
    defining: ClassVar[dict[str, tuple[str, ...]]] = {
        "micro_batch_overhead": ("micro_batches_per_step", "per_micro_batch_share"),
        "launch_overhead": ("kernel_median_us", "idle_from_launch_or_host_wait", "idle_owned_by_launch"),
        "host_overhead": ("idle_from_launch_or_host_wait", "idle_owned_by_launch"),
    }
    fallback: ClassVar[dict[str, str]] = {"launch_overhead": "host_overhead"}
    record: ClassVar[str] = (
        "the GPU idles in gaps whose kernels were launched before the gap began (waits on events, other streams "
        "or the host's own blocking calls): record with CPU and CUDA activities and record_shapes=True, "
        "with_stack=True to see what the host and the streams wait on"
    )

    def detect(self, ctx: Context, *, relaxed: bool) -> Detection | None:
        m = ctx.m
        micro = self._micro(ctx, relaxed)
        if micro is not None:
            return micro
        floor = T.RELAXED if relaxed else T.IDLE_MODERATE.value
        if ctx.gpu:
            idle = unexplained_idle(ctx)
            if (m.gpu_util or 0.0) >= T.GPU_HEALTHY.value or idle < floor:
                return None
            km = m.kernels
            if ctx.owners is not None:  # dispatch owns the idle: launch-bound when the kernels are short
                launch = km is not None and (km.kernel_median_us or 0.0) < T.SHORT_KERNEL_US.value
            else:  # Launch overhead only when short launch gaps are most of the idle time (HTA's kernel-launch idle).
                launch = km is not None and km.totals_ms["idle_launch_ms"] >= T.LAUNCH_BOUND.value * km.idle_ms > 0
            return Detection(
                cause="launch_overhead" if launch else "host_overhead",
                share=idle,
                consistency=ctx.consistency(("launch",), T.IDLE_MODERATE.value, UNEXPLAINED_IDLE),
                evidence_steps=m.steps,
                summary=f"The GPU is busy {m.gpu_util:.0%} of the step; {idle:.0%} of the step it idles for reasons "
                "other than data or sync (kernel launches and Python between them): too little work per step.",
            )
        fixed = per_step_fixed_share(ctx)
        if fixed < (T.RELAXED if relaxed else T.PER_STEP_FIXED.value):
            return None
        handoff = _fixed_data_wait(ctx) > 0
        return Detection(
            cause="per_step_overhead",
            share=fixed,
            consistency=1.0,
            evidence_steps=m.steps,
            summary=f"Each step handles {m.batch_samples or 0:.0f} sample(s) in {ctx.wall:.2f} ms, and {fixed:.0%} of "
            "it is per-step cost that does not grow with the batch (optimizer, framework and loop overhead)"
            + ("; loading is too cheap per batch for worker processes to pay off" if handoff else "")
            + ": a larger batch spreads it over more samples.",
        )

    def _micro(self, ctx: Context, relaxed: bool) -> Detection | None:
        """Gradient accumulation over micro-batches whose per-micro-batch work a larger micro-batch spreads."""
        a = micro_batches(ctx)
        if a is None or enlargement(ctx, a) < 2:
            return None
        share = per_micro_ms(ctx) / ctx.wall if ctx.wall > 0 else 0.0
        if share < (T.RELAXED if relaxed else T.PER_STEP_FIXED.value):
            return None
        each = micro_batch_samples(ctx, a)
        return Detection(
            cause="micro_batch_overhead",
            share=share * per_call(ctx, per_micro_ms(ctx))[0] if ctx.m.batch_split is None else share,
            consistency=1.0,
            evidence_steps=ctx.m.steps,
            summary=f"Each optimizer step runs {a} micro-batches"
            + (f" of {each} sample(s)" if each else "")
            + f"; fetching and forward + backward, paid once per micro-batch, take {share:.0%} of the step: "
            "their per-call part is paid as many times.",
        )

    def evidence(self, ctx: Context, d: Detection) -> tuple[Evidence, ...]:
        m = ctx.m
        ev: list[Evidence] = []
        if d.cause == "micro_batch_overhead":
            return (
                Evidence(
                    "micro_batches_per_step",
                    float(micro_batches(ctx) or 1),
                    2.0,
                    ">=",
                    "micro-batches",
                    "batches fetched per optimizer step (the end marker's fetches over steps): gradient accumulation",
                ),
                Evidence(
                    "per_micro_batch_share",
                    per_micro_ms(ctx) / ctx.wall,
                    T.PER_STEP_FIXED.value,
                    ">=",
                    "fraction of step time",
                    "fetch + forward + backward, paid once per micro-batch (docs/projections.md)",
                ),
            )
        if ctx.gpu:
            util = m.gpu_util or 0.0
            ev.append(
                Evidence(
                    "gpu_utilization", util, T.GPU_HEALTHY.value, "<", "fraction of step time", T.GPU_HEALTHY.source
                )
            )
            ev.append(
                Evidence(
                    "gpu_idle_unexplained_share",
                    d.share,
                    T.IDLE_MODERATE.value,
                    ">=",
                    "fraction of step time",
                    T.IDLE_MODERATE.source,
                )
            )
            km = m.kernels
            if km is not None and km.kernel_median_us is not None:
                ev.append(
                    Evidence(
                        "kernel_median_us",
                        km.kernel_median_us,
                        T.SHORT_KERNEL_US.value,
                        "<",
                        "microseconds",
                        T.SHORT_KERNEL_US.source,
                    )
                )
            owners = ctx.owners
            if owners is not None and owners.idle_ms > 0:
                ev.append(
                    Evidence(
                        "idle_owned_by_launch",
                        owners.ms["launch"] / owners.idle_ms,
                        T.LAUNCH_BOUND.value,
                        ">=",
                        "fraction of GPU idle time",
                        "idle owners (docs/idle-owners.md): the host dispatching and launching kernels owns most "
                        "of the idle time",
                    )
                )
            elif km is not None and km.idle_ms > 0:
                launch = (km.totals_ms["idle_launch_ms"] + km.totals_ms["idle_host_wait_ms"]) / km.idle_ms
                ev.append(
                    Evidence(
                        "idle_from_launch_or_host_wait",
                        launch,
                        T.LAUNCH_BOUND.value,
                        ">=",
                        "fraction of GPU idle time",
                        T.LAUNCH_BOUND.source,
                    )
                )
        else:
            ev.append(
                Evidence(
                    "per_step_fixed_share",
                    d.share,
                    T.PER_STEP_FIXED.value,
                    ">=",
                    "fraction of step time",
                    T.PER_STEP_FIXED.source,
                )
            )
            data = _fixed_data_wait(ctx)
            plan = worker_plan(ctx, ctx.ms(data)) if data > 0 else None
            if plan is not None:
                why = "their per-batch hand-over costs more than they take off; loading stays in the training process"
                ev.append(worker_gain(ctx, plan, why, expect_gain=False))
        need, usable = (None, None) if m.memory is None else (m.memory.need(2), m.memory.usable)
        if need is not None and usable:
            source = T.MEMORY_USABLE.source + "; x the allocator's reserve per allocated byte, measured"
            ev.append(Evidence("memory_needed_at_x2", need / usable, 1.0, "<", "fraction of usable memory", source))
        return tuple(ev)

    def project(self, ctx: Context, d: Detection) -> Projection | None:
        if d.cause == "micro_batch_overhead":
            a = micro_batches(ctx) or 1
            return micro_projection(ctx, a, enlargement(ctx, a))
        k, why = batch_multiplier(ctx)
        return batch_projection(ctx, k, why) if k > 1 else accumulation_projection(ctx, why)

    def advise(self, ctx: Context, d: Detection, p: Projection) -> tuple[str, ...]:
        if d.cause != "micro_batch_overhead" and ctx.m.memory is not None and batch_multiplier(ctx)[0] == 1:
            return memory_advice(ctx, ctx.m.memory)
        if isinstance(p.fix, MicroBatchFix):
            return (
                f"Use fewer, larger micro-batches: DataLoader(batch_size={p.fix.micro_batch}) with "
                f"{p.fix.accumulate} gradient-accumulation step(s) per optimizer step: the same samples per step, "
                "so the learning rate stays; each micro-batch's per-call costs are then paid fewer times.",
                "If memory is short, take the largest micro-batch that fits; measure it with the trial below.",
            )
        k = p.fix.multiplier if isinstance(p.fix, BatchFix) else T.DEFAULT_BATCH_MULTIPLIER
        m = ctx.m
        recs: list[str | tuple[str, bool]] = []
        if ctx.forward_only:
            return gpu_only(ctx, inference_advice(float(k)))
        if m.batch_samples:
            recs.append(
                f"Raise the batch size about {k}x (from {m.batch_samples:.0f}) and scale the learning rate "
                "with it; if memory is short, keep the batch and use fewer, larger gradient-accumulation steps."
            )
        else:
            recs.append(f"Raise the batch size about {k}x and scale the learning rate with it.")
        recs += [
            (
                "Cut launch overhead: torch.compile(model, mode='reduce-overhead') or CUDA graphs fuse small kernels "
                "and "
                "replay them.",
                True,
            ),
            ("Move per-step Python work (logging, metric bookkeeping) off the step or do it every N steps.", True),
        ]
        if _fixed_data_wait(ctx) > 0:
            recs.append(
                "Keep loading in the training process (num_workers=0) while batches are this cheap to fetch: "
                "worker processes would add their per-batch cost."
            )
        return gpu_only(ctx, recs)

"""data_loading: each step waits for its input batch while the GPU (or the CPU compute) idles, or the GPU's busy
time is mostly host<->device copies (``copies``: KernelStats.copy_busy_ms). Only copies from page-locked memory
overlap kernels; pageable ones are staged and synchronous (CUDA C++ Programming Guide, "Asynchronous Concurrent
Execution"): data kept on the device, pinned memory with non_blocking, fewer larger copies are the fix.

The projection charges what the fix costs. DataLoader workers overlap loading with compute, but
every batch is handed over between processes: the training process pays WORKER_MAIN_COST_MS per
batch to receive it, each worker WORKER_SIDE_COST_MS (plus WORKER_SIDE_MS_PER_MIB for its bytes)
to collate and send it; and loading that is CPU work still needs the host's cores, which the
training loop uses too. Workers are advised only when that projection saves WORKER_MIN_GAIN.
When they would not, a fetch no larger than the loop's other per-step costs (a batch-1 loop) is
batch_size's per-step cost; a larger one is loading to make cheaper (cpu_bound_loading when it is
CPU work).
"""

from __future__ import annotations

from typing import ClassVar, TypeGuard

from analyzer.analysis import thresholds as T
from analyzer.analysis.findings import Evidence, Projection
from analyzer.analysis.fixes import WorkerFix
from analyzer.analysis.rules.rule import Context, Detection, FixRunsOn, Rule, bounded, gpu_only
from analyzer.analysis.rules.workers import WorkerPlan, cores_free, free_word, loader_cpu_share, worker_plan
from gpuanalyze.ingest.trace import schema as S

__all__ = ["DataLoading", "WorkerPlan", "fetch_is_a_step_cost", "other_step_costs", "worker_gain", "worker_plan"]


def other_step_costs(ctx: Context) -> float:
    """Share of the step in per-step costs besides loading: the optimizer and small unattributed host
    time (large unattributed time is the host rule's, syncs the sync rule's)."""
    m = ctx.m
    other = m.effective[S.OTHER_MS]
    return (m.share[S.OPTIMIZER_MS] or 0.0) + (other if ctx.ms(other) < T.HOST_MIN_MS else 0.0)


def fetch_is_a_step_cost(ctx: Context) -> bool:
    """The fetch is one more fixed per-step cost (batch_size's), not a loading problem: loading runs in
    the training process, workers would not save WORKER_MIN_GAIN (their hand-over costs more than
    they take off), and the fetch is no larger than the other per-step costs (a batch-1 loop). A
    fetch that dominates the step is loading work (data_loading's)."""
    share = ctx.m.effective[S.DATA_WAIT_MS]
    if share <= 0 or ctx.end is None or ctx.end.loader_workers != 0:
        return False
    return would_not_help(worker_plan(ctx, ctx.ms(share)), ctx.wall) and share <= other_step_costs(ctx)


def worker_gain(ctx: Context, plan: WorkerPlan, why: str, *, expect_gain: bool) -> Evidence:
    """What more DataLoader workers would save, as a share of the step, against WORKER_MIN_GAIN."""
    verb = "at least" if expect_gain else "less than"
    return Evidence(
        "worker_gain",
        (ctx.wall - plan.step_ms) / ctx.wall,
        T.WORKER_MIN_GAIN.value,
        ">=" if expect_gain else "<",
        "fraction of step time",
        f"num_workers={plan.workers} is projected to save {verb} this: {why} (docs/thresholds.md)",
    )


def helps(plan: WorkerPlan | None, wall: float) -> TypeGuard[WorkerPlan]:
    """More workers are possible, projected to save at least WORKER_MIN_GAIN of the step, and not slower
    at the high end of their range (a recommendation only when its projection says it helps)."""
    return (
        plan is not None
        and plan.workers > 0
        and plan.step_ms <= wall * (1 - T.WORKER_MIN_GAIN.value)
        and not may_be_slower(plan, wall)
    )


def may_be_slower(plan: WorkerPlan, wall: float) -> bool:
    """The high end of the workers' range reaches the current step: on this host they may not help."""
    return plan.high_ms is not None and plan.high_ms >= wall


def worst_case(ctx: Context, plan: WorkerPlan) -> Evidence:
    """Workers the point projects to help whose range says they may be slower: evidence against them."""
    high = plan.high_ms if plan.high_ms is not None else plan.step_ms
    return Evidence(
        "worker_gain_worst_case",
        (ctx.wall - high) / ctx.wall,
        T.WORKER_MIN_GAIN.value,
        "<",
        "fraction of step time",
        f"num_workers={plan.workers} would save {(ctx.wall - plan.step_ms) / ctx.wall:.0%} at the point, but at the "
        f"high end of its range (twice the hand-over, loading CPU-bound, compute on every free core) the step is "
        f"{high:.2f} ms: on this host workers may be slower (docs/projections.md)",
    )


def would_not_help(plan: WorkerPlan | None, wall: float) -> bool:
    """More workers are possible but projected to save less than WORKER_MIN_GAIN."""
    return plan is not None and plan.workers > 0 and not helps(plan, wall)


class DataLoading(Rule):
    bottleneck = "data_loading"
    headline = "DATA LOADING: each step waits for its input batch"
    fix_runs_on = FixRunsOn.HOST
    device_causes = frozenset({"copies"})
    high = T.DATA_WAIT_HIGH
    defining: ClassVar[dict[str, tuple[str, ...]]] = {
        "input_pipeline": ("data_wait_share", "gpu_idle_share"),
        "cpu_bound_loading": ("data_wait_share", "gpu_idle_share"),
        "copies": ("copy_share_of_busy", "copy_share"),
    }

    def detect(self, ctx: Context, *, relaxed: bool) -> Detection | None:
        share = ctx.own_share(S.DATA_WAIT_MS)
        floor = T.RELAXED if relaxed else T.DATA_WAIT_MODERATE.value
        of_busy, copies = copy_shares(ctx)
        if copies >= floor and copies > share and of_busy >= (T.RELAXED if relaxed else T.DOMINATES.value):
            return Detection(
                cause="copies",
                share=copies,
                consistency=1.0,
                evidence_steps=ctx.m.kernels.steps if ctx.m.kernels is not None else ctx.m.steps,
                summary=f"Copies between host and device fill {copies:.0%} of the GPU's time ({of_busy:.0%} of its "
                f"busy time, {ctx.ms(copies):.2f} ms of a {ctx.wall:.2f} ms step): the GPU mostly moves data.",
            )
        if share < floor:
            return None
        data = ctx.ms(share)
        plan = worker_plan(ctx, data)
        workers_useless = would_not_help(plan, ctx.wall)
        if workers_useless and fetch_is_a_step_cost(ctx):
            return None  # a fixed per-step cost workers cannot remove: batch_size names it
        cpu = loader_cpu_share(ctx)
        cpu_bound = workers_useless and (cpu is None or cpu >= T.CPU_BOUND_LOADING)
        wait = "while the GPU is idle " if ctx.gpu else ""
        return Detection(
            cause="cpu_bound_loading" if cpu_bound else "input_pipeline",
            share=share,
            consistency=ctx.m.consistency(S.DATA_WAIT_MS, T.DATA_WAIT_MODERATE.value),
            evidence_steps=ctx.m.steps,
            summary=f"The {ctx.loop} waits for the next batch {wait}{share:.0%} of the time "
            f"({data:.2f} ms of a {ctx.wall:.2f} ms step on average).",
        )

    def evidence(self, ctx: Context, d: Detection) -> tuple[Evidence, ...]:
        if d.cause == "copies":
            return _copy_evidence(ctx)
        threshold = T.DATA_WAIT_HIGH if d.share >= T.DATA_WAIT_HIGH.value else T.DATA_WAIT_MODERATE
        ev = [Evidence("data_wait_share", d.share, threshold.value, ">=", "fraction of step time", threshold.source)]
        if ctx.gpu:
            idle = 1.0 - (ctx.m.gpu_util or 0.0)
            ev.append(
                Evidence(
                    "gpu_idle_share",
                    idle,
                    T.DATA_WAIT_MODERATE.value,
                    ">=",
                    "fraction of step time",
                    "waiting on the host costs GPU time only while the GPU is idle (TensorBoard plugin)",
                )
            )
        plan = worker_plan(ctx, ctx.ms(d.share))
        if plan is not None and plan.workers > 0:
            gain = helps(plan, ctx.wall)
            if gain:
                why = "the hand-over on both sides and the cores everything shares included"
            elif d.cause == "cpu_bound_loading":
                why = (
                    "the loading is CPU work on the same cores, plus a hand-over; the batches must get cheaper to build"
                )
            else:
                why = "the wait is shorter than what a worker's hand-over adds; it must get shorter at its source"
            saves = plan.step_ms <= ctx.wall * (1 - T.WORKER_MIN_GAIN.value)
            ev.append(worst_case(ctx, plan) if not gain and saves else worker_gain(ctx, plan, why, expect_gain=gain))
        return tuple(ev)

    def project(self, ctx: Context, d: Detection) -> Projection | None:
        if d.cause == "copies":
            copies = ctx.ms(d.share)
            return bounded(
                ctx,
                ctx.wall - copies,
                "the step without its copies",
                {"the GPU's other work": max(0.0, ctx.busy - copies)},
                f"step {ctx.wall:.2f} ms minus {copies:.2f} ms of GPU time filled only by host<->device copies, if "
                "the data stayed on the device or its copies overlapped compute (pinned memory, non_blocking)",
            )
        data = ctx.ms(d.share)
        compute = ctx.wall - data
        limits = {"the compute path": compute}
        if ctx.gpu:
            limits["GPU-busy time"] = ctx.busy
        plan = worker_plan(ctx, data)
        base = f"step {ctx.wall:.2f} ms, of which data wait {data:.2f} ms"
        if helps(plan, ctx.wall):
            return bounded(
                ctx,
                plan.step_ms,
                f"loading with num_workers={plan.workers}",
                limits,
                f"{base}; {plan.rule}",
                fix=plan.fix,
                model=(plan.low_ms or plan.step_ms, plan.high_ms or plan.step_ms),
            )
        how = ""
        if plan is not None:
            if plan.workers > 0 and may_be_slower(plan, ctx.wall):
                how = f"{plan.rule}, but its range reaches {plan.high_ms or 0.0:.2f} ms, not below the step now; "
            elif plan.workers > 0:
                how = f"{plan.rule}: not {T.WORKER_MIN_GAIN.value:.0%} faster; "
            else:
                how = f"{plan.rule}; "
        return bounded(
            ctx,
            compute,
            "the compute path",
            limits,
            f"{base}; {how}if loading overlapped compute or were as fast as it: {ctx.wall:.2f} - {data:.2f}"
            " (an upper bound on the gain: it needs loading made cheaper or moved off the training process)",
        )

    def advise(self, ctx: Context, d: Detection, p: Projection) -> tuple[str, ...]:
        if d.cause == "copies":
            return _COPY_ADVICE + ((_PAGEABLE,) if _pageable(ctx) else ())
        fix = p.fix
        workers = fix.workers if isinstance(fix, WorkerFix) else None
        current = ctx.end.loader_workers if ctx.end is not None else None
        cpu = loader_cpu_share(ctx)
        recs: list[str | tuple[str, bool]] = []
        free = f"{cores_free(ctx):g} of {ctx.host.cores_available:g}"
        if workers is not None:
            recs.append(
                f"Load in parallel: DataLoader(num_workers={workers}) (the projection's setting; {free} core(s) "
                f"were {free_word(ctx)} to this job), with prefetch_factor=2 or more if waits are bursty."
            )
            recs.append("Keep workers alive between epochs with persistent_workers=True.")
        elif d.cause == "cpu_bound_loading":
            recs.append(
                f"Worker processes would not help here: loading is CPU work and {free} core(s) were {free_word(ctx)} "
                "to this job for it and the training loop; make each batch cheaper to build instead."
            )
            recs.append(
                "For data already in memory, fetch whole batches by index (a BatchSampler with a Dataset "
                "that takes a list of indices, or __getitems__) instead of one __getitem__ per sample."
            )
        elif current is None:
            recs.append(_background(cpu))
        recs += [
            (
                "Use pin_memory=True and move batches with .to(device, non_blocking=True) so the copy overlaps "
                "compute.",
                True,
            ),
            "Make Dataset.__getitem__ (or your batch function) cheaper: decode/augment once offline, cache decoded "
            "samples, or read from faster storage.",
            ("Move augmentation to the GPU (e.g. torchvision.transforms.v2 on device tensors).", True),
        ]
        return gpu_only(ctx, recs)


def copy_shares(ctx: Context) -> tuple[float, float]:
    """(host<->device copies' time alone on the GPU over its busy time, over the steps' time): the busy time only
    copies and memsets fill (KernelStats.copy_busy_ms), the part of it host<->device copies take; 0 without it."""
    km = ctx.m.kernels
    if km is None or not ctx.gpu:
        return 0.0, 0.0
    t = km.totals_ms
    moved = t["memcpy_ms"] + t["memset_ms"]
    if moved <= 0 or t["gpu_busy_ms"] <= 0 or km.wall_ms <= 0:
        return 0.0, 0.0
    alone = t["copy_busy_ms"] * min(1.0, (t["memcpy_h2d_ms"] + t["memcpy_d2h_ms"]) / moved)
    return min(1.0, alone / t["gpu_busy_ms"]), min(1.0, alone / km.wall_ms)


def _pageable(ctx: Context) -> bool:
    km = ctx.m.kernels
    return km is not None and km.totals_ms["memcpy_pageable_ms"] > 0


def _copy_evidence(ctx: Context) -> tuple[Evidence, ...]:
    of_busy, copies = copy_shares(ctx)
    return (
        Evidence(
            "copy_share_of_busy", of_busy, T.DOMINATES.value, ">=", "fraction of GPU-busy time", T.DOMINATES.source
        ),
        Evidence(
            "copy_share", copies, T.DATA_WAIT_MODERATE.value, ">=", "fraction of step time", T.DATA_WAIT_MODERATE.source
        ),
    )


_COPY_ADVICE = (
    "Keep the data on the device: move the model, its inputs and its buffers to the GPU once, outside the loop, and "
    "read results back every N steps, not every step.",
    "Copy from pinned memory and let it overlap compute: DataLoader(pin_memory=True) or tensor.pin_memory(), then "
    ".to(device, non_blocking=True).",
    "Make fewer, larger copies: batch small tensors into one buffer before copying (each copy pays a fixed cost).",
)
_PAGEABLE = (
    "These copies use pageable host memory: the driver stages them through a pinned buffer and the host waits; "
    "pinned memory removes the staging and lets them run beside kernels."
)


def _background(cpu: float | None) -> str:
    """Background loading for a loop without a DataLoader: a thread only for loading that waits (I/O);
    CPU-bound Python loading holds the GIL, so a thread would not overlap it with compute."""
    if cpu is not None and cpu < T.CPU_BOUND_LOADING:
        return (
            "Load in the background: the wait is mostly not CPU time (I/O), so a prefetching thread for a custom "
            "batch function overlaps it with compute; or a DataLoader with num_workers > 0."
        )
    return (
        "Load in the background with processes, not a thread: this loading is CPU work (or its CPU time was not "
        "recorded), and Python holds the GIL, so a prefetching thread would not overlap it with compute. Use a "
        "DataLoader with num_workers > 0, or make the batch function cheaper (vectorise it with numpy/torch)."
    )

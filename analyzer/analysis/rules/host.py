"""host: host time that no instrumented phase accounts for (not data, forward, backward, optimizer
or sync): a batch function that is not a DataLoader, logging, checkpointing, evaluation.

gpuanalyze cannot see what this time is, so the finding says so and says where to look; its
projection (the step without it) is an upper bound. On GPU traces it is GPU idle the host's own work owns
(docs/idle-owners.md): CPU ops that launch nothing (``cpu_work``), gaps no host call covers (``untraced``, named
by the user's frame where the capture has stacks), recorded CPU ops before the step's first kernel outside
DataLoader waits (``input_preprocessing``: host_before_gpu_ms), for DataLoader workers or the GPU.
"""

from __future__ import annotations

from analyzer.analysis import thresholds as T
from analyzer.analysis.findings import Evidence, Projection
from analyzer.analysis.kernel_metrics import KernelMetrics
from analyzer.analysis.owners import owned_consistency
from analyzer.analysis.rerun import rerun_command
from analyzer.analysis.rules.rule import Context, Detection, FixRunsOn, Rule, bounded
from gpuanalyze.ingest.trace import schema as S


class Host(Rule):
    bottleneck = "host"
    headline = "HOST: host work that no phase accounts for (or before the GPU work starts) takes the step"
    fix_runs_on = FixRunsOn.HOST
    high = T.HOST_HIGH

    def detect(self, ctx: Context, *, relaxed: bool) -> Detection | None:
        if ctx.gpu:
            return _preprocessing(ctx, relaxed)
        share = ctx.own_share(S.OTHER_MS)
        if share < (T.RELAXED if relaxed else T.HOST_MODERATE.value) or 1.0 - share < T.HOST_RECOGNISED:
            return None  # below threshold, or no phase recognised at all: nothing to attribute against
        if ctx.ms(share) < T.HOST_MIN_MS:
            return None  # the loop's own per-step Python (loss, zero_grad): batch_size's per-step overhead
        return Detection(
            cause="unattributed_host",
            share=share,
            consistency=ctx.m.consistency(S.OTHER_MS, T.HOST_MODERATE.value),
            evidence_steps=ctx.m.steps,
            summary=f"{share:.0%} of each step ({ctx.ms(share):.2f} ms) is host work outside data loading, forward, "
            "backward and the optimizer: gpuanalyze cannot see what it is.",
        )

    def evidence(self, ctx: Context, d: Detection) -> tuple[Evidence, ...]:
        threshold = T.HOST_HIGH if d.share >= T.HOST_HIGH.value else T.HOST_MODERATE
        name, value, source = _DEFINING.get(d.cause, ("unattributed_host_share", threshold.value, threshold.source))
        ev = [Evidence(name, d.share, value, ">=", "fraction of step time", source)]
        if d.cause == "input_preprocessing":
            idle = 1.0 - (ctx.m.gpu_util or 0.0)
            why = "host work before the first kernel costs step time only while the GPU idles"
            ev.append(Evidence("gpu_idle_share", idle, d.share, ">=", "fraction of step time", why))
        return tuple(ev)

    def project(self, ctx: Context, d: Detection) -> Projection | None:
        bound, gpu_busy, sentence = _PROJECTIONS.get(d.cause, _UNATTRIBUTED)
        removed = ctx.ms(d.share)
        return bounded(
            ctx,
            ctx.wall - removed,
            bound,
            {"GPU-busy time": ctx.busy} if gpu_busy else {},
            sentence.format(wall=ctx.wall, removed=removed),
        )

    def advise(self, ctx: Context, d: Detection, p: Projection) -> tuple[str, ...]:
        if d.cause == "cpu_work":
            return (
                "The GPU waits while the host runs CPU ops that launch nothing: move that work onto the GPU (keep "
                "tensors on the device), into DataLoader workers, or after the next step's kernels are queued.",
                "Open the trace at those gaps to name the ops, or wrap the code in "
                "torch.profiler.record_function('...').",
            )
        if d.cause == "untraced":
            return _untraced_advice(ctx)
        if d.cause == "input_preprocessing":
            return (
                "Move the preprocessing (video/image decode, a tokenizer or Hugging Face processor, augmentation) "
                "into the Dataset so DataLoader(num_workers > 0) workers run it while the GPU computes, or run it "
                "on the GPU (torchvision.io.decode_jpeg(device='cuda'), torchcodec or DALI GPU decode).",
                "gpuanalyze keeps only phase annotations of imported traces, so it cannot name these ops: open the "
                "trace at the step's start (the CPU ops before its first kernel) or wrap the code in "
                "torch.profiler.record_function('preprocess') to see it named.",
            )
        wrap = (
            "If batches come from your own function (no DataLoader, e.g. get_batch()), wrap the call in "
            "`with prof.data():` so gpuanalyze counts it as data wait; then load in the background."
        )
        every_n = (
            "Look for per-step logging, metric computation, evaluation or checkpointing in the loop, and do it every "
            "N steps."
        )
        profile = f"Profile the host side to see the rest (or pyinstrument): py-spy record -- {rerun_command(ctx.run)}"
        if after_optimizer(ctx, d):
            every_n = (
                f"{ctx.m.lead_mean_ms or 0.0:.2f} ms of it runs after optimizer.step(), before the next batch is "
                "fetched: per-step logging or metrics there (grad norms, .tolist(), .item()); do it every N steps."
            )
            return (every_n, profile)
        return (wrap, every_n, profile)


def _untraced_advice(ctx: Context) -> tuple[str, ...]:
    """Name host work the trace does not show (the user's frame, else what to record), then move it."""
    km = ctx.m.kernels
    frame = next(((f, ms / km.steps) for o, f, ms in km.owner_frames if o == "host_idle"), None) if km else None
    where = f"Most of it runs under {frame[0]} ({frame[1]:.3g} ms per step)" if frame else "Name it"
    return (
        f"{where}: record with torch.profiler.profile(with_stack=True) or wrap the {ctx.loop}'s parts in "
        "torch.profiler.record_function('...'), and look at what runs between the calls around the gaps (Python "
        "between ops, hooks, logging, tokenising).",
        "Then take it off the GPU's path: queue the next GPU work first, move it into DataLoader workers or onto "
        "the GPU, or do it every N steps.",
    )


def after_optimizer(ctx: Context, d: Detection) -> bool:
    """The unattributed time sits after the optimizer step of a DataLoader loop (lead_ms holds most of it):
    not a batch function to wrap in prof.data(), but work to do every N steps."""
    lead = ctx.m.lead_mean_ms
    loader = ctx.end is not None and ctx.end.loader_workers is not None
    return loader and lead is not None and lead >= T.LEAD_AFTER_OPTIMIZER * ctx.ms(d.share)


def before_gpu_share(km: KernelMetrics | None) -> float:
    """Host time before each step's first kernel (host_before_gpu_ms) over those steps' wall time."""
    if km is None or not km.wall_ms:
        return 0.0
    return km.totals_ms["host_before_gpu_ms"] / km.wall_ms


def preprocessing_share(ctx: Context) -> float:
    """Share of step time the host spends before each step's first kernel outside data waits and syncs, capped
    by the GPU's idle share (0 without kernel statistics)."""
    km = ctx.m.kernels
    if km is None or not ctx.gpu:
        return 0.0
    return min(before_gpu_share(km), 1.0 - (ctx.m.gpu_util or 0.0))


def _preprocessing(ctx: Context, relaxed: bool) -> Detection | None:
    """Host work while the GPU waits for it: before each step's first kernel (input preprocessing), or, on a
    measured GPU timeline, anywhere in the step: CPU ops that launch nothing (idle owner ``cpu_ops``), or host work
    the trace does not show (``host_idle``: no host call covers the gap), whichever holds more of the idle."""
    floor = T.RELAXED if relaxed else T.PREPROCESSING.value
    share = preprocessing_share(ctx)
    owners = ctx.owners
    km = ctx.m.kernels
    if owners is not None:  # preprocessing is recorded CPU work; host time no call covers is untraced
        share = min(share, owners.share("cpu_ops"))
        owner = max(("cpu_ops", "host_idle"), key=owners.share)
        held = owners.share(owner)
        if held > share and held >= floor:
            cause = "cpu_work" if owner == "cpu_ops" else "untraced"
            steps = owned_consistency(km, (owner,), T.PREPROCESSING.value)
            return _detection(ctx, cause, held, owners.steps, 1.0 if steps is None else steps, _OWNED[cause](ctx))
    if share < floor:
        return None
    assert km is not None
    what = (
        "is host work before the step's first kernel, outside DataLoader waits, while the GPU has nothing to run: "
        f"input preprocessing in the {ctx.loop}."
    )
    return _detection(ctx, "input_preprocessing", share, km.steps, 1.0, what)


def _detection(ctx: Context, cause: str, share: float, steps: int, consistency: float, what: str) -> Detection:
    """'{share} of each step ({ms} ms) {what}'."""
    return Detection(
        cause=cause,
        share=share,
        consistency=consistency,
        evidence_steps=steps,
        summary=f"{share:.0%} of each step ({ctx.ms(share):.2f} ms) {what}",
    )


#: What an owned cause is, in words after "{share} of each step ({ms} ms)" (``loop``: the loop in words).
_OWNED = {
    "cpu_work": lambda ctx: (
        "the GPU idles while the host runs CPU ops that launch no GPU work (CPU-side "
        "preprocessing, metrics, an optimizer on the CPU)."
    ),
    "untraced": lambda ctx: (
        "the GPU idles while the host runs work the trace does not show: no profiled call "
        f"covers these gaps of the {ctx.loop} (Python between ops, hooks, logging)."
    ),
}

#: Per cause other than unattributed host time: its defining evidence (name, threshold, source).
_DEFINING: dict[str, tuple[str, float, str]] = {
    "cpu_work": (
        "idle_owned_by_cpu_ops",
        T.PREPROCESSING.value,
        "idle owners (docs/idle-owners.md): the GPU idles while the host is inside CPU ops that launch no device work",
    ),
    "untraced": (
        "idle_owned_by_host_idle",
        T.PREPROCESSING.value,
        "idle owners (docs/idle-owners.md): the GPU idles in gaps no host call covers: host work the trace does not "
        "show",
    ),
    "input_preprocessing": ("host_before_gpu_share", T.PREPROCESSING.value, T.PREPROCESSING.source),
}

#: Per cause: what the projected step is bound by, whether GPU-busy time bounds it too, and its sentence
#: (``wall``: the step, ``removed``: the host time taken off it, both in ms).
_PROJECTIONS: dict[str, tuple[str, bool, str]] = {
    "cpu_work": (
        "CPU work off the GPU's path",
        True,
        "step {wall:.2f} ms minus {removed:.2f} ms of GPU idle owned by CPU ops, if that work ran on the "
        "GPU, in DataLoader workers, or overlapped with queued GPU work",
    ),
    "untraced": (
        "the host's untraced work off the GPU's path",
        True,
        "step {wall:.2f} ms minus {removed:.2f} ms of GPU idle in gaps no host call covers, if that host work were "
        "removed or overlapped with queued GPU work (what it is, the trace does not say)",
    ),
    "input_preprocessing": (
        "preprocessing off the training loop",
        True,
        "step {wall:.2f} ms minus {removed:.2f} ms of host work before the first kernel, if DataLoader "
        "workers (or the GPU) did it while the GPU runs the previous batch",
    ),
}
_UNATTRIBUTED = (
    "the instrumented phases",
    False,
    "step {wall:.2f} ms minus unattributed host time {removed:.2f} ms, if that work were removed or "
    "overlapped (an upper bound: what the time is spent on is unknown)",
)

"""Warm-up only: a trace whose analysed steps say nothing about the steady state gets no verdict and no
projection, only what to record.

By evidence, never by position (docs/idle-owners.md): every analysed step (fewer than FEW_STEPS) whose GPU idle
is WARMUP_STARTUP or more of its time owned by start-up work (compilation, module loading, device set-up:
schema.STARTUP_OWNERS; traces without idle owners: host time in start-up work, ingest/startup_work.py); or a
window whose idle is mostly CUDA graph capture. A step's number or where its first kernel falls decides
nothing. A run with steady steps after its start-up ones is judged on the steady ones (analysis.steady).
"""

from __future__ import annotations

from analyzer.analysis import thresholds as T
from analyzer.analysis.kernel_metrics import KernelMetrics, StartupStep, StepOwners
from analyzer.analysis.owners import OWNER_WORDS
from analyzer.analysis.rules.data_loading import copy_shares
from analyzer.analysis.rules.rule import Context
from gpuanalyze.ingest.timeline.startup_work import kind_of
from gpuanalyze.ingest.trace import schema as S

#: Steps, and start-up names per step, the verdict quotes.
QUOTED_STEPS = 3
QUOTED_OPS = 3
#: Wording, not thresholds: device work shown in microseconds below this many ms, and kinds of it shown from this
#: share of its time (as the kernels table shows them).
_IN_US_BELOW_MS = 0.1
_SHOWN_SHARE = 0.01
#: What to record instead, the same words in every warm-up verdict.
RECORD = (
    "record more steps: start the profiler after the warm-up, e.g. torch.profiler.schedule(skip_first=10, "
    "wait=1, warmup=1, active=3) (skip_first steps are not recorded, warmup steps are recorded and discarded)"
)
#: The same for an Nsight Systems capture (which starts with the process unless told otherwise).
RECORD_NSYS = (
    "capture the steady state: nsys profile --capture-range=cudaProfilerApi with torch.cuda.profiler.start() after "
    "the warm-up steps and torch.cuda.profiler.stop() a few steps later"
)


def _record(ctx: Context) -> str:
    """What to record instead, in the words of the profiler that made the trace."""
    return RECORD_NSYS if (ctx.run.source or "").startswith("nsys:") else RECORD


def warmup_why(ctx: Context) -> str | None:
    """Why the analysed steps are warm-up, not the steady state, with what to record; None when they may be
    judged. The evidence, where the trace has it, is the better answer: it says what the steps did."""
    if copies_hold(ctx):
        return _capture(ctx)
    return _by_evidence(ctx) or _start_up_capture(ctx) or _capture(ctx) or _no_device_work(ctx)


def copies_hold(ctx: Context) -> bool:
    """Host<->device copies fill DOMINATES of the GPU's busy time and of the steps less their start-up-owned idle: a
    copy moves its bytes at the link's speed whether or not it comes first (a cold call adds idle around the work:
    module loading, context and handle creation; not transfer time), so a copy-bound step is copy-bound warm or
    cold, and judged. Collectives (whose first call sets up its connections) and kernels (first calls autotune)
    are not: they stay a finding to confirm once warm (``_device_work``)."""
    km = ctx.m.kernels
    of_busy, _ = copy_shares(ctx)
    if km is None or of_busy < T.DOMINATES.value:
        return False
    warm = km.wall_ms - sum(km.totals_ms[S.owner_field(o)] for o in S.STARTUP_OWNERS)
    return warm > 0 and of_busy * km.totals_ms["gpu_busy_ms"] >= T.DOMINATES.value * warm


def _start_up_capture(ctx: Context) -> str | None:
    """A capture without steps (no annotations, no iterations found: one window, its GPU life) that is mostly set-up
    and teardown: the process set itself up for longer than its device worked, one pass with nothing repeated. The
    pass's idle is a first call's (first launches, handle creation, the allocator growing), not a steady state's."""
    run, km = ctx.run, ctx.m.kernels
    if run.profiler_steps != 0 or ctx.m.per_step.height != 1 or km is None:
        return None
    setup, teardown = (x.ms if x is not None else 0.0 for x in (run.setup, run.teardown))
    if setup + teardown < T.DOMINATES.value * (setup + teardown + ctx.wall):
        return None
    parts = ", ".join(f"{p.name} {_ms(p.ms)}" for p in run.setup.parts[:QUOTED_OPS]) if run.setup else ""
    return (
        f"the capture is mostly start-up: {_ms(setup)} of set-up ({parts or 'nothing recorded'}) and {_ms(teardown)} "
        f"of teardown around one {_ms(ctx.wall)} pass of GPU work with nothing repeated (a first call, not the "
        f"steady state); {_device_work(km)}no projection from it; {_record(ctx)}"
    )


def _no_device_work(ctx: Context) -> str | None:
    """The judged steps launch no device work at all, in a trace that has some (a partial last step after
    start-up ones): nothing in them is the steady state of the GPU work."""
    m = ctx.m
    km = m.kernels
    if not ctx.gpu or ctx.run.gpu_summary is None or (km is not None and km.kernel_count > 0):
        return None
    steps = ", ".join(f"#{int(s)}" for s in m.per_step.get_column(S.STEP).to_list()[:QUOTED_STEPS])
    return (
        f"the judged step(s) ({steps}, {ctx.wall:.3g} ms on average) launch no device work, though the trace has "
        f"some: the others are start-up work or left out (analysis.steady); no projection from them; {_record(ctx)}"
    )


def _capture(ctx: Context) -> str | None:
    """The GPU's idle time is mostly CUDA graph capture: launches recorded into a graph, nothing run (a capture
    window is set-up, not a training step)."""
    owners = ctx.owners
    if owners is None or owners.idle_ms <= 0 or owners.ms["graph_capture"] < 0.5 * owners.idle_ms:
        return None
    return (
        f"the GPU idles during CUDA graph capture ({owners.per_step('graph_capture'):.3g} ms per step: kernels "
        "launched into a graph, not run): a capture window, not a step that trains; no projection from it; "
        + _record(ctx)
    )


def _by_evidence(ctx: Context) -> str | None:
    """Every analysed step (fewer than FEW_STEPS of them, each with kernel statistics) is WARMUP_STARTUP or more
    start-up work. More steps than that, all doing it, is not warm-up but work repeated every step
    (recompilation on changing shapes, allocations after empty_cache): judged."""
    m = ctx.m
    km = m.kernels
    if km is None or not km.startup_steps or m.per_step.height >= T.FEW_STEPS:
        return None
    if m.accounting.profiler_windows or km.steps != m.accounting.analysed or km.startup_steps != km.steps:
        return None  # some analysed step has no start-up evidence (or no statistics at all)
    ranks = len({s.rank for s in km.startup_detail}) > 1
    window = ctx.run.profiler_steps == 0
    owned = {(o.step, o.rank): o for o in km.step_owners}
    quoted = "; ".join(
        _step_words(s, ranks, window, owned.get((s.step, s.rank))) for s in km.startup_detail[:QUOTED_STEPS]
    )
    more = km.startup_steps - min(QUOTED_STEPS, len(km.startup_detail))
    if more > 0:
        quoted += f"; {more} more step(s) like them"
    every, them = f"every analysed step ({km.startup_steps})", "them"
    if km.startup_steps == 1:
        every = "the one window (no ProfilerStep annotations)" if window else "the only analysed step"
        them = "it"
    return (
        f"{every} is start-up work for {T.WARMUP_STARTUP:.0%} or more of its time, warm-up, not the steady "
        f"state: {quoted}; {_device_work(km)}no projection from {them}; {_record(ctx)}"
    )


#: The finding a kind of device work filling DOMINATES of a cold capture's GPU time is, to confirm once warm.
_FINDING = {"communication": "sync/exposed_communication", "memcpy": "data_loading/copies"}
_FINDING |= {"gemm_simt_fp32": "kernels/fp32_math", "conv": "kernels/fp32_math"}


def _device_work(km: KernelMetrics) -> str:
    """What the GPU itself ran in those steps (how much, and its largest kinds of work), '' without any: a
    start-up capture still shows what its device work is bound by (a cold tensor-parallel forward mostly in
    all-gathers: exposed communication beside the warm-up, to confirm on a steady-state capture)."""
    total = sum(km.totals_ms[f"{c}_ms"] for c in S.KERNEL_CATEGORIES)
    if total <= 0:
        return ""
    shares = sorted(((c, km.share_of_kernel_time(c)) for c in S.KERNEL_CATEGORIES), key=lambda x: -x[1])
    top = ", ".join(f"{c} {v:.0%}" for c, v in shares[:2] if v >= _SHOWN_SHARE)
    amount = f"{total * 1e3:.3g} us" if total < _IN_US_BELOW_MS else f"{total:.3g} ms"
    (c, v), beside = shares[0], ""
    if v >= T.DOMINATES.value and c in _FINDING:
        beside = f"beside the warm-up, a {_FINDING[c]} finding to confirm on a steady-state capture; "
    return f"the GPU's own work in {'it' if km.steps == 1 else 'them'}: {amount} ({top}); {beside}"


def _ms(x: float) -> str:
    return f"{x:,.0f} ms" if x >= 100 else f"{x:.3g} ms"


def _step_words(s: StartupStep, ranks: bool, window: bool, owned: StepOwners | None) -> str:
    """'step #0 (400 ms): 350 ms (88%), mostly module loading (first launches of kernels) 343 ms; calls: ...': the
    largest start-up owner of the step's idle by what it is, then the start-up calls the host made."""
    where = "the window" if window else f"step #{s.step}"
    where = f"rank {s.rank} {where}" if ranks else where
    lead = ""
    if owned is not None:
        ms, owner = max((owned.ms[S.IDLE_OWNERS.index(o)], o) for o in S.STARTUP_OWNERS)
        lead = f", mostly {OWNER_WORDS[owner]} {_ms(ms)}" if ms > 0 else ""
    ops = ", ".join(f"{name} ({kind_of(name)}) {_ms(ms)} x{count}" for name, ms, count in s.ops[:QUOTED_OPS])
    ops = f"; calls: {ops}" if ops else ""
    return f"{where} ({_ms(s.wall_ms)}): {_ms(s.startup_ms)} ({s.startup_ms / s.wall_ms:.0%}){lead}{ops}"

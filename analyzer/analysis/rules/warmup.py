"""Warm-up only: a trace whose analysed steps say nothing about the steady state gets no verdict and no
projection, only what to record.

Two ways to tell (docs/thresholds.md, 'Warm-up only'): by position, one step among the run's first
WARMUP_MAX_STEPS or one step/window whose first kernel launches WARMUP_LEAD or more into it; by evidence,
every analysed step (fewer than FEW_STEPS) made WARMUP_STARTUP or more of start-up work the trace names
(compilation, cudaMalloc/cudaFree, module loading, device set-up: ingest/startup_work.py). A run with steady
steps after its start-up ones is judged as before (the fixed warm-up skip drops leading steps).
"""

from __future__ import annotations

from analyzer.analysis import thresholds as T
from analyzer.analysis.kernel_metrics import StartupStep
from analyzer.analysis.rules.host import before_gpu_share
from analyzer.analysis.rules.rule import Context
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.startup_work import kind_of

#: Steps, and start-up names per step, the verdict quotes.
QUOTED_STEPS = 3
QUOTED_OPS = 3
#: What to record instead, the same words in every warm-up verdict.
RECORD = (
    "record more steps: start the profiler after the warm-up, e.g. torch.profiler.schedule(skip_first=10, "
    "wait=1, warmup=1, active=3) (skip_first steps are not recorded, warmup steps are recorded and discarded)"
)


def warmup_why(ctx: Context) -> str | None:
    """Why the analysed steps are warm-up, not the steady state, with what to record; None when they may be
    judged. The evidence, where the trace has it, is the better answer: it says what the steps did."""
    return _by_evidence(ctx) or _by_position(ctx)


def _by_position(ctx: Context) -> str | None:
    """One step among the run's first WARMUP_MAX_STEPS, or one step (or one window of a trace without
    ProfilerStep annotations) whose first kernel launches WARMUP_LEAD or more into it. A single later step that
    starts its GPU work promptly is judged (at low confidence: one step of evidence)."""
    if ctx.m.per_step.height != 1:
        return None
    number = int(ctx.m.per_step.get_column(S.STEP)[0])
    lead = before_gpu_share(ctx.m.kernels)
    wall = f"{ctx.wall / 1e3:,.3g} s"
    if ctx.run.profiler_steps != 0 and number < T.WARMUP_MAX_STEPS:
        why = f"one step (#{number}, {wall}), among the run's first {T.WARMUP_MAX_STEPS}"
    elif lead >= T.WARMUP_LEAD:
        what = "one window (no ProfilerStep annotations)" if ctx.run.profiler_steps == 0 else f"one step (#{number})"
        why = f"{what} of {wall} whose first kernel launches {lead:.0%} into it"
    else:
        return None
    return (
        f"the trace holds {why}: warm-up (compilation, autotuning, first allocations), not the steady state; "
        f"no projection from it; {RECORD}"
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
    quoted = "; ".join(_step_words(s, ranks, window) for s in km.startup_detail[:QUOTED_STEPS])
    more = km.startup_steps - min(QUOTED_STEPS, len(km.startup_detail))
    if more > 0:
        quoted += f"; {more} more step(s) like them"
    every, them = f"every analysed step ({km.startup_steps})", "them"
    if km.startup_steps == 1:
        every = "the one window (no ProfilerStep annotations)" if window else "the only analysed step"
        them = "it"
    return (
        f"{every} is start-up work for {T.WARMUP_STARTUP:.0%} or more of its time, warm-up, not the steady "
        f"state: {quoted}; no projection from {them}; {RECORD}"
    )


def _ms(x: float) -> str:
    return f"{x:,.0f} ms" if x >= 100 else f"{x:.3g} ms"


def _step_words(s: StartupStep, ranks: bool, window: bool) -> str:
    where = "the window" if window else f"step #{s.step}"
    where = f"rank {s.rank} {where}" if ranks else where
    ops = ", ".join(f"{name} ({kind_of(name)}) {_ms(ms)} x{count}" for name, ms, count in s.ops[:QUOTED_OPS])
    return f"{where} ({_ms(s.wall_ms)}): {_ms(s.startup_ms)} ({s.startup_ms / s.wall_ms:.0%}) of {ops}"

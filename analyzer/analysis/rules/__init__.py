"""The rule engine: one rule per bottleneck, one ranking, one definition of a healthy run.

Ranking: findings are ordered by the step time their fix saves at the slow end of its range, then at
its point, then by share (findings.ranking_key). ``none`` is the verdict only when the run is healthy (every test of
``health`` passes) and no rule fires; a run that is not healthy always gets a named cause (the
largest remaining one, at low confidence, if no rule crosses its usual threshold).
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.analysis import thresholds as T
from analyzer.analysis.aggregate import number
from analyzer.analysis.findings import Bottleneck, Confidence, Evidence, Finding, ranking_key
from analyzer.analysis.metrics import StepMetrics
from analyzer.analysis.owners import OWNER_CLASS, OWNER_WORDS, leading_class
from analyzer.analysis.rules.batch_size import BatchSize
from analyzer.analysis.rules.data_loading import DataLoading
from analyzer.analysis.rules.host import Host
from analyzer.analysis.rules.kernels import FP32_CATEGORIES, Kernels
from analyzer.analysis.rules.rule import TIMELINE_CAUSES, Context, Rule, confidence_level, step_scale
from analyzer.analysis.rules.sync import Sync, blocked_share, exposed_comm_share
from analyzer.analysis.rules.warmup import warmup_why
from gpuanalyze.ingest.trace import schema as S

RULES: tuple[Rule, ...] = (DataLoading(), BatchSize(), Kernels(), Sync(), Host())
#: Each rule by the bottleneck it names (``none`` and ``unknown`` are no rule's).
RULE_OF: dict[str, Rule] = {r.bottleneck: r for r in RULES}

__all__ = ["RULES", "RULE_OF", "Context", "Verdict", "classify", "health", "led"]


@dataclass(frozen=True, slots=True)
class Verdict:
    bottleneck: Bottleneck
    confidence: Confidence
    findings: tuple[Finding, ...]
    health: tuple[Evidence, ...]


def health(ctx: Context) -> tuple[Evidence, ...]:
    """The definition of a healthy run, as tests (docs/thresholds.md, 'Healthy')."""
    m = ctx.m
    ev = [
        Evidence(
            "data_wait_share",
            m.effective[S.DATA_WAIT_MS],
            T.DATA_WAIT_MODERATE.value,
            "<",
            "fraction of step time",
            T.DATA_WAIT_MODERATE.source,
        ),
        Evidence(
            "sync_share",
            blocked_share(ctx) if ctx.owners is not None else m.effective[S.SYNC_MS],
            T.SYNC_MODERATE.value,
            "<",
            "fraction of step time",
            T.SYNC_MODERATE.source,
        ),
    ]
    if ctx.gpu:
        ev.insert(
            0,
            Evidence(
                "gpu_utilization",
                m.gpu_util or 0.0,
                T.GPU_HEALTHY.value,
                ">=",
                "fraction of step time",
                T.GPU_HEALTHY.source,
            ),
        )
        km = m.kernels
        if km is not None:
            fp32 = sum(km.share_of_kernel_time(c) for c in FP32_CATEGORIES)
            ev.append(
                Evidence(
                    "fp32_gemm_conv_share", fp32, T.FP32_MATH.value, "<", "fraction of kernel time", T.FP32_MATH.source
                )
            )
            ev.append(
                Evidence(
                    "exposed_communication_share",
                    exposed_comm_share(ctx),
                    T.SYNC_MODERATE.value,
                    "<",
                    "fraction of the GPU timeline",
                    T.SYNC_MODERATE.source,
                )
            )
    else:
        ev.append(
            Evidence(
                "unattributed_host_share",
                m.effective[S.OTHER_MS],
                T.HOST_MODERATE.value,
                "<",
                "fraction of step time",
                T.HOST_MODERATE.source,
            )
        )
    return tuple(ev)


def _healthy_confidence(m: StepMetrics, gpu: bool) -> Confidence:
    steps = m.per_step
    ok = (steps.get_column(S.DATA_WAIT_MS) < T.DATA_WAIT_MODERATE.value) & (
        steps.get_column(S.SYNC_MS) < T.SYNC_MODERATE.value
    )
    if gpu:
        ok = ok & (steps.get_column(S.GPU_BUSY_MS).fill_null(0.0) >= T.GPU_HEALTHY.value)
    else:
        ok = ok & (steps.get_column(S.OTHER_MS) < T.HOST_MODERATE.value)
    consistency = number(ok.mean() or 0.0) if steps.height else 0.0
    ops = m.kernels.kernel_count if gpu and m.kernels is not None else 0  # a busy timeline's operations are evidence
    scale, why = step_scale(consistency, max(m.steps, ops), "healthy on ")
    why = f"healthy on {consistency:.0%} of {m.steps} step(s), {ops:,} device operations" if ops > m.steps else why
    value = round(consistency * scale, 3)
    return Confidence(value, confidence_level(value), why)


#: What idle work queued on a dependency means, and what settles it (the other owners of no class: OWNER_WORDS).
_QUEUED = "the GPU waits with work launched, on something it is not running (another device, process or rank, its "
_QUEUED += "own scheduling): record every stream and rank to see what"


def _unowned(ctx: Context, findings: list[Finding]) -> str | None:
    """On a measured GPU timeline, when the idle time's largest owner is one no bottleneck class owns (work queued
    on a dependency, start-up work) and no rule fires, or when such owners lead (analysis.owners.leading_class), why
    the verdict is unknown, naming what else was found; None otherwise."""
    owners = ctx.owners
    if owners is None or owners.idle_ms <= 0:
        return None
    top = max((o for o in S.IDLE_OWNERS if OWNER_CLASS[o] is None), key=lambda o: owners.ms[o])
    led = leading_class(owners) == "unknown"
    if not led and (findings or OWNER_CLASS[max(S.IDLE_OWNERS, key=lambda o: owners.ms[o])] is not None):
        return None
    also = "; ".join(f"{f.bottleneck}/{f.cause} ({f.share:.0%} of the step)" for f in findings)
    return (
        f"not healthy: the GPU idles {1.0 - (ctx.m.gpu_util or 0.0):.0%} of the step and no bottleneck class owns "
        f"most of it; idle owners: {owners.words()}; {_QUEUED if top == 'queued' else OWNER_WORDS[top]}"
        + (f"; besides, the rules find {also}" if also else "")
    )


def led(ctx: Context, findings: list[Finding]) -> tuple[Finding, ...]:
    """The findings in the one ranking (ranking_key), the class the idle owners lead with first (leading_class)."""
    ranked = sorted(findings, key=ranking_key, reverse=True)
    cls = leading_class(ctx.owners)
    first = [f for f in ranked if f.bottleneck == cls][:1]
    return (*first, *(f for f in ranked if f not in first))


def _led_rule(ctx: Context, findings: list[Finding]) -> str | None:
    """Why the verdict is unknown when the class the idle owners lead with has no finding; None otherwise."""
    cls, owners = leading_class(ctx.owners), ctx.owners
    if cls is None or cls == "unknown" or owners is None or any(f.bottleneck == cls for f in findings):
        return None
    rule = RULE_OF[cls]
    why = rule.rejected(ctx) or "projects no fix that saves time"
    return f"not healthy: {cls}'s idle owners hold most of the GPU's idle ({owners.words()}), but its rule {why}"


def _unrecorded(ctx: Context) -> str | None:
    """A capture of a GPU run without its device activity (launch calls without kernels, an export without CUDA
    tables, CPU ops only where the trace names the GPU): no verdict, what it holds and what to record; one policy."""
    run = ctx.run
    if run.unrecorded_device:
        return run.unrecorded_device
    if run.source is not None and not ctx.gpu and not run.unrecorded_launches and (run.gpu_name or run.gpu_count):
        return (
            f"no GPU activity in the capture of a run on {run.gpu_name or 'a GPU'}: it holds CPU ops only "
            f"({ctx.m.steps} step(s) of {ctx.wall:.3g} ms), so no verdict is read from it; record with "
            "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]"
        )
    calls = ctx.run.unrecorded_launches
    if not calls:
        return None
    return (
        f"{calls} kernel launch/copy call(s) but no kernel records: the trace's device activity is missing (not a "
        "CPU-only run); record with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]"
    )


def _found(ctx: Context, healthy: bool) -> tuple[Finding, ...] | str:
    """The findings, ranked (``led``); or why the verdict is unknown (owners of no class lead, the leading class's
    rule cannot stand, no idle interval to read owners from)."""
    findings = [f for rule in RULES if (f := rule.evaluate(ctx)) is not None]
    unowned = None if healthy and not findings else _unowned(ctx, findings)
    if unowned is not None:
        return unowned
    lead = _led_rule(ctx, findings)
    if lead is not None:
        return lead
    if not findings and not healthy:
        relaxed = [f for rule in RULES if (f := rule.evaluate(ctx, relaxed=True)) is not None]
        findings = sorted(relaxed, key=lambda f: f.share, reverse=True)[:1]
    ranked, km = led(ctx, findings), ctx.m.kernels
    if ranked and km is not None and km.kernel_count < 2 and (ranked[0].bottleneck, ranked[0].cause) in TIMELINE_CAUSES:
        # who held the idle is read from intervals between device operations: with one or none there is none
        return (
            f"too little device work to say who holds the GPU's idle: {km.kernel_count} device operation(s) in "
            f"{km.steps} step(s) of {ctx.wall:,.4g} ms, no idle interval between two of them; record more steps of "
            f"the {ctx.loop}, e.g. torch.profiler.schedule(skip_first=10, wait=1, warmup=1, active=3)"
        )
    return ranked


def classify(ctx: Context) -> Verdict:
    unrecorded = _unrecorded(ctx)
    if unrecorded is not None:  # no health tests either: none can be read from a trace that lost its GPU work
        return Verdict("unknown", Confidence(0.0, "low", unrecorded), (), ())
    warmup = warmup_why(ctx)
    if warmup is not None:
        return Verdict("unknown", Confidence(0.0, "low", warmup), (), health(ctx))
    tests = health(ctx)
    healthy = all(e.passed for e in tests)
    ranked = _found(ctx, healthy)
    if isinstance(ranked, str):
        return Verdict("unknown", Confidence(0.0, "low", ranked), (), tests)
    if ranked:
        return Verdict(ranked[0].bottleneck, ranked[0].confidence, ranked, tests)
    if not healthy:
        failed = ", ".join(e.metric for e in tests if not e.passed)
        rejected = "; ".join(r for rule in RULES if (r := rule.rejected(ctx)) is not None)
        return Verdict(
            "unknown",
            Confidence(
                0.0,
                "low",
                f"not healthy ({failed} fail the health tests), but no rule can attribute the time or project a fix"
                + (f"; {rejected}" if rejected else ""),
            ),
            (),
            tests,
        )
    return Verdict("none", _healthy_confidence(ctx.m, ctx.gpu), (), tests)

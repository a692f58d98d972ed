"""What every rule shares: the context it reads, the detection it returns, and how a detection
becomes a Finding (evidence, projection, advice, confidence).

A rule is one object per bottleneck with four steps: ``detect`` (does it fire, with what share
of the step and on how many steps), ``evidence`` (the tests behind it, for and against),
``project`` (the step time after the fix, bounded by what remains the limit; None when no fix
is projected to help, and then the rule does not fire) and ``advise`` (what to change).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar

from analyzer.analysis import thresholds as T
from analyzer.analysis.aggregate import clamp
from analyzer.analysis.findings import (
    Bottleneck,
    Confidence,
    ConfidenceLevel,
    Evidence,
    Finding,
    Projection,
    Severity,
)
from analyzer.analysis.fixes import Fix
from analyzer.analysis.host_facts import HostFacts
from analyzer.analysis.metrics import StepMetrics
from analyzer.analysis.owners import OWNER_CLASS, IdleOwnership, owned_consistency, ownership
from analyzer.analysis.ranks import PHASE_NAMES
from analyzer.machine.ceilings import Ceilings
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo


@dataclass(frozen=True, slots=True)
class Context:
    """Everything a rule may read: the metrics and what the trace says about its run."""

    m: StepMetrics
    run: RunInfo
    end: EndInfo | None
    ceilings: Ceilings | None
    """Measured ceilings of the machine the trace was recorded on (None when there are none for it)."""
    host: HostFacts
    """The cores free to the job and how busy the host was (``analysis.host_facts``)."""
    memo: dict[tuple[object, ...], object] = field(init=False, compare=False, repr=False)
    """What the rules compute once per evaluation and share (the worker plan, rules.workers.worker_plan); every
    Context has its own (``dataclasses.replace`` for a resample starts empty: its metrics differ)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "memo", {})

    @property
    def wall(self) -> float:
        """Mean step time in ms (the slowest rank's): what run time adds up from."""
        return self.m.step_mean_ms

    @property
    def gpu(self) -> bool:
        """The trace has GPU timings (GPU rules apply, GPU-only advice is given)."""
        return self.m.gpu_util is not None

    @property
    def owners(self) -> IdleOwnership | None:
        """Who owned the GPU's idle time over the steps (analysis.owners); None without a measured GPU timeline."""
        return ownership(self.m.kernels) if self.gpu else None

    @property
    def forward_only(self) -> bool:
        """An imported trace with no backward and no optimizer step: inference (serving, evaluation, a benchmark
        of a forward), judged and worded as such."""
        m = self.m
        backward = m.share.get(S.BACKWARD_MS)
        optimizer = m.share.get(S.OPTIMIZER_MS)
        return self.run.source is not None and not backward and not optimizer

    def consistency(self, owners: tuple[str, ...], threshold: float, column: str) -> float:
        """Share of steps that show the cause: from the steps' own idle owners where the GPU timeline has them
        (the quantity the verdict reads), else from ``column``'s per-step share."""
        got = owned_consistency(self.m.kernels, owners, threshold) if self.owners is not None else None
        return self.m.consistency(column, threshold) if got is None else got

    @property
    def loop(self) -> str:
        """The recorded loop in words: 'inference loop' for a forward-only trace, else 'training loop'."""
        return "inference loop" if self.forward_only else "training loop"

    @property
    def busy(self) -> float:
        """Mean GPU-busy ms per step (0 without GPU timings)."""
        return self.m.busy_mean_ms or 0.0

    def ms(self, share: float) -> float:
        return share * self.wall

    def own_share(self, column: str) -> float:
        """``column``'s share of the steps less the stragglers' own excess in that phase over the other ranks': the
        straggler finding owns that time, so it is not a second finding (one cause reported once)."""
        d, name = self.m.distributed, PHASE_NAMES.get(column, column.removesuffix("_ms"))
        own = sum(max(0.0, dict(s.phase_diffs).get(name, 0.0)) for s in d.stragglers) if d else 0.0
        return self.m.effective[column] - (own / (d.ranks * self.wall) if d and own and self.wall > 0 else 0.0)


@dataclass(frozen=True, slots=True)
class Detection:
    cause: str
    share: float
    """Fraction of step time the cause takes, in [0, 1]."""
    consistency: float
    """Fraction of the steps the evidence comes from on which the per-step test holds."""
    evidence_steps: int
    """How many steps the evidence comes from (analysed steps, or steps with kernel statistics)."""
    summary: str


def severity(share: float, high: T.Threshold, relaxed: bool = False) -> Severity:
    if relaxed:
        return "low"
    return "high" if share >= high.value else "moderate"


#: Causes read from a step's GPU timeline, its busy split or its idle owners (docs/idle-owners.md, "Confidence").
_BUSY = "data_loading/copies sync/exposed_communication kernels/fp32_math kernels/memory_bound"
BUSY_CAUSES = frozenset(tuple(c.split("/")) for c in _BUSY.split())
TIMELINE_CAUSES = frozenset({c for c in OWNER_CLASS.values() if c is not None} | {("batch_size", "host_overhead")})


def timeline_evidence(ctx: Context, bottleneck: str, d: Detection) -> tuple[float, str, int] | None:
    """(dominance, in words, observations) of a cause read from the GPU timeline: the share of the GPU's idle its
    class's owners hold (a cause of the busy time: its share of the step over its share plus the idle), and the
    judged steps' device operations, each ending at most one idle interval; None for other causes."""
    km, owners, key = ctx.m.kernels, ctx.owners, (bottleneck, d.cause)
    if km is None or not ctx.gpu or not (key in BUSY_CAUSES or (key in TIMELINE_CAUSES and owners is not None)):
        return None
    n = max(km.steps, km.kernel_count)
    if owners is None or key in BUSY_CAUSES:
        lost = d.share + 1.0 - (ctx.m.gpu_util or 0.0)
        share = min(1.0, d.share / lost) if lost > 0 else 1.0
        return share, f"it is {share:.0%} of the step's time lost (its share and the GPU's idle)", n
    held = sum(owners.ms[o] for o, c in OWNER_CLASS.items() if c is not None and c[0] == bottleneck)
    share = min(1.0, held / owners.idle_ms) if owners.idle_ms > 0 else 0.0
    return share, f"its idle owners hold {share:.0%} of the GPU's idle", n


def confidence(
    d: Detection, evidence: tuple[Evidence, ...], relaxed: bool, timeline: tuple[float, str, int] | None = None
) -> Confidence:
    """Consistency across steps, scaled down for few steps and for contrary evidence; a cause read from the GPU
    timeline (``timeline_evidence``) by its dominance and the timeline's observations: one step of many device
    operations is evidence (docs/idle-owners.md, "Confidence")."""
    scale, why = step_scale(d.consistency, d.evidence_steps)
    if timeline is not None:
        dominance, said, n = timeline
        scale = max(scale, step_scale(d.consistency, n)[0]) * dominance
        why = f"{said}, on {d.consistency:.0%} of {d.evidence_steps} step(s), {n:,} device operations"
    support = sum(e.supports for e in evidence) / len(evidence) if evidence else 1.0
    if support < 1.0:
        why += f"; {sum(not e.supports for e in evidence)} of {len(evidence)} evidence item(s) against"
    if relaxed:
        scale = min(scale, T.FEW_STEPS_SCALE)
        why += "; below the usual thresholds (named as the largest remaining cause)"
    value = round(clamp(d.consistency * scale * support), 3)
    return Confidence(value, confidence_level(value), why)


def step_scale(consistency: float, n: int, what: str = "") -> tuple[float, str]:
    """How much ``n`` steps of evidence are worth (FEW_STEPS, ENOUGH_STEPS), and the reason in words."""
    if n < T.FEW_STEPS:
        return T.FEW_STEPS_SCALE, f"only {n} step(s) of evidence"
    if n < T.ENOUGH_STEPS:
        return T.SOME_STEPS_SCALE, f"{what}{consistency:.0%} of only {n} steps"
    return 1.0, f"{what}{consistency:.0%} of {n} step(s)"


def confidence_level(value: float) -> ConfidenceLevel:
    return "high" if value >= T.CONFIDENCE_HIGH else "medium" if value >= T.CONFIDENCE_MEDIUM else "low"


class FixRunsOn(Enum):
    """Where a bottleneck's fix runs: on the host's cores, or there only on a CPU run (whose steps are host work;
    on an accelerator, on the device). An oversubscribed host widens the ranges of the fixes that run on its cores."""

    HOST = "host"
    HOST_ON_CPU_RUNS = "host_on_cpu_runs"


class Rule(ABC):
    bottleneck: ClassVar[Bottleneck]
    headline: ClassVar[str]
    """The verdict's headline, as every renderer shows it."""
    cpu_headline: ClassVar[str | None] = None
    """The headline on a run that used no accelerator, where it needs other words."""
    fix_runs_on: ClassVar[FixRunsOn]
    device_causes: ClassVar[frozenset[str]] = frozenset()
    """Causes whose fix runs on the device whatever ``fix_runs_on`` says (copies kept on it or overlapped)."""
    high: ClassVar[T.Threshold]
    defining: ClassVar[dict[str, tuple[str, ...]]] = {}
    """Per cause, the evidence items that define it: when one is shown and fails, the cause does not stand."""
    fallback: ClassVar[dict[str, str]] = {}
    """Per cause, the cause it falls back to when its defining test fails (that one's tests must then pass)."""
    record: ClassVar[str] = ""
    """What to record so a cause whose defining test failed can be decided."""

    def fix_on_host(self, cause: str, gpu: bool) -> bool:
        """The fix of ``cause`` is CPU work on the host's cores (loading, host time, a CPU run's steps)."""
        if cause in self.device_causes:
            return False
        return self.fix_runs_on is FixRunsOn.HOST or (self.fix_runs_on is FixRunsOn.HOST_ON_CPU_RUNS and not gpu)

    def failed_test(self, evidence: tuple[Evidence, ...], cause: str) -> Evidence | None:
        """The first defining evidence item of ``cause`` that is shown and fails, if any."""
        names = self.defining.get(cause, ())
        return next((e for e in evidence if e.metric in names and not e.passed), None)

    def standing(self, ctx: Context, d: Detection) -> tuple[Detection, tuple[Evidence, ...]] | Evidence:
        """The detection whose defining tests pass (the cause itself or its fallback) with its evidence, or the
        defining item that failed."""
        evidence = self.evidence(ctx, d)
        failed = self.failed_test(evidence, d.cause)
        if failed is None:
            return d, evidence
        if d.cause in self.fallback:
            other = dataclasses.replace(d, cause=self.fallback[d.cause])
            evidence = self.evidence(ctx, other)
            if self.failed_test(evidence, other.cause) is None:
                return other, evidence
        return failed

    def rejected(self, ctx: Context) -> str | None:
        """Why the rule's detection does not stand (its defining test failed), with what to record; None if it
        does not fire or stands."""
        d = self.detect(ctx, relaxed=False) or self.detect(ctx, relaxed=True)
        if d is None:
            return None
        got = self.standing(ctx, d)
        if not isinstance(got, Evidence):
            return None
        e = got
        return (
            f"{self.bottleneck}/{d.cause} fails its defining test ({e.metric} {e.value:.3g} {e.comparison} "
            f"{e.threshold:g} does not hold){': ' + self.record if self.record else ''}"
        )

    def evaluate(self, ctx: Context, *, relaxed: bool = False) -> Finding | None:
        """The finding, or None when the rule does not fire, its defining test fails, or no fix is projected to
        help."""
        d = self.detect(ctx, relaxed=relaxed)
        if d is None:
            return None
        got = self.standing(ctx, d)
        if isinstance(got, Evidence):
            return None
        d, evidence = got
        projection = self.project(ctx, d)
        if projection is None or projection.saved_ms < T.MIN_SAVING * ctx.wall:
            return None
        return Finding(
            bottleneck=self.bottleneck,
            cause=d.cause,
            severity=severity(d.share, self.high, relaxed),
            share=clamp(d.share),
            summary=d.summary,
            evidence=evidence,
            recommendations=self.advise(ctx, d, projection),
            consistency=clamp(d.consistency),
            confidence=confidence(d, evidence, relaxed, timeline_evidence(ctx, self.bottleneck, d)),
            projection=projection,
        )

    @abstractmethod
    def detect(self, ctx: Context, *, relaxed: bool) -> Detection | None: ...

    @abstractmethod
    def evidence(self, ctx: Context, d: Detection) -> tuple[Evidence, ...]: ...

    @abstractmethod
    def project(self, ctx: Context, d: Detection) -> Projection | None: ...

    @abstractmethod
    def advise(self, ctx: Context, d: Detection, p: Projection) -> tuple[str, ...]: ...


def bounded(
    ctx: Context,
    step: float,
    what: str,
    limits: dict[str, float],
    rule: str,
    fix: Fix | None = None,
    per_batch_of: float | None = None,
    model: tuple[float, float] | None = None,
) -> Projection:
    """The projection ``step`` ("what" limits it), raised to the largest of ``limits`` (what remains
    the limit once the cause is fixed: GPU-busy time, the compute path, ...) and kept within
    [0, current step]: never below what remains, never slower than now. ``model``: the (low, high)
    steps the model's assumptions allow (default: the point itself; a cause removed by a change the
    projection cannot size is the time it owns removed); analysis.judge widens them by step-to-step and
    run-to-run variation."""
    wall = ctx.wall
    bound = what
    low, high = model if model is not None else (step, step)
    floor = 0.0
    if limits:
        name, floor = max(limits.items(), key=lambda kv: kv[1])
        if floor > step:
            step, bound = floor, name
            rule += f"; no faster than {name} ({floor:.2f} ms)"
    step = min(max(step, 0.0), wall)
    low = min(max(low, floor, 0.0), step)
    high = max(high, step)
    return Projection(
        step_ms=step,
        current_ms=wall,
        rule=rule,
        bound=f"{bound}: {step:.2f} ms",
        fix=fix,
        per_batch_of=per_batch_of,
        low_ms=low,
        high_ms=high,
    )


def fixed_share_range(
    measured: float | None, unmeasured: float = T.BATCH_UNMEASURED_FIXED
) -> tuple[float, float, float]:
    """The share of per-call work a batch change assumes, and its range: a measured share (a smaller batch in
    the run) plus or minus BATCH_SPLIT_SLACK, else
    the model's own ``unmeasured`` point (the batch model's BATCH_UNMEASURED_FIXED, the micro-batch model's
    MICRO_UNMEASURED_FIXED) over the whole of [0, 1]."""
    if measured is None:
        return unmeasured, 0.0, 1.0
    return measured, max(0.0, measured - T.BATCH_SPLIT_SLACK), min(1.0, measured + T.BATCH_SPLIT_SLACK)


def unmeasured_range(at: Callable[[float], float], point: str, what: str, zero: str, one: str) -> str:
    """The words for a share nothing in the run measures (no smaller batch in it): the model's ``point`` and the
    range from ``at(0)`` (``zero``: none of the work is per call) to ``at(1)`` (``one``: all of it)."""
    return (
        f"nothing in the run measures {what} (no smaller batch in the run): the point takes {point}, the range "
        f"spans {zero} ({at(0.0):.2f} ms) to {one} ({at(1.0):.2f} ms)"
    )


def gpu_only(ctx: Context, recs: list[str | tuple[str, bool]]) -> tuple[str, ...]:
    """Recommendations, dropping those marked GPU-only when the run has no GPU."""
    out = []
    for r in recs:
        if isinstance(r, tuple):
            text, needs_gpu = r
            if needs_gpu and not ctx.gpu:
                continue
            out.append(text)
        else:
            out.append(r)
    return tuple(out)

"""From a Context to the verdict a performance engineer can sign: the rules' findings on the steady
steps, their stability over resamples of the steps, each projection as a range, confidence that
reflects evidence, stability and the host, and periodic spikes as a finding of their own.

The rules see the steady steps (``ctx.m``: outliers and settling steps left out, analysis.steady);
the run's cost is the mean of every analysed step (``full``), so every projection gets back the
time the left-out steps add to the mean (the fix leaves them as they are), less the part of it the
finding's own cause owns (analysis.left_out: those stalls leave with the fix).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from analyzer.analysis import thresholds as T
from analyzer.analysis.contention import contended_confidence, contention
from analyzer.analysis.findings import Confidence, Finding
from analyzer.analysis.fixes import BatchFix
from analyzer.analysis.left_out import cause_part, owned_left_out_ms
from analyzer.analysis.metrics import StepMetrics
from analyzer.analysis.rules import RULE_OF, Context, Verdict, classify, led
from analyzer.analysis.rules.rule import confidence_level
from analyzer.analysis.spikes import spike_finding
from analyzer.analysis.stability import Stability, stability
from analyzer.analysis.steady import SteadyState
from gpuanalyze.ingest.trace import schema as S


@dataclass(frozen=True, slots=True)
class Judged:
    """The verdict, its stability over resamples, and the notes that go with them."""

    verdict: Verdict
    stability: Stability
    notes: tuple[str, ...]


def cpu_side(f: Finding, gpu: bool) -> bool:
    """A finding whose fix is CPU work on the host's cores (its rule's ``fix_runs_on``)."""
    return RULE_OF[f.bottleneck].fix_on_host(f.cause, gpu)


def judge(ctx: Context, full: StepMetrics, steady: SteadyState) -> Judged:
    """The verdict on ``ctx.m``, the analysed steps without the steady state's left-out ones
    (analysis.road, for every input); ``full``: every analysed step."""
    verdict = classify(ctx)
    stab = stability(ctx, verdict, classify)
    delta = full.step_mean_ms - ctx.wall
    findings = [
        _finish(ctx, f, _back(f, delta, full, steady), full.step_mean_ms, stab, steady.spread) for f in verdict.findings
    ]
    spikes = spike_finding(ctx, full, steady)
    if spikes is not None:  # widened alike, so the ranking compares like with like
        findings.append(_finish(ctx, spikes, 0.0, full.step_mean_ms, stab, steady.spread))
    ranked = led(ctx, findings)
    if ranked:
        top = ranked[0]
        if top.bottleneck != verdict.bottleneck:
            stab = stab.of_headline(top.bottleneck, top.cause)
        conf = _stable(top.confidence, stab.value)
        ranked = (dataclasses.replace(top, confidence=conf), *ranked[1:])
        verdict = Verdict(top.bottleneck, conf, ranked, verdict.health)
    else:
        verdict = dataclasses.replace(verdict, confidence=_stable(verdict.confidence, stab.value))
    verdict = _unread_host(ctx, verdict)
    contended = contention(ctx.host, ctx.run)
    if contended is None:
        return Judged(verdict, stab, _notes(steady))
    # a contended host is evidence about every verdict, "healthy" included (its twin may be 3x faster)
    conf = contended_confidence(verdict.confidence)
    ranked = verdict.findings
    if ranked and ranked[0].confidence == verdict.confidence:
        ranked = (dataclasses.replace(ranked[0], confidence=conf), *ranked[1:])
    verdict = Verdict(verdict.bottleneck, conf, ranked, verdict.health)
    return Judged(verdict, stab, (contended.line(), *_notes(steady)))


def _unread_host(ctx: Context, verdict: Verdict) -> Verdict:
    """No high confidence without readings of the host (issue #37): unread, it is taken as idle, so a CPU run's
    verdict, or one whose fix runs on the host's cores, is at most medium."""
    top = verdict.findings[0] if verdict.findings else None
    if ctx.host.sampled or (ctx.gpu and (top is None or not cpu_side(top, ctx.gpu))):
        return verdict
    why = "no readings of the host (a run shorter than the sampler's first, or an imported trace): its load is unknown"
    conf = _capped(verdict.confidence, math.nextafter(T.CONFIDENCE_HIGH, 0.0), why)
    if top is not None and top.confidence == verdict.confidence:
        top = dataclasses.replace(top, confidence=conf)
        return Verdict(verdict.bottleneck, conf, (top, *verdict.findings[1:]), verdict.health)
    return dataclasses.replace(verdict, confidence=conf)


def _back(f: Finding, delta: float, full: StepMetrics, steady: SteadyState) -> float:
    """What the left-out steps add back to ``f``'s projection: their excess, less the part ``f``'s cause owns
    (analysis.left_out: a loader stall leaves with the loader's fix). A projection per current batch worth of
    samples with a batch ``k`` times larger pays a per-step stall (an outlier's excess outside its data wait) once
    per ``k`` of them: it gets back 1/k of it. A stall in the data wait comes with the data (the same samples
    fetched, in larger batches) and the run's settling is a run-fixed cost over the same samples: both whole."""
    fix = f.projection.fix if f.projection is not None else None
    if isinstance(fix, BatchFix) and steady.outliers and steady.steps and delta > 0:
        loader = owned_left_out_ms(full, steady, S.DATA_WAIT_MS, frozenset(steady.outliers))
        per_step = max(0.0, steady.outlier_ms / steady.steps - loader)
        delta = max(0.0, delta - per_step * (1 - 1 / fix.multiplier))
    column = cause_part(f)
    if column is None or delta <= 0:
        return delta
    return max(0.0, delta - owned_left_out_ms(full, steady, column))


def _finish(ctx: Context, f: Finding, delta: float, current: float, stab: Stability, spread: float) -> Finding:
    """The finding with its projection on the whole run and as a range, and its confidence capped.
    Run-to-run noise is at least the steps' own spread (a loaded host shows it even unsampled); the model's own
    out-of-sample error (MODEL_ERROR) widens both ends. The low end is never faster than the fix can reach: the
    rule's own fast end, or the step without the time the cause owns (a fix removes at most that). The rule line
    says how the range was widened, so the range shown is the one the rule gives."""
    p = f.projection
    point = p.step_ms + delta
    loaded = ctx.host.oversubscribed and cpu_side(f, ctx.gpu)
    noise = max(loaded_noise(ctx) if loaded else T.PROJECTION_NOISE, spread)
    lo_b, hi_b = stab.projected.get((f.bottleneck, f.cause), (p.step_ms, p.step_ms))
    # On an oversubscribed host the left-out steps (far above the median) are steps the scheduler gave
    # to other work: the next run may not meet it, so the low end does not carry their excess.
    model_lo = (p.low_ms if p.low_ms is not None else p.step_ms) + (min(delta, 0.0) if loaded else delta)
    model_hi = (p.high_ms if p.high_ms is not None else p.step_ms) + delta
    low, high = widened(
        model_lo - math.hypot(max(0.0, p.step_ms - lo_b), noise * point),
        model_hi + math.hypot(max(0.0, hi_b - p.step_ms), noise * point),
        point,
        T.MODEL_ERROR,
    )
    floor = min(model_lo, current * (1.0 - f.share))
    low, high = min(max(low, floor), point), max(high, point)
    why = "an oversubscribed host (other work gone or doubled)" if loaded else "run-to-run noise"
    rule = (
        f"{p.rule}; range {low:.2f}-{high:.2f} ms: the rule's {model_lo:.2f}-{model_hi:.2f} ms"
        f"{' with the left-out steps' * bool(round(delta, 2))} widened for {why} ({noise:.0%} of the point) and its "
        "spread over resamples of the steps, no faster than the fix can reach"
    )
    projection = dataclasses.replace(p, step_ms=point, current_ms=current, low_ms=low, high_ms=high, rule=rule)
    conf = f.confidence
    if loaded:
        conf = _scaled(conf, T.OVERSUBSCRIBED_SCALE, "on an oversubscribed host a CPU-side projection is less certain")
    if projection.high_ms is not None and projection.high_ms >= current and f.recommendations:
        conf = _capped(conf, math.nextafter(T.CONFIDENCE_MEDIUM, 0.0), "its range reaches the current step time")
    share = max(f.share, min(1.0, projection.saved_ms / current)) if current > 0 else f.share
    return dataclasses.replace(f, projection=projection, confidence=conf, share=share)


def widened(low: float, high: float, point: float, error: float) -> tuple[float, float]:
    """The range [low, high] around ``point`` with the model's own out-of-sample error (``error``, a share of the
    point: MODEL_ERROR) added to both ends (conformalized quantile regression: the calibrated error is added to
    the interval's ends, not in quadrature with its parts), the low end no faster than an instant step."""
    return max(0.0, low - error * point), high + error * point


def loaded_noise(ctx: Context) -> float:
    """Run-to-run variation of a CPU-side step on an oversubscribed host: the job's threads get their fair
    share of the CPUs among the runnable threads (CPUs / run queue), and the run queue's excess over the
    CPUs is other work that the next run may meet gone or doubled, moving the step by excess / run queue
    either way. LOADED_NOISE at least, and when the sampler did not read the run queue."""
    rq = ctx.host.run_queue
    cpus = ctx.run.host_cpus or ctx.run.cpu_count
    if rq is None or not cpus or rq <= cpus:
        return T.LOADED_NOISE
    return max(T.LOADED_NOISE, (rq - cpus) / rq)


def _scaled(c: Confidence, scale: float, why: str) -> Confidence:
    value = round(c.value * scale, 3)
    return Confidence(value, confidence_level(value), f"{c.reason}; {why}")


def _capped(c: Confidence, cap: float, why: str) -> Confidence:
    """At most ``cap`` (kept to three decimals, rounded down so the level stays below the cut)."""
    if c.value <= cap:
        return c
    value = math.floor(cap * 1000) / 1000
    return Confidence(value, confidence_level(value), f"{c.reason}; {why}")


def _stable(c: Confidence, value: float | None) -> Confidence:
    """A verdict that fewer than STABLE_VERDICT of resamples repeat is not 'high'."""
    if value is None or value >= T.STABLE_VERDICT.value:
        return c
    cap = math.nextafter(T.CONFIDENCE_HIGH, 0.0) * value / T.STABLE_VERDICT.value
    return _capped(c, cap, f"stability {value:.2f} < {T.STABLE_VERDICT.value:g} (resamples of the steps)")


def _notes(steady: SteadyState) -> tuple[str, ...]:
    notes = []  # an oversubscribed host is noted once, by analyzer.api (the report's host line has its numbers)
    if steady.left_out:
        notes.append(
            f"{len(steady.settling)} settling and {len(steady.outliers)} outlier step(s) left out of the rules "
            f"(far above the median {steady.median_ms:.2f} ms); run time, cost and projections still count them"
        )
    if abs(steady.drift) >= T.DRIFT_NOTABLE:
        notes.append(f"step time drifts {steady.drift:+.0%} from the first to the last third of the steady steps")
    return tuple(notes)

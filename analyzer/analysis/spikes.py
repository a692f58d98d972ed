"""Periodic spikes: every Nth step far slower than the rest (checkpoint, evaluation, logging).

A finding of its own, with the period and the cost: the spikes' excess over the median step, on
the mean step time and as a share of run time. Its projection is the periodic work run half as
often (every 2N steps: half the excess stays), a ``PeriodicFix`` that ``run --try`` applies through
the script's ``eval_every``/``checkpoint_every`` knobs; its range spans the work off the step
entirely (asynchronous: none of the excess stays) to half as often (analysis.judge widens it as every
finding's).
"""

from __future__ import annotations

from analyzer.analysis import thresholds as T
from analyzer.analysis.findings import Evidence, Finding, Projection
from analyzer.analysis.fixes import PeriodicFix
from analyzer.analysis.metrics import StepMetrics
from analyzer.analysis.rules.rule import Context, Detection, confidence
from analyzer.analysis.steady import SteadyState


def spike_finding(ctx: Context, full: StepMetrics, steady: SteadyState) -> Finding | None:
    """The periodic-spike finding, when spikes recur with a period and cost SPIKE_MIN_SHARE of run time."""
    if steady.period is None or steady.spike_share < T.SPIKE_MIN_SHARE.value:
        return None
    n = len(steady.spikes)
    per_step = n * steady.spike_ms / steady.steps
    current = full.step_mean_ms
    saved = min(per_step, current)
    share = min(1.0, saved / current) if current > 0 else 0.0
    d = Detection(
        cause="periodic_spikes",
        share=share,
        consistency=steady.period_match,
        evidence_steps=steady.steps,
        summary=f"Every {steady.period} steps one step takes {steady.spike_ms:.2f} ms longer than the median "
        f"{steady.median_ms:.2f} ms ({n} such steps): {saved:.2f} ms on the mean step, {share:.0%} of run time. "
        "Periodic work (checkpointing, evaluation, logging) runs on the step.",
    )
    evidence = (
        Evidence(
            "periodic_spike_share",
            steady.spike_share,
            T.SPIKE_MIN_SHARE.value,
            ">=",
            "fraction of run time",
            T.SPIKE_MIN_SHARE.source,
        ),
        Evidence(
            "spike_period_match",
            steady.period_match,
            T.PERIODIC_MATCH,
            ">=",
            "fraction of gaps between spikes",
            f"{T.PERIODIC_MATCH:.0%} of the gaps between spikes are {steady.period} steps (ours, docs/thresholds.md)",
        ),
    )
    every = 2 * steady.period
    point = current - saved / 2
    removed = current - saved
    projection = Projection(
        step_ms=point,
        current_ms=current,
        rule=f"mean step {current:.2f} ms with the spikes' excess {n} x {steady.spike_ms:.2f} ms over "
        f"{steady.steps} steps ({saved:.2f} ms per step) paid every {every} steps instead of every "
        f"{steady.period}: {current:.2f} - {saved:.2f} / 2 = {point:.2f} ms; off the step entirely "
        f"(asynchronous): {removed:.2f} ms",
        bound=f"half the periodic work: {point:.2f} ms",
        fix=PeriodicFix(period=steady.period, every=every),
        low_ms=removed,
        high_ms=point,
    )
    return Finding(
        bottleneck="host",
        cause="periodic_spikes",
        severity="high" if share >= T.HOST_HIGH.value else "moderate",
        share=share,
        summary=d.summary,
        evidence=evidence,
        recommendations=(
            f"Every {steady.period} steps something runs on the step: checkpoint, evaluation or logging on a "
            f"fixed interval. Do it less often (every {every} steps halves its cost), asynchronously (e.g. "
            "torch.distributed.checkpoint.async_save, evaluation in another process) or make it cheaper.",
        ),
        consistency=steady.period_match,
        confidence=confidence(d, evidence, False),
        projection=projection,
    )

"""For two traces of the same job: each kind of fix AFTER shows it applied, BEFORE's projection for it
(the finding's own, or redone for what AFTER applied) beside AFTER's measured step time, and whether
the measurement fell inside the projection's range.

How AFTER shows each fix (docs/cost.md, "Checking a projection after the fact"):

- workers: the end marker's loader_workers changed (on an imported Kineto trace, the DataLoader
  iterator class: single-process 0, multi-process at least 1);
- batch: the median batch grew (compared per batch of BEFORE's size);
- precision: kernel time moved to tensor cores (or the parameters left float32);
- host syncs: blocked sync time per step fell by half or more (BEFORE's host_sync finding);
- loader: data wait fell by half or more with the same DataLoader workers (a faster batch
  function under ``prof.data()``, prefetching);
- logging: lead time (host work before a step's first phase, e.g. logging after the optimizer
  step) fell by half or more;
- rank balance: the straggler's excess fell by half or more (BEFORE's straggler finding);
- micro-batch: the samples of a fetched batch (or the fetches per step) changed while the samples per
  optimizer step stayed (gradient accumulation re-split);
- eval / checkpoint: BEFORE's periodic spikes came less often or went (an evaluation when most of the
  spikes' excess is outside unattributed host time, a checkpoint when it is in it).

A micro-batch or periodic change also moves the data wait and the lead time: the loader and logging
checks are not made beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from analyzer.analysis import thresholds as T
from analyzer.analysis.findings import Finding, Projection
from analyzer.analysis.fixes import BatchFix, MicroBatchFix, PeriodicFix, WorkerFix
from analyzer.analysis.host_facts import host_facts
from analyzer.analysis.metrics import STEP_RANKS, STEP_WALL
from analyzer.analysis.rules import Context
from analyzer.analysis.rules.accumulation import micro_projection
from analyzer.analysis.rules.batch_size import batch_projection
from analyzer.analysis.rules.data_loading import worker_plan
from analyzer.analysis.steady import SteadyState
from analyzer.planning.outcome import Report
from analyzer.planning.run_differences import fell, precision_change
from analyzer.planning.step_series import StepSeries
from gpuanalyze.ingest.trace import schema as S

CheckKind = Literal[
    "workers",
    "batch",
    "precision",
    "host_syncs",
    "loader",
    "logging",
    "rank_balance",
    "micro_batch",
    "eval",
    "checkpoint",
]
#: Samples per step count as unchanged within this fraction (a micro-batch change keeps them).
SAME_SAMPLES = 0.05
#: An imported Kineto trace's end status: its loader_workers says single (0) or multi-process (1), not how many.
IMPORTED = "imported"


@dataclass(frozen=True, slots=True)
class ProjectionCheck:
    """A fix BEFORE's analysis projected, applied in AFTER: the projection against the measurement."""

    kind: CheckKind
    fix: str
    """What changed, e.g. 'num_workers 0 -> 2'."""
    bottleneck: str
    """The finding of BEFORE whose projection is tested."""
    recommended: bool
    """The projection is the finding's own (AFTER applied its fix); else it is redone for what AFTER applied."""
    projected_ms: float
    measured_ms: float
    per: str
    """'per step', or 'per batch of N samples' for a batch-size change (AFTER's step time rescaled)."""
    rule: str
    projected_low_ms: float | None = None
    """Low end of the projection's range (None when the projection has none)."""
    projected_high_ms: float | None = None

    @property
    def error(self) -> float:
        """(projected - measured) / measured."""
        return (self.projected_ms - self.measured_ms) / self.measured_ms

    @property
    def inside(self) -> bool | None:
        """The measurement fell inside the projection's range; None without a range."""
        if self.projected_low_ms is None or self.projected_high_ms is None:
            return None
        return self.projected_low_ms <= self.measured_ms <= self.projected_high_ms


@dataclass(frozen=True, slots=True)
class _Pair:
    before: Report
    after: Report
    ctx: Context
    """BEFORE's rule context (the projections are BEFORE's)."""
    found: dict[str, Finding]
    lead: tuple[float | None, float | None]
    """Mean lead_ms per step of BEFORE and AFTER."""

    @property
    def measured(self) -> float:
        return self.after.metrics.step_mean_ms

    def finding(self, bottleneck: str, *causes: str) -> Finding | None:
        f = self.found.get(bottleneck)
        return f if f is not None and (not causes or f.cause in causes) else None

    def check(
        self,
        kind: CheckKind,
        fix: str,
        bottleneck: str,
        p: Projection,
        *,
        recommended: bool,
        measured: float | None = None,
    ) -> ProjectionCheck:
        per = "per step" if p.per_batch_of is None or kind != "batch" else f"per batch of {p.per_batch_of:.0f} samples"
        return ProjectionCheck(
            kind=kind,
            fix=fix,
            bottleneck=bottleneck,
            recommended=recommended,
            projected_ms=p.step_ms,
            measured_ms=self.measured if measured is None else measured,
            per=per,
            rule=p.rule,
            projected_low_ms=p.low_ms,
            projected_high_ms=p.high_ms,
        )

    def redone(self, step: float, rule: str) -> Projection:
        """A projection for what AFTER applied (no range: the rules give ranges for their own fixes)."""
        return Projection(step_ms=step, current_ms=self.ctx.wall, rule=rule, bound="as applied")


def _worker_change(p: _Pair) -> tuple[str, int | None] | None:
    """(what changed, AFTER's worker count or None when the trace says only 'at least one'), or None
    when the workers did not change to a positive count."""
    b, a = p.before.end, p.after.end
    if b is None or a is None or b.loader_workers is None or a.loader_workers is None:
        return None
    w0, w1 = b.loader_workers, a.loader_workers
    if w1 == w0 or w1 == 0:
        return None
    if a.status != IMPORTED:
        return f"num_workers {w0} -> {w1}", w1
    if w0 != 0:
        return None  # two multi-process imports, or a known count against 'at least one'
    return "single- -> multi-process DataLoader (worker count not in the trace)", None


def _workers(p: _Pair) -> ProjectionCheck | None:
    change = _worker_change(p)
    if change is None:
        return None
    fix, w1 = change
    f = p.finding("data_loading")
    own = f.projection.fix if f is not None else None
    advised = own.workers if isinstance(own, WorkerFix) else None
    if f is not None and advised is not None and w1 in (None, advised):
        return p.check("workers", fix, "data_loading", f.projection, recommended=True)
    plan = worker_plan(p.ctx, p.ctx.ms(p.before.metrics.effective[S.DATA_WAIT_MS]), workers=w1)
    if plan is None or plan.workers == 0:
        return None
    step = max(plan.step_ms, p.ctx.busy)
    return p.check("workers", fix, "data_loading", p.redone(step, plan.rule), recommended=False)


def _batch(p: _Pair) -> ProjectionCheck | None:
    b0, b1 = p.before.metrics.batch_samples, p.after.metrics.batch_samples
    if not b0 or not b1 or b1 <= b0:
        return None
    k = b1 / b0
    f = p.finding("batch_size")
    fix = f"batch {b0:.0f} -> {b1:.0f}"
    measured = p.measured / k
    if f is not None and isinstance(f.projection.fix, BatchFix) and f.projection.fix.multiplier == k:
        return p.check("batch", fix, "batch_size", f.projection, recommended=True, measured=measured)
    proj = batch_projection(p.ctx, k, f"batch {b0:.0f} -> {b1:.0f} (x{k:g}, as applied)")
    return p.check("batch", fix, "batch_size", proj, recommended=False, measured=measured)


def _precision(p: _Pair) -> ProjectionCheck | None:
    f = p.finding("kernels")
    if f is None or precision_change(p.before, p.after) is None:
        return None
    return p.check("precision", "fp32 -> tensor-core precision", "kernels", f.projection, recommended=True)


def _host_syncs(p: _Pair) -> ProjectionCheck | None:
    s0, s1 = p.before.metrics.mean_ms.get(S.SYNC_MS), p.after.metrics.mean_ms.get(S.SYNC_MS)
    f = p.finding("sync", "host_sync")
    if f is None or not fell(s0, s1, 0.0) or not s0:
        return None
    fix = f"host syncs {s0:.2f} -> {s1:.2f} ms per step"
    return p.check("host_syncs", fix, "sync", f.projection, recommended=True)


def _loader(p: _Pair) -> ProjectionCheck | None:
    b, a = p.before.end, p.after.end
    if (b.loader_workers if b else None) != (a.loader_workers if a else None):
        return None  # a worker change is _workers'
    ctx = p.ctx
    d0 = ctx.ms(p.before.metrics.effective[S.DATA_WAIT_MS])
    d1 = p.after.metrics.effective[S.DATA_WAIT_MS] * p.measured
    if not fell(d0, d1, T.DATA_WAIT_MODERATE.value * ctx.wall):
        return None
    fix = f"data wait {d0:.2f} -> {d1:.2f} ms per step, same DataLoader workers (loader or prof.data() change)"
    f = p.finding("data_loading")
    if f is not None and not isinstance(f.projection.fix, WorkerFix):
        return p.check("loader", fix, "data_loading", f.projection, recommended=True)
    step = max(ctx.wall - (d0 - d1), ctx.busy)
    rule = f"step {ctx.wall:.2f} ms minus the data wait removed ({d0:.2f} - {d1:.2f} ms)" + (
        f", no faster than GPU-busy {ctx.busy:.2f} ms" if ctx.gpu else ""
    )
    return p.check("loader", fix, "data_loading", p.redone(step, rule), recommended=False)


def _logging(p: _Pair) -> ProjectionCheck | None:
    l0, l1 = p.lead
    ctx = p.ctx
    if l0 is None or l1 is None or not fell(l0, l1, max(T.HOST_MIN_MS, T.MIN_SAVING * ctx.wall)):
        return None
    f = p.finding("host") or p.finding("batch_size", "host_overhead")
    name = f.bottleneck if f is not None else "host"
    floor = max(ctx.busy, f.projection.step_ms if f is not None else 0.0)
    step = max(ctx.wall - (l0 - l1), floor)
    rule = (
        f"step {ctx.wall:.2f} ms minus the host time removed before each step's first phase ({l0:.2f} - {l1:.2f} ms)"
        f", no faster than {floor:.2f} ms (the larger of GPU-busy time and the finding's own projection)"
    )
    fix = f"work before each step's first phase (logging) {l0:.2f} -> {l1:.2f} ms"
    return p.check("logging", fix, name, p.redone(step, rule), recommended=False)


def _rank_balance(p: _Pair) -> ProjectionCheck | None:
    bd, ad = p.before.metrics.distributed, p.after.metrics.distributed
    f = p.finding("sync", "straggler")
    if f is None or bd is None or not bd.stragglers or ad is None:
        return None
    e0 = bd.stragglers[0].excess_ms
    e1 = ad.stragglers[0].excess_ms if ad.stragglers else 0.0
    if not fell(e0, e1, 0.0):
        return None
    fix = f"rank {bd.stragglers[0].rank}'s excess {e0:.2f} -> {e1:.2f} ms per slow step"
    return p.check("rank_balance", fix, "sync", f.projection, recommended=True)


def _micro_split(p: _Pair) -> tuple[int, int, str] | None:
    """(micro-batches per step before, after, what changed) when AFTER re-split the same samples per step
    into other micro-batches (fetched batch size or fetches per step changed); None otherwise."""
    b, a = p.before.end, p.after.end
    if b is None or a is None or not (b.fetches and a.fetches and b.steps and a.steps):
        return None
    s0, s1 = p.before.metrics.batch_samples, p.after.metrics.batch_samples
    if not s0 or not s1 or abs(s1 - s0) > SAME_SAMPLES * s0:
        return None
    a0, a1 = round(b.fetches / b.steps), round(a.fetches / a.steps)
    sized = bool(b.fetch_samples and a.fetch_samples)
    if a0 == a1 and (not sized or b.fetch_samples == a.fetch_samples):
        return None
    each = f" of {b.fetch_samples} -> {a.fetch_samples} sample(s)" if sized else ""
    return a0, a1, f"micro-batches {a0} -> {a1} per step{each}, {s0:.0f} samples per step"


def _micro_batch(p: _Pair) -> ProjectionCheck | None:
    split = _micro_split(p)
    if split is None:
        return None
    a0, a1, fix = split
    f = p.finding("batch_size", "micro_batch_overhead")
    own = f.projection.fix if f is not None else None
    if f is not None and isinstance(own, MicroBatchFix) and own.accumulate == a1:
        return p.check("micro_batch", fix, "batch_size", f.projection, recommended=True)
    if a1 < a0 and a0 % a1 == 0:
        proj = micro_projection(p.ctx, a0, a0 // a1)
    else:
        proj = p.redone(p.ctx.wall, "no model for more micro-batches")
    return p.check("micro_batch", fix, "batch_size", proj, recommended=False)


def _periodic(p: _Pair) -> ProjectionCheck | None:
    sb, sa = p.before.steady, p.after.steady
    if sb is None or sb.period is None or not sb.spikes or sa is None:
        return None
    n0 = sb.period
    n1 = sa.period if sa.period is not None and sa.spikes else None
    if n1 is not None and n1 <= n0:
        return None
    kind: CheckKind = "checkpoint" if _host_share_of_spikes(p.before, sb) >= 0.5 else "eval"
    what = "checkpoint" if kind == "checkpoint" else "evaluation"
    fix = f"{what} every {n0} -> {'never on the step' if n1 is None else f'every {n1}'} steps"
    f = p.finding("host", "periodic_spikes")
    own = f.projection.fix if f is not None else None
    if f is not None and isinstance(own, PeriodicFix) and n1 == own.every:
        return p.check(kind, fix, "host", f.projection, recommended=True)
    excess = len(sb.spikes) * sb.spike_ms / p.before.metrics.steps if p.before.metrics.steps else 0.0
    left = 0.0 if n1 is None else n0 / n1
    current = p.before.metrics.step_mean_ms
    step = current - excess * (1.0 - left)
    rule = f"mean step {current:.2f} ms minus the spikes' {excess:.2f} ms per step x (1 - {left:.2f}) = {step:.2f} ms"
    proj = Projection(
        step_ms=step,
        current_ms=current,
        rule=rule,
        bound="as applied",
        low_ms=step * (1 - T.PROJECTION_NOISE),
        high_ms=step * (1 + T.PROJECTION_NOISE),
    )
    return p.check(kind, fix, "host", proj, recommended=False)


def _host_share_of_spikes(report: Report, steady: SteadyState) -> float:
    """Share of the spikes' excess over the median step that is unattributed host time (a checkpoint's
    torch.save, logging) rather than data, forward and backward (an evaluation pass)."""
    ps = report.metrics.per_step
    if ps.height == 0 or S.OTHER_MS not in ps.columns or STEP_WALL not in ps.columns:
        return 0.0
    wall = ps.get_column(STEP_WALL).to_numpy() / np.maximum(ps.get_column(STEP_RANKS).to_numpy(), 1)
    other = ps.get_column(S.OTHER_MS).fill_null(0.0).to_numpy() * wall
    on = np.isin(ps.get_column(S.STEP).to_numpy(), np.asarray(steady.spikes))
    if not on.any() or on.all():
        return 0.0
    excess = float(np.sum(wall[on] - steady.median_ms))
    host = float(np.sum(other[on] - np.median(other[~on])))
    return max(0.0, host) / excess if excess > 0 else 0.0


KINDS: tuple[Callable[[_Pair], ProjectionCheck | None], ...] = (
    _micro_batch,
    _periodic,
    _workers,
    _batch,
    _precision,
    _host_syncs,
    _loader,
    _logging,
    _rank_balance,
)


def projection_checks(
    before: Report, after: Report, steps: tuple[StepSeries | None, StepSeries | None] = (None, None)
) -> tuple[ProjectionCheck, ...]:
    """Each kind of fix AFTER shows it applied, with BEFORE's projection for it (``steps``: the runs'
    analysed steps, for the lead time per step)."""
    ctx = Context(m=before.metrics, run=before.run, end=before.end, ceilings=None, host=host_facts(before.run))
    lead = (steps[0].lead_ms if steps[0] else None, steps[1].lead_ms if steps[1] else None)
    pair = _Pair(before, after, ctx, {f.bottleneck: f for f in before.findings}, lead)
    checks = [c for kind in KINDS if (c := kind(pair)) is not None]
    if any(c.kind in ("micro_batch", "eval", "checkpoint") for c in checks):  # they move data wait and lead time
        checks = [c for c in checks if c.kind not in ("loader", "logging")]
    return tuple(checks)

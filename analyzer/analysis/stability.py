"""Verdict stability: resample the analysed steps (bootstrap) and classify each resample.

``stability`` is the share of resamples whose verdict is the report's; each finding's projection
is redone on every resample, and the spread of the projected mean is the step-to-step part of its
range (analysis.intervals). Resampling works on ``StepMetrics.per_step`` (one row per step, its
shares summed over the ranks that ran it), so a run measured out of core is resampled the same
way: whole steps, every rank of a step together. What per_step does not hold stays as measured
(the cross-rank analysis, kernel statistics, per-step consistency, medians). The resample is
vectorised: one index matrix per chunk of resamples (bounded memory on long runs), every share of
those resamples in one numpy reduction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from analyzer.analysis import thresholds as T
from analyzer.analysis.metrics import RAW, STEP_RANKS, STEP_WALL, UNEXPLAINED_IDLE, StepMetrics
from analyzer.analysis.rules import Context, Verdict
from gpuanalyze.ingest.trace import schema as S

Key = tuple[str, str]
"""A finding's (bottleneck, cause)."""


@dataclass(frozen=True, slots=True)
class Stability:
    """How often resamples of the steps repeat the verdict, and the resampled projections."""

    value: float | None
    """Share of resamples with the report's verdict, in [0, 1]; None when not computed."""
    resamples: int
    reason: str
    projected: dict[Key, tuple[float, float]] = dataclasses.field(default_factory=dict)
    """Per finding: the (low, high) BOOTSTRAP_COVERAGE percentiles of its projected mean step over the
    resamples where it fires (the step-to-step part of its range)."""
    fired: dict[Key, int] = dataclasses.field(default_factory=dict)
    """Per finding: how many resamples have it."""
    steps: int = 0
    """Steps resampled."""

    def of_headline(self, bottleneck: str, cause: str) -> Stability:
        """The stability of a headline that the ranking by saved step time put first although the share-based
        verdict of the resamples is another: how many resamples find the headline's finding at all."""
        if self.value is None:
            return self
        found = self.fired.get((bottleneck, cause))
        if found is None:
            reason = f"the {cause} finding is measured on the whole run, not on resamples of its steps"
            return dataclasses.replace(self, value=None, reason=reason)
        reason = f"{found} of {self.resamples} resamples of the {self.steps} steps also find {bottleneck} ({cause})"
        return dataclasses.replace(self, value=found / self.resamples, reason=reason)


def _arrays(m: StepMetrics) -> dict[str, np.ndarray] | None:
    ps = m.per_step
    if ps.height < T.FEW_STEPS or STEP_WALL not in ps.columns:
        return None
    out = {c: ps.get_column(c).fill_null(0.0).to_numpy() for c in ps.columns if c != S.STEP}
    out[STEP_WALL] = ps.get_column(STEP_WALL).to_numpy()
    return out


def resampled(m: StepMetrics, idx: np.ndarray, arrays: dict[str, np.ndarray] | None = None) -> list[StepMetrics]:
    """StepMetrics for each row of ``idx`` (resample x step indices into per_step); ``arrays``: per_step's
    columns as ``_arrays`` gives them (read once for every chunk of resamples)."""
    a = arrays if arrays is not None else _arrays(m)
    assert a is not None
    wall = a[STEP_WALL]
    ranks = np.maximum(a[STEP_RANKS], 1)
    W = wall[idx].sum(axis=1)

    def share(col: str) -> np.ndarray:
        return np.clip((a[col] * wall)[idx].sum(axis=1) / W, 0.0, 1.0)

    per_rank = (wall / ranks)[idx].mean(axis=1) / float(np.mean(wall / ranks))
    mean = m.step_mean_ms * per_rank
    eff = {p: share(p) for p in (S.DATA_WAIT_MS, S.SYNC_MS, S.OTHER_MS)}
    raw = {p: share(p + RAW) for p in (S.DATA_WAIT_MS, S.SYNC_MS, S.OTHER_MS)}
    gpu = m.gpu_util is not None
    util = share(S.GPU_BUSY_MS) if gpu else None
    unexplained = share(UNEXPLAINED_IDLE) if gpu else None
    out = []
    for b in range(idx.shape[0]):
        shares = dict(m.share)
        means = dict(m.mean_ms)
        for p in raw:
            if shares.get(p) is not None:
                shares[p] = float(raw[p][b])
                means[p] = float(raw[p][b] * mean[b])
        out.append(
            dataclasses.replace(
                m,
                step_mean_ms=float(mean[b]),
                effective={p: float(v[b]) for p, v in eff.items()},
                share=shares,
                mean_ms=means,
                gpu_util=None if util is None else float(util[b]),
                busy_mean_ms=None if util is None else float(util[b] * mean[b]),
                idle_unexplained=None if unexplained is None else float(unexplained[b]),
            )
        )
    return out


#: Step indices drawn at once (a chunk of resamples x steps): bounds the bootstrap's memory on long runs
#: (64 resamples of 1M steps in one matrix held 0.5 GiB of indices and as much again per gathered column).
CHUNK_INDICES = 1 << 20


def _index_chunks(n: int, chunk: int | None = None) -> Iterator[np.ndarray]:
    """The BOOTSTRAP_RESAMPLES x ``n`` step indices of the seeded bootstrap, a few resamples (rows) at a
    time: the same draws, row for row, as one ``integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))`` call."""
    rng = np.random.default_rng(0)
    rows = max(1, (chunk or CHUNK_INDICES) // max(n, 1))
    for start in range(0, T.BOOTSTRAP_RESAMPLES, rows):
        yield rng.integers(0, n, size=(min(rows, T.BOOTSTRAP_RESAMPLES - start), n))


def stability(ctx: Context, verdict: Verdict, classify: Callable[[Context], Verdict]) -> Stability:
    """Bootstrap the verdict over BOOTSTRAP_RESAMPLES resamples of the analysed steps (seeded: the
    same trace gives the same stability)."""
    n = ctx.m.per_step.height
    arrays = _arrays(ctx.m)
    if arrays is None:
        return Stability(None, 0, f"not computed: {n} step(s), fewer than {T.FEW_STEPS}")
    same = 0
    seen: dict[Key, list[float]] = {}
    for idx in _index_chunks(n):
        for m in resampled(ctx.m, idx, arrays):
            v = classify(dataclasses.replace(ctx, m=m))
            same += v.bottleneck == verdict.bottleneck
            for key, step_ms in {(f.bottleneck, f.cause): f.projection.step_ms for f in v.findings}.items():
                seen.setdefault(key, []).append(step_ms)
    value = same / T.BOOTSTRAP_RESAMPLES
    tail = (1 - T.BOOTSTRAP_COVERAGE) / 2
    projected: dict[Key, tuple[float, float]] = {}
    for f in verdict.findings:
        steps = seen.get((f.bottleneck, f.cause))
        if steps:
            lo, hi = np.quantile(np.asarray(steps), [tail, 1 - tail])
            projected[(f.bottleneck, f.cause)] = (float(lo), float(hi))
    reason = f"{same} of {T.BOOTSTRAP_RESAMPLES} resamples of the {n} steps give {verdict.bottleneck}"
    fired = {key: len(steps) for key, steps in seen.items()}
    return Stability(value, T.BOOTSTRAP_RESAMPLES, reason, projected, fired, n)

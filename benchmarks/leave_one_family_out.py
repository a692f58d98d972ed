"""Leave-one-family-out validation of the projections (benchmarks/projection_validation.py).

The constants the projection models fit on the validation pairs (``GRID``: the residue of a cause
removed by a change the projection cannot size; the per-call share a batch, micro-batch or
CPU-precision projection does not measure) are chosen on every fix family but one, from a small
grid: the lowest median |error| on the training pairs, then (ties) the narrowest high end that still
covers COVERAGE_TARGET of them. The held-out family's BEFORE traces are analysed again with those
constants, and the finding whose fix was applied gives the out-of-sample projection. A group with no
pair outside the held-out family (the micro-batch model has one family) takes its prior: a value set
before any pair was measured, never the in-sample choice. A pair whose model has no fitted constant
(workers, stragglers, a healthy verdict), or whose projection measured its share from the trace,
projects the same point in and out of sample.

The model's own error (thresholds.MODEL_ERROR) is calibrated the same way: conformalized quantile
regression over the conformity scores (how far each measurement fell outside its range, as a share of
the point) of the pairs projected out of sample. The held-out family's ranges are widened by the error
calibrated on the other families' pairs, each projected with constants fitted without both families;
the value to ship comes from every family's out-of-sample scores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import analyzer
from analyzer.analysis import thresholds as T
from analyzer.analysis.judge import widened
from analyzer.analysis.rules import cpu_precision

COVERAGE = 0.80


@contextlib.contextmanager
def constants(values: dict[str, float]) -> Iterator[None]:
    """The thresholds module with ``values`` in place for the block (restored however it ends)."""
    saved = {k: getattr(T, k) for k in values}
    try:
        for k, v in values.items():
            setattr(T, k, v)
        yield
    finally:
        for k, v in saved.items():
            setattr(T, k, v)


@contextlib.contextmanager
def without_windows() -> Iterator[None]:
    """The analysis with the profiled steps' shares ignored for the block: every projection on its constants."""
    saved = cpu_precision.window_ms
    cpu_precision.window_ms = lambda ctx, field: None
    try:
        yield
    finally:
        cpu_precision.window_ms = saved


def reproject(pair: Any, values: dict[str, float]) -> tuple[float, float | None, float | None] | None:
    """(projected, low, high) of the pair's applied finding on its BEFORE trace analysed with ``values``;
    None when that finding no longer fires."""
    with constants(values):
        report = analyzer.analyze(pair.before_path)
    f = next((f for f in report.findings if (f.bottleneck, f.cause) == tuple(pair.finding)), None)
    if f is None:
        return None
    p = f.projection
    return p.step_ms, p.low_ms, p.high_ms


def _score(results: Sequence[tuple[Any, tuple[float, float | None, float | None] | None]]) -> tuple[float, int, float]:
    """(median |error|, 0 when coverage >= COVERAGE else 1, median width) of reprojected pairs."""
    errs, inside, widths = [], [], []
    for pair, r in results:
        if r is None:
            errs.append(1.0)
            continue
        point, low, high = r
        errs.append(abs(point - pair.measured_ms) / pair.measured_ms)
        if low is not None and high is not None:
            inside.append(low <= pair.measured_ms <= high)
            widths.append((high - low) / pair.before_ms)
    coverage = sum(inside) / len(inside) if inside else 0.0
    return (
        round(statistics.median(errs), 3),
        0 if coverage >= COVERAGE else 1,
        statistics.median(widths) if widths else 0.0,
    )


class Lofo(NamedTuple):
    """What leave-one-family-out gives: the pairs projected out of sample, per held-out family the constants and
    the model error chosen without it, and the model error to ship (from every family's out-of-sample scores)."""

    pairs: list[Any]
    chosen: list[dict[str, Any]]
    model_error: float | None
    scores: list[float]
    """Every applied pair's conformity score out of sample (its family held out; no model error)."""


def conformity(point: float, low: float, high: float, measured: float) -> float:
    """How far ``measured`` fell outside [low, high], as a share of the projected ``point`` (negative: inside, by
    the distance to the nearer end): conformalized quantile regression's score."""
    return max(low - measured, measured - high) / point


def conformal_error(scores: Sequence[float], coverage: float = COVERAGE) -> float | None:
    """The error to add to both ends of a range so that a new pair's measurement falls inside with probability
    ``coverage`` (Romano, Patterson and Candes 2019): the ceil((n + 1) x coverage)-th smallest of the n scores, at
    least 0 (ranges are only widened); None when the scores are too few to say (that rank beyond n)."""
    n = len(scores)
    k = math.ceil((n + 1) * coverage)
    if n == 0 or k > n:
        return None
    return max(0.0, sorted(scores)[k - 1])


def lofo(pairs: list[Any], grid: dict[str, list[dict[str, float]]], priors: dict[str, dict[str, float]]) -> Lofo:
    """Leave-one-family-out: the pairs with their held-out projections, per family the constants chosen without it.

    A group whose pairs all belong to the held-out family has nothing to fit on: it takes its ``priors``
    entry (values chosen before any pair was measured, not fitted on them), never the in-sample choice.
    Every applied finding's range is reprojected without the model error (MODEL_ERROR 0), and the held-out
    family's ranges are widened by the model error calibrated on the other families' pairs, each projected
    with constants fitted without both families (nested: the held-out family's measurements reach neither
    the constants nor the error it is judged with)."""
    usable = [i for i, p in enumerate(pairs) if p.error is not None and p.finding is not None]
    fitted = [i for i in usable if pairs[i].group]
    cache: dict[tuple[int, tuple[tuple[str, float], ...]], tuple[float, float | None, float | None] | None] = {}
    fits: dict[frozenset[str], tuple[dict[str, dict[str, float]], list[str]]] = {}

    def at(i: int, values: dict[str, float]) -> tuple[float, float | None, float | None] | None:
        key = (i, tuple(sorted(values.items())))
        if key not in cache:
            cache[key] = reproject(pairs[i], {**values, "MODEL_ERROR": 0.0})
        return cache[key]

    def fit(without: frozenset[str]) -> tuple[dict[str, dict[str, float]], list[str]]:
        """Per group the constants chosen on the pairs of every family but ``without``, and the groups on a prior."""
        if without not in fits:
            picks: dict[str, dict[str, float]] = {}
            prior: list[str] = []
            for group in grid:
                train = [i for i in fitted if pairs[i].family not in without and pairs[i].group == group]
                if not train:
                    picks[group] = priors[group]
                    prior.append(group)
                    continue
                scores = [_score([(pairs[i], at(i, point)) for i in train]) for point in grid[group]]
                picks[group] = grid[group][min(range(len(scores)), key=lambda j: scores[j])]
            fits[without] = (picks, prior)
        return fits[without]

    def raw(i: int, without: frozenset[str]) -> tuple[float, float | None, float | None] | None:
        """Pair ``i`` projected with the constants fitted without ``without`` and no model error."""
        group = pairs[i].group
        return at(i, fit(without)[0][group] if group else {})

    def scores(indices: Sequence[int], without: frozenset[str]) -> list[float]:
        out = []
        for j in indices:
            r = raw(j, without | {pairs[j].family})
            if r is not None and r[1] is not None and r[2] is not None and r[0] > 0:
                out.append(conformity(r[0], r[1], r[2], pairs[j].measured_ms))
        return out

    out: list[Any] = []
    chosen: list[dict[str, Any]] = []
    for family in sorted({p.family for p in pairs}):
        held = frozenset({family})
        picks, prior = fit(held)
        error = conformal_error(scores([j for j in usable if pairs[j].family != family], held))
        chosen.append({"held_out": family, **picks, "prior": prior, "model_error": error})
        for i, p in enumerate(pairs):
            if p.family != family:
                continue
            q = dataclasses.replace(p)
            if i in usable:
                _apply(q, _wide(raw(i, held), error or 0.0), "held out")
                if p.group in prior:
                    q.note = (q.note + "; " if q.note else "") + f"held out: no other family fits {p.group}, its prior"
            out.append(q)
    held_out = scores(usable, frozenset())
    return Lofo(out, chosen, conformal_error(held_out), held_out)


def _wide(
    r: tuple[float, float | None, float | None] | None, error: float
) -> tuple[float, float | None, float | None] | None:
    """A reprojection (point, low, high) with the model error added to its range (judge.widened, as analysed)."""
    if r is None or r[1] is None or r[2] is None:
        return r
    return (r[0], *widened(r[1], r[2], r[0], error))


def _apply(q: Any, r: tuple[float, float | None, float | None] | None, what: str) -> None:
    """Put a reprojection (point, low, high) on the pair copy ``q``, or say that its finding did not fire."""
    if r is None:
        q.note = (q.note + "; " if q.note else "") + f"{what}: the finding did not fire"
        return
    q.projected_ms, q.low_ms, q.high_ms = r
    q.error = (r[0] - q.measured_ms) / q.measured_ms
    q.inside = None if r[1] is None or r[2] is None else r[1] <= q.measured_ms <= r[2]


def in_sample(pairs: list[Any]) -> list[Any]:
    """The pairs with their applied finding reprojected on the constants in use (under ``without_windows``: the
    same measured pairs projected as if the trace had no profiled steps)."""
    out = []
    for p in pairs:
        q = dataclasses.replace(p)
        if p.error is not None and p.finding is not None:
            _apply(q, reproject(p, {}), "reprojected")
        out.append(q)
    return out

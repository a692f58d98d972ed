"""Each correction in the projection code, taken out one at a time (one removed this round, put back), on the same
recorded pairs.

A projection is built from the time its fix removes, plus corrections stacked on it (the outlier steps a batch
gets back 1/k of, the residue a removed cause leaves, each epoch's worker refill, the hand-over charges ...).
``table`` reanalyses the BEFORE trace of every measured pair once with all of them and once without each, and
prints, side by side in one run, the median |error| against the AFTER measurement, the range's coverage and
median width, and how many pairs the correction moves. The measurements do not change between the rows: only
the projection does. A correction that is not in the code being measured prints ``n/a``.

Used by benchmarks/projection_validation.py (in sample: the loops the models were written from) and
benchmarks/held_out_batch.py (loops no model was written from or checked on).
"""

from __future__ import annotations

import contextlib
import statistics
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import analyzer
from analyzer.analysis import judge
from analyzer.analysis import thresholds as T
from analyzer.analysis.left_out import cause_part, owned_left_out_ms

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.leave_one_family_out import constants


@dataclass(frozen=True, slots=True)
class Measured:
    """One pair: its BEFORE trace, the finding whose fix was applied, and what the AFTER run measured (per
    current batch worth of samples for a batch change)."""

    label: str
    before_path: str
    finding: tuple[str, str]
    before_ms: float
    measured_ms: float


def _patch_everywhere(owner: Any, name: str, value: Any) -> contextlib.AbstractContextManager[None]:
    """``owner.name`` replaced by ``value`` for the block, and in every analyzer module that imported it by name."""
    original = getattr(owner, name)

    @contextlib.contextmanager
    def patched() -> Iterator[None]:
        saved = [(m, name) for m in list(sys.modules.values()) if _holds(m, name, original)]
        try:
            for m, n in saved:
                setattr(m, n, value)
            setattr(owner, name, value)
            yield
        finally:
            for m, n in saved:
                setattr(m, n, original)
            setattr(owner, name, original)

    return patched()


def _holds(module: Any, name: str, value: Any) -> bool:
    return getattr(module, "__name__", "").startswith("analyzer.") and getattr(module, name, None) is value


def _back_without_outlier_share(f: Any, delta: float, full: Any, steady: Any) -> float:
    """judge._back without the batch's 1/k of the outlier steps: every left-out step's excess comes back."""
    column = cause_part(f)
    if column is None or delta <= 0:
        return delta
    return max(0.0, delta - owned_left_out_ms(full, steady, column))


def _back_without_owned(f: Any, delta: float, full: Any, steady: Any) -> float:
    """judge._back without the cause's own part of the left-out steps leaving with its fix."""
    return _ORIGINAL_BACK(_NoCause(f), delta, full, steady)


class _NoCause:
    """A finding whose cause owns no part (analysis.left_out.cause_part gives None); the rest as ``f``."""

    def __init__(self, f: Any) -> None:
        self._f = f
        self.bottleneck, self.cause = "kernels", "none"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


_ORIGINAL_BACK = judge._back


def _module(name: str) -> Any:
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _attr(module: str, name: str) -> tuple[Any, str] | None:
    m = _module(module)
    return (m, name) if m is not None and hasattr(m, name) else None


Toggle = Callable[[], contextlib.AbstractContextManager[None] | None]
"""A correction taken out for a block; None when the code measured does not have it."""


def _without(module: str, name: str, value: Any) -> Toggle:
    def toggle() -> contextlib.AbstractContextManager[None] | None:
        at = _attr(module, name)
        return None if at is None else _patch_everywhere(at[0], at[1], value)

    return toggle


def _without_constants(**values: float) -> Toggle:
    return lambda: constants(values) if all(hasattr(T, k) for k in values) else None


def _raw_cpu_share(ctx: Any) -> float | None:
    cpu = ctx.m.data_cpu_fraction
    return None if cpu is None else min(1.0, cpu)


def _with_residue() -> contextlib.AbstractContextManager[None] | None:
    """The removal residue this round removed, put back: a cause removed by a change the projection cannot size
    kept 10% of the removed time at its point and 30% at its slow end (REMOVAL_RESIDUE / _HIGH, fitted on the
    in-sample pairs)."""
    at = _attr(f"{RULES}.rule", "bounded")
    if at is None:
        return None
    original = at[0].bounded

    def bounded(ctx: Any, step: float, what: str, limits: Any, rule: str, fix: Any = None, **kw: Any) -> Any:
        if fix is None and kw.get("model") is None:
            removed = max(0.0, ctx.wall - step)
            kw["model"] = (step, step + 0.3 * removed)
            step += 0.1 * removed
        return original(ctx, step, what, limits, rule, fix, **kw)

    return _patch_everywhere(at[0], "bounded", bounded)


RULES = "analyzer.analysis.rules"
#: Every correction stacked on a projection's removed time, and how it is taken out (or, for one this round
#: removed, put back).
CORRECTIONS: dict[str, Toggle] = {
    "without outlier steps back 1/k (judge._back)": _without(
        "analyzer.analysis.judge", "_back", _back_without_outlier_share
    ),
    "without left-out steps the cause owns (judge._back)": _without(
        "analyzer.analysis.judge", "_back", _back_without_owned
    ),
    "without worker epoch refill (epoch_refill_ms)": _without(f"{RULES}.workers", "epoch_refill_ms", lambda *a: 0.0),
    "without worker hand-over cost (WORKER_*_COST*)": _without_constants(
        WORKER_MAIN_COST_MS=0.0, WORKER_SIDE_COST_MS=0.0, WORKER_SIDE_MS_PER_MIB=0.0
    ),
    "without workers' contention charge (workers._PASSES)": _without(f"{RULES}.workers", "_PASSES", 0),
    "without loaded-host loader CPU share (x load/cores)": _without(
        f"{RULES}.workers", "loader_cpu_share", _raw_cpu_share
    ),
    "without the sampler kept in the training process": _without(
        f"{RULES}.workers", "main_process_share", lambda ctx: 0.0
    ),
    "without profiled windows' per-call bound": _without(f"{RULES}.measured", "per_call_share", lambda ctx, w: None),
    "without profiled windows' matmul share": _without(f"{RULES}.cpu_precision", "matmul_share", lambda ctx, c: None),
    "with the removal residue put back (removed)": _with_residue,
    "without sample replay (op and collate growth)": _without(f"{RULES}.measured", "_op_ms_at", lambda ctx, k: None),
    "without collate replay (fetch_collate_growth)": _without(f"{RULES}.measured", "_collate_at", lambda ctx, k: None),
    "without sample-replay slack (SAMPLE_REPLAY_SLACK)": _without_constants(SAMPLE_REPLAY_SLACK=0.0),
    "without bf16 replay (cpu_precision.replayed)": _without(f"{RULES}.cpu_precision", "replayed", lambda ctx: None),
    "without removal residue (REMOVAL_RESIDUE)": _without_constants(REMOVAL_RESIDUE=0.0, REMOVAL_RESIDUE_HIGH=0.0),
    "without hand-over range x0.5..x2 (HANDOVER_LOW/_HIGH)": _without_constants(HANDOVER_LOW=1.0, HANDOVER_HIGH=1.0),
}


def reproject(pair: Measured) -> tuple[float, float | None, float | None] | None:
    """(point, low, high) of the pair's finding on its BEFORE trace as analysed now; None when it does not fire."""
    report = analyzer.analyze(pair.before_path)
    f = next((f for f in report.findings if (f.bottleneck, f.cause) == tuple(pair.finding)), None)
    if f is None or f.projection is None:
        return None
    return f.projection.step_ms, f.projection.low_ms, f.projection.high_ms


@dataclass(frozen=True, slots=True)
class Figures:
    median_error: float | None
    coverage: float | None
    median_width: float | None
    fired: int
    moved: int
    """Pairs whose point moved by more than 0.5% against all corrections in."""


def figures(pairs: list[Measured], got: list[Any], base: list[Any] | None = None) -> Figures:
    errs, inside, widths, moved = [], [], [], 0
    for i, (p, r) in enumerate(zip(pairs, got, strict=True)):
        if base is not None and (r is None) != (base[i] is None):
            moved += 1
        if r is None:
            continue
        point, low, high = r
        if base is not None and base[i] is not None and abs(point - base[i][0]) > 0.005 * base[i][0]:
            moved += 1
        errs.append(abs(point - p.measured_ms) / p.measured_ms)
        if low is not None and high is not None:
            inside.append(low <= p.measured_ms <= high)
            widths.append((high - low) / p.before_ms)
    return Figures(
        statistics.median(errs) if errs else None,
        sum(inside) / len(inside) if inside else None,
        statistics.median(widths) if widths else None,
        len(errs),
        moved,
    )


def _moved(pairs: list[Measured], got: list[Any], base: list[Any]) -> list[str]:
    """'label +12% -> +3%' for each pair whose projection the correction moves (its error with -> without)."""

    def err(p: Measured, r: Any) -> str:
        if r is None:
            return "not fired"
        inside = "" if r[1] is None or r[2] is None else " in" if r[1] <= p.measured_ms <= r[2] else " out"
        return f"{(r[0] - p.measured_ms) / p.measured_ms:+.1%}{inside}"

    return [
        f"{p.label[:28]} {err(p, b)} -> {err(p, r)}"
        for p, r, b in zip(pairs, got, base, strict=True)
        if (r is None) != (b is None) or (r is not None and b is not None and r != b)
    ]


def table(pairs: list[Measured], title: str) -> dict[str, Any]:
    """Print the figures with every correction in, then without each (and the pairs each moves: error with ->
    without, inside or outside the range); returns them as a dict."""
    base = [reproject(p) for p in pairs]
    rows: dict[str, Figures | None] = {"all corrections in": figures(pairs, base)}
    moved: dict[str, list[str]] = {}
    for name, toggle in CORRECTIONS.items():
        block = toggle()
        if block is None:
            rows[name] = None
            continue
        with block:
            got = [reproject(p) for p in pairs]
        rows[name] = figures(pairs, got, base)
        moved[name] = _moved(pairs, got, base)
    print(f"-- corrections, {title}: {len(pairs)} measured pair(s)")
    print(f"   {'':56} {'median err':>10} {'coverage':>8} {'width':>6} {'fired':>5} {'moved':>5}")
    for name, fig in rows.items():
        if fig is None:
            print(f"   {name[:56]:56} {'n/a: not in this code':>38}")
            continue
        print(
            f"   {name[:56]:56} {_pct(fig.median_error):>10} {_pct(fig.coverage):>8} {_pct(fig.median_width):>6} "
            f"{fig.fired:5d} {fig.moved if name != 'all corrections in' else '':>5}"
        )
    for name, lines in moved.items():
        if lines:
            print(f"   {name}, moved: " + "; ".join(lines))
    return {k: None if v is None else _asdict(v) for k, v in rows.items()}


def _asdict(f: Figures) -> dict[str, Any]:
    return {k: getattr(f, k) for k in Figures.__slots__}


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"

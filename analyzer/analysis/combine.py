"""Merge ranks' partials (analyzer.analysis.partial) into StepMetrics, one partial at a time.

Memory held here: the partials' small parts (O(ranks)), per-step sums over ranks (O(steps)), and
the ranks' work vectors for the cross-rank analysis (a WorkStore, spilled to disk past a budget).
Quantiles are exact: when the ranks' sketches do not hold every value, ``finish`` asks the caller
for a second pass (``answer``) over the ranks for the values inside the brackets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import polars as pl

from analyzer.analysis.batch_split import BatchSplit, median_split
from analyzer.analysis.kernel_metrics import KernelMetrics, KernelPartial, combine_kernels
from analyzer.analysis.memory_fit import RankMemory
from analyzer.analysis.partial import KERNEL_MEDIAN, QUANTILE_COLUMNS, RankPartial, StepVectors
from analyzer.analysis.quantiles import (
    Answer,
    Bracket,
    Sketch,
    bracket,
    combine_linear,
    exact_values,
    order_stats,
    select,
)
from analyzer.analysis.ranks import RankAnalysis, WorkStore, rank_analysis_from, store_budget
from gpuanalyze.ingest.trace import schema as S

WALL, PARTS, SAMPLES, S_BUSY = S.WALL_MS, S.PARTS, S.BATCH_SAMPLES, S.GPU_BUSY_MS

#: Per-step sums kept over ranks: capped (_c: while the GPU idles) and uncapped (_u) waits.
_SUMS = (
    "wall",
    "data_c",
    "sync_c",
    "other_c",
    "data_u",
    "sync_u",
    "other_u",
    "busy",
    "busy_wall",
    "busy_n",
    "idle",
    "unexpl_c",
    "unexpl_u",
    "n",
)
Answers = dict[str, list[Answer]]
AnswerFn = Callable[[dict[str, list[Bracket]], bool], Iterable[Answers]]
"""Given brackets per column and whether all-sampled ranks are left out, every rank's answers."""

_NO_VECTORS = StepVectors(*(np.empty(0) for _ in range(7)))


class StepSums:
    """Sums over ranks per step number; the step set grows as ranks bring new steps."""

    def __init__(self) -> None:
        self.steps = np.empty(0, dtype=np.int64)
        self.sums = {k: np.empty(0) for k in _SUMS}

    def add(self, v: StepVectors) -> None:
        if v.steps.size == 0:
            return
        steps = v.steps.astype(np.int64, copy=False)
        if self.steps.size == 0:  # the first rank: its values are the sums (0 + x, made one at a time)
            self.steps = steps.copy()
            first = _step_values(v)
            self.sums = {k: np.add(first.pop(k, 0.0), np.zeros(steps.size)) for k in _SUMS}
            return
        run = self._slice(steps)
        at = self._place(steps) if run is None else run
        for k, values in _step_values(v).items():
            self.sums[k][at] += values

    def _slice(self, steps: np.ndarray) -> slice | None:
        """Where a rank's steps are, when they are a run inside the known ones and those are a run too
        (ranks of one run record the same steps): no search. None otherwise."""
        if self.steps.size == 0:  # the first rank: its steps are the known ones
            self.steps = steps.copy()
            self.sums = {k: np.zeros(steps.size) for k in _SUMS}
        first, n = int(steps[0]), steps.size
        lo, known = int(self.steps[0]), self.steps.size
        if int(steps[-1]) - first + 1 != n or int(self.steps[-1]) - lo + 1 != known:
            return None
        if first < lo or first + n > lo + known:
            return None
        return slice(first - lo, first - lo + n)

    def _place(self, steps: np.ndarray) -> slice | np.ndarray:
        """Where a rank's (sorted) steps are among the known ones, adding those not yet known."""
        idx = np.searchsorted(self.steps, steps)
        if idx.size and (idx.max() >= self.steps.size or not np.array_equal(self.steps[idx], steps)):
            union = np.union1d(self.steps, steps)
            moved = np.searchsorted(union, self.steps)
            for k, old in self.sums.items():
                new = np.zeros(union.size)
                new[moved] = old
                self.sums[k] = new
            self.steps = union
            idx = np.searchsorted(union, steps)
        run = idx[-1] - idx[0] + 1 == idx.size  # the rank's steps are a run of the known ones: add a slice
        return slice(int(idx[0]), int(idx[-1]) + 1) if run else idx

    def merge(self, other: StepSums) -> StepSums:
        """The sums of both; when one holds no step, the other itself (its arrays are shared, not copied:
        a union with nothing is what it was, and 1M steps' sums are ~0.1 GiB)."""
        if other.steps.size == 0 or self.steps.size == 0:
            return self if other.steps.size == 0 else other
        out = StepSums()
        for part in (self, other):
            if part.steps.size:
                out._add_sums(part.steps, part.sums)
        return out

    def absorb(self, other: StepSums) -> None:
        """Add ``other``'s sums into these (in place where both have the same steps; into sums that hold no
        step yet, ``other``'s arrays are taken over, not copied: ``other`` is not used again)."""
        if other.steps.size == 0:
            return
        if self.steps.size == 0:  # every sum starts from zeros, so 0 + x is x bit for bit (no -0.0 to lose)
            # Taken over, not copied, unless read-only (Ray hands results over as read-only buffers):
            # later ranks are added into these arrays in place.
            self.steps = other.steps
            self.sums = {k: a if a.flags.writeable else a.copy() for k, a in other.sums.items()}
            return
        if np.array_equal(self.steps, other.steps):
            for k in _SUMS:
                self.sums[k] += other.sums[k]
        else:
            self._add_sums(other.steps, other.sums)

    def _add_sums(self, steps: np.ndarray, sums: dict[str, np.ndarray]) -> None:
        union = np.union1d(self.steps, steps)
        at_old, at_new = np.searchsorted(union, self.steps), np.searchsorted(union, steps)
        for k in _SUMS:
            merged = np.zeros(union.size)
            merged[at_old] = self.sums[k]
            merged[at_new] += sums[k]
            self.sums[k] = merged
        self.steps = union


def _step_values(v: StepVectors) -> dict[str, np.ndarray | float]:
    """What one rank adds to each per-step sum (a number: the same on every step). A rank without
    GPU busy times adds nothing to the busy sums and its whole step to the idle one, without the
    arrays of zeros (the same sums, bit for bit: wall > 0, so max(wall - 0, 0) is wall)."""
    known = ~np.isnan(v.busy)
    if not known.any():
        idle = v.wall
        out: dict[str, np.ndarray | float] = {}
    else:
        busy = np.where(known, v.busy, 0.0)
        idle = np.maximum(v.wall - busy, 0.0)
        out = {"busy": busy, "busy_wall": np.where(known, v.wall, 0.0), "busy_n": known.astype(np.float64)}
    capped = {p: np.minimum(x, idle) for p, x in (("data", v.data), ("sync", v.sync), ("other", v.other))}
    return {
        **out,
        "wall": v.wall,
        "data_c": capped["data"],
        "sync_c": capped["sync"],
        "other_c": capped["other"],
        "data_u": v.data,
        "sync_u": v.sync,
        "other_u": v.other,
        "idle": idle,
        "unexpl_c": np.maximum(idle - capped["data"] - capped["sync"], 0.0),
        "unexpl_u": np.maximum(idle - v.data - v.sync, 0.0),
        "n": 1.0,
    }


@dataclass(frozen=True, slots=True)
class Combined:
    """Everything StepMetrics is built from (metrics.py turns it into StepMetrics)."""

    rows: int
    warmup: int
    windows: int
    analysed: int
    ranks: int
    known: dict[str, bool]
    has_gpu: bool
    sums: dict[str, float]
    means: dict[str, float | None]
    quantiles: dict[tuple[str, float], float]
    step_sums: StepSums
    wall_total: float
    step_mean_ms: float
    samples_per_s: float | None
    memory: list[RankMemory]
    """The ranks' memory figures (analysis.memory_fit; empty without any)."""
    kernels: KernelMetrics | None
    distributed: RankAnalysis | None
    wall_range: tuple[float, float] | None = None
    """(min, max) wall time of the analysed steps (None: none analysed)."""
    lead_mean_ms: float | None = None
    """Mean lead_ms of the analysed rows that recorded it (None: none did)."""
    batch_split: BatchSplit | None = None
    """The median rank's forward + backward split (analysis.batch_split)."""


@dataclass(slots=True)
class Reduced:
    """Some ranks' partials reduced where they were made (a worker): their per-step sums, their work
    vectors, and the partials without vectors. It is what a worker sends for a group of files: a
    third of the bytes of the partials' vectors, and the driver only adds it (Combiner.merge)."""

    partials: list[RankPartial] = dataclasses.field(default_factory=list)
    main: StepSums = dataclasses.field(default_factory=StepSums)
    alt: StepSums = dataclasses.field(default_factory=StepSums)
    """The per-step sums of ranks whose every post-warm-up row is sampled (left out when others are not)."""
    work: list[tuple[int, int | np.ndarray, np.ndarray, np.ndarray]] = dataclasses.field(default_factory=list)
    """(rank, first step of a run or the steps, work per step, start per step) of the ranks with analysed rows."""

    def add(self, p: RankPartial) -> None:
        (self.alt if p.all_sampled else self.main).add(p.vectors)
        if p.n:
            steps = p.vectors.steps
            run = int(steps[-1]) - int(steps[0]) + 1 == steps.size
            self.work.append((p.rank, int(steps[0]) if run else steps, p.vectors.work, p.vectors.start))
        self.partials.append(dataclasses.replace(p, vectors=_NO_VECTORS))


class Combiner:
    """Accepts ranks' partials in any order; ``finish`` returns the Combined metrics."""

    def __init__(self, skip: int, *, quartiles: bool = False) -> None:
        self.skip = skip
        self.quartiles = quartiles
        """Also the wall time's quartiles (Q1, Q3: the report's outlier fence)."""
        self.partials: dict[int, RankPartial] = {}
        self._main, self._alt = StepSums(), StepSums()
        self._store = WorkStore(budget=store_budget() // 2)
        self._starts = WorkStore(budget=store_budget() // 2)

    def add(self, p: RankPartial) -> None:
        if p.rank in self.partials:
            raise ValueError(f"rank {p.rank} twice")
        (self._alt if p.all_sampled else self._main).add(p.vectors)
        if p.n:
            self._store.add(p.rank, p.vectors.steps, p.vectors.work)
            self._starts.add(p.rank, p.vectors.steps, p.vectors.start)
        self.partials[p.rank] = dataclasses.replace(p, vectors=_NO_VECTORS)

    def merge(self, r: Reduced) -> None:
        """Add ranks reduced elsewhere (the same as adding each of their partials)."""
        for p in r.partials:
            if p.rank in self.partials:
                raise ValueError(f"rank {p.rank} twice")
            self.partials[p.rank] = p
        self._main.absorb(r.main)
        self._alt.absorb(r.alt)
        for rank, steps, work, start in r.work:
            self._store.add(rank, steps, work)
            self._starts.add(rank, steps, start)

    @property
    def min_rows(self) -> int:
        return min(p.rows for p in self.partials.values())

    def close(self) -> None:
        self._store.close()
        self._starts.close()

    def finish(self, answer: AnswerFn) -> Combined:
        parts = [self.partials[r] for r in sorted(self.partials)]
        drop, windows = _dropped_windows(parts)
        used = [p for p in parts if not (drop and p.all_sampled) and p.n]
        sums = self._main if drop else self._main.merge(self._alt)
        self._main, self._alt = StepSums(), StepSums()  # handed to the result (finish is the last step)
        n = sum(p.n for p in used)
        rows = sum(p.rows for p in parts)
        t = _totals(parts, used)
        kparts = [p.kernels for p in parts if p.kernels is not None]
        wanted, sketches = _requests(t.known, used, kparts)
        if self.quartiles:
            wanted[WALL] += [0.25, 0.75]
        quantiles = _quantiles(wanted, sketches, lambda req: answer(req, drop))
        kernel_median = quantiles.get((KERNEL_MEDIAN, 0.5))
        distributed = self._distributed(parts, used, drop, sums, quantiles[(WALL, 0.5)])
        return Combined(
            rows=rows,
            warmup=rows - n - windows,
            windows=windows,
            analysed=n,
            ranks=len(used),
            known=t.known,
            has_gpu=t.known[S_BUSY],
            sums=t.total,
            means=t.means,
            quantiles=quantiles,
            step_sums=sums,
            wall_total=float(sums.sums["wall"].sum()),
            step_mean_ms=max(p.sums[WALL] / p.n for p in used),
            samples_per_s=_samples_per_s(t, used),
            memory=[p.memory for p in used if p.memory is not None],
            kernels=combine_kernels(kparts, kernel_median) if kparts else None,
            distributed=distributed,
            wall_range=_range([p.sketches[WALL] for p in used]),
            lead_mean_ms=_lead(used),
            batch_split=median_split([p.split for p in parts if p.split is not None]),
        )

    def _distributed(
        self, parts: list[RankPartial], used: list[RankPartial], drop: bool, sums: StepSums, wall_median: float
    ) -> RankAnalysis | None:
        """The cross-rank analysis of the ranks used (two or more), without the ranks left out."""
        if drop:
            self._store.drop([p.rank for p in parts if p.all_sampled])
            self._starts.drop([p.rank for p in parts if p.all_sampled])
        stats = {p.rank: p.stats for p in used}
        if len(stats) < 2:
            return None
        return rank_analysis_from(stats, self._store, sums.steps, wall_median, self._starts)


def _range(sketches: list[Sketch]) -> tuple[float, float] | None:
    """(min, max) of the values the sketches describe (each holds its rank's first and last sorted value)."""
    held = [s.sample for s in sketches if s.n]
    return (float(min(s[0] for s in held)), float(max(s[-1] for s in held))) if held else None


def _dropped_windows(parts: list[RankPartial]) -> tuple[bool, int]:
    """Whether steps run under profiler windows are left out (some, not all, post-warm-up steps
    ran under one), and how many were."""
    post = sum(p.rows - p.warmup for p in parts)
    sampled = sum(p.sampled for p in parts)
    drop = 0 < sampled < post
    return drop, sampled if drop else 0


def _lead(used: list[RankPartial]) -> float | None:
    n = sum(p.lead[1] for p in used)
    return sum(p.lead[0] for p in used) / n if n else None


@dataclass(frozen=True, slots=True)
class _Totals:
    known: dict[str, bool]
    total: dict[str, float]
    means: dict[str, float | None]


def _totals(parts: list[RankPartial], used: list[RankPartial]) -> _Totals:
    """Which columns any used rank knows, their sums over ranks, and their means per step."""
    known = {c: sum(p.known[c] for p in used) > 0 for c in parts[0].known}
    total = {c: sum(p.sums[c] for p in used) for c in parts[0].sums}
    counts = {c: sum(p.known[c] for p in used) for c in parts[0].known}
    means: dict[str, float | None] = {c: (total[c] / counts[c] if counts[c] else None) for c in (*PARTS, S_BUSY)}
    return _Totals(known, total, means)


def _requests(
    known: dict[str, bool], used: list[RankPartial], kparts: list[KernelPartial]
) -> tuple[dict[str, list[float]], dict[str, list[Sketch]]]:
    """The quantiles StepMetrics needs per column, and the ranks' sketches they come from."""
    wanted: dict[str, list[float]] = {WALL: [0.5, 0.9]}
    wanted.update({c: [0.5] for c in PARTS if known[c]})
    if known[SAMPLES]:
        wanted[SAMPLES] = [0.5]
    sketches: dict[str, list[Sketch]] = {c: [p.sketches[c] for p in used] for c in QUANTILE_COLUMNS}
    if kparts:
        wanted[KERNEL_MEDIAN] = [0.5]
        sketches[KERNEL_MEDIAN] = [k.medians for k in kparts]
    return wanted, sketches


def _samples_per_s(t: _Totals, used: list[RankPartial]) -> float | None:
    """Samples per second over the run: every rank's samples over the slowest rank's wall time."""
    if not t.known[SAMPLES]:
        return None
    return 1000.0 * t.total[SAMPLES] / max(p.sums[WALL] for p in used)


_Pending = dict[str, list[tuple[float, int, int, float]]]
"""Per column: (q, first and last order statistic, weight of the last) of each quantile not read yet."""


def _quantiles(
    wanted: dict[str, list[float]],
    sketches: dict[str, list[Sketch]],
    ask: Callable[[dict[str, list[Bracket]]], Iterable[Answers]],
) -> dict[tuple[str, float], float]:
    """Exact quantiles; one extra pass over the ranks (``ask``) for columns whose sketches are samples."""
    out: dict[tuple[str, float], float] = {}
    pending: _Pending = {}
    for column, qs in wanted.items():
        sk = sketches[column]
        total = sum(s.n for s in sk)
        if total == 0:
            continue
        exact = exact_values(sk)
        for q in qs:
            i, j, frac = _order(column, total, q)
            if exact is not None:
                out[(column, q)] = _interpolate(column, float(exact[i]), float(exact[j]), frac)
            else:
                pending.setdefault(column, []).append((q, i, j, frac))
    pending, requests = _brackets(pending, sketches, out)
    if not pending:
        return out
    gathered: dict[str, list[list[Answer]]] = {c: [[] for _ in b] for c, b in requests.items()}
    for answers in ask(requests):
        for c, per_bracket in answers.items():
            for k, a in enumerate(per_bracket):
                gathered[c][k].append(a)
    for c, items in pending.items():
        for k, (q, i, j, frac) in enumerate(items):
            got, b = gathered[c][k], requests[c][k]
            out[(c, q)] = _interpolate(c, select(got, b, i), select(got, b, j), frac)
    return out


def _brackets(
    pending: _Pending, sketches: dict[str, list[Sketch]], out: dict[tuple[str, float], float]
) -> tuple[_Pending, dict[str, list[Bracket]]]:
    """The brackets the second pass must answer, and their quantiles; a bracket of one value is the
    quantile itself (into ``out``: no pass for it, e.g. a constant batch size)."""
    left: _Pending = {}
    requests: dict[str, list[Bracket]] = {}
    for c, items in pending.items():
        for item in items:
            b = bracket(sketches[c], item[1], item[2])
            if b.lo == b.hi:
                out[(c, item[0])] = _interpolate(c, b.lo, b.lo, 0.0)
            else:
                left.setdefault(c, []).append(item)
                requests.setdefault(c, []).append(b)
    return left, requests


def _order(column: str, n: int, q: float) -> tuple[int, int, float]:
    if column == KERNEL_MEDIAN:  # statistics.median, as KernelMetrics always used
        return (n - 1) // 2, n // 2, 0.5
    return order_stats(n, q)


def _interpolate(column: str, a: float, b: float, frac: float) -> float:
    if column == KERNEL_MEDIAN:
        return a if a == b else (a + b) / 2
    return combine_linear(a, b, frac)


def per_step_frame(sums: StepSums, has_gpu: bool, columns: dict[str, str]) -> pl.DataFrame:
    """StepMetrics.per_step: one row per step, each share summed over the ranks that ran it."""
    s = sums.sums
    wall = s["wall"]
    v = "c" if has_gpu else "u"
    with np.errstate(divide="ignore", invalid="ignore"):
        busy = np.where(s["busy_n"] > 0, s["busy"] / s["busy_wall"], np.nan)
        data = {
            columns["step"]: sums.steps,
            columns["data"]: s[f"data_{v}"] / wall,
            columns["sync"]: s[f"sync_{v}"] / wall,
            columns["other"]: s[f"other_{v}"] / wall,
            columns["data_raw"]: s["data_u"] / wall,
            columns["sync_raw"]: s["sync_u"] / wall,
            columns["other_raw"]: s["other_u"] / wall,
            columns["busy"]: busy,
            columns["idle"]: s["idle"] / wall,
            columns["unexplained"]: s[f"unexpl_{v}"] / wall,
            columns["wall"]: wall,
            columns["ranks"]: s["n"],
        }
    frame = pl.DataFrame(data)
    return frame.with_columns(pl.col(columns["busy"]).fill_nan(None))

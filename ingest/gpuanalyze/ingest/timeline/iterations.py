"""Iterations of a trace without ProfilerStep annotations, found from its repeated top-level structure.

A training or serving loop runs the same outermost CPU ops in the same order every iteration, on the thread that
runs the Python loop. So: take the outermost ``cpu_op`` events of that thread (the one whose ops span the longest
time), and look for an op that starts every iteration: one whose occurrences cut the sequence into windows with the
same ops (the same set of names, about as many of them). Of the candidates (per distinct occurrence count, the
earliest op with that count), the one whose matching windows cover the most ops wins.

Three checks keep a repeated block that is not an iteration (a model's layers in one forward pass) from passing as
one:

- every matching window exchanges something with the host or is a training step: it takes its input (a DataLoader
  fetch, a host-to-device copy), hands a result back (a device-to-host copy, a sync, a ``.item()``), or runs a
  backward pass or an optimizer step. An iteration of a training or serving loop does; a layer inside one forward
  pass does not;
- at least MIN_ITERATIONS windows match (two repetitions say nothing about a steady state);
- the capture must end inside the repeated structure: the ops after the last match are ops of the loop (all but
  MAX_FOREIGN of them, or FOREIGN_SHARE), at most one iteration's worth. One forward pass of a 36-layer model
  repeats its layer 36 times, then runs the head and sampling: it is one window, not 36 iterations.

What comes before the first iteration (set-up, the first allocation) is not analysed, and said so. A capture
without CPU ops is searched the same way in its runtime calls (capture_windows.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from gpuanalyze.ingest.timeline.blocking_calls import HostOps
from gpuanalyze.ingest.timeline.intervals import outermost

#: Fewest matching windows that make a repeated structure a loop.
MIN_ITERATIONS = 3
#: A window matches when its set of op names is SIMILARITY like the most common window's (Jaccard: a loader's
#: collate ops or an occasional .item() may come and go) and its op count is within LENGTH_TOLERANCE of the median.
SIMILARITY = 0.75
LENGTH_TOLERANCE = 0.5
#: Share of the windows (all but the last) that must match.
MATCHING_SHARE = 0.8
#: Ops after the last iteration's start that no window has, beyond which the capture did not end inside the loop
#: (a capture cut mid-iteration may end inside an allocation or a copy no full iteration shows at top level).
MAX_FOREIGN = 2
FOREIGN_SHARE = 0.05
#: Distinct occurrence counts tried as the iteration count (the most common ones among op names).
MAX_CANDIDATES = 16
#: Outermost ops the anchor is searched among (the search is linear per candidate, in Python); past them the anchor
#: found in the first MAX_TOP_OPS is checked on every op (one candidate), and the note says so.
MAX_TOP_OPS = 200_000


@dataclass(frozen=True, slots=True)
class Iterations:
    windows: list[tuple[int, float, float]]
    """(iteration number, start, end) in microseconds, like ProfilerStep windows."""
    anchor: str
    """The op that starts every iteration."""
    skipped_us: float
    """Host time before the first iteration (not analysed)."""
    searched: int = 0  # top-level ops the anchor was chosen among where fewer than all (MAX_TOP_OPS); 0: all

    def note(self) -> str:
        before = f"; {self.skipped_us / 1e3:,.1f} ms before the first is not analysed" if self.skipped_us > 0 else ""
        among = f" (chosen among the first {self.searched:,} top-level ops, checked on all)" if self.searched else ""
        return (
            f"no ProfilerStep#N annotations: {len(self.windows)} iterations found from the repeated top-level op "
            f"'{self.anchor[:80]}'{among} on the loop's thread, each analysed as a step{before}"
        )


def _outermost(ops: HostOps, before: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(start, end, name id) of the outermost ops of the thread whose ops span the longest time, of the ops that start
    before ``before`` (None: all); None without ops. The ops are selected where they are, not copied."""
    early = None if before is None else ops.start < before

    def of(tid: int) -> np.ndarray:
        return ops.tid == tid if early is None else (ops.tid == tid) & early

    best, span = None, -1.0
    for tid in np.unique(ops.tid).tolist():
        sel = of(tid)
        if not sel.any():
            continue
        s = float(ops.end[sel].max() - ops.start[sel].min())
        if s > span:
            best, span = tid, s
    if best is None:
        return None
    idx = np.flatnonzero(of(best))
    idx = idx[np.lexsort((-ops.end[idx], ops.start[idx]))]
    start, end = ops.start[idx], ops.end[idx]
    top = outermost(start, end)
    return start[top], end[top], ops.name[idx][top]


def _candidates(names: np.ndarray) -> list[int]:
    """Per distinct occurrence count (at least MIN_ITERATIONS, the most common counts first), the name id with that
    count that occurs first."""
    counts = Counter(names.tolist())
    by_count: dict[int, int] = {}
    first: dict[int, int] = {}
    for pos, n in enumerate(names.tolist()):
        first.setdefault(n, pos)
    for n, c in counts.items():
        if c >= MIN_ITERATIONS and (c not in by_count or first[n] < first[by_count[c]]):
            by_count[c] = n
    popular = Counter(counts.values())
    ranked = sorted(by_count, key=lambda c: (-popular[c], c))[:MAX_CANDIDATES]
    return [by_count[c] for c in ranked]


def _similar(a: frozenset[int], b: frozenset[int]) -> bool:
    return len(a & b) >= SIMILARITY * len(a | b)


def _score(names: np.ndarray, start: np.ndarray, exchanges: np.ndarray, anchor: int) -> tuple[int, np.ndarray] | None:
    """(ops covered by matching windows, window start positions) for ``anchor``; None when it is not a loop."""
    at = np.flatnonzero(names == anchor)
    bounds = np.append(at, names.size)
    edges = np.searchsorted(exchanges, start[at])
    exchange = np.diff(edges) > 0  # each window but the last
    last_exchanges = exchanges.size > edges[-1]
    sets = [frozenset(names[a:b].tolist()) for a, b in pairwise(bounds[:-1].tolist())]
    if len(sets) < MIN_ITERATIONS - 1:
        return None
    modal, _ = Counter(sets).most_common(1)[0]
    lengths = np.diff(bounds[:-1])
    typical = float(np.median(lengths))
    match = [
        _similar(s, modal) and abs(n - typical) <= LENGTH_TOLERANCE * typical and bool(x)
        for s, n, x in zip(sets, lengths, exchange, strict=True)
    ]
    tail = names[bounds[-2] :]
    loop = frozenset().union(*sets)
    foreign = sum(1 for n in tail.tolist() if n not in loop)
    if foreign > max(MAX_FOREIGN, FOREIGN_SHARE * tail.size) or tail.size > (1 + LENGTH_TOLERANCE) * typical:
        return None  # the capture does not end inside the repeated structure
    if sum(match) + last_exchanges < MIN_ITERATIONS or sum(match) < MATCHING_SHARE * len(match):
        return None
    return int(sum(n for n, m in zip(lengths, match, strict=True) if m) + tail.size), at


def detect_iterations(
    ops: HostOps, exchanges: np.ndarray, end_us: float, before: float | None = None
) -> Iterations | None:
    """The iterations of a trace without step annotations (module docstring); None when no loop is found.
    ``exchanges``: sorted host times (us) where the host gives the device input or takes a result (a loader fetch,
    an H2D/D2H copy's launch, a blocking call, a scalar read); ``end_us``: where the last iteration ends (the end of
    the trace's host activity); ``before``: only the ops that start before it are read (None: all)."""
    top = _outermost(ops, before)
    if top is None:
        return None
    start, _, names = top
    head = slice(0, MAX_TOP_OPS)
    best: tuple[int, np.ndarray, int] | None = None
    for anchor in _candidates(names[head]):
        got = _score(names[head], start[head], exchanges, anchor)
        if got is not None and (best is None or got[0] > best[0]):
            best = (got[0], got[1], anchor)
    if best is not None and names.size > MAX_TOP_OPS:  # the anchor of the first ops, checked on them all
        got = _score(names, start, exchanges, best[2])
        best = None if got is None else (got[0], got[1], best[2])
    if best is None:
        return None
    _, at, anchor = best
    edges = [float(x) for x in start[at]] + [end_us]
    windows = [(i, lo, hi) for i, (lo, hi) in enumerate(pairwise(edges))]
    skipped = edges[0] - float(start[0])
    return Iterations(windows, ops.names[anchor], skipped, MAX_TOP_OPS if names.size > MAX_TOP_OPS else 0)

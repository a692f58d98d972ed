"""ProfilerStep windows made disjoint in one sort, so per-step work stays linear in the trace.

One thread's steps follow each other: its step timer may stop a little after the next step began
(up to OVERLAP_US; step_rows gives what starts in that tail to the next step), never more. A
window that runs further into the next step of its thread (nested or overlapping ranges: a broken
or hostile trace, e.g. 20,000 ranges nested in each other) is cut at that step's start, and the
cut windows are counted in a note. Steps of different threads may overlap (another stream of
steps), but not without bound: when more than MAX_OPEN windows are open at once, every window is
cut at the next step's start, whatever its thread. Without this, each window's statistics cover
every kernel of the windows nested in it: quadratic work.
"""

from __future__ import annotations

import numpy as np

#: How far (us) a step's window may run into the next step's before they are separate streams.
OVERLAP_US = 1000.0
#: Most step windows open at the same time (threads with their own profiler steps) before the
#: trace is taken to be broken and every window is cut at the next start.
MAX_OPEN = 64


def resolve_windows(steps: list[tuple[int, float, float, int]]) -> tuple[list[tuple[int, float, float]], list[str]]:
    """(step, start, end) sorted, from (step, start, end, thread); cut where they overlap beyond
    the rules above, with a note saying how many."""
    if not steps:
        return [], []
    arr = np.array([(s, a, b, t) for s, a, b, t in steps], dtype=np.float64)
    number, start, end, thread = arr[:, 0], arr[:, 1], arr[:, 2].copy(), arr[:, 3]
    notes: list[str] = []
    order = np.lexsort((start, thread))
    nxt = np.full(order.size, np.inf)
    same = thread[order][1:] == thread[order][:-1]
    nxt[:-1][same] = start[order][1:][same]
    cut = end[order] > nxt + OVERLAP_US
    if cut.any():
        end[order[cut]] = nxt[cut]
        notes.append(
            f"{int(cut.sum())} ProfilerStep window(s) ran more than {OVERLAP_US / 1e3:g} ms past the next step of "
            "their thread (nested or overlapping ranges); each was cut at that step's start"
        )
    most = _most_open(start, end)
    if most > MAX_OPEN:
        by_start = np.argsort(start, kind="stable")
        following = np.append(start[by_start][1:], np.inf)
        over = end[by_start] > following + OVERLAP_US
        end[by_start[over]] = following[over]
        notes.append(
            f"{most} ProfilerStep windows were open at once (more than {MAX_OPEN} streams of steps); "
            f"{int(over.sum())} were cut at the next step's start"
        )
    out = sorted(zip(number.astype(np.int64).tolist(), start.tolist(), end.tolist(), strict=True))
    return out, notes


def _most_open(start: np.ndarray, end: np.ndarray) -> int:
    """The most windows [start, end) open at one time (a sweep over the sorted ends points)."""
    times = np.concatenate([start, end])
    delta = np.concatenate([np.ones(start.size, np.int64), -np.ones(end.size, np.int64)])
    order = np.lexsort((delta, times))  # at equal times an end (-1) comes before a start
    return int(np.cumsum(delta[order]).max())

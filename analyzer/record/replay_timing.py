"""Timing the replays (record.bf16_replay, record.sample_replay) do between steps: a few variants of one call,
interleaved so a loaded host slows them alike, the fastest of a few rounds each."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

#: Rounds of the variants; the fastest of each is kept.
REPEATS = 3


def fastest(runs: Sequence[Callable[[], Any]], timing_s: float) -> list[float]:
    """Seconds per call of each of ``runs``: each timed over enough calls to last about ``timing_s`` (after one
    warm-up call), the variants alternating, the fastest of REPEATS rounds each."""
    per = [calls_for(f, timing_s) for f in runs]
    best = [math.inf] * len(runs)
    for _ in range(REPEATS):
        for i, f in enumerate(runs):
            best[i] = min(best[i], timed(f, per[i]))
    return best


def calls_for(f: Callable[[], Any], timing_s: float) -> int:
    """Calls of ``f`` that last about ``timing_s`` (after one warm-up call)."""
    f()
    once = timed(f, 1)
    return max(1, min(10_000, int(timing_s / max(once, 1e-7))))


def timed(f: Callable[[], Any], n: int) -> float:
    """Seconds per call of ``f`` over ``n`` calls."""
    start = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - start) / n

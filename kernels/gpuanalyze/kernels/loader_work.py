"""The per-sample CPU work of the synthetic loader: a numba-jitted decode/augment stand-in."""

from __future__ import annotations

import time

import numpy as np
from numba import njit


@njit(cache=False)
def augment(x: np.ndarray, iters: int, seed: int) -> None:
    """Fill a flat float32 sample and pass over it ``iters`` times (normalise-and-jitter arithmetic)."""
    v = np.float32(seed % 97) / np.float32(97.0)
    for i in range(x.size):
        x[i] = v + np.float32(i % 255) / np.float32(255.0)
    for _ in range(iters):
        for i in range(x.size):
            x[i] = x[i] * np.float32(0.999) + np.float32(0.001)


def iterations_for(cost_us: float, sample_size: int) -> tuple[int, float]:
    """(iterations, measured microseconds per sample) that make one sample cost about ``cost_us``."""
    x = np.empty(sample_size, np.float32)

    def best(iters: int) -> float:
        augment(x, iters, 0)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            augment(x, iters, 0)
            times.append(time.perf_counter() - t0)
        return min(times) * 1e6

    base, per_pass = best(0), (best(20) - best(0)) / 20
    iters = max(0, round((cost_us - base) / max(per_pass, 1e-3)))
    return iters, best(iters)

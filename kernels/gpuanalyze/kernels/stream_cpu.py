"""BabelStream-style loops on the CPU with numba parallel (numpy's own copy is single-threaded)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=False)
def _copy(a: np.ndarray, c: np.ndarray) -> None:
    for i in prange(a.size):
        c[i] = a[i]


@njit(parallel=True, cache=False)
def _scale(a: np.ndarray, c: np.ndarray, s: float) -> None:
    for i in prange(a.size):
        c[i] = s * a[i]


@njit(parallel=True, cache=False)
def _add(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    for i in prange(a.size):
        c[i] = a[i] + b[i]


@njit(parallel=True, cache=False)
def _triad(a: np.ndarray, b: np.ndarray, c: np.ndarray, s: float) -> None:
    for i in prange(a.size):
        c[i] = a[i] + s * b[i]


@njit(parallel=True, cache=False)
def _dot(a: np.ndarray, b: np.ndarray) -> float:
    acc = 0.0
    for i in prange(a.size):
        acc += np.float64(a[i] * b[i])
    return acc


class CpuStream:
    def __init__(self, n: int, scalar: float, init: tuple[float, float, float]) -> None:
        self.s = np.float32(scalar)
        self.a, self.b, self.c = (np.full(n, v, dtype=np.float32) for v in init)
        self.dot = 0.0

    def run(self, variant: str) -> None:
        if variant == "copy":
            _copy(self.a, self.c)
        elif variant == "scale":
            _scale(self.a, self.c, self.s)
        elif variant == "add":
            _add(self.a, self.b, self.c)
        elif variant == "triad":
            _triad(self.a, self.b, self.c, self.s)
        else:
            self.dot = _dot(self.a, self.b)

    def c_equals_any(self, values: tuple[np.float32, ...]) -> bool:
        return bool(np.isin(self.c, np.array(values, dtype=np.float32)).all())

    def dot_value(self) -> float:
        return float(self.dot)

    def sync(self) -> None:
        pass

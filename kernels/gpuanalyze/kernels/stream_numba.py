"""BabelStream-style kernels for numba.cuda: scalar grid-stride loops; they also run under the simulator."""

from __future__ import annotations

import numpy as np
from numba import cuda, float64

import gpuanalyze.kernels.numba_compat  # noqa: F401  (before numba compiles anything)

TPB = 256


@cuda.jit
def copy_k(a: np.ndarray, c: np.ndarray) -> None:
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, a.size, stride):
        c[i] = a[i]


@cuda.jit
def scale_k(a: np.ndarray, c: np.ndarray, s: float) -> None:
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, a.size, stride):
        c[i] = s * a[i]


@cuda.jit
def add_k(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, a.size, stride):
        c[i] = a[i] + b[i]


@cuda.jit
def triad_k(a: np.ndarray, b: np.ndarray, c: np.ndarray, s: float) -> None:
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, a.size, stride):
        c[i] = a[i] + s * b[i]


@cuda.jit
def dot_k(a: np.ndarray, b: np.ndarray, partial: np.ndarray) -> None:
    sh = cuda.shared.array(TPB, float64)
    start, stride = cuda.grid(1), cuda.gridsize(1)
    tid = cuda.threadIdx.x
    acc = 0.0
    for i in range(start, a.size, stride):
        acc += a[i] * b[i]
    sh[tid] = acc
    cuda.syncthreads()
    step = cuda.blockDim.x // 2
    while step > 0:
        if tid < step:
            sh[tid] += sh[tid + step]
        cuda.syncthreads()
        step //= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = sh[0]


class NumbaStream:
    """Three float32 device arrays; ``blocks`` caps the grid (small under the simulator)."""

    def __init__(self, n: int, scalar: float, init: tuple[float, float, float], blocks: int) -> None:
        self.s = np.float32(scalar)
        self.a, self.b, self.c = (cuda.to_device(np.full(n, v, dtype=np.float32)) for v in init)
        self.grid = max(1, min(blocks, (n + TPB - 1) // TPB))
        self.partial = cuda.to_device(np.zeros(self.grid, dtype=np.float64))

    def run(self, variant: str) -> None:
        g = self.grid
        if variant == "copy":
            copy_k[g, TPB](self.a, self.c)
        elif variant == "scale":
            scale_k[g, TPB](self.a, self.c, self.s)
        elif variant == "add":
            add_k[g, TPB](self.a, self.b, self.c)
        elif variant == "triad":
            triad_k[g, TPB](self.a, self.b, self.c, self.s)
        else:
            dot_k[g, TPB](self.a, self.b, self.partial)

    def c_equals_any(self, values: tuple[np.float32, ...]) -> bool:
        c = self.c.copy_to_host()
        return bool(np.isin(c, np.array(values, dtype=np.float32)).all())

    def dot_value(self) -> float:
        return float(self.partial.copy_to_host().sum())

    def sync(self) -> None:
        cuda.synchronize()

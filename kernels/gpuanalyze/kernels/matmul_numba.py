"""A tiled shared-memory fp32 matmul in numba.cuda: our own SIMT kernel (no tensor cores)."""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

import gpuanalyze.kernels.numba_compat  # noqa: F401  (before numba compiles anything)

TILE = 16


@cuda.jit
def matmul_k(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    n = a.shape[0]
    acc = float32(0.0)
    for t in range((n + TILE - 1) // TILE):
        k = t * TILE
        sa[ty, tx] = a[row, k + tx] if row < n and k + tx < n else float32(0.0)
        sb[ty, tx] = b[k + ty, col] if col < n and k + ty < n else float32(0.0)
        cuda.syncthreads()
        for j in range(TILE):
            acc += sa[ty, j] * sb[j, tx]
        cuda.syncthreads()
    if row < n and col < n:
        c[row, col] = acc


class NumbaMatmul:
    def __init__(self, n: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.host_a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        self.host_b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        self.a, self.b = cuda.to_device(self.host_a), cuda.to_device(self.host_b)
        self.c = cuda.device_array((n, n), dtype=np.float32)
        self.n, self.dtype = n, "float32"
        blocks = (n + TILE - 1) // TILE
        self.grid, self.block = (blocks, blocks), (TILE, TILE)

    def run(self) -> None:
        matmul_k[self.grid, self.block](self.a, self.b, self.c)

    def max_rel_error(self, rows: int = 64) -> float:
        self.run()
        got = self.c.copy_to_host()[:rows].astype(np.float64)
        ref = self.host_a[:rows].astype(np.float64) @ self.host_b.astype(np.float64)
        return float(np.abs(got - ref).max() / np.abs(ref).max())

"""The ring all-reduce's reduction on GPUs: our numba.cuda add kernel on torch tensors."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

import gpuanalyze.kernels.numba_compat  # noqa: F401  (before numba compiles anything)


@cuda.jit
def _add_k(a: np.ndarray, b: np.ndarray) -> None:
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, a.size, stride):
        a[i] += b[i]


def cuda_add(a: Any, b: Any) -> None:
    """a += b for CUDA tensors, launched on torch's current stream."""
    import torch

    stream = cuda.external_stream(torch.cuda.current_stream().cuda_stream)
    blocks = min(4096, (a.numel() + 255) // 256)
    _add_k[max(1, blocks), 256, stream](cuda.as_cuda_array(a), cuda.as_cuda_array(b))

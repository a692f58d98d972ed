"""Matmul through cuBLAS ``gemmEx`` from CuPy, so fp32, TF32, fp16 and bf16 use the same call.

CuPy has no bfloat16 dtype: bf16 operands are stored as uint16 bit patterns and passed to
cuBLAS as CUDA_R_16BF. TF32 is requested explicitly with CUBLAS_COMPUTE_32F_FAST_TF32 (CuPy's
own fp32 matmul uses TF32 only when CUPY_TF32=1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14
CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32 = 68, 77
CUBLAS_GEMM_DEFAULT = -1
_TYPES = {  # storage dtype, cuda data type, compute type
    "float32": ("float32", CUDA_R_32F, CUBLAS_COMPUTE_32F),
    "tf32": ("float32", CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32),
    "float16": ("float16", CUDA_R_16F, CUBLAS_COMPUTE_32F),
    "bfloat16": ("uint16", CUDA_R_16BF, CUBLAS_COMPUTE_32F),
}
TOLERANCE = {"float32": 1e-4, "tf32": 5e-3, "float16": 1e-2, "bfloat16": 1e-2}


def _to_bf16_bits(cp: Any, x: Any) -> Any:
    bits = x.astype(cp.float32).view(cp.uint32)
    rounded = bits + cp.uint32(0x7FFF) + ((bits >> 16) & cp.uint32(1))
    return (rounded >> 16).astype(cp.uint16)


def _to_f64(cp: Any, x: Any, dtype: str) -> Any:
    if dtype == "bfloat16":
        return (x.astype(cp.uint32) << 16).view(cp.float32).astype(cp.float64)
    return x.astype(cp.float64)


class CupyMatmul:
    """C = A @ B for square n x n row-major matrices in one precision."""

    def __init__(self, n: int, dtype: str, seed: int = 0) -> None:
        import cupy
        from cupy.cuda import cublas

        self.cp, self.cublas, self.n, self.dtype = cupy, cublas, n, dtype
        storage, self.ctype, self.compute = _TYPES[dtype]
        rng = cupy.random.default_rng(seed)
        a = rng.random((n, n), dtype=cupy.float32) * 2 - 1
        b = rng.random((n, n), dtype=cupy.float32) * 2 - 1
        if dtype == "bfloat16":
            self.a, self.b = _to_bf16_bits(cupy, a), _to_bf16_bits(cupy, b)
        else:
            self.a, self.b = a.astype(storage), b.astype(storage)
        self.c = cupy.zeros((n, n), dtype=storage if dtype != "tf32" else "float32")
        self.alpha, self.beta = np.ones(1, np.float32), np.zeros(1, np.float32)
        # cuBLAS picks faster Hopper kernels with a workspace; 32 MiB is what PyTorch gives it.
        self.workspace = cupy.empty(32 * 2**20, dtype=cupy.uint8)
        if hasattr(cublas, "setWorkspace"):
            cublas.setWorkspace(cupy.cuda.device.get_cublas_handle(), self.workspace.data.ptr, self.workspace.nbytes)

    def run(self) -> None:
        n = self.n
        handle = self.cp.cuda.device.get_cublas_handle()
        # Row-major C = A B is column-major C^T = B^T A^T: pass B first.
        self.cublas.gemmEx(
            handle,
            0,
            0,
            n,
            n,
            n,
            self.alpha.ctypes.data,
            self.b.data.ptr,
            self.ctype,
            n,
            self.a.data.ptr,
            self.ctype,
            n,
            self.beta.ctypes.data,
            self.c.data.ptr,
            self.ctype,
            n,
            self.compute,
            CUBLAS_GEMM_DEFAULT,
        )

    def max_rel_error(self, rows: int = 64) -> float:
        cp = self.cp
        self.run()
        ref = _to_f64(cp, self.a[:rows], self.dtype) @ _to_f64(cp, self.b, self.dtype)
        got = _to_f64(cp, self.c[:rows], self.dtype)
        return float(cp.abs(got - ref).max() / cp.abs(ref).max())

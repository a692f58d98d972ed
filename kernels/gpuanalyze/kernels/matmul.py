"""Matmul throughput per precision: 2*M*N*K FLOPs over event-timed runs, median of >= 50 after >= 10 warm-ups.

cupy: cuBLAS gemmEx in fp32, tf32, fp16, bf16 (fp8 needs cuBLASLt, which CuPy does not expose:
measured through torch._scaled_mm when torch is present, and labelled so). numba: our tiled
fp32 SIMT kernel. cpu: numpy's BLAS in fp32 (and fp64).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analyzer.errors import Skip, VerificationError
from gpuanalyze.kernels.backend import TIMERS, Backend, host_timer
from gpuanalyze.kernels.result import BenchResult, matmul_flops, rate_result

CUPY_DTYPES = ("float32", "tf32", "float16", "bfloat16")
#: Untimed and timed runs on a GPU (the docstring's protocol); the CPU's quick pass runs fewer.
WARMUP, REPEATS = 10, 50


def _measure(
    impl: Any,
    *,
    backend: Backend,
    dtype: str,
    n: int,
    tol: float,
    timer: Any,
    engine: str,
    warmup: int = WARMUP,
    repeats: int = REPEATS,
) -> BenchResult:
    err = impl.max_rel_error()
    if not err <= tol:
        raise VerificationError(f"{dtype} matmul max relative error {err:.2e} exceeds {tol:.0e}")
    seconds = timer(impl.run, warmup, repeats)
    return rate_result(
        benchmark="matmul",
        backend=backend.name,
        device=backend.device,
        variant=f"{n}x{n}x{n}",
        unit="TFLOP/s",
        work=matmul_flops(n, n, n) / 1e12,
        seconds=seconds,
        dtype=dtype,
        size_bytes=3 * n * n * (2 if dtype in ("float16", "bfloat16") else 4),
        params={"m": n, "n": n, "k": n, "max_rel_error": err, "engine": engine},
    )


class _NumpyMatmul:
    def __init__(self, n: int, dtype: str) -> None:
        rng = np.random.default_rng(0)
        self.a = rng.uniform(-1, 1, (n, n)).astype(dtype)
        self.b = rng.uniform(-1, 1, (n, n)).astype(dtype)
        self.c = np.empty((n, n), dtype=dtype)

    def run(self) -> None:
        np.matmul(self.a, self.b, out=self.c)

    def max_rel_error(self, rows: int = 64) -> float:
        self.run()
        ref = self.a[:rows].astype(np.float64) @ self.b.astype(np.float64)
        return float(np.abs(self.c[:rows] - ref).max() / np.abs(ref).max())


def run_matmul(backend: Backend, *, quick: bool) -> tuple[list[BenchResult], list[str]]:
    """(results, skipped-with-reason)."""
    results, skipped = [], []
    if backend.name == "cupy":
        from gpuanalyze.kernels.matmul_cupy import TOLERANCE, CupyMatmul

        n = 4096 if quick else 8192
        for dtype in CUPY_DTYPES:
            results.append(
                _measure(
                    CupyMatmul(n, dtype),
                    backend=backend,
                    dtype=dtype,
                    n=n,
                    tol=TOLERANCE[dtype],
                    timer=TIMERS["cupy"],
                    engine="cuBLAS gemmEx",
                )
            )
        try:
            results.append(_torch_fp8(backend, n))
        except Skip as exc:
            skipped.append(f"matmul float8: {exc}")
    elif backend.name == "numba":
        from gpuanalyze.kernels.matmul_numba import NumbaMatmul

        n = 2048 if quick else 4096
        results.append(
            _measure(
                NumbaMatmul(n),
                backend=backend,
                dtype="float32",
                n=n,
                tol=1e-4,
                timer=TIMERS["numba"],
                engine="numba tiled SIMT kernel",
            )
        )
        skipped.append("matmul tf32/float16/bfloat16/float8: the numba backend has only its own fp32 SIMT kernel")
    else:
        n = 1024 if quick else 2048
        for dtype in ("float32", "float64"):
            results.append(
                _measure(
                    _NumpyMatmul(n, dtype),
                    backend=backend,
                    dtype=dtype,
                    n=n,
                    tol=1e-4,
                    warmup=3 if quick else WARMUP,
                    repeats=10 if quick else REPEATS,
                    timer=host_timer,
                    engine="numpy BLAS",
                )
            )
    return results, skipped


def _torch_fp8(backend: Backend, n: int) -> BenchResult:
    try:
        import torch
    except ImportError as exc:
        raise Skip("needs torch (cuBLASLt fp8 is not reachable from CuPy)") from exc
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
        raise Skip("the device has no fp8 tensor cores (needs compute capability >= 8.9)")
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")

    class Impl:
        def run(self) -> None:
            torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        def max_rel_error(self, rows: int = 64) -> float:
            got = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)[:rows].double()
            ref = a[:rows].double() @ b.double()
            return float((got - ref).abs().max() / ref.abs().max())

    return _measure(
        Impl(),
        backend=backend,
        dtype="float8",
        n=n,
        tol=1e-2,
        timer=TIMERS["torch"],
        engine="torch._scaled_mm (cuBLASLt), e4m3",
    )

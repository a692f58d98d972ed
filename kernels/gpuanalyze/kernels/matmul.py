"""Matmul throughput per precision: 2*M*N*K FLOPs over event-timed runs, median of >= 50 after >= 10 warm-ups.

cupy: cuBLAS gemmEx in fp32, tf32, fp16, bf16 (fp8 needs cuBLASLt, which CuPy does not expose:
measured through torch._scaled_mm when torch is present, and labelled so). cpu: numpy's BLAS in fp32 (and
fp64).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class _Plan:
    """What one backend measures: n x n x n matmuls in each dtype of ``tolerance``, timed the same way."""

    n: int
    make: Callable[[str], Any]
    """The implementation of one dtype, made when it is measured (one set of matrices at a time)."""
    tolerance: dict[str, float]
    """Largest relative error of each dtype's result, in the order they are measured."""
    timer: Any
    engine: str
    warmup: int = WARMUP
    repeats: int = REPEATS


def _measured(backend: Backend, plan: _Plan) -> list[BenchResult]:
    return [
        _measure(
            plan.make(dtype),
            backend=backend,
            dtype=dtype,
            n=plan.n,
            tol=tol,
            timer=plan.timer,
            engine=plan.engine,
            warmup=plan.warmup,
            repeats=plan.repeats,
        )
        for dtype, tol in plan.tolerance.items()
    ]


def _plan(backend: Backend, quick: bool) -> _Plan:
    if backend.name == "cupy":
        from gpuanalyze.kernels.matmul_cupy import TOLERANCE, CupyMatmul

        n = 4096 if quick else 8192
        tolerance = {dtype: TOLERANCE[dtype] for dtype in CUPY_DTYPES}
        return _Plan(n, lambda dtype: CupyMatmul(n, dtype), tolerance, TIMERS["cupy"], "cuBLAS gemmEx")
    n = 1024 if quick else 2048
    return _Plan(
        n,
        lambda dtype: _NumpyMatmul(n, dtype),
        {"float32": 1e-4, "float64": 1e-4},
        host_timer,
        "numpy BLAS",
        warmup=3 if quick else WARMUP,
        repeats=10 if quick else REPEATS,
    )


def run_matmul(backend: Backend, *, quick: bool) -> tuple[list[BenchResult], list[str]]:
    """(results, skipped-with-reason)."""
    plan = _plan(backend, quick)
    results, skipped = _measured(backend, plan), []
    if backend.name == "cupy":
        try:
            results.append(_torch_fp8(backend, plan.n))
        except Skip as exc:
            skipped.append(f"matmul float8: {exc}")
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

    (result,) = _measured(
        backend, _Plan(n, lambda _: Impl(), {"float8": 1e-2}, TIMERS["torch"], "torch._scaled_mm (cuBLASLt), e4m3")
    )
    return result

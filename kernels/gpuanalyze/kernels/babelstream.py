"""Device memory bandwidth, BabelStream-style: copy, scale, add, triad and dot.

Bytes are counted as BabelStream does (copy/scale 2 arrays, add/triad 3, dot 2, x element size
x N). Arrays are at least 4x the L2 cache. Every variant's output is checked element by element
against the exact expected float32 value before its rate is reported.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analyzer.errors import VerificationError
from gpuanalyze.kernels.backend import TIMERS, Backend
from gpuanalyze.kernels.result import BenchResult, rate_result, stream_bytes

VARIANTS = ("copy", "scale", "add", "triad", "dot")
INIT = (0.1, 0.2, 0.0)
SCALAR = 0.4


def expected(variant: str) -> tuple[np.float32, ...]:
    """Exact float32 results; triad also accepts the fused multiply-add rounding."""
    a, b, s = np.float32(INIT[0]), np.float32(INIT[1]), np.float32(SCALAR)
    if variant == "copy":
        return (a,)
    if variant == "scale":
        return (np.float32(s * a),)
    if variant == "add":
        return (np.float32(a + b),)
    if variant == "triad":
        return (np.float32(a + np.float32(s * b)), np.float32(np.float64(a) + np.float64(s) * np.float64(b)))
    raise ValueError(variant)


def elements(backend: Backend, quick: bool) -> int:
    """Array length: >= 4x L2 on GPUs (at least 2^26 floats, 2^28 unless quick); 2^26 (2^25 quick)
    on CPU, past most L3 caches."""
    if backend.name == "cpu":
        n = 2**25 if quick else 2**26
    else:
        n = max(2**26 if quick else 2**28, 4 * (backend.l2_bytes or 0) // 4)
    return -(-n // 1024) * 1024


def make_impl(backend: Backend, n: int, *, sim_blocks: int | None = None) -> Any:
    if backend.name == "cupy":
        from gpuanalyze.kernels.stream_cupy import CupyStream

        return CupyStream(n, SCALAR, INIT, backend.sm_count or 80)
    if backend.name == "numba":
        from gpuanalyze.kernels.stream_numba import NumbaStream

        return NumbaStream(n, SCALAR, INIT, sim_blocks or 2**20)
    from gpuanalyze.kernels.stream_cpu import CpuStream

    return CpuStream(n, SCALAR, INIT)


def verify(impl: Any, variant: str, n: int) -> None:
    impl.run(variant)
    impl.sync()
    if variant == "dot":
        want = n * float(np.float32(np.float32(INIT[0]) * np.float32(INIT[1])))
        got = impl.dot_value()
        if abs(got - want) > 1e-6 * abs(want):
            raise VerificationError(f"dot gave {got}, expected {want}")
    elif not impl.c_equals_any(expected(variant)):
        raise VerificationError(f"{variant} wrote values other than {expected(variant)}")


def run_memory(backend: Backend, *, quick: bool) -> list[BenchResult]:
    n = elements(backend, quick)
    impl = make_impl(backend, n)
    timer = TIMERS[backend.name]
    inner = 1 if backend.name == "cpu" else 5
    warmup, repeats = (2, 5) if quick else (3, 20)
    results = []
    for variant in VARIANTS:
        verify(impl, variant, n)

        def body(v: str = variant) -> None:
            for _ in range(inner):
                impl.run(v)

        seconds = [s / inner for s in timer(body, warmup, repeats)]
        nbytes = stream_bytes(variant, n, 4)
        results.append(
            rate_result(
                benchmark="memory_bandwidth",
                backend=backend.name,
                device=backend.device,
                variant=variant,
                unit="GB/s",
                work=nbytes / 1e9,
                seconds=seconds,
                dtype="float32",
                size_bytes=n * 4,
                params={"elements": n, "bytes_counted": nbytes},
            )
        )
    return results

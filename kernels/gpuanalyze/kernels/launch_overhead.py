"""Kernel launch overhead: an empty kernel launched back to back.

Reports host-side microseconds per launch (what a Python training loop pays per small op) and
launches per second; the device-side time per launch between events is kept as a parameter.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

from gpuanalyze.kernels.backend import TIMERS, Backend
from gpuanalyze.kernels.result import BenchResult

LAUNCHES = 2000


def _launcher(backend: Backend) -> tuple[Callable[[], None], str]:
    if backend.name == "cupy":
        import cupy

        kernel = cupy.RawKernel('extern "C" __global__ void empty_k() {}', "empty_k")
        return (lambda: kernel((1,), (1,), ())), "CuPy RawKernel, 1 block x 1 thread"
    if backend.name == "numba":
        from numba import cuda

        import gpuanalyze.kernels.numba_compat  # noqa: F401

        @cuda.jit
        def empty_k() -> None:
            pass

        return (lambda: empty_k[1, 1]()), "numba.cuda kernel, 1 block x 1 thread"
    try:
        import torch

        x, y = torch.zeros(1), torch.zeros(1)
        return (lambda: torch.add(x, 1.0, out=y)), "torch CPU op dispatch on a 1-element tensor"
    except ImportError:
        from numba import njit

        @njit
        def noop(a: np.ndarray) -> None:
            pass

        arr = np.zeros(1)
        return (lambda: noop(arr)), "numba njit call of an empty function"


def run_launch(backend: Backend, *, quick: bool) -> list[BenchResult]:
    launch, what = _launcher(backend)
    n = LAUNCHES // 4 if quick else LAUNCHES

    def burst() -> None:
        for _ in range(n):
            launch()

    burst()
    host = []
    for _ in range(5 if quick else 10):
        t0 = time.perf_counter()
        burst()
        if backend.name != "cpu":
            TIMERS[backend.name](lambda: None, 0, 1)  # drain the queue before the next host timing
        host.append((time.perf_counter() - t0) / n * 1e6)
    device = [s / n * 1e6 for s in TIMERS[backend.name](burst, 1, 3)]
    host.sort()
    med = statistics.median(host)
    return [
        BenchResult(
            benchmark="launch_overhead",
            backend=backend.name,
            device=backend.device,
            variant="empty_kernel",
            value=med,
            unit="us/launch",
            repeats=len(host),
            min=host[0],
            median=med,
            max=host[-1],
            params={
                "launches_per_s": 1e6 / med,
                "launches_per_repeat": n,
                "device_us_per_launch": statistics.median(device),
                "what": what,
            },
        )
    ]

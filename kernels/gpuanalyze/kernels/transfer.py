"""Host<->device copy bandwidth, bandwidthTest-style: pinned vs pageable, H2D and D2H, size sweep.

Each copy is issued on a stream and timed between CUDA events. Every measured copy is verified
once by comparing the destination with the source.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from analyzer.errors import Skip, VerificationError
from gpuanalyze.kernels.backend import TIMERS, Backend
from gpuanalyze.kernels.result import BenchResult, rate_result

KIB, MIB, GIB = 2**10, 2**20, 2**30
SIZES = (64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, GIB)
QUICK_SIZES = (64 * KIB, MIB, 16 * MIB, 256 * MIB)


def _cupy_buffers(size: int, pinned: bool) -> tuple[Any, Any, Callable[[], None], Callable[[], None]]:
    import cupy

    n = size // 4
    if pinned:
        mem = cupy.cuda.alloc_pinned_memory(size)
        host = np.frombuffer(mem, np.float32, n)
    else:
        host = np.empty(n, np.float32)
    host[:] = np.arange(n, dtype=np.float32)
    dev = cupy.empty(n, cupy.float32)
    stream = cupy.cuda.get_current_stream()
    return host, dev, lambda: dev.set(host, stream=stream), lambda: dev.get(stream=stream, out=host)


def _numba_buffers(size: int, pinned: bool) -> tuple[Any, Any, Callable[[], None], Callable[[], None]]:
    from numba import cuda

    n = size // 4
    host = cuda.pinned_array(n, np.float32) if pinned else np.empty(n, np.float32)
    host[:] = np.arange(n, dtype=np.float32)
    dev = cuda.device_array(n, np.float32)
    stream = cuda.default_stream()
    return host, dev, lambda: dev.copy_to_device(host, stream=stream), lambda: dev.copy_to_host(host, stream=stream)


def run_transfer(backend: Backend, *, quick: bool) -> list[BenchResult]:
    if backend.name == "cpu":
        raise Skip("host<->device copies need a GPU backend (cupy or numba)")
    make = _cupy_buffers if backend.name == "cupy" else _numba_buffers
    timer = TIMERS[backend.name]
    results = []
    for size in QUICK_SIZES if quick else SIZES:
        for pinned in (True, False):
            host, dev, h2d, d2h = make(size, pinned)
            for direction, fn in (("h2d", h2d), ("d2h", d2h)):
                reps = 5 if size >= 256 * MIB else 20
                seconds = timer(fn, 2, reps)
                results.append(
                    rate_result(
                        benchmark=direction,
                        backend=backend.name,
                        device=backend.device,
                        variant="pinned" if pinned else "pageable",
                        unit="GB/s",
                        work=size / 1e9,
                        seconds=seconds,
                        dtype="float32",
                        size_bytes=size,
                    )
                )
            if not np.array_equal(host[:1024], np.arange(1024, dtype=np.float32)):
                raise VerificationError(f"a {size}-byte round trip changed the data")
            del host, dev
    return results

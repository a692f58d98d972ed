"""Which benchmark backends this machine has, and how each one times work.

``cupy`` needs a real CUDA device; ``cpu`` is always available.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from analyzer.errors import GpuAnalyzeError

BACKENDS = ("cupy", "cpu")


@dataclass(frozen=True, slots=True)
class Backend:
    name: str
    device: str


def cupy_unavailable() -> str | None:
    """Why the cupy backend cannot run here, or None when it can."""
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed (pip install 'gpuanalyze[cuda12]' or '[cuda13]')"
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "CuPy sees no CUDA device"
    except Exception as exc:  # noqa: BLE001 - CuPy raises many kinds here
        return f"CuPy cannot reach a CUDA device ({type(exc).__name__}: {str(exc)[:120]})"
    return None


def availability() -> dict[str, str | None]:
    """Backend name -> None if usable, else the reason it is not."""
    return {"cupy": cupy_unavailable(), "cpu": None}


def select(name: str) -> Backend:
    """Resolve 'auto' or a backend name; raise GpuAnalyzeError saying why one is unavailable."""
    if name not in (*BACKENDS, "auto"):
        raise GpuAnalyzeError(f"unknown backend {name!r}; choose auto, cupy or cpu")
    avail = availability()
    if name == "auto":
        name = next(b for b in BACKENDS if avail[b] is None)
    elif avail[name] is not None:
        raise GpuAnalyzeError(f"backend {name} is unavailable: {avail[name]}")
    if name == "cupy":
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        return Backend("cupy", props["name"].decode())
    return Backend("cpu", f"CPU: {platform.processor() or platform.machine()} x{os.cpu_count()}")


class Clock(Protocol):
    """Times one call: ``start`` before it, ``stop`` after it returns the elapsed seconds."""

    def start(self) -> None: ...
    def stop(self) -> float: ...


class HostClock:
    """The host clock: for CPU work only, never around asynchronous device work."""

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        return time.perf_counter() - self._t0


class EventClock:
    """A pair of device events on the current stream (CuPy or torch), waited on at ``stop``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def start(self) -> None:
        if self.kind == "cupy":
            import cupy

            self._a, self._b = cupy.cuda.Event(), cupy.cuda.Event()
        else:
            import torch

            self._a, self._b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self._a.record()

    def stop(self) -> float:
        self._b.record()
        self._b.synchronize()
        if self.kind == "cupy":
            import cupy

            return float(cupy.cuda.get_elapsed_time(self._a, self._b)) / 1e3
        return float(self._a.elapsed_time(self._b)) / 1e3


def repeat(
    fn: Callable[[], object], warmup: int, repeats: int, clock: Clock, before: Callable[[], object] | None = None
) -> list[float]:
    """Seconds per call of ``fn`` over ``repeats`` timed calls after ``warmup`` untimed ones;
    ``before`` runs untimed ahead of each timed call (e.g. a barrier)."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        if before is not None:
            before()
        clock.start()
        fn()
        out.append(clock.stop())
    return out


Timer = Callable[[Callable[[], object], int, int], list[float]]


def host_timer(fn: Callable[[], object], warmup: int, repeats: int) -> list[float]:
    return repeat(fn, warmup, repeats, HostClock())


def _event_timer(kind: str) -> Timer:
    return lambda fn, warmup, repeats: repeat(fn, warmup, repeats, EventClock(kind))


TIMERS: dict[str, Timer] = {
    "cupy": _event_timer("cupy"),
    "cpu": host_timer,
    "torch": _event_timer("torch"),
}

"""A synthetic data loader that measures what this host can feed a GPU, and which stage caps it.

Worker processes build batches into reusable shared-memory slots (per-sample CPU cost from a
numba-jitted augment); the main process copies each batch into a reused pinned staging buffer,
sends it to the device on a copy stream with one event per batch, and a consumer kernel reads
it. Each stage is first measured alone (producer, host->device link, consumer), then the whole
pipeline; the stage with the lowest rate is the one that caps it.

The run always ends: every wait on a worker is bounded, a dead worker is reported, Ctrl-C stops
it within a fraction of a second, and the shared memory is released on every path
(``loader_workers``, ``shm``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuanalyze.kernels.backend import Backend
from gpuanalyze.kernels.loader_workers import Workers, sigint_deferred
from gpuanalyze.kernels.result import BenchResult
from gpuanalyze.kernels.shm import Segment, shm_dir


@dataclass(kw_only=True, slots=True)
class LoaderConfig:
    """Shape and cost of the synthetic input pipeline."""

    batch: int = 64
    """Samples per batch."""
    sample_shape: tuple[int, ...] = (3, 64, 64)
    """float32 elements per sample (default: a 64x64 RGB image)."""
    sample_cost_us: float = 200.0
    """CPU time each sample costs a worker (decode/augment stand-in)."""
    workers: int = 0
    """Worker processes; 0 means all CPU cores."""
    batches: int = 40
    """Batches per measured phase."""
    slots: int = 8
    """Shared-memory batch slots in flight (at least two per worker are used)."""
    timeout_s: float = 120.0
    """Longest wait for any worker (start-up compile included) before the run is stopped as stalled."""

    def __post_init__(self) -> None:
        if self.batch < 1 or self.batches < 1 or self.slots < 2 or self.sample_cost_us < 0 or self.workers < 0:
            raise ValueError("batch, batches >= 1, slots >= 2, sample_cost_us and workers >= 0")
        if not self.timeout_s > 0:
            raise ValueError("timeout_s must be > 0")
        if self.workers == 0:
            self.workers = os.cpu_count() or 1

    @property
    def slot_count(self) -> int:
        return max(self.slots, 2 * self.workers)


class _Device:
    """Link and consumer for a backend: cupy (pinned staging, copy stream, events) or host memory."""

    def __init__(self, backend: Backend, batch_shape: tuple[int, ...]) -> None:
        self.kind = backend.name
        if self.kind == "cupy":
            import cupy

            self.cp = cupy
            n = int(np.prod(batch_shape))
            self.staging = [
                np.frombuffer(cupy.cuda.alloc_pinned_memory(n * 4), np.float32, n).reshape(batch_shape)
                for _ in range(2)
            ]
            self.dev = [cupy.empty(batch_shape, cupy.float32) for _ in range(2)]
            self.copy_stream = cupy.cuda.Stream(non_blocking=True)
            self.events = [cupy.cuda.Event() for _ in range(2)]
            self.sums = cupy.zeros(2, cupy.float32)
        else:
            self.staging = [np.empty(batch_shape, np.float32) for _ in range(2)]
        self.k = 0

    def link(self, batch: np.ndarray) -> int:
        """Copy a batch towards the device; returns the buffer index the consumer reads."""
        k = self.k = (self.k + 1) % 2
        if self.kind == "cupy":
            self.events[k].synchronize()  # the staging buffer's previous copy is done
            np.copyto(self.staging[k], batch)
            self.dev[k].set(self.staging[k], stream=self.copy_stream)
            self.events[k].record(self.copy_stream)
        else:
            np.copyto(self.staging[k], batch)
        return k

    def consume(self, k: int) -> None:
        if self.kind == "cupy":
            self.cp.cuda.get_current_stream().wait_event(self.events[k])
            self.sums[k] = self.dev[k].sum()
        else:
            float(self.staging[k].sum())

    def finish(self) -> None:
        if self.kind == "cupy":
            self.cp.cuda.Device().synchronize()


def _rate(samples: int, seconds: float) -> float:
    return samples / seconds


def run_loader(backend: Backend, *, quick: bool, config: LoaderConfig | None = None) -> list[BenchResult]:
    cfg = config or LoaderConfig(batches=20 if quick else 60)
    sample_size = int(np.prod(cfg.sample_shape))
    shape = (cfg.slot_count, cfg.batch, *cfg.sample_shape)
    workers = Workers(timeout_s=cfg.timeout_s, shm=shm_dir())
    segment: Segment | None = None
    slots: np.ndarray | None = None
    ok = False
    try:
        # first, so a /dev/shm too small for the slots is one clear error before anything starts
        segment = Segment(int(np.prod(shape)) * 4, what=f"the loader's {shape[0]} batch slots")
        from gpuanalyze.kernels.loader_work import iterations_for

        iters, cost_us = iterations_for(cfg.sample_cost_us, sample_size)
        slots = np.ndarray(shape, np.float32, buffer=segment.map)
        workers.start(cfg.workers, segment.path, shape, iters)
        workers.wait_ready()
        rates = _stages(cfg, backend, slots, workers)
        ok = True
    finally:
        with sigint_deferred():
            if segment is not None:
                segment.unlink()
            workers.close(grace_s=2.0 if ok else 0.1)
            del slots
            if segment is not None:
                segment.close()
    cap = min(("producer", "link", "consumer"), key=rates.__getitem__)
    common = {
        "batch": cfg.batch,
        "sample_shape": list(cfg.sample_shape),
        "workers": cfg.workers,
        "sample_cost_us": round(cost_us, 1),
        "capped_by": cap,
    }
    return [
        BenchResult(
            benchmark="dataloader",
            backend=backend.name,
            device=backend.device,
            variant=stage,
            value=rate,
            unit="samples/s",
            repeats=cfg.batches,
            min=rate,
            median=rate,
            max=rate,
            dtype="float32",
            size_bytes=cfg.batch * sample_size * 4,
            params=common,
        )
        for stage, rate in rates.items()
    ]


def _stages(cfg: LoaderConfig, backend: Backend, slots: np.ndarray, workers: Workers) -> dict[str, float]:
    """Samples/s of each stage alone, then of the whole pipeline."""
    device = _Device(backend, slots.shape[1:])
    ramp = slots.shape[0]
    workers.fill(ramp)
    for _ in range(ramp):  # warm-up: every slot filled once
        workers.refill(workers.next_full())
    rates = {"producer": _phase(cfg, workers, lambda idx: None, ramp=ramp)}
    batch = slots[0].copy()
    rates["link"] = _isolated(cfg, lambda: device.link(batch), device)
    rates["consumer"] = _isolated(cfg, lambda: device.consume(device.k), device)
    rates["pipeline"] = _phase(cfg, workers, lambda idx: device.consume(device.link(slots[idx])), device, ramp=ramp)
    return rates


def _phase(
    cfg: LoaderConfig, workers: Workers, consume: Callable[[int], object], device: _Device | None = None, *, ramp: int
) -> float:
    """Samples/s in steady state: the first ``ramp`` batches (slots filled while idle) are not timed."""
    t0 = time.perf_counter()
    for i in range(ramp + cfg.batches):
        if i == ramp:
            t0 = time.perf_counter()
        idx = workers.next_full()
        consume(idx)
        workers.refill(idx)
    if device is not None:
        device.finish()
    return _rate(cfg.batches * cfg.batch, time.perf_counter() - t0)


def _isolated(cfg: LoaderConfig, fn: Callable[[], object], device: _Device) -> float:
    fn()
    device.finish()
    t0 = time.perf_counter()
    for _ in range(cfg.batches):
        fn()
    device.finish()
    return _rate(cfg.batches * cfg.batch, time.perf_counter() - t0)


def stale_segment_note() -> str | None:
    """Remove shared memory left by bench runs that were killed; a note saying so, if any were."""
    from gpuanalyze.kernels.shm import remove_stale_segments

    removed = remove_stale_segments(shm_dir())
    if not removed:
        return None
    return f"removed {len(removed)} shared-memory segment(s) left in {shm_dir()} by a killed bench run"

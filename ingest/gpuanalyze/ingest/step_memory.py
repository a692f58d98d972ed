"""Device memory per step, from a capture's allocator events (docs/memory.md).

- PyTorch profiler traces recorded with ``profile_memory=True``: each allocation and free of PyTorch's allocator is
  an instant event ``[memory]`` whose args hold ``Bytes`` (negative for a free) and ``Total Allocated`` / ``Total
  Reserved``, the allocator's totals on ``Device Type``/``Device Id`` after it (c10::DeviceType; 0, the CPU
  allocator, is not the device's memory and is left out).
- Nsight Systems exports recorded with ``--cuda-memory-usage=true``: ``CUDA_GPU_MEMORY_USAGE_EVENTS``, one row per
  allocation or free of device memory through the driver (nsys_events.py). Their running sum is what the driver
  gave out: under a caching allocator its reserve, so those steps have a reserved peak and no allocated figures.

Per step [lo, hi), on the device with the largest total: allocated at its start (``Total Allocated`` less ``Bytes``
of its first event, else the total after the last event before it: what persists across steps), the peak allocated
(at least that) and the peak reserved.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuanalyze.ingest import schema as S


@dataclass(frozen=True, slots=True)
class StepMemory:
    """One device's allocator totals after each event, in time order (us); NaN where the source has none."""

    ts: np.ndarray
    allocated: np.ndarray
    reserved: np.ndarray
    delta: np.ndarray

    def step(self, lo: float, hi: float) -> dict[str, int | None]:
        """The step's memory columns (empty before the first event: nothing known yet)."""
        i, j = (int(x) for x in np.searchsorted(self.ts, (lo, hi)))
        if i == j == 0:
            return {}
        before = i - 1 if i else i
        start = self.allocated[before] if i == j else self.allocated[i] - self.delta[i]
        peak = np.max(self.allocated[i:j], initial=start)
        reserved = np.max(self.reserved[i:j], initial=self.reserved[before])
        return {S.PEAK_MEM_BYTES: _int(peak), S.MEM_START_BYTES: _int(start), S.MEM_RESERVED_BYTES: _int(reserved)}


def _int(value: float) -> int | None:
    return int(value) if math.isfinite(value) else None


class MemorySink:
    """Memory events as flat arrays, kept as they are read."""

    def __init__(self) -> None:
        self.ts, self.device = array("d"), array("q")
        self.allocated, self.reserved, self.delta = array("d"), array("d"), array("d")
        self.bad = 0

    def __len__(self) -> int:
        return len(self.ts)

    def kineto(self, e: Any, max_ts: float) -> None:
        """A ``[memory]`` instant event; one with a missing or non-numeric field is counted in ``bad``."""
        a = e.args
        try:
            kind, row = int(a.device_type), (float(e.ts), float(a.allocated), float(a.reserved), float(a.bytes))
            device = kind << 32 | int(a.device_id or 0)
        except (AttributeError, TypeError, ValueError):
            self.bad += 1
            return
        if kind == 0:
            return
        if not all(map(math.isfinite, row)) or abs(row[0]) > max_ts:
            self.bad += 1
            return
        self.add(device, *row)

    def add(self, device: int, ts: float, allocated: float, reserved: float, delta: float) -> None:
        self.device.append(device)
        self.ts.append(ts)
        self.allocated.append(allocated)
        self.reserved.append(reserved)
        self.delta.append(delta)

    def finish(self) -> StepMemory | None:
        if not self.ts:
            return None
        device = np.frombuffer(self.device, dtype=np.int64)
        arrays = [np.frombuffer(a, dtype=np.float64) for a in (self.ts, self.allocated, self.reserved, self.delta)]
        size = np.where(np.isnan(arrays[1]), arrays[2], arrays[1])
        sel = device == device[int(np.argmax(size))]
        order = np.argsort(arrays[0][sel], kind="stable")
        return StepMemory(*(a[sel][order] for a in arrays))

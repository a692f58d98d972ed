"""Device memory per step from a capture's allocator events (docs/memory.md).

PyTorch profiler (``profile_memory=True``): each allocation or free is an instant event ``[memory]`` with args
``Bytes`` (negative for a free) and ``Total Allocated``/``Total Reserved``, the allocator's totals on ``Device
Type``/``Device Id`` after it (c10::DeviceType 0, the CPU allocator, left out). Nsight Systems
(``--cuda-memory-usage=true``): the driver's device allocations (nsys/events.py), reserved memory only.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuanalyze.ingest.trace import schema as S


@dataclass(frozen=True, slots=True)
class StepMemory:
    """One device's allocator totals after each event, in time order (us); NaN where the source has none."""

    ts: np.ndarray
    allocated: np.ndarray
    reserved: np.ndarray
    delta: np.ndarray

    def step(self, lo: float, hi: float) -> dict[str, int | None]:
        """The step's memory columns: allocated at its start (``Total Allocated - Bytes`` of its first event, else
        the total after the last before it), peak allocated and reserved; empty before the first event."""
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
    """Memory events as one flat array, (device, ts, allocated, reserved, delta) each, kept as they are read."""

    def __init__(self) -> None:
        self.rows, self.bad = array("d"), 0

    def __len__(self) -> int:
        return len(self.rows) // 5

    def kineto(self, e: Any, max_ts: float) -> None:
        """A ``[memory]`` instant event; one with a missing or non-numeric field is counted in ``bad``."""
        a = e.args
        try:
            if (kind := int(a.device_type)) == 0:
                return
            row = (float(e.ts), float(a.allocated), float(a.reserved), float(a.bytes))
            device = kind << 16 | int(a.device_id or 0)
        except (AttributeError, TypeError, ValueError):
            self.bad += 1
            return
        if abs(row[0]) <= max_ts and all(map(math.isfinite, row)):
            self.rows.extend((device, *row))
        else:
            self.bad += 1

    def add(self, device: int, ts: float, allocated: float, reserved: float, delta: float) -> None:
        self.rows.extend((device, ts, allocated, reserved, delta))

    def finish(self) -> StepMemory | None:
        """The events of the device with the largest total (allocated, else reserved), in time order."""
        if not self.rows:
            return None
        device, ts, allocated, reserved, delta = np.frombuffer(self.rows, dtype=np.float64).reshape(-1, 5).T
        sel = device == device[int(np.argmax(np.where(np.isnan(allocated), reserved, allocated)))]
        order = np.argsort(ts[sel], kind="stable")
        return StepMemory(*(x[sel][order] for x in (ts, allocated, reserved, delta)))

"""Per-step accumulation of host timings, turned into one trace row when the step closes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gpuanalyze.ingest import schema as S

_NS_PER_MS = 1e6


@dataclass(slots=True)
class StepTimes:
    """Host-clock nanoseconds spent in each phase of the step being recorded."""

    index: int
    start_ns: int
    start_unix_ns: int = field(default_factory=time.time_ns)
    data_ns: int = 0
    forward_ns: int = 0
    backward_ns: int = 0
    optimizer_ns: int = 0
    sync_ns: int = 0
    loader_samples: int | None = None
    forward_samples: int | None = None
    forwards: int = 0
    forward_start: int | None = None
    optimizer_start: int | None = None
    last_grad_ns: int | None = None
    """When the watched parameter's gradient was accumulated (distributed runs): after it, the
    rest of backward is waiting for gradient communication."""

    def add_samples(self, n: int | None, *, from_loader: bool) -> None:
        """Count samples; batches from the DataLoader win over inputs seen by forward."""
        if n is None:
            return
        if from_loader:
            self.loader_samples = (self.loader_samples or 0) + n
        else:
            self.forward_samples = (self.forward_samples or 0) + n

    @property
    def samples(self) -> int | None:
        return self.loader_samples if self.loader_samples is not None else self.forward_samples

    def row(self, end_ns: int, rank: int, device_ms: dict[str, float] | None) -> dict[str, Any]:
        """The trace row: host phases, or device phase times when CUDA events measured them."""
        wall = (end_ns - self.start_ns) / _NS_PER_MS
        parts = {
            S.DATA_WAIT_MS: self.data_ns / _NS_PER_MS,
            S.FORWARD_MS: self.forward_ns / _NS_PER_MS,
            S.BACKWARD_MS: self.backward_ns / _NS_PER_MS,
            S.OPTIMIZER_MS: self.optimizer_ns / _NS_PER_MS,
            S.SYNC_MS: self.sync_ns / _NS_PER_MS,
        }
        busy = None
        if device_ms is not None:
            parts.update({k: device_ms.get(k, 0.0) for k in (S.FORWARD_MS, S.BACKWARD_MS, S.OPTIMIZER_MS)})
            busy = min(wall, sum(device_ms.values()))
        row = S.empty_row()
        row.update(parts)
        row.update(
            {
                S.STEP: self.index,
                S.RANK: rank,
                S.START_UNIX_NS: self.start_unix_ns,
                S.WALL_MS: wall,
                S.OTHER_MS: max(0.0, wall - sum(parts.values())),
                S.GPU_BUSY_MS: busy,
                S.BATCH_SAMPLES: self.samples,
            }
        )
        return row

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
    data_cpu_ns: int = 0
    """The training thread's CPU time inside data fetches (part of data_ns)."""
    forward_ns: int = 0
    backward_ns: int = 0
    optimizer_ns: int = 0
    sync_ns: int = 0
    loader_samples: int | None = None
    forward_samples: int | None = None
    forwards: int = 0
    backwards: int = 0
    grad_forwards: int = 0
    """Forwards run with autograd on (training, as opposed to evaluation under no_grad)."""
    forward_start: int | None = None
    optimizer_start: int | None = None
    optimizer_nested_ns: int = 0
    """Phase time already counted when the optimizer step began: a closure (LBFGS, Lightning) runs
    forward and backward inside ``optimizer.step``, and that time is not the optimizer's."""
    last_grad_ns: int | None = None
    """When the watched parameter's gradient was accumulated (distributed runs): after it, the
    rest of backward is waiting for gradient communication."""
    model_ns: dict[str, int] | None = None
    """Forward time per model name when more than one model is profiled."""

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

    @property
    def phase_ns(self) -> int:
        """Host time counted in a phase so far (what a nested optimizer call must not count again)."""
        return self.data_ns + self.forward_ns + self.backward_ns + self.sync_ns

    def absorb(self, later: StepTimes) -> None:
        """Fold a later part of the same optimizer step into this one (gradient accumulation)."""
        self.data_ns += later.data_ns
        self.data_cpu_ns += later.data_cpu_ns
        self.forward_ns += later.forward_ns
        self.backward_ns += later.backward_ns
        self.optimizer_ns += later.optimizer_ns
        self.sync_ns += later.sync_ns
        self.forwards += later.forwards
        self.backwards += later.backwards
        self.grad_forwards += later.grad_forwards
        if later.loader_samples is not None:
            self.add_samples(later.loader_samples, from_loader=True)
        if later.forward_samples is not None:
            self.add_samples(later.forward_samples, from_loader=False)
        if later.model_ns:
            mine = self.model_ns if self.model_ns is not None else {}
            for name, ns in later.model_ns.items():
                mine[name] = mine.get(name, 0) + ns
            self.model_ns = mine
        self.forward_start, self.optimizer_start = later.forward_start, later.optimizer_start
        self.optimizer_nested_ns = later.optimizer_nested_ns
        self.last_grad_ns = later.last_grad_ns

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
                S.DATA_CPU_MS: self.data_cpu_ns / _NS_PER_MS,
            }
        )
        if self.model_ns is not None:
            row[S.MODEL_FORWARD_MS] = {name: ns / _NS_PER_MS for name, ns in self.model_ns.items()}
        return row

"""Per-step accumulation of host timings, turned into one trace row when the step closes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from analyzer.record.memory_reader import Memory
from gpuanalyze.ingest.trace import schema as S

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
    first_ns: int | None = None
    """When the step's first recorded phase (a data fetch or the forward) began: before it, the
    host did something else (logging after the previous optimizer step): ``lead_ms``."""

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
        if self.first_ns is None:
            self.first_ns = later.first_ns
        self.forward_start, self.optimizer_start = later.forward_start, later.optimizer_start
        self.optimizer_nested_ns = later.optimizer_nested_ns
        self.last_grad_ns = later.last_grad_ns

    def row(self, end_ns: int, rank: int, device_ms: dict[str, float] | None) -> dict[str, Any]:
        """The trace row: host phases, or device phase times when CUDA events measured them.
        Built at every step (on the writer's thread, ``closed_row``), so it fills a copy of a prepared row."""
        wall = (end_ns - self.start_ns) / _NS_PER_MS
        data = self.data_ns / _NS_PER_MS
        sync = self.sync_ns / _NS_PER_MS
        if device_ms is None:
            forward = self.forward_ns / _NS_PER_MS
            backward = self.backward_ns / _NS_PER_MS
            optimizer = self.optimizer_ns / _NS_PER_MS
            busy = None
        else:
            forward = device_ms.get(S.FORWARD_MS, 0.0)
            backward = device_ms.get(S.BACKWARD_MS, 0.0)
            optimizer = device_ms.get(S.OPTIMIZER_MS, 0.0)
            busy = min(wall, sum(device_ms.values()))
        row = _EMPTY_ROW.copy()
        row[S.STEP] = self.index
        row[S.RANK] = rank
        row[S.START_UNIX_NS] = self.start_unix_ns
        row[S.WALL_MS] = wall
        row[S.DATA_WAIT_MS] = data
        row[S.FORWARD_MS] = forward
        row[S.BACKWARD_MS] = backward
        row[S.OPTIMIZER_MS] = optimizer
        row[S.SYNC_MS] = sync
        row[S.OTHER_MS] = max(0.0, wall - (data + forward + backward + optimizer + sync))
        row[S.GPU_BUSY_MS] = busy
        row[S.BATCH_SAMPLES] = self.loader_samples if self.loader_samples is not None else self.forward_samples
        row[S.DATA_CPU_MS] = self.data_cpu_ns / _NS_PER_MS
        if self.first_ns is not None:
            row[S.LEAD_MS] = max(0, self.first_ns - self.start_ns) / _NS_PER_MS
        if self.model_ns is not None:
            row[S.MODEL_FORWARD_MS] = {name: ns / _NS_PER_MS for name, ns in self.model_ns.items()}
        return row


_EMPTY_ROW = S.empty_row()

ClosedStep = tuple[StepTimes, int, int, dict[str, float] | None, Memory, str | None]
"""(step, end_ns, rank, device_ms, memory, system): a closed step as the training thread
queues it for the writer. Nothing changes a step once it is closed."""


def closed_row(closed: ClosedStep) -> dict[str, Any]:
    """The trace row of a closed step: built on the writer's thread (``TraceWriter.to_row``), so
    that the training thread only queues a tuple."""
    step, end_ns, rank, device_ms, memory, system = closed
    row = step.row(end_ns, rank, device_ms)
    if memory is not None:
        row.update(zip(S.MEMORY_COLUMNS, memory, strict=True))
    row[S.SYSTEM] = system
    return row

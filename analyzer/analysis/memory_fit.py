"""Memory beside speed (docs/memory.md): what a run holds across steps and within one, whether a larger batch
fits, and memory that creeps up from step to step.

From the trace's memory columns (allocated bytes on a GPU, the resident set on a CPU run), per rank over its
analysed steps: the peak; ``persistent``, the largest memory at a step's start (parameters, gradients, optimizer
state); ``transient``, the most a step adds on top of its own start (activations, temporaries). Batch x k needs
persistent + k x transient, times the allocator's reserve per allocated byte (its fragmentation and cache: the
peak reserved over the peak allocated, measured), within MEMORY_USABLE of the device. The run's figures are its
rank's with the highest peak. Creep (memory at a step's start rising step after step: tensors kept across steps)
is no speed finding: shown with the memory, never a verdict.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from analyzer.analysis import thresholds as T
from analyzer.analysis.findings import Evidence
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.columns import Column


@dataclass(frozen=True, slots=True)
class RankMemory:
    """One rank's memory over its analysed steps, in bytes (None: not in the trace); the start figures' trend:
    the first, growth per step (last less first over the ``span`` of step numbers between), the share of
    consecutive steps that rose, how many steps, the last step's number."""

    rank: int
    peak: int | None
    persistent: int | None
    transient: int | None
    reserved: int | None
    first: int = 0
    growth: float = 0.0
    rising: float = 0.0
    steps: int = 0
    last: int = 0
    span: int = 0

    def creep(self) -> tuple[Evidence, ...]:
        """The creep's tests where they all pass, else none (none either below MEMORY_CREEP_MIN_STEPS steps)."""
        if self.steps < T.MEMORY_CREEP_MIN_STEPS:
            return ()
        rise, grow, grown = T.MEMORY_CREEP_RISING, T.MEMORY_CREEP_GROWTH, self.growth * self.span
        tests = (
            Evidence("memory_start_rising_share", self.rising, rise.value, ">=", "fraction of steps", rise.source),
            Evidence("memory_start_growth", grown / max(self.first, 1), grow.value, ">=", "of the first", grow.source),
        )
        return tests if all(e.passed for e in tests) else ()


def _valid(col: Column) -> np.ndarray:
    return np.ones(len(col), dtype=bool) if col.valid is None else col.valid


def rank_memory(rows: dict[str, Column], rank: int) -> RankMemory | None:
    """The memory of one rank's analysed rows; None when they have no memory figures."""
    peak, start, reserved = (rows[c] for c in S.MEMORY_COLUMNS)
    if not peak.count() and not reserved.count():
        return None
    both = _valid(peak) & _valid(start)
    transient = int(np.max(peak.values[both] - start.values[both], initial=0)) if both.any() else None
    p, s, r = (int(c.known().max()) if c.count() else None for c in (peak, start, reserved))
    starts, steps = start.known(), rows[S.STEP].values[_valid(start)]
    if starts.size < 2 or steps[-1] <= steps[0]:
        return RankMemory(rank, p, s, transient, r)
    growth = float(starts[-1] - starts[0]) / float(steps[-1] - steps[0])
    rising = float(np.mean(np.diff(starts) > 0))
    span = int(steps[-1] - steps[0])
    return RankMemory(rank, p, s, transient, r, int(starts[0]), growth, rising, starts.size, int(steps[-1]), span)


@dataclass(frozen=True, slots=True)
class Creep:
    """Memory at a step's start that grows step after step: bytes per step, over how many steps, the step at which
    the device would be full at that rate (None: no device total), the tests."""

    rank: int
    per_step: float
    steps: int
    full_at: int | None
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True, slots=True)
class Memory:
    """The run's memory (its rank's with the highest peak), the device's total (None on a CPU run, whose figures
    are the process's resident memory: ``host``), a creep where one shows."""

    peak: int | None
    persistent: int | None
    transient: int | None
    reserved: int | None
    total: int | None
    host: bool
    creep: Creep | None = None

    @property
    def reserve_ratio(self) -> float:
        return self.reserved / self.peak if self.reserved and self.peak and self.reserved > self.peak else 1.0

    @property
    def usable(self) -> float | None:
        return None if self.total is None else T.MEMORY_USABLE.value * self.total

    @property
    def parts(self) -> tuple[int, int] | None:
        """(persistent, transient); without start figures (traces before 1.4) all of the peak grows with the batch."""
        if self.persistent is not None and self.transient is not None:
            return self.persistent, self.transient
        return None if self.peak is None else (0, self.peak)

    def need(self, k: float, activations: float = 1.0) -> float | None:
        """Bytes a batch ``k`` times larger needs from the device (``activations``: the transient part scaled)."""
        p = self.parts
        return None if p is None else (p[0] + k * p[1] * activations) * self.reserve_ratio

    def largest(self, activations: float = 1.0) -> int | None:
        """The largest batch multiplier that fits (0: not even this batch); None: not known."""
        p = self.parts
        if self.usable is None or p is None or not p[1]:
            return None
        return max(0, math.floor((self.usable / self.reserve_ratio - p[0]) / (p[1] * activations)))

    def words(self, k: float, activations: float = 1.0) -> str:
        """``need``'s arithmetic in GB against what is usable: persistent + k x per step, x the reserve."""
        gb = [x / 1e9 for x in (*(self.parts or (0, 0)), self.need(k, activations) or 0, self.usable or 0)]
        kept = f"{gb[0]:.2f} + " if self.persistent is not None else ""
        part = f" x {activations:g}" if activations != 1 else ""
        return f"{kept}{k:g}{part} x {gb[1]:.2f} GB, x{self.reserve_ratio:.2f} = {gb[2]:.2f} of {gb[3]:.1f} GB usable"


def run_memory(ranks: list[RankMemory], total: int | None, host: bool) -> Memory | None:
    """The run's memory from its ranks' (None without figures); the fastest creep, where any rank creeps."""
    if not ranks:
        return None
    top = max(ranks, key=lambda r: (r.peak or 0, r.reserved or 0))
    memory = Memory(top.peak, top.persistent, top.transient, top.reserved, None if host else total, host)
    creeping = [r for r in ranks if r.creep()]
    if not creeping:
        return memory
    worst = max(creeping, key=lambda r: r.growth)
    room, need = memory.usable, memory.need(1)
    left = None if room is None or need is None else (room - need) / (worst.growth * memory.reserve_ratio)
    full = None if left is None else worst.last + max(0, math.ceil(left))
    return dataclasses.replace(memory, creep=Creep(worst.rank, worst.growth, worst.steps, full, worst.creep()))

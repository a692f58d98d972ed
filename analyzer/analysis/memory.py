"""Memory beside speed (docs/memory.md): what a run holds across steps and within one, whether a larger batch
fits, and memory that creeps up from step to step.

From the trace's memory columns (the allocator's allocated bytes on a GPU, the process's resident set on a CPU
run), per rank over its analysed steps: the peak; the largest memory at a step's start (``persistent``: what
outlives a step, parameters, gradients, optimizer state); the most a step adds on top of its own start
(``transient``: activations and temporaries). A batch k times larger needs persistent + k x transient, times what
the allocator holds per byte it hands out (fragmentation and cached blocks: the peak reserved over the peak
allocated measured in the same trace, 1 without reserved figures), within MEMORY_USABLE of the device (the CUDA
context and library workspaces sit outside the allocator). The run's figures are its rank's with the highest peak.

Creep: memory at a step's start that rises from one step to the next on MEMORY_CREEP_RISING of the steps and by
MEMORY_CREEP_GROWTH of where it began: tensors kept across steps. Not a speed finding (no verdict class, never the
headline): it is shown with the memory, with its growth per step and the step at which the device would be full.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from analyzer.analysis import thresholds as T
from analyzer.analysis.findings import Evidence
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.columns import Column


@dataclass(frozen=True, slots=True)
class RankMemory:
    """One rank's memory over its analysed steps, in bytes (None: not in the trace)."""

    rank: int
    peak: int | None
    persistent: int | None
    transient: int | None
    reserved: int | None
    first: int = 0
    """Memory at the start of the first analysed step that has it."""
    growth: float = 0.0
    """Memory at a step's start, last less first, per step between them."""
    rising: float = 0.0
    """Share of consecutive analysed steps whose start memory rose."""
    steps: int = 0
    """Analysed steps with a start figure."""
    last: int = 0
    """The last of them (step number)."""

    def evidence(self) -> tuple[Evidence, ...]:
        """The creep's tests; none with fewer than MEMORY_CREEP_MIN_STEPS steps (no trend to read)."""
        if self.steps < T.MEMORY_CREEP_MIN_STEPS:
            return ()
        rise, grow = T.MEMORY_CREEP_RISING, T.MEMORY_CREEP_GROWTH
        grown = self.growth * (self.steps - 1) / max(self.first, 1)
        return (
            Evidence("memory_start_rising_share", self.rising, rise.value, ">=", "fraction of steps", rise.source),
            Evidence("memory_start_growth", grown, grow.value, ">=", "fraction of the first start", grow.source),
        )


def _valid(col: Column) -> np.ndarray:
    return np.ones(len(col), dtype=bool) if col.valid is None else col.valid


def rank_memory(rows: dict[str, Column], rank: int) -> RankMemory | None:
    """The memory of one rank's analysed rows; None when they have no memory figures."""
    peak, start, reserved = (rows[c] for c in S.MEMORY_COLUMNS)
    if not peak.count() and not reserved.count():
        return None
    both = _valid(peak) & _valid(start)
    transient = int(np.max(peak.values[both] - start.values[both], initial=0)) if both.any() else None
    top = [int(c.known().max()) if c.count() else None for c in (peak, start, reserved)]
    starts, steps = start.known(), rows[S.STEP].values[_valid(start)]
    if starts.size < 2 or steps[-1] <= steps[0]:
        return RankMemory(rank, top[0], top[1], transient, top[2])
    growth = float(starts[-1] - starts[0]) / float(steps[-1] - steps[0])
    rising = float(np.mean(np.diff(starts) > 0))
    return RankMemory(rank, top[0], top[1], transient, top[2], int(starts[0]), growth, rising, starts.size, steps[-1])


@dataclass(frozen=True, slots=True)
class Creep:
    """Memory at a step's start that grows step after step."""

    rank: int
    per_step: float
    """Bytes per step."""
    steps: int
    full_at: int | None
    """The step at which the device would be full at this rate (None: no device total)."""
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True, slots=True)
class Memory:
    """The run's memory: the figures of its rank with the highest peak, the device's total, and a creep where one
    shows."""

    peak: int | None
    persistent: int | None
    transient: int | None
    reserved: int | None
    total: int | None
    """The device's memory (deviceProperties' totalGlobalMem, torch's total_memory); None on a CPU run."""
    host: bool
    """The figures are the process's resident memory (a CPU run), not a device allocator's."""
    creep: Creep | None = None

    @property
    def reserve_ratio(self) -> float:
        """Bytes the allocator holds per byte allocated at the peak, as measured (at least 1)."""
        return self.reserved / self.peak if self.reserved and self.peak and self.reserved > self.peak else 1.0

    @property
    def parts(self) -> tuple[int, int] | None:
        """(persistent, transient); without start figures (traces before 1.4) all of the peak grows with the batch."""
        if self.persistent is not None and self.transient is not None:
            return self.persistent, self.transient
        return None if self.peak is None else (0, self.peak)

    def need(self, k: float, activations: float = 1.0) -> float | None:
        """Bytes a batch ``k`` times larger needs from the device (``activations``: the transient part scaled)."""
        parts = self.parts
        return None if parts is None else (parts[0] + k * parts[1] * activations) * self.reserve_ratio

    @property
    def usable(self) -> float | None:
        return None if self.total is None else T.MEMORY_USABLE.value * self.total

    def largest(self, activations: float = 1.0) -> int | None:
        """The largest batch multiplier that fits (0: not even this batch); None: not known."""
        parts = self.parts
        if self.usable is None or parts is None or not parts[1]:
            return None
        return max(0, math.floor((self.usable / self.reserve_ratio - parts[0]) / (parts[1] * activations)))

    def words(self, k: float, activations: float = 1.0) -> str:
        """``need``'s arithmetic in GB against what is usable (known figures only)."""
        part = f" x {activations:g}" if activations != 1 else ""
        gb = [x / 1e9 for x in (*(self.parts or (0, 0)), self.need(k, activations) or 0, self.usable or 0)]
        return (
            f"{gb[0]:.2f} GB persistent + x{k:g}{part} the {gb[1]:.2f} GB a step adds, x{self.reserve_ratio:.2f} the "
            f"allocator's reserve = {gb[2]:.2f} of {gb[3]:.1f} GB usable"
        )

    def fits(self, k: float) -> bool | None:
        most = self.largest()
        return None if most is None else most >= k


def run_memory(ranks: list[RankMemory], total: int | None, host: bool) -> Memory | None:
    """The run's memory from its ranks' (None without figures)."""
    if not ranks:
        return None
    top = max(ranks, key=lambda r: (r.peak or 0, r.reserved or 0))
    memory = Memory(top.peak, top.persistent, top.transient, top.reserved, None if host else total, host)
    creeping = [r for r in ranks if r.evidence() and all(e.passed for e in r.evidence())]
    if not creeping:
        return memory
    worst = max(creeping, key=lambda r: r.growth)
    room, need = memory.usable, memory.need(1)
    left = None if room is None or need is None else (room - need) / (worst.growth * memory.reserve_ratio)
    full = None if left is None else worst.last + max(0, math.ceil(left))
    return dataclasses.replace(memory, creep=Creep(worst.rank, worst.growth, worst.steps, full, worst.evidence()))

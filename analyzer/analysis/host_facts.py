"""The host a run had: how many cores this job could use and how busy the machine was.

CPU-side projections (DataLoader workers, a cheaper batch function) divide CPU work among the
cores actually free to the job, not the cores the machine has. ``HostFacts`` is what the rules
read; ``host_facts`` builds it from what the trace recorded (the run's CPU count and placement
today; the system sampler's readings where the trace has them).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuanalyze.ingest.runinfo import RunInfo


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What the rules may assume about the host the run was recorded on."""

    cores_available: float
    """Cores this training process and its loader workers may use: the affinity mask and the
    cgroup CPU quota (whichever is smaller), shared among the ranks on the node."""
    cores_free: float
    """Of those, the cores not taken by other work on the host while the run was measured
    (``cores_available`` when nothing else was measured); never above ``cores_available``."""
    load_avg: float | None = None
    """The host's mean 1-minute load average over the run (None when not sampled)."""
    cpu_util_pct: float | None = None
    """Host-wide CPU utilisation over the run, 0-100 (None when not sampled)."""
    process_cpu_cores: float | None = None
    """Cores' worth of CPU the training process used (CPU time / wall time; None when not sampled)."""
    workers_cpu_cores: float | None = None
    """Cores' worth of CPU its DataLoader workers used (None when not sampled or no workers)."""
    oversubscribed: bool = False
    """More runnable work than cores during the run: CPU-side projections are less certain."""
    sampled: bool = False
    """True when the facts come from the system sampler, False when only from the run's CPU count."""

    def __post_init__(self) -> None:
        assert self.cores_available >= 1 and 0 < self.cores_free <= self.cores_available, self


#: Cores assumed when a trace does not say how many the host had.
DEFAULT_CORES = 4


def host_facts(run: RunInfo) -> HostFacts:
    """The host facts a trace without sampler readings gives: its CPU count, shared by local ranks."""
    cores = run.cpu_count or DEFAULT_CORES
    local = max(1, min(run.world, run.gpu_count or 1))
    share = float(max(1, cores // local))
    return HostFacts(cores_available=share, cores_free=share)

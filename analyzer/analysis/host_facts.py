"""The host a run had: how many cores this job could use and how busy the machine was.

CPU-side projections (DataLoader workers, a cheaper batch function) divide CPU work among the
cores actually free to the job, not the cores the machine has. ``HostFacts`` is what the rules
read; ``host_facts`` builds it from what the trace recorded: the system sampler's readings where
the trace has them (format 1.3 ``system`` column), else the run's CPU count and placement.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import polars as pl

from analyzer.analysis import thresholds as T
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.host_sample import HostSample, decode_host_sample
from gpuanalyze.ingest.trace.runinfo import RunInfo


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What the rules may assume about the host the run was recorded on."""

    cores_available: float
    """Cores this training process and its loader workers may use: the affinity mask and the
    cgroup CPU quota (whichever is smaller), shared among the ranks on the node."""
    cores_free: float
    """Of those, the cores not taken by other work on the host while the run was measured
    (``cores_available`` when nothing else was measured); never above ``cores_available``. Only work that
    competes at the job's priority takes a core: low-priority (niced) work yields it (``priority``)."""
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
    samples: int = 0
    """System-sampler readings the facts come from."""
    oversubscribed_share: float | None = None
    """Share of the readings with more runnable threads (or load) than the host's CPUs."""
    run_queue: float | None = None
    """Mean runnable threads on the host."""
    rss_bytes: int | None = None
    """Largest resident memory of the training process."""
    workers_rss_bytes: int | None = None
    """Largest resident memory of its worker processes together."""
    gpu_util_pct: float | None = None
    """NVML's mean GPU utilisation (share of time a kernel ran); None without NVML or GPU."""
    gpu_mem_used_bytes: int | None = None
    """Largest GPU memory in use (NVML: every process on the GPU)."""
    gpu_power_w: float | None = None
    gpu_temp_c: float | None = None
    """Highest GPU temperature."""
    gpu_sm_clock_mhz: float | None = None
    """Mean SM clock (a low one under load is throttling)."""
    niced_cores: float | None = None
    """Cores' worth of low-priority (positive nice) busy time on the job's CPUs (None when not sampled)."""
    priority: str | None = None
    """What ``cores_free`` assumed about the other work's priority, in words (None when nothing was niced)."""

    def __post_init__(self) -> None:
        assert self.cores_available >= 1 and 0 < self.cores_free <= self.cores_available, self


_N = TypeVar("_N", int, float)

#: Cores assumed when a trace does not say how many the host had.
DEFAULT_CORES = 4


def samples_of(frame: pl.DataFrame) -> tuple[HostSample, ...]:
    """The sampler readings of a loaded trace (its ``system`` column), in time order."""
    if S.SYSTEM not in frame.columns:
        return ()
    texts = frame.get_column(S.SYSTEM).drop_nulls().to_list()
    return tuple(sorted((decode_host_sample(t) for t in texts), key=lambda s: s.unix_ns))


def host_facts(run: RunInfo, samples: Sequence[HostSample] = ()) -> HostFacts:
    """The host facts: from the sampler's readings when there are any, else from the run's CPU
    count (its affinity mask), the cgroup quota when recorded, shared by local ranks."""
    cpus = run.cpu_count or DEFAULT_CORES
    limit = min(float(cpus), run.cpu_quota_cores) if run.cpu_quota_cores is not None else float(cpus)
    local = max(1, min(run.world, run.gpu_count or 1))
    share = float(max(1, int(limit) // local))
    if not samples:
        return HostFacts(cores_available=share, cores_free=share)
    over_share = _oversubscribed_share(samples, run.host_cpus or cpus)

    def mean(name: str) -> float | None:
        return _mean([getattr(s, name) for s in samples])

    def most(name: str) -> Any:
        return _max([getattr(s, name) for s in samples])

    niced = _yielding(samples)
    return HostFacts(
        cores_available=share,
        cores_free=max(min(T.MIN_FREE_CORES, share), _free_cores(samples, share, limit, local, niced is not None)),
        load_avg=mean("load_avg"),
        cpu_util_pct=mean("cpu_util_pct"),
        process_cpu_cores=mean("process_cpu_cores"),
        workers_cpu_cores=mean("workers_cpu_cores"),
        oversubscribed=over_share is not None and over_share >= T.OVERSUBSCRIBED_SHARE.value,
        sampled=True,
        samples=len(samples),
        oversubscribed_share=over_share,
        run_queue=mean("run_queue"),
        rss_bytes=most("rss_bytes"),
        workers_rss_bytes=most("workers_rss_bytes"),
        gpu_util_pct=mean("gpu_util_pct"),
        gpu_mem_used_bytes=most("gpu_mem_used_bytes"),
        gpu_power_w=mean("gpu_power_w"),
        gpu_temp_c=most("gpu_temp_c"),
        gpu_sm_clock_mhz=mean("gpu_sm_clock_mhz"),
        niced_cores=mean("niced_cores"),
        priority=niced,
    )


def _yielding(samples: Sequence[HostSample]) -> str | None:
    """Whether the other work's low-priority (niced) time is taken to yield its cores to the job, in words;
    None when nothing ran niced or the job itself is niced (its own time is then in the nice column).

    The scheduler (CFS) shares a core by weight: a nice-19 thread gets 15/1024 of a core a nice-0 thread
    wants (kernel/sched/core.c, sched_prio_to_weight). With autogroup on (most desktops), nice ranks
    threads within one session only; a niced process of another session competes as an equal group."""
    niced = _mean([s.niced_cores for s in samples])
    own = _max([s.nice for s in samples])
    if not niced or niced < T.NICED_MIN_CORES or (own is not None and own > 0):
        return None
    text = f"{niced:.2g} core(s) of low-priority (niced) work counted as free: it yields to the job at nice {own or 0}"
    if any(s.autogroup for s in samples):
        text += "; assumed in the job's session (autogroup is on: a niced process of another session competes)"
    return text


def _free_cores(samples: Sequence[HostSample], share: float, limit: float, local: int, yielding: bool) -> float:
    """The job's cores less the other work on the CPUs it may use (their busy time less this
    process and its workers, and less low-priority work when it yields: ``_yielding``), averaged over
    the readings."""
    others = [
        max(
            0.0,
            s.busy_cores
            - (s.process_cpu_cores or 0.0)
            - (s.workers_cpu_cores or 0.0)
            - ((s.niced_cores or 0.0) if yielding else 0.0),
        )
        for s in samples
        if s.busy_cores is not None
    ]
    return min(share, (limit - statistics.fmean(others)) / local) if others else share


def _oversubscribed_share(samples: Sequence[HostSample], host_cpus: int) -> float | None:
    """Share of the readings that were saturated (None when none could tell)."""
    judged = [x for x in (_saturated(s, host_cpus) for s in samples) if x is not None]
    return sum(judged) / len(judged) if judged else None


def _saturated(s: HostSample, host_cpus: int) -> bool | None:
    """More runnable threads (or 1-minute load) than the host's CPUs; None when neither was read."""
    limit = T.OVERSUBSCRIBED_RUNNABLE_PER_CPU.value * host_cpus
    seen = [v for v in (s.run_queue, s.load_avg) if v is not None]
    return any(v > limit for v in seen) if seen else None


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def _max(values: Sequence[_N | None]) -> _N | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None

"""Host contention as evidence: how much of the host this run got, and what that does to the verdict.

A run on a host where other work is runnable competes for the CPUs: its steps are slower than the
same code on a quiet host, whatever its bottleneck, and a twin run can be several times faster. The
system sampler measures it: the host's runnable threads (``run_queue``) against its CPUs, and the
cores other work took from the job (``HostFacts.cores_free``). A contended run says so in a note
with those numbers (and this run's own CPU use and fair share of the CPUs), and its verdict's
confidence drops by thresholds.CONTENDED_SCALE: "healthy" or any bottleneck is then a statement about this
run on that host. Without readings nothing is known (``None``), and host facts that were assumed
(an imported trace records no CPUs) are said to be assumed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from analyzer.analysis import thresholds as T
from analyzer.analysis.findings import Confidence
from analyzer.analysis.host_facts import DEFAULT_CORES, HostFacts
from analyzer.analysis.rules.rule import confidence_level
from gpuanalyze.ingest.trace.runinfo import RunInfo


@dataclass(frozen=True, slots=True)
class Contention:
    """What the sampler saw of the other work on the host while the run was measured."""

    cpus: int | None
    """The host's CPUs (None when the trace does not record them)."""
    run_queue: float | None
    """Mean runnable threads on the host."""
    fair_share: float | None
    """This run's fair share of the host's CPUs among the runnable threads (CPUs / run queue, at most 1)."""
    used_cores: float | None
    """Cores' worth of CPU the training process and its workers used."""
    cores_free: float
    cores_available: float

    def line(self) -> str:
        return (
            f"recorded on a contended host ({self.facts()}): other work slowed its steps, so the step "
            "times and the verdict hold for this host under that load; confidence lowered"
        )

    def facts(self) -> str:
        """``6.2 runnable threads on 2 CPUs; this run's fair share ~32% of them; ...``"""
        parts = []
        if self.run_queue is not None and self.cpus:
            parts.append(f"{self.run_queue:.1f} runnable threads on {self.cpus} CPUs")
        if self.fair_share is not None:
            parts.append(f"this run's fair share ~{self.fair_share:.0%} of them")
        if self.used_cores is not None:
            parts.append(f"it used {self.used_cores:.1f} cores")
        parts.append(f"{self.cores_free:.1f} of {self.cores_available:g} cores free to it")
        return "; ".join(parts)


def contention(host: HostFacts, run: RunInfo) -> Contention | None:
    """The contention the sampler measured; None on a quiet host or without readings (unknown)."""
    if not host.sampled:
        return None
    cpus = run.host_cpus or run.cpu_count
    rq = host.run_queue
    crowded = rq is not None and bool(cpus) and rq > T.OVERSUBSCRIBED_RUNNABLE_PER_CPU.value * (cpus or 0)
    starved = host.cores_free < T.CONTENDED_FREE_SHARE * host.cores_available
    if not (crowded or starved or host.oversubscribed):
        return None
    share = None if rq is None or not cpus else min(1.0, cpus / rq) if rq > 0 else 1.0
    used = None
    if host.process_cpu_cores is not None:
        used = host.process_cpu_cores + (host.workers_cpu_cores or 0.0)
    return Contention(cpus, rq, share, used, host.cores_free, host.cores_available)


def assumed_host_note(host: HostFacts, run: RunInfo) -> str | None:
    """A note when the host's cores were assumed, not measured (an imported trace records none)."""
    if host.sampled or run.cpu_count is not None:
        return None
    return (
        f"the trace does not record the host's CPUs (no system readings; an imported trace): the cores free "
        f"in the advice are assumed ({DEFAULT_CORES}), not measured"
    )


def contended_confidence(confidence: Confidence) -> Confidence:
    """``confidence`` times thresholds.CONTENDED_SCALE, the reason saying why."""
    value = round(confidence.value * T.CONTENDED_SCALE, 3)
    why = "recorded on a contended host (other work took CPU time from this run)"
    return dataclasses.replace(
        confidence, value=value, level=confidence_level(value), reason=f"{confidence.reason}; {why}"
    )

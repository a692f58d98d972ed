"""The hosts of the two runs a gate compares: when they differ (free cores, load), how much of a
slowdown the difference alone could explain, and whether the measured change is beyond it."""

from __future__ import annotations

from analyzer.analysis.contention import contention
from analyzer.analysis.host_facts import HostFacts
from analyzer.planning.gate import GateResult
from gpuanalyze.ingest.runinfo import RunInfo

#: Free-core ratio (BEFORE / AFTER, either way) from which the hosts are said to differ.
FREE_CORES_RATIO = 1.25
#: Load-average difference (absolute) from which the hosts are said to differ.
LOAD_DIFFERENCE = 1.0


def _describe(h: HostFacts) -> str:
    load = "" if h.load_avg is None else f", load {h.load_avg:.1f}"
    return f"{h.cores_free:.1f} of {h.cores_available:g} cores free{load}"


def host_lines(
    before: HostFacts | None,
    after: HostFacts | None,
    gate: GateResult | None,
    runs: tuple[RunInfo, RunInfo] | None = None,
) -> list[str]:
    """Notes for the comparison: the two hosts when they differ (only measured facts: a run without
    system readings is unknown, said once, and a contended one that has them said to be), and the
    gate's change against what the host explains."""
    if before is None or after is None:
        return []
    if not (before.sampled and after.sampled):
        return _one_sampled(before, after, gate, runs) if before.sampled or after.sampled else []
    ratio = before.cores_free / after.cores_free
    loads = (before.load_avg, after.load_avg)
    load_gap = abs(loads[0] - loads[1]) if loads[0] is not None and loads[1] is not None else 0.0
    if max(ratio, 1 / ratio) < FREE_CORES_RATIO and load_gap < LOAD_DIFFERENCE:
        return []
    lines = [f"host: BEFORE {_describe(before)}, AFTER {_describe(after)}"]
    explained = max(0.0, ratio - 1.0) * 100  # a CPU-bound step slows as its free cores shrink
    for check in gate.checks if gate is not None else ():
        if check.metric == "step_time":
            lines.append(_against(explained, check.change_pct))
    return lines


def _one_sampled(
    before: HostFacts, after: HostFacts, gate: GateResult | None, runs: tuple[RunInfo, RunInfo] | None
) -> list[str]:
    """One run has system readings: the hosts cannot be compared, but a contended one is said (for a gate)."""
    which, other = ("BEFORE", "AFTER") if not before.sampled else ("AFTER", "BEFORE")
    lines = [f"host: {which} has no system readings, so whether the two hosts differed is unknown"]
    if runs is None or gate is None or not gate.checks:
        return lines
    measured, run = (after, runs[1]) if after.sampled else (before, runs[0])
    busy = contention(measured, run)
    if busy is not None:
        lines.append(
            f"host: {other} was recorded on a contended host ({busy.facts()}): part of the change may be "
            "the host's; rerun both on one quiet host before trusting the gate"
        )
    return lines


def _against(explained: float, change_pct: float) -> str:
    """The gate's step-time change against what fewer free cores explain."""
    if explained <= 0:
        return f"host: AFTER had no fewer free cores; its {change_pct:+.1f}% is not the host's"
    head = f"host: fewer free cores explain up to +{explained:.0f}% for a CPU-bound step; "
    head += f"the measured {change_pct:+.1f}%"
    if change_pct > explained:
        return f"{head} is beyond that"
    return f"{head} is within that: rerun both on one quiet host before trusting the gate"

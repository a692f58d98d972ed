"""The hosts of the two runs a gate compares: when they differ (free cores, load), how much of a
change the difference alone could explain, and whether the measured change is beyond it; and, for one
job's two runs, how far the phases no recognised change touches moved (the machine's speed or load)."""

from __future__ import annotations

from analyzer.analysis import thresholds as T
from analyzer.analysis.contention import contention
from analyzer.analysis.host_facts import HostFacts
from analyzer.planning.gate import GateResult, change_words
from analyzer.planning.outcome import Report
from analyzer.planning.run_differences import different_jobs
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import RunInfo

#: Free-core ratio (BEFORE / AFTER, either way) from which the hosts are said to differ.
FREE_CORES_RATIO = 1.25
#: Load-average difference (absolute) from which the hosts are said to differ.
LOAD_DIFFERENCE = 1.0
#: The phases only a batch, micro-batch or precision change moves among the changes compare recognises.
COMPUTE = (S.FORWARD_MS, S.BACKWARD_MS, S.OPTIMIZER_MS)


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
    for check in gate.checks if gate is not None else ():
        if check.metric == "step_time":
            lines.append(_against(ratio, check.change_pct))
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


def _against(ratio: float, change_pct: float) -> str:
    """The gate's step-time change against what the free cores alone explain: a CPU-bound step's time scales with
    1 / its free cores, faster or slower."""
    explained = (ratio - 1.0) * 100
    head = (
        f"host: its free cores alone would make a CPU-bound step {change_words(explained, 'step_time')}; it is "
        f"{change_words(change_pct, 'step_time')}"
    )
    if explained * change_pct > 0 and abs(change_pct) <= abs(explained):
        return f"{head}, within that: rerun both on one quiet host before trusting the gate"
    return f"{head}, beyond that"


def unchanged_phases(a: Report, b: Report, changed: list[str]) -> str | None:
    """With no batch, micro-batch or precision change among ``changed`` (differences, checks' kinds), compute phases
    moving beyond run-to-run noise (PROJECTION_NOISE) say the machine's speed or load moved, and by how much."""
    if different_jobs(changed) or any(c.startswith(("batch", "micro_batch", "precision")) for c in changed):
        return None
    before, after = (sum(r.metrics.mean_ms.get(p) or 0.0 for p in COMPUTE) for r in (a, b))
    if before <= 0 or abs(after / before - 1) <= T.PROJECTION_NOISE:
        return None
    step = b.metrics.step_mean_ms - a.metrics.step_mean_ms
    return (
        f"host: forward, backward and optimizer, which no change recognised here touches, went {before:.2f} -> "
        f"{after:.2f} ms per step ({after / before - 1:+.0%}), {after - before:+.2f} of the step's {step:+.2f} ms: "
        "unless their code changed, the machine's speed or load did"
    )

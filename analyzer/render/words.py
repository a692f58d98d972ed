"""The words every renderer (terminal, HTML) uses for a report's parts, so they say the same thing.

These return plain strings that may contain untrusted text (an exception message, a path): the
caller passes them through ``analyzer.render.safe`` for its medium.
"""

from __future__ import annotations

from typing import Literal

from analyzer.analysis.findings import Confidence, Evidence, Finding, Projection, Savings
from analyzer.analysis.memory_fit import Memory
from analyzer.analysis.owners import ownership
from analyzer.analysis.rules import RULE_OF
from analyzer.analysis.thresholds import WIDE_RANGE
from analyzer.planning.cost import RunCost
from analyzer.planning.outcome import Report
from gpuanalyze.ingest.trace import schema as S

PART_LABELS: dict[str, str] = {
    S.DATA_WAIT_MS: "data wait",
    S.H2D_MS: "host->device copy",
    S.FORWARD_MS: "forward",
    S.BACKWARD_MS: "backward",
    S.OPTIMIZER_MS: "optimizer",
    S.SYNC_MS: "sync",
    S.OTHER_MS: "other",
}
#: The headlines of the verdicts that are no rule's (each rule has its own: ``Rule.headline``).
NOT_A_RULE: dict[str, str] = {
    "none": "HEALTHY: no bottleneck by the definition in docs/thresholds.md",
    "unknown": "UNKNOWN: not healthy, but the trace does not show where the time goes",
}


def accelerated(report: Report) -> bool:
    """The run used an accelerator (its trace has device timings)."""
    return report.metrics.gpu_util is not None


def verdict_line(report: Report) -> str:
    """The verdict's headline, in its rule's CPU words where no accelerator was used."""
    rule = RULE_OF.get(report.bottleneck)
    if rule is None:
        return NOT_A_RULE[report.bottleneck]
    return (None if accelerated(report) else rule.cpu_headline) or rule.headline


def device_hours(report: Report, hours: float, devices: int | None = None) -> str:
    """Device-hours in the run's words: GPU-h on an accelerator; on a CPU run CPU process-hours, which are
    machine-hours where each process has its own machine."""
    if accelerated(report):
        return f"{hours:,.2f} GPU-h" + ("" if devices is None else f" on {devices} GPU(s)")
    if devices is None:
        return f"{hours:,.2f} CPU-h"
    return f"{hours:,.2f} CPU-h on {devices} CPU process(es), no accelerator (machine-hours where each has its own)"


RunState = Literal[
    "ok",
    "exception",
    "interrupted",
    "profiler_error",
    "imported",
    "trial_stop",
    "incomplete",
    "disk_full",
    "live",
    "unknown",
]
#: Phrase of the reader's notes for a trace cut short by a full disk.
DISK_PHRASE = "the disk filled"
#: Phrase of the reader's note for a trace whose writer still holds it (the run is in progress).
LIVE_PHRASE = "still being written"


def run_state(report: Report) -> tuple[RunState | str, str]:
    """(state, sentence): how the recorded run ended, as the trace says."""
    if not report.complete:
        if any(LIVE_PHRASE in n for n in report.notes):
            return "live", "still being written: the run is in progress; these are the steps recorded so far"
        if any(DISK_PHRASE in n for n in report.notes):
            return (
                "disk_full",
                "incomplete: the disk filled and the trace could not be closed; these are the steps it recorded",
            )
        return "incomplete", (
            "cut off: the trace was never closed (the run was killed, crashed or ran out of memory); "
            "these are the steps it recorded"
        )
    end = report.end
    if end is None:
        return "unknown", "ended; the trace records no end status"
    if end.status == "ok":
        return "ok", "ended normally"
    if end.status == "exception":
        return "exception", f"ended with an exception: {end.exception or 'unknown'}"
    if end.status == "interrupted":
        return "interrupted", "interrupted (Ctrl-C / KeyboardInterrupt)"
    if end.status == "profiler_error":
        return "profiler_error", f"profiling switched itself off after an internal error: {end.error or 'unknown'}"
    if end.status == "trial_stop":
        return "trial_stop", "stopped by `gpuanalyze run --try` after the trial's bounded steps"
    if end.status == "disk_full":
        return "disk_full", "incomplete: the disk filled while the trace was written; these are the steps before that"
    if end.status == "imported":
        if (report.run.source or "").startswith("nsys:"):
            return "imported", "imported from an Nsight Systems capture (which records no end status)"
        return "imported", "imported from a PyTorch profiler trace (which records no end status)"
    return end.status, f"ended with status '{end.status}'"


def accounting(report: Report) -> str:
    """Where every recorded step row went."""
    m = report.metrics
    a = m.accounting
    per_rank = f" ({m.warmup_steps} per rank)" if m.ranks > 1 else ""
    return (
        f"{a.analysed:,} analysed of {a.rows:,} recorded: {a.warmup:,} warm-up{per_rank}, "
        f"{a.profiler_windows:,} under a profiler window (kernel evidence only); {m.ranks} rank(s)"
    )


def step_time(report: Report) -> str:
    m = report.metrics
    slowest = " on the slowest rank" if m.ranks > 1 else ""
    return (
        f"median {m.step_median_ms:.2f} ms, p90 {m.step_p90_ms:.2f} ms (analysed steps); "
        f"mean {m.step_mean_ms:.2f} ms{slowest}, which the projections and cost use"
    )


def outside(report: Report) -> list[tuple[str, str]]:
    """('set-up' | 'teardown', what it held): the capture outside its steps (RunInfo.setup/teardown), not judged."""
    out = []
    for label, part in (("set-up", report.run.setup), ("teardown", report.run.teardown)):
        if part is not None and part.ms > 0:
            what = ", ".join(f"{p.name} {p.ms:,.3g} ms" + (f" x{p.count}" * (p.count > 1)) for p in part.parts[:4])
            out.append((label, f"{part.ms:,.4g} ms outside the steps, not judged" + (f": {what}" if what else "")))
    return out


def idle_owners(report: Report, n: int = 4) -> list[tuple[str, str]]:
    """(owner, 'ms per step (share of idle); at the user's frame ms per step') for the top ``n`` idle owners."""
    km = report.metrics.kernels
    owners = ownership(km)
    if owners is None or km is None or owners.idle_ms <= 0:
        return []
    out = []
    for o, ms in owners.top(n):
        line = f"{ms:.3g} ms per step ({ms * owners.steps / owners.idle_ms:.0%} of the idle)"
        frames = [f"{f} {t / km.steps:.3g} ms" for who, f, t in km.owner_frames if who == o][:2]
        out.append((o, line + (f"; at {'; '.join(frames)}" if frames else "")))
    return out


def confidence(c: Confidence) -> str:
    return f"{c.level} ({c.value:.2f}): {c.reason}"


def test(e: Evidence) -> str:
    """The evidence item's test with the measured value: 'data_wait_share = 0.84 >= 0.2 (fraction of step time)'."""
    return f"{e.metric} = {e.value:.4g} {e.comparison} {e.threshold:.4g} ({e.unit})"


def evidence(e: Evidence) -> str:
    return f"{test(e)}: {'holds' if e.passed else 'fails'}"


def per_what(p: Projection) -> str:
    return f"per batch of {p.per_batch_of:,.0f} samples" if p.per_batch_of else "per step"


def projection(p: Projection) -> str:
    return f"~{p.step_ms:.2f} ms {per_what(p)}{projection_range(p)} (mean now {p.current_ms:.2f} ms per step)"


def projection_range(p: Projection) -> str:
    """', range 25.17-27.33 ms (width 3% of the step)', marked when so wide it says little."""
    width = p.range_width
    if width is None or p.low_ms is None or p.high_ms is None:
        return ""
    wide = "; wide: it says little until measured" if width > WIDE_RANGE else ""
    return f", range {p.low_ms:.2f}-{p.high_ms:.2f} ms (width {width:.0%} of the step{wide})"


def ranking(findings: tuple[Finding, ...]) -> str | None:
    """How the findings are ordered, and why a lower severity may stand first (None for fewer than two)."""
    order = [("high", "moderate", "low").index(f.severity) for f in findings]
    why = "" if order == sorted(order) else "; severity is the share of the step the cause takes"
    return f"Findings ranked by the step time each fix saves at the slow end of its range{why}" if order[1:] else None


def stability(report: Report) -> str | None:
    """'1.00: 64 of 64 resamples of the 57 steps give data_loading' (None when not computed)."""
    st = report.stability
    if st is None:
        return None
    return f"not computed ({st.reason})" if st.value is None else f"{st.value:.2f}: {st.reason}"


def usd(x: float | None) -> str:
    return "n/a" if x is None else f"${x:,.2f}"


def run_length(c: RunCost) -> str:
    """How long a completed run takes: ``N steps x T ms = H h``."""
    return f"{c.steps_per_run:,.0f} steps x {c.step_time_s * 1e3:.2f} ms = {c.hours_per_run:,.2f} h"


def saves(report: Report, s: Savings) -> str:
    """What a fix saves per completed run: ``~H h (G GPU-h, $U) per run``."""
    price = "" if s.usd_per_run is None else f", {usd(s.usd_per_run)}"
    return f"~{s.hours_per_run:,.2f} h ({device_hours(report, s.gpu_hours_per_run)}{price}) per run"


def memory(m: Memory) -> list[tuple[str, str]]:
    """The memory line (peak, at a step's start, the device's total, whether batch x2 fits) and a creep's."""
    figures = (
        (m.peak, "peak resident" if m.host else "peak"),
        (m.persistent, "at step start"),
        (m.reserved, "reserved"),
    )
    line = ", ".join(f"{what} {v / 1e9:,.2f} GB" for v, what in figures if v is not None)
    line += f" of {m.total / 1e9:,.2f} GB" if m.total else ""
    if (most := m.largest()) is not None:
        line += f"; batch x2 {'fits' if most >= 2 else 'does not fit'} (x{most} at most)"
    if (c := m.creep) is None:
        return [("memory", line)]
    full = f": the device is full near step {c.full_at:,}" if c.full_at is not None else ""
    return [
        ("memory", line),
        (
            "memory creep",
            f"memory at step start grows {c.per_step / 1e6:,.2f} MB per step over {c.steps} steps (rank {c.rank})"
            f"{full}; tensors kept across steps (a loss summed without .item() or .detach(), outputs in a list)",
        ),
    ]

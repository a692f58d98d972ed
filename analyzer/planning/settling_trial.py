"""The trial that would settle a finding's advice: the `gpuanalyze run --try --candidates ...`
command line that measures the fix its projection assumes.

The analysis projects; `run --try` measures. A report names this command so that the two give one
answer: the user runs it, and the trial's table shows the projection beside what was measured.
The setting names are those `run --try --candidates` accepts (analyzer.run.trial_env; a test keeps
the two in step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from analyzer.analysis.fixes import BatchFix, MicroBatchFix, PeriodicFix, PrecisionFix, WorkerFix
from analyzer.analysis.rerun import UNKNOWN_COMMAND, rerun_command
from analyzer.analysis.thresholds import WIDE_RANGE

if TYPE_CHECKING:
    from analyzer.analysis.findings import Finding
    from analyzer.planning.outcome import Report


def candidate_text(finding: Finding, batch_samples: float | None = None) -> str | None:
    """``num_workers=4`` / ``autocast=bf16`` / ``batch_size=64``: the fix of ``finding`` as a
    ``--candidates`` value, or None when no trial can apply it without editing the code
    (a larger batch needs the current batch size, ``batch_samples``)."""
    fix = finding.projection.fix
    if isinstance(fix, WorkerFix):
        return f"num_workers={fix.workers}" + (",persistent_workers=true" if fix.persistent else "")
    if isinstance(fix, PrecisionFix) and fix.autocast is not None:
        return f"autocast={fix.autocast}"
    if isinstance(fix, BatchFix) and batch_samples:
        return f"batch_size={max(1, round(batch_samples * fix.multiplier))}"
    if isinstance(fix, MicroBatchFix):
        return f"batch_size={fix.micro_batch},accumulate={fix.accumulate}"
    if isinstance(fix, PeriodicFix):  # whichever knob the script reads (it reads the one it has)
        return f"eval_every={fix.every},checkpoint_every={fix.every}"
    return None


def settling_trial(report: Report, command: str | None = None) -> str | None:
    """The command line that would measure the fix of the report's top finding (None: the report
    has no finding, or its fix needs a code change a trial cannot make), e.g.
    ``gpuanalyze run --try --candidates num_workers=4 -- python train.py`` (the run's own command by default)."""
    if not report.findings:
        return None
    return trial_of(report.findings[0], report.metrics.batch_samples, command or rerun_command(report.run))


def measure_line(report: Report, i: int) -> str | None:
    """The ``measure`` line of finding ``i`` (1-based), the same in every report: for a range too wide to act on,
    that it is and the trial that measures its fix (``too_wide``); for the top finding, the trial of its fix beside
    its projection; None where there is none. The command is the run's own where recorded (analysis.rerun)."""
    f, command = report.findings[i - 1], rerun_command(report.run)
    wide_text = too_wide(f, report.metrics.batch_samples, command)
    if wide_text is not None or i != 1:
        return wide_text
    trial = settling_trial(report)
    return None if trial is None else f"{trial}  (measures the fix beside this projection)"


def trial_of(finding: Finding, batch_samples: float | None, command: str = UNKNOWN_COMMAND) -> str | None:
    """The ``run --try`` command line that measures ``finding``'s fix (None: a trial cannot apply it)."""
    text = candidate_text(finding, batch_samples)
    return None if text is None else f"gpuanalyze run --try --candidates {text} -- {command}"


def wide(finding: Finding) -> bool:
    """A projection whose range is wider than WIDE_RANGE of the step: it says little until measured."""
    width = finding.projection.range_width
    return width is not None and width > WIDE_RANGE


def too_wide(finding: Finding, batch_samples: float | None, command: str = UNKNOWN_COMMAND) -> str | None:
    """For a finding whose range is wider than WIDE_RANGE (None otherwise): that it is too wide to act on, and the
    ``run --try`` command that measures its fix, or that no trial can apply it and how to measure it instead."""
    if not wide(finding):
        return None
    trial = trial_of(finding, batch_samples, command)
    if trial is None:
        return (
            "its range is too wide to act on, and no `run --try` candidate applies this fix: apply it, record again "
            "and measure it with `gpuanalyze compare BEFORE AFTER`"
        )
    return f"its range is too wide to act on: measure the fix with {trial}"

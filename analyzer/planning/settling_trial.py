"""The trial that would settle a finding's advice: the `gpuanalyze run --try --candidates ...`
command line that measures the fix its projection assumes.

The analysis projects; `run --try` measures. A report names this command so that the two give one
answer: the user runs it, and the trial's table shows the projection beside what was measured.
The setting names are those `run --try --candidates` accepts (analyzer.run.trial_env; a test keeps
the two in step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analyzer.analysis.findings import Finding
    from analyzer.planning.outcome import Report

#: Projection parameters a trial applies as they are (DataLoader arguments).
_AS_IS = ("num_workers", "persistent_workers", "pin_memory", "prefetch_factor")
#: What a projection's ``precision`` means as a trial's autocast setting.
_PRECISION = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16"}


def candidate_text(finding: Finding, batch_samples: float | None = None) -> str | None:
    """``num_workers=4`` / ``autocast=bf16`` / ``batch_size=64``: the fix of ``finding`` as a
    ``--candidates`` value, or None when no trial can apply it without editing the code
    (a larger batch needs the current batch size, ``batch_samples``)."""
    parts = []
    for key, value in finding.projection.params:
        if key in _AS_IS and isinstance(value, int):
            parts.append(f"{key}={str(value).lower() if isinstance(value, bool) else value}")
        elif key == "precision" and isinstance(value, str) and value.lower() in _PRECISION:
            parts.append(f"autocast={_PRECISION[value.lower()]}")
        elif key == "batch_multiplier" and isinstance(value, (int, float)) and value > 0 and batch_samples:
            parts.append(f"batch_size={max(1, round(batch_samples * value))}")
        else:
            return None
    return ",".join(parts) or None


def settling_trial(report: Report, command: str = "python train.py") -> str | None:
    """The command line that would measure the fix of the report's top finding (None: the report
    has no finding, or its fix needs a code change a trial cannot make), e.g.
    ``gpuanalyze run --try --candidates num_workers=4 -- python train.py``."""
    if not report.findings:
        return None
    text = candidate_text(report.findings[0], report.metrics.batch_samples)
    return None if text is None else f"gpuanalyze run --try --candidates {text} -- {command}"

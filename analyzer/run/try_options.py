"""Options of `gpuanalyze run --try`: how long each trial runs and which settings it tries."""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzer.errors import GpuAnalyzeError
from analyzer.run.trial_env import TrialSetting

#: The most steps one trial may be asked to measure (a trial is a short run, not a training).
MAX_STEPS = 100_000
#: The most baseline trials (each costs as much as a candidate).
MAX_BASELINES = 10


@dataclass(kw_only=True, slots=True)
class TryOptions:
    """How the trials of `gpuanalyze run --try` run."""

    steps: int = 20
    """Steady-state steps measured in each trial, after the warm-up (at least 2: their variation
    decides whether a candidate beats the baseline)."""
    warmup: int = 5
    """Steps each trial runs before measuring (DataLoader workers starting, lazy initialisation)."""
    time_limit_s: float = 600.0
    """Seconds for all trials together, baseline included. A trial still running at the limit is
    killed (its whole process group) and marked; the candidates not started by then are not run."""
    baselines: int = 2
    """Baseline trials (at least 2): the spread between their means is the run-to-run noise a
    candidate must beat."""
    candidates: tuple[TrialSetting, ...] = ()
    """Only these settings (default: derived from the baseline's findings and the standard set)."""

    def __post_init__(self) -> None:
        if not 2 <= self.steps <= MAX_STEPS:
            raise GpuAnalyzeError(
                f"--try-steps {self.steps}: give 2 to {MAX_STEPS:,} steps (the steps measured per trial after warm-up)"
            )
        if not 0 <= self.warmup <= MAX_STEPS:
            raise GpuAnalyzeError(f"--try-warmup {self.warmup}: give 0 to {MAX_STEPS:,} steps")
        if not (math.isfinite(self.time_limit_s) and self.time_limit_s > 0):
            raise GpuAnalyzeError(f"--try-time-limit {self.time_limit_s}: give a positive number of seconds")
        if not 2 <= self.baselines <= MAX_BASELINES:
            raise GpuAnalyzeError(
                f"--try-baselines {self.baselines}: give 2 to {MAX_BASELINES} "
                "(their spread is the noise a candidate must beat)"
            )
        for setting in self.candidates:
            if setting.is_baseline:
                raise GpuAnalyzeError("--candidates: a candidate must change at least one setting")

    @property
    def stop_after(self) -> int:
        """Optimizer steps after which a trial's processes stop."""
        return self.warmup + self.steps

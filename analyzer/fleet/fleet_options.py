"""What `gpuanalyze fleet` needs besides the directory: run length and price for the ranking, the engine."""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.errors import GpuAnalyzeError
from analyzer.planning.cost import MAX_VALUE, CostInputs


@dataclass(kw_only=True, slots=True, frozen=True)
class RunLength:
    """How long one completed run of every run in the fleet is, and what a GPU-hour costs."""

    price_per_gpu_hour: float | None = None
    """USD per GPU-hour (yours; none is shipped). Without it runs are ranked by GPU-hours saved."""
    steps_per_run: float | None = None
    """Optimizer steps in a completed run (every run of the fleet)."""
    hours_per_run: float | None = None
    """Wall-clock hours of a completed run at today's step time (converted to steps per run with each
    run's own step time)."""

    def __post_init__(self) -> None:
        if self.steps_per_run is not None and self.hours_per_run is not None:
            raise GpuAnalyzeError("give the run length once: --steps-per-run or --hours-per-run, not both")
        CostInputs(price_per_gpu_hour=self.price_per_gpu_hour, steps_per_run=self.steps_per_run)  # their one check
        hours = self.hours_per_run
        if hours is not None and (
            isinstance(hours, bool) or not isinstance(hours, int | float) or not 0 < hours <= MAX_VALUE
        ):
            raise GpuAnalyzeError(f"--hours-per-run must be positive and at most {MAX_VALUE:.0e}, not {hours!r}")

    @property
    def has_length(self) -> bool:
        return self.steps_per_run is not None or self.hours_per_run is not None

    def steps_for(self, step_ms: float) -> float | None:
        """Steps in a completed run of a run whose step takes ``step_ms`` (None without a length)."""
        if self.steps_per_run is not None:
            return self.steps_per_run
        if self.hours_per_run is not None and step_ms > 0:
            return self.hours_per_run * 3.6e6 / step_ms
        return None


@dataclass(kw_only=True, slots=True, frozen=True)
class FleetOptions:
    """How a fleet is triaged."""

    length: RunLength = RunLength()
    """Run length and price, for the savings per run."""
    engine: str = "local"
    """'local' (a process pool) or 'ray' (Ray tasks, for thousands of runs; docs/large-runs.md)."""
    workers: int | None = None
    """Processes of the local pool, or CPUs of a local Ray (default: the cores)."""

    def __post_init__(self) -> None:
        if self.engine not in ("local", "ray"):
            raise GpuAnalyzeError(f"--engine {self.engine!r}: choose one of local, ray")
        if self.workers is not None and self.workers < 1:
            raise GpuAnalyzeError("--workers must be at least 1")

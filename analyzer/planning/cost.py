"""What a completed run costs: GPU-hours x price plus the optional non-GPU terms.

No real vendor prices ship with gpuanalyze; every price is the user's input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from analyzer.analysis.findings import Savings
from analyzer.errors import GpuAnalyzeError
from analyzer.planning.toml_config import read_toml

#: Largest number any cost input may be (steps, samples, USD): beyond it an input is a typo.
MAX_VALUE = 1e18


@dataclass(kw_only=True, slots=True)
class CostInputs:
    """Run length, price and the other cost terms of one completed training run."""

    price_per_gpu_hour: float | None = None
    """USD per GPU-hour (your price; none is shipped)."""
    steps_per_run: float | None = None
    """Optimizer steps in a completed run."""
    samples_per_run: float | None = None
    """Samples in a completed run (converted to steps with the trace's batch size)."""
    gpus: int | None = None
    """GPUs the run uses (default: the trace's world size)."""
    storage_usd: float = 0.0
    """Storage for the run's data and checkpoints."""
    network_usd: float = 0.0
    """Egress and network charges."""
    software_usd: float = 0.0
    """Licences and software."""
    recovery_usd: float = 0.0
    """Expected cost of failures: restarts and lost work."""
    operations_usd: float = 0.0
    """Attributable operations (people, on-call, tooling)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            bad_type = isinstance(value, bool) or not isinstance(value, int | float)
            if value is not None and (bad_type or not math.isfinite(value) or not 0 <= value <= MAX_VALUE):
                raise GpuAnalyzeError(f"{f.name} must be a number from 0 to {MAX_VALUE:.0e}, not {value!r}")
        if self.gpus is not None and (int(self.gpus) != self.gpus or self.gpus < 1):
            raise GpuAnalyzeError("gpus must be a positive whole number")
        for name in ("steps_per_run", "samples_per_run"):
            if getattr(self, name) == 0:
                raise GpuAnalyzeError(f"{name} must be positive: a run of zero length has nothing to cost")
        given = [n for n in ("steps_per_run", "samples_per_run") if getattr(self, n) is not None]
        if len(given) > 1:
            raise GpuAnalyzeError(f"give the run length once, not as {' and '.join(given)}")

    @property
    def other_usd(self) -> float:
        return self.storage_usd + self.network_usd + self.software_usd + self.recovery_usd + self.operations_usd

    @property
    def has_length(self) -> bool:
        return self.steps_per_run is not None or self.samples_per_run is not None


def load_cost_config(path: str | Path, **overrides: Any) -> CostInputs:
    """CostInputs from a TOML file with the same keys; explicit overrides (not None) win."""
    path = Path(path)
    return cost_inputs(read_toml(path, "cost config"), path, **overrides)


def cost_inputs(data: dict[str, Any], path: Path, **overrides: Any) -> CostInputs:
    """CostInputs from a parsed cost table (keys of a ``compare`` option file are allowed beside them)."""
    known = {f.name for f in fields(CostInputs)}
    unknown = sorted(set(data) - known - {"name", "trace", "hours_per_run", "gpu"})
    if unknown:
        raise GpuAnalyzeError(f"{path}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    values = {k: v for k, v in data.items() if k in known}
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return CostInputs(**values)
    except GpuAnalyzeError as exc:
        raise GpuAnalyzeError(f"{path}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class RunCost:
    steps_per_run: float
    step_time_s: float
    gpus: int
    hours_per_run: float
    gpu_hours: float
    gpu_usd: float | None
    other_usd: float
    per_run_usd: float | None
    inputs: CostInputs


def steps_for(inputs: CostInputs, batch_samples: float | None) -> float:
    """Steps in a run from whichever run length the user gave."""
    if inputs.steps_per_run is not None:
        return float(inputs.steps_per_run)
    samples = inputs.samples_per_run
    if samples is None:
        raise GpuAnalyzeError("give the run length: steps_per_run or samples_per_run")
    if not batch_samples:
        raise GpuAnalyzeError("the trace has no batch size, so samples per run cannot become steps; give steps_per_run")
    return samples / batch_samples


def run_cost(step_time_ms: float, inputs: CostInputs, *, batch_samples: float | None, world_size: int) -> RunCost:
    """GPU-hours = step time x steps x GPUs; cost = GPU-hours x price + the other terms."""
    steps = steps_for(inputs, batch_samples)
    gpus = int(inputs.gpus or world_size or 1)
    hours = run_hours(step_time_ms, steps)
    gpu_hours = hours * gpus
    gpu_usd = gpu_hours_usd(gpu_hours, inputs.price_per_gpu_hour)
    return RunCost(
        steps_per_run=steps,
        step_time_s=step_time_ms / 1e3,
        gpus=gpus,
        hours_per_run=hours,
        gpu_hours=gpu_hours,
        gpu_usd=gpu_usd,
        other_usd=inputs.other_usd,
        per_run_usd=None if gpu_usd is None else gpu_usd + inputs.other_usd,
        inputs=inputs,
    )


def run_hours(step_time_ms: float, steps: float) -> float:
    """Wall-clock hours of ``steps`` steps of ``step_time_ms`` each."""
    return steps * step_time_ms / 3.6e6


def gpu_hours_usd(gpu_hours: float, price_per_gpu_hour: float | None) -> float | None:
    """GPU-hours x price: the one place a price is applied (None without a price)."""
    return None if price_per_gpu_hour is None else gpu_hours * price_per_gpu_hour


def savings(saved_ms_per_step: float, cost: RunCost) -> Savings:
    """What saving ``saved_ms_per_step`` on every step saves per completed run."""
    # A larger-batch projection is per current batch worth of samples, so the current step count applies.
    hours = run_hours(saved_ms_per_step, cost.steps_per_run)
    gpu_hours = hours * cost.gpus
    return Savings(
        hours_per_run=hours,
        gpu_hours_per_run=gpu_hours,
        usd_per_run=gpu_hours_usd(gpu_hours, cost.inputs.price_per_gpu_hour),
    )

"""Compare runs or servers by what a *completed run* costs, not by hourly price."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from analyzer.analysis.pipeline import analyze
from analyzer.errors import GpuAnalyzeError
from analyzer.machine.ceilings import Ceilings
from analyzer.planning.config import read_toml
from analyzer.planning.cost import CostInputs, cost_inputs
from gpuanalyze.ingest import schema as S


@dataclass(frozen=True, slots=True)
class RunOption:
    name: str
    hours_per_run: float
    gpus: int
    price_per_gpu_hour: float | None
    per_run_usd: float | None
    step_time_ms: float | None = None
    samples_per_s: float | None = None
    breakdown_ms: dict[str, float | None] | None = None
    bottleneck: str | None = None


@dataclass(frozen=True, slots=True)
class Comparison:
    options: tuple[RunOption, ...]
    cheapest: str | None
    """Name of the option with the lowest cost per completed run (None without prices)."""
    saving_usd: float | None
    """How much the cheapest saves per run against the next cheapest."""


def load_option(path: str | Path, defaults: CostInputs, ceilings: Ceilings | None = None) -> RunOption:
    """A trace (analysed with ``defaults``), or a TOML file naming price and run length
    (``hours_per_run``, or ``trace`` plus ``steps_per_run``/``samples_per_run``)."""
    path = Path(path)
    if path.suffix == ".toml":
        cfg = read_toml(path, "run option")
        inputs = cost_inputs(cfg, path)
        name, trace, hours = cfg.get("name", path.stem), cfg.get("trace"), cfg.get("hours_per_run")
        if not isinstance(name, str) or not isinstance(trace, str | None):
            raise GpuAnalyzeError(f"{path}: name and trace must be strings")
        if hours is not None:
            if isinstance(hours, bool) or not isinstance(hours, int | float) or not 0 < hours < math.inf:
                raise GpuAnalyzeError(f"{path}: hours_per_run must be a positive number, not {hours!r}")
            gpus = int(inputs.gpus or 1)
            return RunOption(name, float(hours), gpus, inputs.price_per_gpu_hour, _usd(hours, gpus, inputs))
        if trace is None:
            raise GpuAnalyzeError(f"{path}: needs hours_per_run, or trace plus a run length")
        return _from_trace(path.parent / trace, name, inputs, ceilings)
    return _from_trace(path, path.name, defaults, ceilings)


def _usd(hours: float, gpus: int, inputs: CostInputs) -> float | None:
    if inputs.price_per_gpu_hour is None:
        return None
    return hours * gpus * inputs.price_per_gpu_hour + inputs.other_usd


def _from_trace(trace: Path, name: str, inputs: CostInputs, ceilings: Ceilings | None) -> RunOption:
    if not inputs.has_length:
        raise GpuAnalyzeError(f"{name}: comparing traces needs the run length (--steps-per-run or --samples-per-run)")
    report = analyze(trace, ceilings=ceilings, cost=inputs)
    c = report.cost
    assert c is not None  # the inputs have a run length
    m = report.metrics
    return RunOption(
        name,
        c.hours_per_run,
        c.gpus,
        inputs.price_per_gpu_hour,
        c.per_run_usd,
        m.step_mean_ms,
        m.samples_per_s,
        {k: v for k, v in m.mean_ms.items() if k in S.PARTS},
        report.bottleneck,
    )


def compare(options: list[RunOption]) -> Comparison:
    if len(options) < 2:
        raise GpuAnalyzeError("compare needs at least two runs or servers")
    priced = sorted((o.per_run_usd, o.name) for o in options if o.per_run_usd is not None)
    if len(priced) < 2:
        return Comparison(tuple(options), None, None)
    return Comparison(tuple(options), priced[0][1], priced[1][0] - priced[0][0])

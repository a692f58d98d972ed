"""Compare runs or servers by what a *completed run* costs, not by hourly price."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analyzer.analyze import analyze
from analyzer.ceilings import Ceilings
from analyzer.cost import CostInputs, load_cost_config
from ingest import schema as S
from ingest.errors import GpuAnalyzeError


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
        cfg = _toml(path)
        inputs = load_cost_config(path)
        name = str(cfg.get("name", path.stem))
        if "hours_per_run" in cfg:
            gpus = int(inputs.gpus or 1)
            hours = float(cfg["hours_per_run"])
            return RunOption(name, hours, gpus, inputs.price_per_gpu_hour, _usd(hours, gpus, inputs))
        if "trace" not in cfg:
            raise GpuAnalyzeError(f"{path}: needs hours_per_run, or trace plus a run length")
        return _from_trace(path.parent / cfg["trace"], name, inputs, ceilings)
    return _from_trace(path, path.name, defaults, ceilings)


def _toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError as exc:
        raise GpuAnalyzeError(f"{path}: no such file") from exc
    except tomllib.TOMLDecodeError as exc:
        raise GpuAnalyzeError(f"{path}: not valid TOML ({exc})") from exc


def _usd(hours: float, gpus: int, inputs: CostInputs) -> float | None:
    if inputs.price_per_gpu_hour is None:
        return None
    return hours * gpus * inputs.price_per_gpu_hour + inputs.other_usd


def _from_trace(trace: Path, name: str, inputs: CostInputs, ceilings: Ceilings | None) -> RunOption:
    if not inputs.has_length:
        raise GpuAnalyzeError(f"{name}: comparing traces needs the run length (--steps-per-run or --samples-per-run)")
    report = analyze(trace, ceilings=ceilings, cost=inputs)
    c = report.cost
    m = report.metrics
    return RunOption(name, c.hours_per_run, c.gpus, inputs.price_per_gpu_hour, c.per_run_usd, m.mean_ms[S.WALL_MS],
                     m.samples_per_s, {k: v for k, v in m.mean_ms.items() if k in S.PARTS}, report.bottleneck)


def compare(options: list[RunOption]) -> Comparison:
    if len(options) < 2:
        raise GpuAnalyzeError("compare needs at least two runs or servers")
    priced = sorted((o for o in options if o.per_run_usd is not None), key=lambda o: o.per_run_usd)
    if len(priced) < 2:
        return Comparison(tuple(options), None, None)
    return Comparison(tuple(options), priced[0].name, priced[1].per_run_usd - priced[0].per_run_usd)

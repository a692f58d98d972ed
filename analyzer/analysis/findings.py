"""The analysis result types: frozen, so renderers can only format them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from analyzer.analysis.metrics import StepMetrics
from gpuanalyze.ingest.runinfo import EndInfo, RunInfo

if TYPE_CHECKING:
    from analyzer.planning.cost import RunCost
    from analyzer.planning.mfu import Mfu

Bottleneck = Literal["data_loading", "batch_size", "kernels", "sync", "none"]


@dataclass(frozen=True, slots=True)
class Evidence:
    """One measured number compared with one threshold, and where the threshold comes from."""

    metric: str
    value: float
    threshold: float
    comparison: Literal[">=", "<"]
    unit: str
    source: str


@dataclass(frozen=True, slots=True)
class Finding:
    bottleneck: Bottleneck
    severity: Literal["high", "moderate"]
    share: float
    """Fraction of step time this finding could give back if fixed (the ranking key)."""
    summary: str
    evidence: tuple[Evidence, ...]
    recommendations: tuple[str, ...]
    consistency: float
    """Fraction of analysed steps on which the per-step value crosses the threshold."""
    projected_step_time_ms: float | None = None
    """Mean step time if fixed (analyzer/projections.py), or None when it cannot be projected."""
    projection_rule: str | None = None
    projection_params: dict[str, Any] | None = None
    """The concrete fix the projection assumes, e.g. {"num_workers": 4}."""
    savings_hours_per_run: float | None = None
    """Wall-clock hours a completed run saves (needs the run length)."""
    savings_gpu_hours_per_run: float | None = None
    savings_usd_per_run: float | None = None
    """Needs a price per GPU-hour too."""


@dataclass(frozen=True, slots=True)
class Report:
    path: str
    bottleneck: Bottleneck
    confidence: float
    findings: tuple[Finding, ...]
    metrics: StepMetrics
    complete: bool
    notes: tuple[str, ...]
    run: RunInfo
    end: EndInfo | None = None
    ceilings: str | None = None
    """Path of the measured-ceilings file the findings were compared with, if any."""
    cost: RunCost | None = None
    """Cost per run, when run length (and price) were given."""
    mfu: Mfu | None = None
    """Model FLOPs utilisation, when FLOPs per step were given."""

"""The whole answer for one run: the analysis verdict with what planning adds (cost, MFU).

Frozen, so renderers can only format it. It lives in planning, the last stage before render,
because it carries planning's results; ``analyzer.api`` builds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.analysis.findings import Bottleneck, Confidence, Evidence, Finding
from analyzer.analysis.host_facts import HostFacts
from analyzer.analysis.metrics import StepMetrics
from analyzer.analysis.stability import Stability
from analyzer.analysis.steady import SteadyState
from analyzer.planning.cost import RunCost
from analyzer.planning.mfu import Mfu
from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo


@dataclass(frozen=True, slots=True)
class Report:
    path: str
    bottleneck: Bottleneck
    confidence: Confidence
    findings: tuple[Finding, ...]
    """Ranked by the step time their fix saves (docs/thresholds.md, 'Ranking')."""
    health: tuple[Evidence, ...]
    """The tests that define a healthy run; all pass when the bottleneck is 'none'."""
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
    stability: Stability | None = None
    """Share of resamples of the steps that repeat the verdict (analysis.stability)."""
    steady: SteadyState | None = None
    """Settling and outlier steps, their period and drift (analysis.steady)."""
    host: HostFacts | None = None
    """The host the run had (cores, load, memory, GPU telemetry; the system sampler's readings)."""

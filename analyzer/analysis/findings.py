"""The analysis result types: frozen, so renderers can only format them.

The rules give one ``Finding`` per bottleneck that fired, ranked by the step time its fix saves at the
slow end of its range (``planning.outcome.Report`` carries them with cost and MFU). Every finding has evidence (each
item a test that passed or failed, for or against the finding), a projection with the bound that
limits it, and a confidence that says how much evidence stands behind it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from analyzer.analysis.fixes import Fix

Bottleneck = Literal["data_loading", "batch_size", "kernels", "sync", "host", "none", "unknown"]
"""``host``: host work no phase accounts for (not forward, backward, optimizer, data or sync);
``none``: a healthy run (docs/thresholds.md); ``unknown``: not healthy, but the trace does not
show where the time goes (no recognised phases) and no fix can be projected."""
BOTTLENECKS: tuple[Bottleneck, ...] = get_args(Bottleneck)
ConfidenceLevel = Literal["low", "medium", "high"]
Severity = Literal["high", "moderate", "low"]


@dataclass(frozen=True, slots=True)
class Evidence:
    """One measured number compared with one threshold, and where the threshold comes from.

    Every item is a test phrased for its finding: ``passed`` says whether the comparison holds,
    ``supports`` whether the item counts for the finding. An item that fails its test is shown
    as contrary evidence, never as support.
    """

    metric: str
    value: float
    threshold: float
    comparison: Literal[">=", "<"]
    unit: str
    source: str

    @property
    def passed(self) -> bool:
        return self.value >= self.threshold if self.comparison == ">=" else self.value < self.threshold

    @property
    def supports(self) -> bool:
        return self.passed


@dataclass(frozen=True, slots=True)
class Projection:
    """Mean step time if the finding were fixed, never below what remains the limit."""

    step_ms: float
    current_ms: float
    """Mean step time now (the slowest rank's)."""
    rule: str
    """The arithmetic, with the measured numbers, in words."""
    bound: str
    """What limits the projected step once this is fixed (e.g. 'GPU busy 12.30 ms')."""
    fix: Fix | None = None
    """The concrete fix the projection assumes (analysis.fixes, e.g. ``WorkerFix(workers=4)``); None for a
    cause removed by a change the projection cannot size."""
    per_batch_of: float | None = None
    """Set when the projection is per current batch worth of samples (a larger-batch fix)."""
    low_ms: float | None = None
    """Low end of the range the measured mean step is expected to fall in after the fix
    (step-to-step variation, the model's assumptions, how far it extrapolates)."""
    high_ms: float | None = None
    """High end of that range (``low_ms <= step_ms <= high_ms``)."""

    @property
    def saved_ms(self) -> float:
        return max(0.0, self.current_ms - self.step_ms)

    @property
    def params(self) -> tuple[tuple[str, int | float | str], ...]:
        """The fix as (name, value) pairs, e.g. (("num_workers", 4),), for the JSON report (empty: no fix)."""
        return () if self.fix is None else self.fix.params

    @property
    def range_width(self) -> float | None:
        """Width of the projection's range as a share of the current step (None: no range)."""
        if self.low_ms is None or self.high_ms is None or self.current_ms <= 0:
            return None
        return (self.high_ms - self.low_ms) / self.current_ms

    @property
    def assured_saved_ms(self) -> float:
        """What the fix saves at the slow end of its range: the saving a user can count on."""
        high = self.high_ms if self.high_ms is not None else self.step_ms
        return max(0.0, self.current_ms - high)


@dataclass(frozen=True, slots=True)
class Confidence:
    value: float
    """In [0, 1]: how consistently the finding holds across steps, scaled by how much evidence there is."""
    level: ConfidenceLevel
    reason: str


@dataclass(frozen=True, slots=True)
class Savings:
    """What a fix saves per completed run (needs the run length; USD needs a price too)."""

    hours_per_run: float
    gpu_hours_per_run: float
    usd_per_run: float | None


@dataclass(frozen=True, slots=True)
class Finding:
    bottleneck: Bottleneck
    cause: str
    """The sub-cause, e.g. 'input_pipeline', 'host_sync', 'exposed_communication', 'straggler',
    'launch_overhead', 'per_step_overhead', 'micro_batch_overhead', 'fp32_math', 'cpu_fp32_math', 'memory_bound',
    'unattributed_host', 'periodic_spikes'."""
    severity: Severity
    share: float
    """Fraction of step time in [0, 1] that this finding's cause takes."""
    summary: str
    evidence: tuple[Evidence, ...]
    recommendations: tuple[str, ...]
    consistency: float
    """Fraction of analysed steps on which the finding's per-step test holds."""
    confidence: Confidence
    projection: Projection
    savings: Savings | None = None

    @property
    def supporting(self) -> tuple[Evidence, ...]:
        return tuple(e for e in self.evidence if e.supports)

    @property
    def contrary(self) -> tuple[Evidence, ...]:
        return tuple(e for e in self.evidence if not e.supports)


def ranking_key(f: Finding) -> tuple[float, float, float]:
    """The one ranking of findings: the step time their fix saves at the slow end of its range (what
    can be counted on), then at its point, then the share of the step the cause takes."""
    return (f.projection.assured_saved_ms, f.projection.saved_ms, f.share)

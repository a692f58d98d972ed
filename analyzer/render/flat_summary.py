"""A report as one flat dict of scalars: what trackers (MLflow, W&B) and framework loggers record.

Built once here and used by ``--log``, the callbacks' ``log_to=`` and the callbacks' own
``gpuanalyze/*`` values, so every sink records the same names. Keys are stable; values are
str, int, float or None (None: not measured, e.g. no range without one, no savings without a run
length).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpuanalyze.ingest.trace import schema as S

if TYPE_CHECKING:
    from analyzer.planning.outcome import Report

Scalar = str | int | float | None


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def flat_summary(report: Report) -> dict[str, Scalar]:
    """The verdict, confidence, step breakdown per phase, projected step (and its range) and savings."""
    m = report.metrics
    top = report.findings[0] if report.findings else None
    out: dict[str, Scalar] = {
        "bottleneck": report.bottleneck,
        "confidence": report.confidence.value,
        "confidence_level": report.confidence.level,
        "steps": m.steps,
        "ranks": m.ranks,
        "step_time_median_ms": _finite(m.step_median_ms),
        "step_time_mean_ms": _finite(m.step_mean_ms),
        "samples_per_s": _finite(m.samples_per_s),
    }
    for part in S.PARTS:
        value = m.breakdown_ms.get(part)
        if value is not None:
            out[f"breakdown_{part}"] = _finite(value)
    p = None if top is None else top.projection
    out["projected_step_time_ms"] = None if p is None else _finite(p.step_ms)
    out["projected_step_time_low_ms"] = None if p is None else _finite(p.low_ms)
    out["projected_step_time_high_ms"] = None if p is None else _finite(p.high_ms)
    out["saved_ms_per_step"] = None if p is None else _finite(p.saved_ms)
    s = None if top is None else top.savings
    out["saved_hours_per_run"] = None if s is None else _finite(s.hours_per_run)
    out["saved_gpu_hours_per_run"] = None if s is None else _finite(s.gpu_hours_per_run)
    out["saved_usd_per_run"] = None if s is None else _finite(s.usd_per_run)
    out["summary"] = None if top is None else top.summary
    return out


def numbers(values: dict[str, Scalar], prefix: str = "gpuanalyze/") -> dict[str, float]:
    """The numeric entries (what a metrics API takes), with ``prefix``; None and text left out."""
    return {
        f"{prefix}{k}": float(v) for k, v in values.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }


def texts(values: dict[str, Scalar], prefix: str = "gpuanalyze/") -> dict[str, str]:
    """The text entries (tags, hyperparameters), with ``prefix``."""
    return {f"{prefix}{k}": v for k, v in values.items() if isinstance(v, str)}

"""The analysed steps of a compared run, step by step: what the regression gate resamples and what
the logging-frequency check reads (``lead_ms``), from the same rows the analysis used (warm-up and
sampled-window rows left out by ``analysis.partial.analysed_rows``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from analyzer.analysis.metrics import warmup_steps
from analyzer.analysis.partial import analysed_rows
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.reader import Trace


@dataclass(frozen=True, slots=True)
class StepSeries:
    """One value per analysed step number, ordered by step."""

    step_ms: np.ndarray
    """The step's time: its slowest rank's wall time (every rank waits for it)."""
    samples: np.ndarray | None
    """Samples the step trained, summed over its ranks; None when the trace has no batch sizes."""
    lead_ms: float | None
    """Mean host time per step before its first phase (format 1.3's lead_ms); None when not recorded."""

    @property
    def steps(self) -> int:
        return int(self.step_ms.size)


def step_series(trace: Trace) -> StepSeries:
    """The analysed steps of ``trace`` (every rank), one value per step number."""
    frame = trace.frame
    if frame.height == 0:
        return StepSeries(np.empty(0), None, None)
    ranks = [part.sort(S.STEP) for part in frame.partition_by(S.RANK, maintain_order=True)]
    skip = warmup_steps(min(r.height for r in ranks))
    picked = [analysed_rows(r, skip) for r in ranks]
    mixed = any(not all_sampled for _, _, all_sampled in picked)
    rows = pl.concat([f for _, f, all_sampled in picked if not (mixed and all_sampled)])
    per_step = (
        rows.group_by(S.STEP)
        .agg(
            pl.col(S.WALL_MS).max().alias("step_time"),
            pl.col(S.BATCH_SAMPLES).sum().alias("samples"),
            pl.col(S.BATCH_SAMPLES).null_count().alias("no_samples"),
            pl.col(S.LEAD_MS).mean().alias("lead"),
        )
        .sort(S.STEP)
    )
    has_samples = per_step.height > 0 and int(per_step.get_column("no_samples").sum()) == 0
    lead = rows.get_column(S.LEAD_MS).drop_nulls()
    return StepSeries(
        step_ms=per_step.get_column("step_time").cast(pl.Float64).to_numpy(),
        samples=per_step.get_column("samples").cast(pl.Float64).to_numpy() if has_samples else None,
        lead_ms=float(per_step.get_column("lead").drop_nulls().mean()) if lead.len() else None,  # type: ignore[arg-type]
    )

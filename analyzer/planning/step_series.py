"""The analysed steps of a compared run, step by step: what the regression gate resamples and what
the logging-frequency check reads (``lead_ms``), from the same rows the analysis used (warm-up and
sampled-window rows left out by ``analysis.partial.analysed_columns``), read as numpy columns:
only the few columns it needs (``COLUMNS``), never a wide frame of the whole run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl

from analyzer.analysis.metrics import warmup_steps
from analyzer.analysis.partial import Rows, analysed_columns
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.columns import Column


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


#: The columns the step series reads (compare loads only these: ``scale.file_rows.trace_rank_rows``).
COLUMNS = (S.STEP, S.RANK, S.WALL_MS, S.BATCH_SAMPLES, S.LEAD_MS, S.KERNEL_STATS)


def _series(col: Column, name: str) -> pl.Series:
    """A numpy column as a polars Series, null where unknown (the reader's frame holds it so)."""
    values = pl.Series(name, col.values)
    return values if col.valid is None else values.set(pl.Series(~col.valid), None)


def step_series(per_rank: Mapping[int, Rows]) -> StepSeries:
    """The analysed steps of a run (every rank; rows per rank as numpy columns, sorted by step), one
    value per step number: the rows ``analysis.partial.analysed_columns`` picks, grouped by step."""
    ranks = [per_rank[r] for r in sorted(per_rank) if len(per_rank[r][S.STEP])]
    if not ranks:
        return StepSeries(np.empty(0), None, None)
    skip = warmup_steps(min(len(r[S.STEP]) for r in ranks))
    picked = [analysed_columns(r, skip) for r in ranks]
    mixed = any(not all_sampled for _, _, all_sampled in picked)
    kept = [f for _, f, all_sampled in picked if not (mixed and all_sampled)]
    if len(kept) == 1:
        return _one_rank(kept[0])
    rows = pl.DataFrame(
        [pl.concat([_series(f[c], c) for f in kept]) for c in (S.STEP, S.WALL_MS, S.BATCH_SAMPLES, S.LEAD_MS)]
    )
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


def _one_rank(f: Rows) -> StepSeries:
    """The series of one rank's analysed rows (one per step, in step order): the rows themselves, as
    the group-by of several ranks gives them (a group of one), without a hash table of every step."""
    samples, lead = f[S.BATCH_SAMPLES], f[S.LEAD_MS]
    known_lead = lead.known()
    return StepSeries(
        step_ms=f[S.WALL_MS].values.astype(np.float64),
        samples=samples.values.astype(np.float64) if samples.count() == len(samples) and len(samples) else None,
        lead_ms=float(pl.Series(known_lead).mean()) if known_lead.size else None,  # type: ignore[arg-type]
    )

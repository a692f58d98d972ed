"""Per-step vs per-sample compute, measured from a smaller batch within the run.

A batch that varies within a run (the last, smaller batch of an epoch) measures how much of
forward and backward grows with the batch: two batch sizes, two median compute times, a line
through them. A larger-batch projection uses it instead of assuming compute doubles with the
batch; without a smaller batch the projection's range spans both assumptions (docs/thresholds.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from analyzer.analysis import thresholds as T
from gpuanalyze.ingest import schema as S


@dataclass(frozen=True, slots=True)
class BatchSplit:
    """Forward + backward per step = fixed_ms + per_sample_ms x samples, from two batch sizes."""

    usual: float
    """Samples of the usual batch (the most common)."""
    smaller: float
    """Median samples of the smaller batches."""
    smaller_steps: int
    fixed_ms: float
    per_sample_ms: float

    @property
    def fixed_fraction(self) -> float:
        """Share of the usual batch's forward + backward that does not grow with the batch, in [0, 1]."""
        total = self.fixed_ms + self.per_sample_ms * self.usual
        return self.fixed_ms / total if total > 0 else 0.0


def batch_split(rows: pl.DataFrame) -> BatchSplit | None:
    """The split from analysed rows, or None when the run has no batch small enough to tell."""
    if S.BATCH_SAMPLES not in rows.columns or rows.height == 0:
        return None
    samples = rows.get_column(S.BATCH_SAMPLES).to_numpy().astype(np.float64)
    compute = (
        rows.get_column(S.FORWARD_MS).fill_null(0.0).to_numpy()
        + rows.get_column(S.BACKWARD_MS).fill_null(0.0).to_numpy()
    )
    ok = np.isfinite(samples) & (samples > 0) & np.isfinite(compute)
    if not ok.any():
        return None
    samples, compute = samples[ok], compute[ok]
    values, counts = np.unique(samples, return_counts=True)
    usual = float(values[np.argmax(counts)])
    small = samples <= T.BATCH_SPLIT_MAX * usual
    big = samples == usual
    if not small.any() or float(np.median(compute[big])) <= 0:
        return None
    n_small = float(np.median(samples[small]))
    c_big, c_small = float(np.median(compute[big])), float(np.median(compute[small]))
    per_sample = max(0.0, (c_big - c_small) / (usual - n_small))
    fixed = min(max(c_big - per_sample * usual, 0.0), c_big)
    per_sample = (c_big - fixed) / usual
    return BatchSplit(usual, n_small, int(small.sum()), fixed, per_sample)

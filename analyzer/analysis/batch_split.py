"""Per-step vs per-sample compute, measured from a smaller batch within the run.

A batch that varies within a run (the last, smaller batch of an epoch, or micro-batches of
different sizes) measures how much of forward and backward grows with the batch: a regression of
each batch size's median compute time on its samples (weighted by the square root of its steps),
anchored at the usual batch's median. A larger-batch projection uses it instead of assuming compute doubles with the
batch; without a smaller batch the projection's range spans both assumptions (docs/thresholds.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzer.analysis import thresholds as T


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


def batch_split(samples: np.ndarray, compute: np.ndarray) -> BatchSplit | None:
    """The split from one rank's analysed rows (``samples``: batch samples, NaN where unknown;
    ``compute``: forward + backward ms), or None when the run has no batch small enough to tell."""
    ok = np.isfinite(samples) & (samples > 0) & np.isfinite(compute)
    if not ok.any():
        return None
    samples, compute = samples[ok], compute[ok]
    if samples.min() == samples.max():
        return None  # one batch size: nothing to tell the split from
    values, counts = np.unique(samples, return_counts=True)
    usual = float(values[np.argmax(counts)])
    small = samples <= T.BATCH_SPLIT_MAX * usual
    big = samples == usual
    if not small.any() or float(np.median(compute[big])) <= 0:
        return None
    # a line through each batch size's median compute, each weighted by the square root of its steps
    medians = np.array([np.median(compute[samples == v]) for v in values])
    slope, _ = np.polyfit(values, medians, 1, w=np.sqrt(counts))
    c_big = float(np.median(compute[big]))
    per_sample = max(0.0, float(slope))
    fixed = min(max(c_big - per_sample * usual, 0.0), c_big)
    per_sample = (c_big - fixed) / usual
    return BatchSplit(usual, float(np.median(samples[small])), int(small.sum()), fixed, per_sample)


def median_split(splits: list[BatchSplit]) -> BatchSplit | None:
    """The run's split from its ranks' (each rank measured on its own rows): the median rank's by
    fixed time, the lower one of an even count; ranks of one run see the same batches."""
    if not splits:
        return None
    ordered = sorted(splits, key=lambda s: (s.fixed_ms, s.per_sample_ms))
    return ordered[(len(ordered) - 1) // 2]

"""What the steps left out of the rules (settling, outliers: analysis.steady) owe to a finding's cause.

The run's mean counts every analysed step, so a projection gets back what the left-out steps add to the
mean (the fix leaves them as they are) -- except the part of their excess the cause itself owns: a loader
stall of 220 ms on two steps is the loader's, and it leaves with the loader's fix. Per left-out step, the
cause's part of its excess over the median step is its cause time above the steady steps' median cause
time, at most the step's excess; the projection gets back the rest.
"""

from __future__ import annotations

import numpy as np

from analyzer.analysis.findings import Finding
from analyzer.analysis.metrics import STEP_RANKS, STEP_WALL, StepMetrics
from analyzer.analysis.steady import SteadyState
from gpuanalyze.ingest.trace import schema as S

#: The per-step part (a column of StepMetrics.per_step, a share of the step) each cause's fix removes.
CAUSE_PART: dict[tuple[str, str | None], str] = {
    ("data_loading", None): S.DATA_WAIT_MS,
    ("sync", "host_sync"): S.SYNC_MS,
    ("host", "unattributed_host"): S.OTHER_MS,
    ("host", "cpu_work"): S.OTHER_MS,
    ("host", "input_preprocessing"): S.OTHER_MS,
}


def cause_part(f: Finding) -> str | None:
    """The per-step column of the part ``f``'s fix removes, None when its fix removes no one part."""
    return CAUSE_PART.get((f.bottleneck, f.cause), CAUSE_PART.get((f.bottleneck, None)))


def owned_left_out_ms(
    full: StepMetrics, steady: SteadyState, column: str, among: frozenset[int] | None = None
) -> float:
    """Mean ms per analysed step (per rank) of the left-out steps' excess (of those ``among``, default all) that
    ``column``'s part owns."""
    ps = full.per_step
    left = steady.left_out if among is None else among
    if not left or ps.height == 0 or column not in ps.columns or STEP_WALL not in ps.columns:
        return 0.0
    steps = ps.get_column(S.STEP).to_numpy()
    wall = ps.get_column(STEP_WALL).to_numpy() / np.maximum(ps.get_column(STEP_RANKS).to_numpy(), 1)
    part = ps.get_column(column).fill_null(0.0).fill_nan(0.0).to_numpy() * wall
    out = np.isin(steps, np.fromiter(left, dtype=steps.dtype, count=len(left)))
    if out.all():
        return 0.0
    usual = float(np.median(part[~out]))
    excess = np.clip(wall[out] - steady.median_ms, 0.0, None)
    owned = np.minimum(np.clip(part[out] - usual, 0.0, None), excess)
    return float(owned.sum()) / ps.height

"""One table of row rules (ingest/row_rules.py): the polars check the reader runs and the numpy check
load_columns runs read the same table and agree on every rule, at both ends of its range."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.row_rules import (
    DURATIONS,
    RULES,
    WALL,
    WALL_SLACK,
    RowRule,
    normalise_frame,
    passes,
    passes_numpy,
)

WALL_MS = 10.0


def _good(rule: RowRule) -> float:
    return WALL_MS if rule.column == S.WALL_MS else 1.0


def _values(rule: RowRule) -> list[tuple[int | float, bool]]:
    """(value, whether it passes) at and beyond both ends of the rule's range."""
    high = WALL_MS * WALL_SLACK if rule.high == WALL else rule.high
    good = _good(rule) if rule.column in DURATIONS else 1
    out = [(rule.low, not rule.above), (rule.low - 1, False), (good, True)]
    if high is not None:
        out += [(high, True), (high + 1 if isinstance(high, int) else high * 1.5, False)]
    return out


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.column)
def test_both_checks_agree_on_every_rule(rule: RowRule) -> None:
    for value, ok in _values(rule):
        frame = pl.DataFrame(
            {rule.column: [value], S.WALL_MS: [WALL_MS]} if rule.column != S.WALL_MS else {S.WALL_MS: [value]}
        )
        polars_ok = frame.select(passes(rule)).item()
        wall = frame.get_column(S.WALL_MS).to_numpy()
        numpy_ok = passes_numpy(rule, np.array([value]), wall, None)
        assert (polars_ok, numpy_ok) == (ok, ok), (rule.column, value)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.column)
def test_unknown_fails_a_required_rule_and_passes_an_optional_one(rule: RowRule) -> None:
    frame = pl.DataFrame(
        {rule.column: [None, _good(rule)], S.WALL_MS: [WALL_MS, WALL_MS]}, schema_overrides={rule.column: pl.Float64}
    )
    if rule.column == S.WALL_MS:
        frame = pl.DataFrame({S.WALL_MS: [None, WALL_MS]}, schema={S.WALL_MS: pl.Float64})
    polars_ok = bool(frame.select(passes(rule).all()).item())
    values = np.array([0.0, _good(rule)])
    numpy_ok = passes_numpy(rule, values, np.array([WALL_MS, WALL_MS]), np.array([False, True]))
    assert polars_ok == numpy_ok == (not rule.required)


def test_repairs_follow_the_table() -> None:
    """A row failing a required rule is dropped; a part over its step is clamped; a count out of range unknown."""
    from tests.report_helpers import synthetic_trace

    frame = synthetic_trace(ranks=1, steps=4, straggler=None).frame
    frame = frame.with_columns(
        pl.when(pl.col(S.STEP) == 1).then(-5.0).otherwise(pl.col(S.WALL_MS)).alias(S.WALL_MS),
        pl.when(pl.col(S.STEP) == 2).then(pl.col(S.WALL_MS) * 3).otherwise(pl.col(S.FORWARD_MS)).alias(S.FORWARD_MS),
        pl.when(pl.col(S.STEP) == 3).then(-1).otherwise(pl.col(S.BATCH_SAMPLES)).alias(S.BATCH_SAMPLES),
    )
    fixed, notes = normalise_frame(frame)
    assert fixed.get_column(S.STEP).to_list() == [0, 2, 3]
    row2 = fixed.filter(pl.col(S.STEP) == 2)
    assert row2.get_column(S.FORWARD_MS).item() == row2.get_column(S.WALL_MS).item()
    assert fixed.filter(pl.col(S.STEP) == 3).get_column(S.BATCH_SAMPLES).item() is None
    assert len(notes) == 3, notes

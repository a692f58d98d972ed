"""What makes a step row valid: one table of (column, predicate), read by both readers.

``reader.normalise_frame`` checks a polars frame against it (and repairs what fails: drops, clamps,
unknowns); ``columns.load_columns`` checks numpy columns against the same table and hands any file
with a failing row to the reader. A rule is a closed range: a required column must be known and
within it on every row; an optional one (null: unknown) within it wherever known. The parts' upper
bound is the row's own step time, with WALL_SLACK for timers that overlap a little.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import MAX_WORLD_SIZE

#: Longest step a trace may record (11.6 days): longer ones are corrupt or hostile, not slow.
MAX_STEP_MS = 1e9
#: Largest plausible batch (samples) and peak memory (bytes): beyond them a value is treated as unknown.
MAX_BATCH_SAMPLES = 1 << 40
MAX_MEMORY_BYTES = 1 << 50
#: Step starts (ns) must lie within this of 1970 (146 years either way): nothing later overflows when a
#: step's wall time is added or when two starts are subtracted, which ±2**63 did (export dropped every
#: event, watch showed 584 years elapsed).
MAX_START_NS = 1 << 62
#: Largest rank a trace may carry (runinfo.MAX_WORLD_SIZE).
MAX_RANK = MAX_WORLD_SIZE - 1
#: How much longer than its step a phase or GPU-busy time may be before it is clamped (timer overlap).
WALL_SLACK = 1.001
#: The durations of a row: the step time, then what must fit inside it.
DURATIONS = (S.WALL_MS, *S.PARTS, S.GPU_BUSY_MS, S.DATA_CPU_MS)
#: Upper bound of a rule that is the row's step time (times WALL_SLACK).
WALL = "wall"


@dataclass(frozen=True, slots=True)
class RowRule:
    """``low <= column <= high`` (``low < column`` with ``above`` set); ``high`` None: no upper bound,
    WALL: the row's step time. ``required``: unknown fails the row."""

    column: str
    low: float
    high: float | str | None
    required: bool
    above: bool = False


#: The table. Rows failing a required rule are dropped; optional durations are clamped to the step
#: (negative or infinite: dropped), optional counts beyond their range become unknown.
RULES: tuple[RowRule, ...] = (
    RowRule(S.WALL_MS, 0, MAX_STEP_MS, required=True, above=True),
    RowRule(S.START_UNIX_NS, -MAX_START_NS, MAX_START_NS, required=True),
    RowRule(S.STEP, 0, None, required=True),
    RowRule(S.RANK, 0, MAX_RANK, required=True),
    *(RowRule(c, 0, WALL, required=False) for c in DURATIONS[1:]),
    RowRule(S.BATCH_SAMPLES, 0, MAX_BATCH_SAMPLES, required=False),
    *(RowRule(c, 0, MAX_MEMORY_BYTES, required=False) for c in S.MEMORY_COLUMNS),
)
REQUIRED = tuple(r for r in RULES if r.required)


def _within(rule: RowRule) -> pl.Expr:
    """The rule as a polars predicate (null where the value is unknown)."""
    col = pl.col(rule.column)
    ok = col > rule.low if rule.above else col >= rule.low
    if rule.high == WALL:
        return ok & (col <= pl.col(S.WALL_MS) * WALL_SLACK)
    return ok if rule.high is None else ok & (col <= rule.high)


def passes(rule: RowRule) -> pl.Expr:
    """True where a row passes ``rule`` (an optional column's unknown passes; a required one's fails)."""
    within = _within(rule)
    return within.fill_null(False) if rule.required else (pl.col(rule.column).is_null() | within)


def passes_numpy(rule: RowRule, values: np.ndarray, wall: np.ndarray, valid: np.ndarray | None) -> bool:
    """Every row passes ``rule`` (``valid``: which values are known; None: all of them)."""
    if rule.required and valid is not None and not valid.all():
        return False
    if valid is not None and not valid.any():
        return True
    ok = values > rule.low if rule.above else values >= rule.low
    if rule.high == WALL:
        ok &= values <= wall * WALL_SLACK
    elif rule.high is not None:
        ok &= values <= rule.high
    return bool(ok.all() if valid is None else (ok | ~valid).all())


#: Rows up to which clean_rows checks in Python (beyond, the frame's one-pass check is cheaper).
CLEAN_ROWS_MAX = 10_000


def _passes_value(rule: RowRule, value: float | None, wall: float) -> bool:
    """The rule on one row's value (NaN fails every comparison)."""
    if value is None:
        return not rule.required
    high = wall * WALL_SLACK if rule.high == WALL else rule.high
    low_ok = value > rule.low if rule.above else value >= rule.low
    return low_ok and (high is None or value <= float(high))


def clean_rows(rows: list[dict[str, float | int | None]]) -> bool:
    """True when normalise_frame would change nothing in these rows (every value passes RULES, no NaN,
    (rank, step) strictly increasing), checked without building a frame: for the few rows of a tiny
    import, building and running the frame's checks costs more than the rest of the import."""
    if not rows or len(rows) > CLEAN_ROWS_MAX:
        return False
    prev: tuple[float, float] | None = None
    for r in rows:
        wall = r.get(S.WALL_MS)
        if wall is None or not all(_passes_value(rule, r.get(rule.column), wall) for rule in RULES):
            return False
        rank, step = r.get(S.RANK), r.get(S.STEP)
        assert rank is not None and step is not None  # required rules passed
        if prev is not None and (rank, step) <= prev:
            return False
        prev = (rank, step)
    return True


def _clean_and_sorted(frame: pl.DataFrame) -> tuple[pl.DataFrame, list[str]] | None:
    """The frame (sorted) when no row needs dropping, clamping or unknowing, checked in one select;
    None when something does (normalise_frame then repairs it step by step)."""
    if frame.height == 0:
        return None
    ok, dup, is_sorted, in_order = frame.select(_checks()).row(0)
    if not ok or dup:
        return None
    notes = [] if in_order else ["steps were out of order; sorted them"]
    return (frame if is_sorted else frame.sort([S.RANK, S.STEP])), notes


@functools.cache
def _nan_to_null() -> list[pl.Expr]:
    return [pl.when(pl.col(c).is_nan()).then(None).otherwise(pl.col(c)).alias(c) for c in DURATIONS]


@functools.cache
def _checks() -> list[pl.Expr]:
    """The one-pass checks of _clean_and_sorted (built once: building expressions costs more than
    evaluating them on a small frame)."""
    step, rank = pl.col(S.STEP), pl.col(S.RANK)
    return [
        pl.all_horizontal(*[passes(r) for r in RULES]).fill_null(False).all().alias("fine"),
        pl.struct(rank, step).is_duplicated().any().alias("dup"),
        ((rank.diff() > 0) | ((rank.diff() == 0) & (step.diff() > 0))).fill_null(True).all().alias("sorted"),
        ((step.diff().over(rank).fill_null(1) > 0).all()).alias("in_order"),
    ]


def normalise_frame(frame: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Make every row physically possible or drop it, deduplicate, sort; say what was done.

    Rows failing a required rule (step time missing, non-positive, non-finite or implausibly long;
    start time missing or beyond MAX_START_NS; step or rank missing or out of range), or with a
    negative or infinite duration, are dropped (every command reads traces through here, so all see
    the same valid rows). A phase or GPU-busy time longer than its step is clamped to the step
    (timers can overlap a little; more is corruption), and counts out of range become unknown. The
    analysis can then rely on 0 <= part <= wall for every row.
    """
    notes: list[str] = []
    frame = frame.with_columns(_nan_to_null())
    clean = _clean_and_sorted(frame)
    if clean is not None:  # the common case, in one pass (thousands of small rank files stay fast)
        return clean
    bad = ~pl.all_horizontal(*[passes(r) for r in REQUIRED]) | pl.any_horizontal(
        [((pl.col(c) < 0) | (pl.col(c) == math.inf)).fill_null(False) for c in DURATIONS]
    )
    n_bad = frame.filter(bad).height
    if n_bad:
        notes.append(
            f"skipped {n_bad} row(s) with a missing, negative, non-finite or implausible step, rank, start time "
            "or duration"
        )
        frame = frame.filter(~bad)
    wall = pl.col(S.WALL_MS)
    over = pl.any_horizontal([(pl.col(c) > wall * WALL_SLACK).fill_null(False) for c in DURATIONS[1:]])
    n_over = frame.filter(over).height
    if n_over:
        notes.append(f"{n_over} row(s) had a phase or GPU-busy time longer than the step itself; clamped to the step")
        frame = frame.with_columns(
            pl.when(pl.col(c) > wall).then(wall).otherwise(pl.col(c)).alias(c) for c in DURATIONS[1:]
        )
    for col, what in ((S.BATCH_SAMPLES, "batch sizes"), *((c, "memory values") for c in S.MEMORY_COLUMNS)):
        (rule,) = [r for r in RULES if r.column == col]
        out = ~passes(rule)
        n_out = frame.filter(out).height
        if n_out:
            notes.append(f"{n_out} implausible {what} treated as unknown")
            frame = frame.with_columns(pl.when(out).then(None).otherwise(pl.col(col)).alias(col))
    n_dup = frame.height - frame.unique([S.RANK, S.STEP]).height
    if n_dup:
        notes.append(f"skipped {n_dup} duplicated (rank, step) row(s), keeping the first of each")
        frame = frame.unique([S.RANK, S.STEP], keep="first", maintain_order=True)
    if not frame.select((pl.col(S.STEP).diff().over(S.RANK).fill_null(1) > 0).all()).item():
        notes.append("steps were out of order; sorted them")
    return frame.sort([S.RANK, S.STEP]), notes

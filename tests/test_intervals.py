"""Interval arithmetic (ingest/intervals.py): the vectorised window lengths agree with one window at a time."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuanalyze.ingest.timeline.intervals import Clipper, merge, union

_times = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 40)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(segments=_times, windows=st.lists(st.tuples(st.integers(-10, 260), st.integers(-10, 260)), max_size=20))
def test_lengths_of_many_windows_equal_each_window_alone(segments, windows):
    s = np.array([a for a, _ in segments], dtype=np.float64)
    e = s + np.array([d for _, d in segments], dtype=np.float64)
    c = Clipper(*merge(s, e))
    lo = np.array([a for a, _ in windows], dtype=np.float64)
    hi = np.array([b for _, b in windows], dtype=np.float64)
    got = c.lengths(lo, hi)
    assert got.shape == lo.shape
    assert np.allclose(got, [c.length(a, b) for a, b in zip(lo, hi, strict=True)])


def _sweep(pairs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of intervals by a plain sorted sweep: a new segment where one starts after all before it end."""
    out: list[list[float]] = []
    for s, e in sorted(pairs, key=lambda p: p[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


_sets = st.lists(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 9)), max_size=25), min_size=1, max_size=3)


@settings(max_examples=300, deadline=None)
@given(sets=_sets)
def test_merge_and_union_equal_a_sorted_sweep_however_starts_tie(sets):
    arrays = [
        (np.array([a for a, _ in x], dtype=np.float64), np.array([a + d for a, d in x], dtype=np.float64)) for x in sets
    ]
    s, e = merge(*arrays[0])
    assert list(zip(s.tolist(), e.tolist(), strict=True)) == _sweep([(a, a + d) for a, d in sets[0]])
    u = union(*arrays)
    assert list(zip(u[0].tolist(), u[1].tolist(), strict=True)) == _sweep(
        [(a, a + d) for x in sets for a, d in x if d > 0]
    )
    assert u[0].flags.c_contiguous and u[1].flags.c_contiguous  # what callers index and search

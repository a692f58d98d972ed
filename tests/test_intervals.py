"""Interval arithmetic (ingest/intervals.py): the vectorised window lengths agree with one window at a time."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuanalyze.ingest.timeline.intervals import Clipper, merge

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

"""Exact quantiles from per-rank sketches and one bracket pass, against polars on the pooled values."""

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.analysis.quantiles import bracket, combine_linear, exact_values, in_bracket, order_stats, select, sketch


def _quantile(ranks: list[np.ndarray], q: float, sample: int) -> float:
    sketches = [sketch(v, sample) for v in ranks]
    n = sum(s.n for s in sketches)
    i, j, frac = order_stats(n, q)
    exact = exact_values(sketches)
    if exact is not None:
        return combine_linear(float(exact[i]), float(exact[j]), frac)
    b = bracket(sketches, i, j)
    answers = [in_bracket(v, b) for v in ranks]
    # only values strictly inside are sent: at most about two sample spacings per rank
    assert sum(a.inside.size for a in answers) <= sum(2 * s.every for s in sketches)
    return combine_linear(select(answers, b, i), select(answers, b, j), frac)


values = st.lists(
    st.lists(
        st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from([0.0, 1.0, 20.0, 20.0, 1e9])),
        min_size=0,
        max_size=60,
    ),
    min_size=1,
    max_size=8,
).filter(lambda r: sum(map(len, r)) > 0)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(ranks=values, q=st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]), sample=st.integers(1, 9))
def test_matches_polars_on_the_pooled_values(ranks, q, sample):
    arrays = [np.array(r, dtype=np.float64) for r in ranks]
    pooled = pl.Series(np.concatenate(arrays))
    want = pooled.median() if q == 0.5 else pooled.quantile(q, "linear")
    assert _quantile(arrays, q, sample) == want


@pytest.mark.parametrize("sample", [2, 16, 256])
def test_large_skewed_ranks(sample):
    rng = np.random.default_rng(3)
    ranks = [rng.lognormal(3, 1, 5000) for _ in range(6)] + [np.full(3000, 20.0), np.array([1e12])]
    pooled = pl.Series(np.concatenate(ranks))
    assert _quantile(ranks, 0.5, sample) == pooled.median()
    assert _quantile(ranks, 0.9, sample) == pooled.quantile(0.9, "linear")

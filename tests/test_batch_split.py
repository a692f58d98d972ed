"""Steps of different batch sizes in one run (epoch tails, micro-batches) measure forward + backward as fixed ms
+ ms per sample: a regression of each size's median on its samples (analysis/batch_split.py)."""

import pytest

from analyzer import analyze
from tests.conftest import make_row


def test_a_regression_over_several_batch_sizes_recovers_fixed_and_per_sample_cost(trace_factory):
    # forward + backward = 3 ms + 0.05 ms/sample; batches of 64 (most), 40, 24 and 8 (epoch tails, micro-batches)
    sizes = [40 if i % 15 == 7 else 24 if i % 15 == 11 else 8 if i % 15 == 13 else 64 for i in range(90)]
    rows = []
    for i, n in enumerate(sizes):
        compute = 3.0 + 0.05 * n + (0.02 if i % 2 else -0.02)
        rows.append(make_row(i, wall=compute + 2.5, fwd=compute * 0.4, bwd=compute * 0.6, opt=2.0, samples=n))
    split = analyze(trace_factory(rows)).metrics.batch_split
    assert split is not None
    assert split.fixed_ms == pytest.approx(3.0, abs=0.1)
    assert split.per_sample_ms == pytest.approx(0.05, rel=0.05)

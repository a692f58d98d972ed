"""The steps left out of the rules come back into a projection only for what the fix leaves: a loader
stall left out as an outlier is the loader's, and it leaves with the loader's fix; a stall of another
kind stays."""

import pytest

from analyzer import analyze
from gpuanalyze.ingest.trace.runinfo import EndInfo
from tests.conftest import make_row


def _loop(trace_factory, stall_data: float, stall_other: float):
    # 20 ms steps, 10 ms of them waiting for a batch; two steps stall 200 ms more (in data wait or in other work)
    rows = []
    for i in range(60):
        stalled = i in (30, 45)
        data = 10.0 + (stall_data if stalled else 0.0)
        wall = 20.0 + (stall_data + stall_other if stalled else 0.0)
        rows.append(make_row(i, wall=wall, data=data, fwd=4.0, bwd=5.0, opt=0.5, data_cpu=data * 0.9))
    return trace_factory(rows, run={"cpu_count": 1}, end=EndInfo(status="ok", steps=60, loader_workers=0))


def _data_finding(report):
    return next(f for f in report.findings if f.bottleneck == "data_loading")


def test_loader_stalls_left_out_as_outliers_leave_with_the_loaders_fix(trace_factory):
    r = analyze(_loop(trace_factory, stall_data=200.0, stall_other=0.0))
    p = _data_finding(r).projection
    assert r.metrics.step_mean_ms > 25.0  # the run's mean counts the stalls
    # the compute path (10.5 ms) plus at most a residue of the 10 ms wait; the 2 x 200 ms stalls are not added back
    assert p.step_ms < 10.5 + 0.35 * 10.0
    assert p.step_ms == pytest.approx(p.current_ms - p.saved_ms)


def test_stalls_of_another_kind_stay_in_the_projection(trace_factory):
    r = analyze(_loop(trace_factory, stall_data=0.0, stall_other=200.0))
    p = _data_finding(r).projection
    # the same fix; the stalls are not the loader's, so their 2 x 200 / 59 ms per step stays
    assert p.step_ms > 10.5 + 400.0 / 60 - 0.5


def test_a_larger_batch_pays_a_per_step_stall_once_per_k_batches_worth(trace_factory):
    """Batch 1 on a CPU (the batch finding projects per current batch worth of samples with a batch x2): two
    steps of 60 stall 30 ms more. Steps twice as large pay such a stall half as often per sample, so the
    projection gets back half of what the stalls add to the mean step, where a fix that keeps the steps gets all."""

    def rows(stall: float) -> list[dict]:
        return [
            make_row(i, wall=1.6 + (stall if i in (30, 45) else 0.0), data=0.1, fwd=0.4, bwd=0.5, opt=0.5, samples=1)
            for i in range(60)
        ]

    def batch(r):
        return next(f for f in r.findings if f.cause == "per_step_overhead").projection

    calm = batch(analyze(trace_factory(rows(0.0), run={"cpu_count": 2})))
    stalled = batch(analyze(trace_factory(rows(30.0), run={"cpu_count": 2})))
    added = stalled.current_ms - calm.current_ms  # the stalls on the run's mean: 60 ms over the analysed steps
    assert added == pytest.approx(60.0 / 57, rel=0.01)  # 3 warm-up steps skipped
    assert stalled.step_ms - calm.step_ms == pytest.approx(added / 2, rel=0.05)


def test_a_stall_in_the_data_wait_comes_back_whole_with_a_larger_batch(trace_factory):
    """The same two stalls in the data wait: a larger batch fetches the same samples, so the loader's stall per
    sample stays; the batch projection gets all of it back."""

    def rows(stall: float) -> list[dict]:
        return [
            make_row(
                i,
                wall=1.6 + (stall if i in (30, 45) else 0.0),
                data=0.1 + (stall if i in (30, 45) else 0.0),
                fwd=0.4,
                bwd=0.5,
                opt=0.5,
                samples=1,
            )
            for i in range(60)
        ]

    def batch(r):
        return next(f for f in r.findings if f.cause == "per_step_overhead").projection

    calm = batch(analyze(trace_factory(rows(0.0), run={"cpu_count": 2})))
    stalled = batch(analyze(trace_factory(rows(30.0), run={"cpu_count": 2})))
    assert stalled.step_ms - calm.step_ms == pytest.approx(stalled.current_ms - calm.current_ms, rel=0.05)

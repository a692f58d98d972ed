import pytest

from analyzer import analyze
from analyzer.analysis.thresholds import DATA_WAIT_HIGH, DATA_WAIT_MODERATE
from tests.conftest import make_row

GB = 10**9


def _verdict(trace_factory, rows, run=None):
    return analyze(trace_factory(rows, run=run))


def test_data_wait_above_twenty_percent_is_high_data_loading(trace_factory):
    r = _verdict(trace_factory, [make_row(i, wall=20.0, data=10.0) for i in range(20)])
    assert r.bottleneck == "data_loading"
    f = r.findings[0]
    assert f.severity == "high" and f.share == pytest.approx(0.5)
    assert f.evidence[0].threshold == DATA_WAIT_HIGH.value and "XProf" in f.evidence[0].source
    assert any("num_workers" in rec for rec in f.recommendations)
    assert r.confidence == 1.0


def test_moderate_data_wait(trace_factory):
    r = _verdict(trace_factory, [make_row(i, wall=20.0, data=2.0) for i in range(20)])
    assert r.bottleneck == "data_loading" and r.findings[0].severity == "moderate"
    assert r.findings[0].evidence[0].threshold == DATA_WAIT_MODERATE.value


def test_below_five_percent_is_none(trace_factory):
    r = _verdict(trace_factory, [make_row(i, wall=20.0, data=0.5) for i in range(20)])
    assert r.bottleneck == "none" and r.findings == ()
    assert r.confidence == 1.0


def test_confidence_is_the_fraction_of_steps_over_threshold(trace_factory):
    rows = [make_row(i, wall=20.0, data=10.0 if i % 2 else 0.0) for i in range(40)]
    r = _verdict(trace_factory, rows)
    assert r.bottleneck == "data_loading"
    assert 0.4 < r.confidence < 0.6


def test_sync_wins_when_it_is_the_larger_share(trace_factory):
    r = _verdict(trace_factory, [make_row(i, wall=20.0, data=2.0, sync=8.0, fwd=2, bwd=2, opt=1) for i in range(20)])
    assert [f.bottleneck for f in r.findings] == ["sync", "data_loading"]
    assert r.bottleneck == "sync"
    assert any(".item()" in rec for rec in r.findings[0].recommendations)


def test_idle_gpu_with_memory_headroom_is_batch_size(trace_factory):
    rows = [make_row(i, wall=20.0, busy=5.0, peak=10 * GB, samples=16) for i in range(20)]
    r = _verdict(trace_factory, rows, run={"gpu_memory_bytes": 80 * GB, "param_dtype": "float32"})
    assert r.bottleneck == "batch_size"
    metrics = {e.metric: e.value for e in r.findings[0].evidence}
    assert metrics["gpu_utilization"] == pytest.approx(0.25)
    assert metrics["peak_memory_fraction"] == pytest.approx(0.125)
    assert "115 samples" in r.findings[0].recommendations[0]


def test_busy_fp32_gpu_is_kernels(trace_factory):
    rows = [make_row(i, wall=20.0, busy=19.0) for i in range(20)]
    r = _verdict(trace_factory, rows, run={"param_dtype": "float32"})
    assert r.bottleneck == "kernels" and r.findings[0].severity == "high"
    assert any("bfloat16" in rec for rec in r.findings[0].recommendations)


def test_gpu_rules_do_not_fire_without_gpu_timings(trace_factory):
    r = _verdict(trace_factory, [make_row(i, wall=20.0) for i in range(20)], run={"param_dtype": "float32"})
    assert r.bottleneck == "none"

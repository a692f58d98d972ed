import pytest

from analyzer.analysis.metrics import warmup_steps
from analyzer.analysis.road import trace_road
from analyzer.errors import TraceError
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import load_trace
from tests.conftest import make_row


def test_warmup_is_a_tenth_capped_at_three():
    assert warmup_steps(5) == 0
    assert warmup_steps(20) == 2
    assert warmup_steps(1000) == 3


def test_medians_shares_and_throughput(trace_factory):
    rows = [make_row(i, wall=100.0 if i < 3 else 20.0, data=5.0, samples=10) for i in range(30)]
    m = trace_road(load_trace(trace_factory(rows))).metrics
    assert m.warmup_steps == 3 and m.steps == 27
    assert m.step_median_ms == pytest.approx(20.0)
    assert m.breakdown_ms[S.DATA_WAIT_MS] == pytest.approx(5.0)
    assert m.share[S.DATA_WAIT_MS] == pytest.approx(0.25)
    assert m.breakdown_ms[S.H2D_MS] is None and m.share[S.H2D_MS] is None
    assert m.samples_per_s == pytest.approx(500.0)
    assert m.gpu_util is None


def test_gpu_utilisation_from_busy_time(trace_factory):
    m = trace_road(load_trace(trace_factory([make_row(i, wall=10.0, busy=4.0) for i in range(10)]))).metrics
    assert m.gpu_util == pytest.approx(0.4)


def test_zero_steps_is_an_error(trace_factory):
    with pytest.raises(TraceError, match="no steps"):
        trace_road(load_trace(trace_factory([])))


def test_consistency_counts_unknown_shares_as_zero_and_matches_polars():
    import polars as pl

    from analyzer.analysis.metrics import StepMetrics

    frame = pl.DataFrame({"share": [0.5, None, 0.1, 0.9, None]}, schema={"share": pl.Float64})

    class _M:
        per_step = frame
        consistency = StepMetrics.consistency

    m = _M()
    assert m.consistency("share", 0.4) == 0.4  # 2 of 5
    assert m.consistency("share", 0.4, below=True) == 0.6  # the unknowns count as 0
    assert m.consistency("absent", 0.4) == 0.0


def test_consistency_runs_no_polars_query(monkeypatch):
    """The stability resampling calls it tens of thousands of times in a fleet: no per-call query."""
    import polars as pl

    from analyzer.analysis.metrics import StepMetrics

    frame = pl.DataFrame({"share": [0.5, None, 0.1]}, schema={"share": pl.Float64})

    class _M:
        per_step = frame
        consistency = StepMetrics.consistency

    def refused(*_a, **_k):
        raise AssertionError("a polars query per call")

    monkeypatch.setattr(pl.LazyFrame, "_collect_eager", refused)
    assert _M().consistency("share", 0.4) == 1 / 3

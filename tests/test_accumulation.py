"""Gradient accumulation is modelled as micro-batches x the cost of one: fewer, larger micro-batches
divide the per-call part, keep the per-sample part and the optimizer, and travel as a MicroBatchFix
that run --try can apply (batch_size and accumulate)."""

import pytest

from analyzer import analyze
from analyzer.analysis import thresholds as T
from analyzer.analysis.fixes import MicroBatchFix
from analyzer.planning.settling_trial import settling_trial
from analyzer.run.candidates import setting_of
from gpuanalyze.ingest.trace.runinfo import EndInfo
from tests.conftest import make_row


def _accumulating(trace_factory, micro: int, fetches_per_step: int, data=6.0, fwd=5.0, bwd=7.0, opt=1.0):
    wall = data + fwd + bwd + opt + 0.2
    rows = [
        make_row(i, wall=wall, data=data, fwd=fwd, bwd=bwd, opt=opt, samples=micro * fetches_per_step, data_cpu=data)
        for i in range(40)
    ]
    end = EndInfo(status="ok", steps=40, loader_workers=0, fetches=40 * fetches_per_step, fetch_samples=micro)
    return trace_factory(rows, run={"cpu_count": 1}, end=end)


def test_eight_micro_batches_of_two_get_the_micro_batch_fix(trace_factory):
    r = analyze(_accumulating(trace_factory, micro=2, fetches_per_step=8))
    f = next(f for f in r.findings if f.bottleneck == "batch_size")
    assert f.cause == "micro_batch_overhead"
    assert f.projection.fix == MicroBatchFix(micro_batch=16, accumulate=1)
    p = f.projection
    # per micro-batch work 18 ms of a 19.2 ms step; the micro-batch model's own share per call, 1/8 of it paid
    assert p.step_ms == pytest.approx(19.2 - 18.0 * T.MICRO_UNMEASURED_FIXED * (1 - 1 / 8), rel=0.05)
    assert p.low_ms <= 19.2 - 18.0 * (1 - 1 / 8) + 1.0  # all per call: the fast end
    assert p.high_ms >= 19.2 * 0.99  # none of it per call: no saving (unmeasured: the range says so)
    assert f.confidence.level == "low"  # a range reaching the current step is no medium/high advice
    assert "learning rate stays" in f.recommendations[0] and "batch_size=16" in f.recommendations[0]
    assert setting_of(p.fix).label() == "batch_size=16, accumulate=1"


def test_one_fetch_per_step_is_no_accumulation(trace_factory):
    r = analyze(_accumulating(trace_factory, micro=16, fetches_per_step=1))
    assert all(f.cause != "micro_batch_overhead" for f in r.findings)


def test_the_trial_that_settles_a_micro_batch_finding(trace_factory):
    r = analyze(_accumulating(trace_factory, micro=2, fetches_per_step=4, data=0.0, opt=0.2))
    top = r.findings[0]
    assert top.cause == "micro_batch_overhead"
    assert settling_trial(r, "python t.py") == (
        "gpuanalyze run --try --candidates batch_size=8,accumulate=1 -- python t.py"
    )


def test_workers_hand_over_every_micro_batch(trace_factory):
    from analyzer.analysis.host_facts import HostFacts
    from analyzer.analysis.road import trace_road
    from analyzer.analysis.rules import Context
    from analyzer.analysis.rules.workers import handover_ms, worker_plan
    from gpuanalyze.ingest.trace.reader import load_trace

    def ctx(fetches_per_step):
        t = load_trace(_accumulating(trace_factory, micro=2, fetches_per_step=fetches_per_step))
        host = HostFacts(cores_available=4, cores_free=4)
        return Context(m=trace_road(t).metrics, run=t.run, end=t.end, ceilings=None, host=host)

    one, eight = ctx(1), ctx(8)
    assert handover_ms(eight)[0] == pytest.approx(8 * handover_ms(one)[0])
    assert worker_plan(eight, 6.0, workers=2).step_ms > worker_plan(one, 6.0, workers=2).step_ms


def test_the_micro_batch_point_takes_its_own_per_call_share_not_the_batch_models(trace_factory, monkeypatch):
    trace = _accumulating(trace_factory, micro=2, fetches_per_step=8)

    def point():
        return next(f for f in analyze(trace).findings if f.bottleneck == "batch_size").projection.step_ms

    before = point()
    monkeypatch.setattr(T, "BATCH_UNMEASURED_FIXED", 0.1)
    assert point() == before
    monkeypatch.setattr(T, "MICRO_UNMEASURED_FIXED", 0.3)
    assert point() > before


def test_the_loops_own_python_between_micro_batches_is_paid_per_micro_batch(trace_factory):
    # 0.5 ms of unattributed host time per step over 8 micro-batches: loss scaling, backward calls, the loop
    lean = analyze(_accumulating(trace_factory, micro=2, fetches_per_step=8, data=1.0, fwd=1.0, bwd=1.5, opt=0.3))
    rows = [
        make_row(i, wall=4.3, data=1.0, fwd=1.0, bwd=1.5, opt=0.3, samples=16, data_cpu=1.0) for i in range(40)
    ]  # other = 4.3 - 3.8 = 0.5 ms
    end = EndInfo(status="ok", steps=40, loader_workers=0, fetches=320, fetch_samples=2)
    loopy = analyze(trace_factory(rows, run={"cpu_count": 1}, end=end))
    a = next(f for f in lean.findings if f.cause == "micro_batch_overhead").projection
    b = next(f for f in loopy.findings if f.cause == "micro_batch_overhead").projection
    # the 0.5 ms is spread with the rest: the fast end saves 7/8 of it too (the lean loop has 0.2 ms of it)
    assert (b.current_ms - b.low_ms) - (a.current_ms - a.low_ms) == pytest.approx(0.3 * 7 / 8, abs=0.15)

"""CPU-side projections on the host as measured (HostFacts built here, as the system sampler would):
the cores free to the job, workers never beyond them, compute charged for the cores workers take,
an oversubscribed host lowering confidence, no thread for CPU-bound Python loading, and the first
advice for host time after the optimizer step of a DataLoader loop."""

import dataclasses
import re

import pytest

from analyzer import analyze
from analyzer.analysis import thresholds as T
from analyzer.analysis.host_facts import HostFacts
from analyzer.analysis.judge import judge
from analyzer.analysis.road import trace_road
from analyzer.analysis.rules import Context
from analyzer.analysis.rules.workers import worker_plan
from analyzer.analysis.steady import steady_state
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import load_trace
from gpuanalyze.ingest.trace.runinfo import EndInfo
from tests.conftest import make_row

END0 = EndInfo(status="ok", steps=60, loader_workers=0)


def _ctx(path, host):
    t = load_trace(path)
    m = trace_road(t).metrics
    return Context(m=m, run=t.run, end=t.end, ceilings=None, host=host), m


def _judged(path, host):
    ctx, m = _ctx(path, host)
    return judge(ctx, m, steady_state(m)).verdict


def _cpu_loading(trace_factory, cpu=8.0):
    # 10 ms of CPU-bound loading in the training process, 10 ms of compute
    rows = [make_row(i, wall=20.0, data=10.0, fwd=4.0, bwd=5.0, opt=0.5, data_cpu=cpu) for i in range(60)]
    return trace_factory(rows, run={"host": "t", "cpu_count": 8}, end=END0)


QUIET = HostFacts(cores_available=8, cores_free=8, sampled=True)  # read by the sampler: high confidence may stand


def test_workers_never_exceed_the_free_cores(trace_factory):
    path = _cpu_loading(trace_factory)
    for free in (1.0, 1.5, 2.0, 3.7, 8.0):
        ctx, _ = _ctx(path, HostFacts(cores_available=8, cores_free=free))
        plan = worker_plan(ctx, 10.0)
        assert plan is not None and 1 <= plan.workers <= max(1, int(free))


def test_loading_that_sleeps_gets_workers_by_their_cpu_share_not_one_per_core(trace_factory):
    """A fetch that sleeps on I/O (5% CPU) takes a twentieth of a core per worker: on one free core
    several workers still fit (their CPU parts), while CPU-bound loading gets one worker per core."""

    def loading(cpu: float):  # 50 ms of loading in the training process, 10 ms of compute
        rows = [make_row(i, wall=60.0, data=50.0, fwd=4.0, bwd=5.0, opt=0.5, data_cpu=cpu) for i in range(60)]
        return trace_factory(rows, run={"host": "t", "cpu_count": 2}, end=END0)

    ctx, _ = _ctx(loading(cpu=2.5), HostFacts(cores_available=2, cores_free=1.0, sampled=True))  # 5% CPU
    plan = worker_plan(ctx, 50.0)
    assert plan is not None and plan.workers > 1
    assert plan.workers * 0.05 <= 1.0  # their CPU parts still fit the free core
    ctx, _ = _ctx(loading(cpu=50.0), HostFacts(cores_available=2, cores_free=1.0, sampled=True))  # CPU-bound
    plan = worker_plan(ctx, 50.0)
    assert plan is not None and plan.workers == 1


def test_fewer_free_cores_never_project_a_faster_step(trace_factory):
    path = _cpu_loading(trace_factory)
    steps = []
    for free in (8.0, 4.0, 2.0, 1.2):
        ctx, _ = _ctx(path, HostFacts(cores_available=8, cores_free=free))
        plan = worker_plan(ctx, 10.0)
        assert plan is not None
        steps.append(plan.step_ms)
    assert steps == sorted(steps)


def test_compute_is_charged_for_the_cores_workers_take(trace_factory):
    # the training process computes on 2 threads; with 2 free cores, 2 CPU-bound workers take them
    path = _cpu_loading(trace_factory, cpu=10.0)
    one = HostFacts(cores_available=2, cores_free=2, process_cpu_cores=1.0, sampled=True)
    two = dataclasses.replace(one, process_cpu_cores=2.0)
    p1 = worker_plan(_ctx(path, one)[0], 10.0)
    p2 = worker_plan(_ctx(path, two)[0], 10.0)
    assert p1 is not None and p2 is not None
    assert p2.step_ms > p1.step_ms and "slowed" in p2.rule
    assert p2.low_ms <= p2.step_ms <= p2.high_ms


def test_an_oversubscribed_host_lowers_confidence_and_widens_ranges(trace_factory):
    path = _cpu_loading(trace_factory, cpu=1.0)  # mostly waiting: workers help
    quiet = _judged(path, QUIET)
    loaded = _judged(path, HostFacts(cores_available=8, cores_free=8, load_avg=16.0, oversubscribed=True, sampled=True))
    fq, fl = quiet.findings[0], loaded.findings[0]
    assert fq.bottleneck == fl.bottleneck == "data_loading"
    assert fq.confidence.level == "high" and fl.confidence.level != "high"
    assert "oversubscribed" in fl.confidence.reason
    p = fl.projection  # its slow end widened for the load, and the rule line says so
    assert p.high_ms - p.step_ms >= T.LOADED_NOISE * p.step_ms and "oversubscribed host" in p.rule
    assert "oversubscribed host" not in fq.projection.rule
    assert p.low_ms >= p.current_ms - 10.0  # no faster than the fix can reach: the step without its data wait


def test_a_loaded_host_does_not_make_cpu_loading_look_like_waiting(trace_factory):
    # pure CPU loading reads 30% CPU time on a host loaded 3x over its 2 cores (it got a third of a core)
    path = _cpu_loading(trace_factory, cpu=3.0)
    base = HostFacts(cores_available=2, cores_free=1, sampled=True)
    ctx, _ = _ctx(path, dataclasses.replace(base, load_avg=6.0, oversubscribed=True))
    from analyzer.analysis.rules.workers import loader_cpu_share

    assert loader_cpu_share(ctx) == pytest.approx(0.9)
    quiet_ctx, _ = _ctx(path, base)
    assert loader_cpu_share(quiet_ctx) == pytest.approx(0.3)


def test_advice_that_the_range_says_may_not_help_is_not_given_at_medium_or_high(trace_factory):
    for free in (1.0, 1.5, 2.0, 8.0):
        for load in (None, 12.0):
            host = HostFacts(
                cores_available=8, cores_free=free, load_avg=load, oversubscribed=load is not None, sampled=True
            )
            v = _judged(_cpu_loading(trace_factory), host)
            for f in v.findings:
                p = f.projection
                if f.confidence.level in ("medium", "high"):
                    assert p.high_ms is not None and p.high_ms < p.current_ms, (free, load, f.cause, p)


def test_no_thread_for_cpu_bound_python_loading(trace_factory):
    # a custom batch function (no DataLoader recorded) that is CPU work
    rows = [make_row(i, wall=20.0, data=10.0, fwd=4.0, bwd=5.0, opt=0.5, data_cpu=9.5) for i in range(60)]
    r = analyze(trace_factory(rows))
    advice = " ".join(r.findings[0].recommendations)
    assert "GIL" in advice and "prefetching thread for" not in advice
    rows = [make_row(i, wall=20.0, data=10.0, fwd=4.0, bwd=5.0, opt=0.5, data_cpu=0.5) for i in range(60)]
    advice = " ".join(analyze(trace_factory(rows)).findings[0].recommendations)
    assert "prefetching thread" in advice


def _logging_loop(trace_factory, lead):
    rows = []
    for i in range(60):
        row = make_row(i, wall=30.0, data=1.0, fwd=8.0, bwd=9.0, opt=1.0)  # 11 ms unattributed
        row[S.LEAD_MS] = lead
        rows.append(row)
    return trace_factory(rows, end=EndInfo(status="ok", steps=60, loader_workers=2))


def test_logging_after_the_optimizer_step_is_the_first_advice(trace_factory):
    r = analyze(_logging_loop(trace_factory, 10.0))
    f = r.findings[0]
    assert (f.bottleneck, f.cause) == ("host", "unattributed_host")
    assert "every N steps" in f.recommendations[0] and "after optimizer.step()" in f.recommendations[0]
    assert not any("prof.data()" in rec for rec in f.recommendations)
    # without lead_ms (not recorded) the batch-function advice stays first
    f = analyze(_logging_loop(trace_factory, None)).findings[0]
    assert "prof.data()" in f.recommendations[0]


def test_a_measured_smaller_batch_sets_the_batch_projection(trace_factory):
    # forward+backward: 4 ms fixed + 0.05 ms/sample; batch 8 and a last batch of 2 every 10 steps
    def row(i):
        n = 2 if i % 10 == 9 else 8
        return make_row(i, wall=4.4 + 0.05 * n + 3.0, fwd=2.0 + 0.02 * n, bwd=2.0 + 0.03 * n, opt=3.0, samples=n)

    r = analyze(trace_factory([row(i) for i in range(60)]))
    split = r.metrics.batch_split
    assert split is not None and split.fixed_ms == pytest.approx(4.0, rel=0.05)
    assert split.per_sample_ms == pytest.approx(0.05, rel=0.1)
    f = next(f for f in r.findings if f.bottleneck == "batch_size")
    assert f.projection.low_ms <= f.projection.step_ms <= f.projection.high_ms
    assert "fixed" in f.projection.rule and f"{T.BATCH_SPLIT_MAX}" not in f.projection.rule


def _with_left_out_steps(trace_factory):
    # CPU-bound loading in the training process; 5 steps at random places 3x the others (preempted)
    slow = (3, 17, 22, 41, 50)
    rows = [
        make_row(i, wall=60.0 if i in slow else 20.0, data=10.0, fwd=4.0, bwd=5.0, opt=0.5, data_cpu=8.0)
        for i in range(60)
    ]
    t = load_trace(trace_factory(rows, run={"host": "t", "cpu_count": 2, "host_cpus": 2}, end=END0))
    road = trace_road(t)
    assert road.steady.left_out  # the rules see the steady steps, as analyzer.api gives them
    return t, road.metrics, road.steady, road.judged


def _loading(trace_factory, host):
    t, full, steady, m = _with_left_out_steps(trace_factory)
    ctx = Context(m=m, run=t.run, end=t.end, ceilings=None, host=host)
    v = judge(ctx, full, steady).verdict
    f = next(f for f in v.findings if f.bottleneck == "data_loading")
    return f.projection, full.step_mean_ms - m.step_mean_ms


def test_an_oversubscribed_host_does_not_carry_the_left_out_steps_into_the_low_end(trace_factory):
    # the left-out steps' excess is time the scheduler gave other work: the next run may not meet it
    loaded = HostFacts(cores_available=2, cores_free=1, load_avg=6.0, oversubscribed=True, sampled=True)
    p, excess = _loading(trace_factory, loaded)
    assert excess > 0
    assert p.low_ms <= p.step_ms - excess < p.step_ms  # covers the step without the excess
    q, _ = _loading(trace_factory, HostFacts(cores_available=2, cores_free=2))
    assert q.low_ms > q.step_ms - excess  # a quiet host's slow steps are the job's own: they recur


def test_the_loaded_range_spans_the_measured_run_queue_excess(trace_factory):
    # 2 CPUs, 6 runnable threads: the job gets 2/6 of the CPUs; the other 4 threads gone or doubled
    # move a CPU-side step by 4/6 either way
    rows = [make_row(i, wall=20.0, data=10.0, fwd=4.0, bwd=5.0, opt=0.5, data_cpu=8.0) for i in range(60)]
    path = trace_factory(rows, run={"host": "t", "cpu_count": 2, "host_cpus": 2}, end=END0)
    base = HostFacts(cores_available=2, cores_free=1, load_avg=6.0, oversubscribed=True, sampled=True)
    queued = _judged(path, dataclasses.replace(base, run_queue=6.0)).findings[0].projection
    assert queued.high_ms >= queued.step_ms * (1 + 4 / 6)
    assert queued.low_ms == pytest.approx(queued.current_ms - 10.0)  # the fix removes at most the data wait
    unread = _judged(path, base).findings[0].projection  # no run queue read: LOADED_NOISE
    assert unread.high_ms < queued.step_ms * (1 + 4 / 6)
    barely = _judged(path, dataclasses.replace(base, run_queue=2.1)).findings[0].projection
    assert barely.high_ms == pytest.approx(unread.high_ms)  # an excess below LOADED_NOISE: the floor


def test_on_a_contended_cpu_run_every_range_is_widened_alike_said_and_never_past_the_fixs_reach(trace_factory):
    """A CPU run's precision fix is CPU work too: the load widens it as it widens the host finding (it was left
    narrow, and ranked above a host finding four times its size); the rule line says how, and no low end is below
    the step without the time the cause owns (a bf16 range read 0.00 ms at its low end)."""
    rows = [make_row(i, wall=40.0 + i % 5 * 0.4, data=0.2, fwd=7.0, bwd=11.0, opt=1.5, samples=256) for i in range(60)]
    run = {"host": "t", "cpu_count": 2, "host_cpus": 2, "param_dtype": "float32", "cpu_bf16": "avx512_bf16,amx_bf16"}
    host = HostFacts(cores_available=2, cores_free=1, load_avg=8.0, oversubscribed=True, sampled=True, run_queue=8.0)
    v = _judged(trace_factory(rows, run=run), host)
    assert {f.bottleneck for f in v.findings} >= {"host", "kernels"}
    for f in v.findings:
        p = f.projection
        assert f"range {p.low_ms:.2f}-{p.high_ms:.2f} ms: the rule's" in p.rule and "oversubscribed host" in p.rule
        fast = float(re.search(r"the rule's ([\d.]+)", p.rule).group(1))  # the rule's own fast end
        assert p.low_ms >= min(fast, p.current_ms * (1 - f.share)) - 0.005 > 0
    assert v.findings[0].bottleneck == "host"  # half the step, against a precision fix of a third of it

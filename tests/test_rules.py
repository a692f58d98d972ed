"""The rule engine: each rule's detection, evidence, projection and advice, the one ranking, and
the definition of a healthy run, on synthetic traces whose answer is known."""

import pytest

from analyzer import ReadOptions, analyze
from analyzer.analysis import thresholds as T
from analyzer.analysis.findings import ranking_key
from analyzer.planning.cost import CostInputs
from gpuanalyze.ingest.trace.runinfo import EndInfo
from tests.conftest import make_row

GB = 10**9


def _find(report, kind):
    return next(f for f in report.findings if f.bottleneck == kind)


def _rows(n=40, **kw):
    return [make_row(i, **kw) for i in range(n)]


def _read(rows):
    """``rows`` with readings of a quiet host on every row (the system sampler read it): without readings a verdict
    is at most medium (issue #37)."""
    from gpuanalyze.ingest.trace import schema as S
    from gpuanalyze.ingest.trace.host_sample import encode_host_sample
    from tests.test_host_facts import sample

    for i, row in enumerate(rows):
        row[S.SYSTEM] = encode_host_sample(sample(i, run_queue=1, load_avg=0.5, busy_cores=1.0))
    return rows


def _gpu_rows(n=40, *, wall=20.0, busy=19.0, data=0.0, sync=0.0, **kw):
    # device phase times (forward/backward/optimizer) are inside busy; host waits come on top
    fwd, bwd, opt = busy * 0.35, busy * 0.55, busy * 0.1
    return [make_row(i, wall=wall, busy=busy, data=data, sync=sync, fwd=fwd, bwd=bwd, opt=opt, **kw) for i in range(n)]


def test_high_data_wait_is_data_loading_with_its_threshold_source(trace_factory):
    r = analyze(trace_factory(_read(_rows(wall=20.0, data=10.0, fwd=4.0, bwd=5.0, opt=1.0))))
    assert r.bottleneck == "data_loading"
    f = r.findings[0]
    assert f.severity == "high" and f.share == pytest.approx(0.5) and f.cause == "input_pipeline"
    assert f.evidence[0].metric == "data_wait_share" and f.evidence[0].threshold == T.DATA_WAIT_HIGH.value
    assert "XProf" in f.evidence[0].source
    assert r.confidence.level == "high" and r.confidence.value == pytest.approx(1.0)
    # the trace does not say how many workers ran: the projection is the compute path (an upper bound on the
    # gain): the wait it owns removed
    assert f.projection.step_ms == pytest.approx(10.0) and "upper bound" in f.projection.rule
    # the projection removes the whole wait: the fast end is the point, no faster than the fix can reach
    assert f.projection.low_ms == pytest.approx(f.projection.step_ms) and f.projection.step_ms < f.projection.high_ms


def test_moderate_data_wait(trace_factory):
    r = analyze(trace_factory(_rows(wall=20.0, data=2.0, fwd=7.0, bwd=9.0, opt=1.8)))
    assert r.bottleneck == "data_loading" and r.findings[0].severity == "moderate"
    assert r.findings[0].evidence[0].threshold == T.DATA_WAIT_MODERATE.value


def test_a_healthy_cpu_loop_is_none_and_every_health_test_passes(trace_factory):
    r = analyze(trace_factory(_read(_rows(wall=20.0, data=0.5))))
    assert r.bottleneck == "none" and r.findings == ()
    assert r.health and all(e.passed for e in r.health)
    assert r.confidence.level == "high"


@pytest.mark.parametrize("gpu", [False, True])
def test_no_high_confidence_without_readings_of_the_host(trace_factory, gpu):
    """A run the system sampler never read (shorter than its first reading, or imported): its host is taken as
    idle, so a verdict on a CPU run, or one whose fix runs on the host's cores, is at most medium and says why."""
    rows = _gpu_rows(wall=20.0, busy=9.0, data=10.0) if gpu else _rows(wall=20.0, data=10.0, fwd=4.0, bwd=5.0, opt=1.0)
    read, unread = analyze(trace_factory(_read([dict(r) for r in rows]))), analyze(trace_factory(rows))
    assert read.bottleneck == unread.bottleneck == "data_loading"
    assert read.confidence.level == "high" and unread.confidence.level == "medium"
    assert "no readings of the host" in unread.confidence.reason


def test_confidence_is_the_fraction_of_steps_that_show_it(trace_factory):
    rows = [make_row(i, wall=20.0, data=10.0 if i % 2 else 0.0, fwd=4.0, bwd=5.0, opt=1.0) for i in range(60)]
    r = analyze(trace_factory(rows))
    assert r.bottleneck == "data_loading"
    assert 0.4 < r.confidence.value < 0.6 and r.confidence.level == "medium"


@pytest.mark.parametrize(
    ("steps", "level"), [(2, "low"), (3, "low"), (5, "low"), (9, "low"), (20, "medium"), (40, "high")]
)
def test_few_steps_give_low_confidence_whatever_the_consistency(trace_factory, steps, level):
    r = analyze(trace_factory(_read(_rows(steps, wall=20.0, data=10.0, fwd=4.0, bwd=5.0, opt=1.0))))
    assert r.bottleneck == "data_loading" and r.confidence.level == level, r.confidence
    if level == "low":
        assert "step" in r.confidence.reason


def test_a_single_first_step_is_judged_by_what_it_shows_at_low_confidence(trace_factory):
    """Warm-up is evidence, never position: one step with nothing of start-up in it is judged, sure of nothing."""
    r = analyze(trace_factory(_rows(1, wall=20.0, data=10.0, fwd=4.0, bwd=5.0, opt=1.0)))
    assert r.bottleneck == "data_loading" and r.confidence.level == "low" and "step" in r.confidence.reason


def test_blocking_sync_on_cpu_is_sync(trace_factory):
    r = analyze(trace_factory(_rows(wall=20.0, data=2.0, sync=8.0, fwd=4.0, bwd=4.0, opt=1.5)))
    assert [f.bottleneck for f in r.findings][:2] == ["sync", "data_loading"]
    assert r.findings[0].cause == "host_sync"
    assert any(".item()" in rec for rec in r.findings[0].recommendations)


def test_idle_gpu_with_memory_headroom_is_batch_size(trace_factory):
    rows = _gpu_rows(wall=20.0, busy=5.0, peak=10 * GB, samples=16)
    r = analyze(trace_factory(rows, run={"gpu_memory_bytes": 80 * GB, "device": "cuda"}))
    assert r.bottleneck == "batch_size"
    f = r.findings[0]
    metrics = {e.metric: e.value for e in f.evidence}
    assert metrics["gpu_utilization"] == pytest.approx(0.25)
    assert metrics["memory_needed_at_x2"] == pytest.approx(2 * 10 / (0.9 * 80))  # no start figures: all of it grows
    # x4: the 15 ms idle is per-step; whether the 5 ms of kernels grow with the batch the trace cannot tell
    # (no smaller batch): the range spans 5 + 15/4 (they grow) down to 20/4 (they do not), the point the middle
    p = f.projection
    assert p.step_ms == pytest.approx((5.0 + 15.0 / 4 + 20.0 / 4) / 2) and p.per_batch_of == 16
    assert p.low_ms <= 20.0 / 4 < p.step_ms < 5.0 + 15.0 / 4 <= p.high_ms
    assert "4x" in f.recommendations[0]


@pytest.mark.parametrize("busy", [11.0, 13.0, 14.6, 16.0, 17.8])
def test_no_blind_band_between_half_and_ninety_percent_busy(trace_factory, busy):
    r = analyze(trace_factory(_gpu_rows(wall=20.0, busy=busy), run={"param_dtype": "bfloat16", "device": "cuda"}))
    assert r.bottleneck == "batch_size", r.findings


def test_a_busy_gpu_on_tensor_core_precisions_is_healthy(trace_factory):
    r = analyze(trace_factory(_gpu_rows(wall=20.0, busy=19.0), run={"param_dtype": "bfloat16", "device": "cuda"}))
    assert r.bottleneck == "none" and all(e.passed for e in r.health)


def test_small_waits_that_add_up_still_name_the_largest_cause(trace_factory):
    # busy 88%: data 4.5%, sync 4.5%, unexplained idle 3%: each under its threshold, the run is not healthy
    rows = _gpu_rows(wall=20.0, busy=17.6, data=0.9, sync=0.9)
    r = analyze(trace_factory(rows, run={"param_dtype": "bfloat16", "device": "cuda"}))
    assert r.bottleneck != "none" and not all(e.passed for e in r.health)
    assert r.findings[0].severity == "low" and r.confidence.level == "low"


def test_busy_fp32_gpu_without_kernel_statistics_is_kernels_at_low_confidence(trace_factory):
    rows = _gpu_rows(wall=20.0, busy=19.0)
    r = analyze(trace_factory(rows, run={"param_dtype": "float32", "gpu_name": "NVIDIA H100 80GB HBM3"}))
    assert r.bottleneck == "kernels" and r.confidence.level == "low"
    f = r.findings[0]
    assert [e.metric for e in f.contrary] == ["steps_with_kernel_statistics"]
    ratio = 989 / 67
    assert f.projection.step_ms == pytest.approx(20.0 - 19.0 * (1 - 1 / ratio) * 0.95)
    assert any("bfloat16" in rec for rec in f.recommendations)


def test_an_unknown_gpu_falls_back_to_the_smallest_datasheet_ratio(trace_factory):
    rows = _gpu_rows(wall=20.0, busy=19.0)
    r = analyze(trace_factory(rows, run={"param_dtype": "float32", "gpu_name": "NVIDIA A100-PG509-200"}))
    f = _find(r, "kernels")
    assert f.projection.step_ms == pytest.approx(20.0 - 19.0 * 0.5 * 0.95)
    assert "not in the datasheet table" in f.projection.rule


def test_unattributed_host_time_on_cpu_is_host_with_what_to_check(trace_factory):
    rows = _rows(wall=50.0, fwd=7.0, bwd=10.0, opt=2.5, data=0.0)  # 30.5 ms in no phase
    r = analyze(trace_factory(rows))
    assert r.bottleneck == "host" and r.findings[0].share == pytest.approx(0.61)
    assert any("prof.data()" in rec for rec in r.findings[0].recommendations)
    assert "upper bound" in r.findings[0].projection.rule


def test_a_trace_with_no_recognised_phase_is_unknown_not_healthy(trace_factory):
    r = analyze(trace_factory(_rows(wall=50.0, fwd=0.0, bwd=0.0, opt=0.0)))
    assert r.bottleneck == "unknown" and r.findings == () and r.confidence.level == "low"


def test_cheap_batches_in_the_training_process_are_batch_size_not_data_loading(trace_factory):
    """Batch 1 from memory (a quiet recording's means): the 0.05 ms fetch costs less than a worker's
    hand-over and less than the optimizer and loop overhead: one more per-step cost."""
    rows = _rows(wall=0.45, data=0.05, fwd=0.07, bwd=0.12, opt=0.08, samples=1)
    end = EndInfo(status="ok", steps=40, loader_workers=0)
    r = analyze(trace_factory(rows, run={"cpu_count": 2}, end=end))
    f = r.findings[0]
    assert r.bottleneck == "batch_size" and f.cause == "per_step_overhead"
    assert f.share == pytest.approx((0.05 + 0.08 + 0.13) / 0.45)
    # the fetch is fixed per step, so the projection divides it with the optimizer and the rest; whether
    # forward and backward grow with the batch is not measured: the middle of 0.19 + 0.26/2 and 0.45/2
    assert f.projection.step_ms == pytest.approx((0.19 + 0.26 / 2 + 0.45 / 2) / 2)
    assert not any(f.bottleneck == "data_loading" for f in r.findings)
    assert not any("num_workers=2" in rec for f in r.findings for rec in f.recommendations)


def test_a_cheap_fetch_that_dominates_the_step_is_per_sample_loading_work(trace_factory):
    """Batch 256 from memory: the fetch (one __getitem__ per sample and a collate) is 57% of the step;
    workers would cost more than they save, a larger batch grows it too: build batches cheaper."""
    rows = _rows(wall=1.15, data=0.65, fwd=0.10, bwd=0.16, opt=0.08, samples=256)
    end = EndInfo(status="ok", steps=40, loader_workers=0)
    r = analyze(trace_factory(rows, run={"cpu_count": 2}, end=end))
    f = r.findings[0]
    assert (r.bottleneck, f.cause) == ("data_loading", "cpu_bound_loading")
    assert dict(f.projection.params) == {} and "upper bound" in f.projection.rule
    assert [e.metric for e in f.supporting] == ["data_wait_share", "worker_gain"] and not f.contrary
    assert any("whole batches" in rec for rec in f.recommendations)
    assert not any("num_workers=" in rec for rec in f.recommendations)


def test_a_fetch_workers_might_slow_is_not_given_workers(trace_factory):
    """1.4 ms per batch is cheaper than a worker's whole hand-over: the point projects workers to save
    16% of a 4 ms step, but the high end of their range (twice the hand-over, loading CPU-bound, which
    is unknown here) is slower than now. No recommendation of workers, and no two rules disagree."""
    rows = _rows(wall=4.0, data=1.4, fwd=0.5, bwd=0.6, opt=1.5, samples=1)
    end = EndInfo(status="ok", steps=40, loader_workers=0)
    r = analyze(trace_factory(rows, run={"cpu_count": 2}, end=end))
    advice = " ".join(rec for f in r.findings for rec in f.recommendations)
    assert "DataLoader(num_workers=" not in advice
    batch = _find(r, "batch_size")
    assert batch.share >= (1.4 + 1.5) / 4.0 - 1e-9  # the fetch is one more per-step cost
    data = [f for f in r.findings if f.bottleneck == "data_loading"]
    assert not data or not dict(data[0].projection.params)


def test_a_wait_that_is_not_cpu_work_is_not_called_cpu_bound(trace_factory):
    rows = _rows(wall=1.15, data=0.65, fwd=0.10, bwd=0.16, opt=0.08, samples=256, data_cpu=0.0)
    end = EndInfo(status="ok", steps=40, loader_workers=0)
    f = analyze(trace_factory(rows, run={"cpu_count": 2}, end=end)).findings[0]
    assert (f.bottleneck, f.cause) == ("data_loading", "input_pipeline")
    assert not any("CPU work" in rec or "num_workers=" in rec for rec in f.recommendations)


def test_a_larger_batch_saves_only_the_per_step_cost_it_measured(trace_factory):
    """8 ms of sync is the sync rule's: a larger batch divides the 5 ms optimizer, not the sync."""
    rows = _rows(wall=20.0, data=1.0, fwd=3.0, bwd=4.0, opt=4.0, sync=8.0, samples=8)
    r = analyze(trace_factory(rows, run={"cpu_count": 4}))
    f = _find(r, "batch_size")
    assert f.projection.step_ms >= 8.0 + (20.0 - 8.0) / 2  # at most the non-sync half is saved
    assert f.projection.high_ms >= 20.0 - f.share * 20.0 / 2  # the slow end: only the per-step cost halves


def test_slow_loading_in_the_training_process_gets_workers_with_their_cost(trace_factory):
    # the loader sleeps (I/O): 0.5 of its 50 ms is CPU time, so workers are not bound by the 4 cores;
    # the fewest that make the 10 ms compute path (+ receiving the batch) the limit: ceil(50.78 / 10.75) = 5
    rows = _rows(wall=60.0, data=50.0, fwd=4.0, bwd=4.5, opt=1.0, samples=32, data_cpu=0.5)
    end = EndInfo(status="ok", steps=40, loader_workers=0)
    f = analyze(trace_factory(rows, run={"cpu_count": 4}, end=end)).findings[0]
    assert f.bottleneck == "data_loading" and dict(f.projection.params) == {"num_workers": 5}
    assert (50.0 + T.WORKER_SIDE_COST_MS) / 5 <= 10.0 + T.WORKER_MAIN_COST_MS < (50.0 + T.WORKER_SIDE_COST_MS) / 4
    assert f.projection.step_ms == pytest.approx(10.0 + T.WORKER_MAIN_COST_MS)
    assert any("num_workers=5" in rec for rec in f.recommendations)


def test_cpu_bound_loading_shares_the_cores_with_compute(trace_factory):
    # the same wait, all of it CPU work: compute, loading and both sides of the hand-over share 4 cores
    rows = _rows(wall=60.0, data=50.0, fwd=4.0, bwd=4.5, opt=1.0, samples=32, data_cpu=50.0)
    end = EndInfo(status="ok", steps=40, loader_workers=0)
    f = analyze(trace_factory(rows, run={"cpu_count": 4}, end=end)).findings[0]
    both = T.WORKER_MAIN_COST_MS + T.WORKER_SIDE_COST_MS
    assert f.projection.step_ms == pytest.approx((10.0 + 50.0 + both) / 4)


def test_data_fix_is_bounded_by_gpu_busy(trace_factory):
    # 15 ms of data wait but only 12 ms of GPU idle: the fix cannot go below the 8 ms of GPU work
    f = _find(analyze(trace_factory(_gpu_rows(wall=20.0, busy=8.0, data=15.0))), "data_loading")
    assert f.share == pytest.approx(0.6) and f.projection.step_ms == pytest.approx(8.0)


def test_findings_are_ranked_by_the_time_their_fix_saves(trace_factory):
    # data wait 40% (moderate confidence fix saves 8 ms) beats unexplained idle (a 2x batch saves less)
    rows = _gpu_rows(wall=20.0, busy=8.0, data=8.0, peak=10 * GB)
    r = analyze(trace_factory(rows, run={"gpu_memory_bytes": 80 * GB}))
    keys = [ranking_key(f) for f in r.findings]
    assert keys == sorted(keys, reverse=True) and r.bottleneck == r.findings[0].bottleneck


def test_savings_per_run_follow_the_projection(trace_factory):
    rows = _rows(wall=20.0, data=10.0, fwd=4.0, bwd=5.0, opt=1.0)
    r = analyze(trace_factory(rows), ReadOptions(cost=CostInputs(steps_per_run=1e6, price_per_gpu_hour=2.0)))
    f = r.findings[0]
    hours = 1e6 * f.projection.saved_ms / 3.6e6
    assert f.savings.hours_per_run == pytest.approx(hours) and f.savings.usd_per_run == pytest.approx(hours * 2.0)


def test_gpu_only_advice_is_not_given_on_cpu_runs(trace_factory):
    r = analyze(trace_factory(_rows(wall=20.0, data=10.0, fwd=4.0, bwd=5.0, opt=1.0)))
    recs = " ".join(r.findings[0].recommendations)
    assert "pin_memory" not in recs and "GPU" not in recs


def test_gpu_rules_do_not_fire_without_gpu_timings(trace_factory):
    r = analyze(trace_factory(_rows(wall=20.0), run={"param_dtype": "float32"}))
    assert r.bottleneck == "none" and not any(e.metric == "gpu_utilization" for e in r.health)


def test_the_worker_cost_grows_with_the_batch_bytes(trace_factory):
    rows = _rows(wall=60.0, data=50.0, fwd=4.0, bwd=4.5, opt=1.0, samples=32, data_cpu=0.5)
    end = EndInfo(status="ok", steps=40, loader_workers=0, batch_bytes=4 * 2**20)
    f = analyze(
        trace_factory(rows, run={"cpu_count": 4}, end=end),
    ).findings[0]
    side = T.WORKER_SIDE_COST_MS + 4 * T.WORKER_SIDE_MS_PER_MIB
    workers = dict(f.projection.params)["num_workers"]
    # the same workers as without the bytes would not reach the compute path: the larger side cost shows
    assert f.projection.step_ms == pytest.approx(max(10.0 + T.WORKER_MAIN_COST_MS, (50.0 + side) / workers))
    assert (50.0 + side) / workers <= (10.0 + T.WORKER_MAIN_COST_MS) * (1 + T.WORKERS_ENOUGH)

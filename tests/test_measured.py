"""A CPU run's sampled profiler windows measure the shares its projections used to assume: the matmul share
bf16 autocast speeds up, and the per-call share of the work a larger micro-batch spreads (rules/measured.py).
The projection then says it measured them, and its range narrows to the measurement's slack."""

import pytest

from analyzer import analyze
from analyzer.analysis import thresholds as T
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.runinfo import EndInfo
from tests.conftest import make_row

SAMPLED = range(20, 23)


def _with_windows(rows: list[dict], **cpu: float) -> list[dict]:
    """Rows with a sampled CPU window (KernelStats cpu_* fields) on steps SAMPLED."""
    for r in rows:
        if r[S.STEP] in SAMPLED:
            r[S.KERNEL_STATS] = S.encode_kernel_stats(S.KernelStats(**cpu))
    return rows


def _finding(report, cause):
    return next(f for f in report.findings if f.cause == cause)


def test_the_matmul_share_is_measured_and_the_range_narrows(trace_factory):
    # forward + backward 18 ms of a 20 ms step; the profiled steps spend 12.6 ms of 20 in matmul: f = 0.7
    rows = [make_row(i, wall=20.0, data=0.2, fwd=7.0, bwd=11.0, opt=1.5, samples=256) for i in range(40)]
    run = {"cpu_count": 4, "param_dtype": "float32", "cpu_bf16": "avx512_bf16"}
    plain = _finding(analyze(trace_factory(rows, run=run)), "cpu_fp32_math").projection
    measured = _finding(
        analyze(trace_factory(_with_windows(rows, cpu_matmul_ms=12.6, cpu_op_ms=16.0), run=run)), "cpu_fp32_math"
    ).projection
    assert measured.step_ms == pytest.approx(20.0 - 18.0 * 0.7 * 0.5, rel=0.01)
    assert "f measured" in measured.rule
    assert "not measured" in plain.rule
    width = measured.high_ms - measured.low_ms
    assert width < 0.5 * (plain.high_ms - plain.low_ms)
    assert measured.high_ms < 20.0  # f >= 0.6 for certain: the slow end is a gain
    # the model's span of f +- CPU_MATMUL_SLACK, widened only by noise
    assert width >= 18.0 * 2 * T.CPU_MATMUL_SLACK * 0.5


def test_the_per_call_share_of_micro_batches_is_bounded_by_what_the_windows_measure(trace_factory):
    # 8 micro-batches per step: fetch 6 + forward 5 + backward 7 = 18 ms of work; the profiled steps spend 9 ms in
    # ATen ops, 1.8 ms of it their dispatch: at least 1 - 7.2 / 18 = 60% of the work is per call
    rows = [make_row(i, wall=19.0, data=6.0, fwd=5.0, bwd=7.0, opt=1.0, samples=16, data_cpu=6.0) for i in range(40)]
    end = EndInfo(status="ok", steps=40, loader_workers=0, fetches=320, fetch_samples=2)
    trace = trace_factory(_with_windows(rows, cpu_op_ms=9.0, cpu_dispatch_ms=1.8), run={"cpu_count": 1}, end=end)
    p = _finding(analyze(trace), "micro_batch_overhead").projection
    assert p.step_ms == pytest.approx(19.0 - 18.0 * 0.8 * (1 - 1 / 8), rel=0.01)  # the middle of [0.6, 1]
    assert "profiled steps measure at least 60%" in p.rule
    slow_end = 19.0 - 18.0 * 0.6 * (1 - 1 / 8)
    assert slow_end <= p.high_ms < 19.0  # the measured bound, not 0: the slow end is still a gain
    assert p.low_ms <= 19.0 - 18.0 * (1 - 1 / 8) + 0.5


def test_without_windows_the_constant_is_used_and_said(trace_factory):
    rows = [make_row(i, wall=19.0, data=6.0, fwd=5.0, bwd=7.0, opt=1.0, samples=16, data_cpu=6.0) for i in range(40)]
    end = EndInfo(status="ok", steps=40, loader_workers=0, fetches=320, fetch_samples=2)
    p = _finding(analyze(trace_factory(rows, run={"cpu_count": 1}, end=end)), "micro_batch_overhead").projection
    assert "MICRO_UNMEASURED_FIXED" in p.rule
    assert p.step_ms == pytest.approx(19.0 - 18.0 * T.MICRO_UNMEASURED_FIXED * (1 - 1 / 8), rel=0.01)


def test_attention_written_as_matmul_softmax_matmul_gets_sdpa_advice_on_a_cpu(trace_factory):
    rows = [make_row(i, wall=20.0, data=0.2, fwd=7.0, bwd=11.0, opt=1.5, samples=256) for i in range(40)]
    run = {"cpu_count": 4, "param_dtype": "float32", "cpu_bf16": "avx512_bf16"}
    loop = _with_windows(rows, cpu_matmul_ms=12.0, cpu_bmm_ms=4.0, cpu_softmax_ms=2.0, cpu_op_ms=16.0)
    f = _finding(analyze(trace_factory(loop, run=run)), "cpu_fp32_math")
    assert any("scaled_dot_product_attention" in r for r in f.recommendations)
    fused = _with_windows(rows, cpu_matmul_ms=12.0, cpu_bmm_ms=4.0, cpu_softmax_ms=2.0, cpu_sdpa_ms=3.0, cpu_op_ms=16.0)
    g = _finding(analyze(trace_factory(fused, run=run)), "cpu_fp32_math")
    assert not any("scaled_dot_product_attention" in r for r in g.recommendations)


def test_a_batch_projection_takes_the_windows_bound_on_its_fixed_share(trace_factory):
    # batch 1 on a CPU: optimizer 0.5 + fetch and compute; the profiled steps' op time beyond dispatch is a
    # tenth of the step, so at least most of the compute is per call: the slow end is narrower than "all grows"
    rows = [make_row(i, wall=1.6, data=0.1, fwd=0.4, bwd=0.5, opt=0.5, samples=1) for i in range(60)]
    plain = _finding(analyze(trace_factory(rows, run={"cpu_count": 2})), "per_step_overhead").projection
    win = _with_windows(rows, cpu_op_ms=0.2, cpu_dispatch_ms=0.04)
    measured = _finding(analyze(trace_factory(win, run={"cpu_count": 2})), "per_step_overhead").projection
    assert "profiled steps measure at least" in measured.rule and "no smaller batch" in plain.rule
    assert measured.high_ms < plain.high_ms  # the bound narrows the slow end
    assert measured.low_ms == pytest.approx(plain.low_ms, rel=0.05)  # the fast end (all fixed) is the same


def test_micro_batches_take_the_replayed_growth_of_their_ops_and_fetch(trace_factory):
    # 8 micro-batches of 2: fetch 4 + forward 5 + backward 7 = 16 ms of work in a 17.5 ms step. The profiled steps
    # spend 10 ms in ATen ops, replayed at 8x the samples as 12 ms (+2 ms); a quarter of each fetch is __getitem__
    # (x8), half is the collate, replayed 1.5x slower at 8x the samples.
    rows = [make_row(i, wall=17.5, data=4.0, fwd=5.0, bwd=7.0, opt=1.0, samples=16, data_cpu=4.0) for i in range(40)]
    growth = {"cpu_op_x2_ms": 10.2, "cpu_op_x4_ms": 10.8, "cpu_op_x8_ms": 12.0}
    win = _with_windows(rows, cpu_op_ms=10.0, cpu_dispatch_ms=2.0, **growth)
    end = EndInfo(
        status="ok", steps=40, loader_workers=0, fetches=320, fetch_samples=2, fetch_ms=1280.0,
        fetch_dataset_ms=320.0, fetch_collate_ms=640.0, fetch_collate_growth=(1.1, 1.2, 1.5),
    )  # fmt: skip
    p = _finding(analyze(trace_factory(win, run={"cpu_count": 1}, end=end)), "micro_batch_overhead").projection
    # the work (with the loop's 0.5 ms between the phases: 16.5 ms) grows by 2 ms (ops) + 4 x 0.25 x 7
    # (__getitem__) + 4 x 0.5 x 0.5 (collate) = 10 ms at 8x: in one micro-batch the step is 17.5 - 16.5 + 26.5 / 8
    assert p.step_ms == pytest.approx(17.5 - 16.5 + 26.5 / 8, rel=0.02), p.rule
    assert "replayed on this machine at 8x" in p.rule and "x1.50 replayed" in p.rule
    assert p.low_ms < p.step_ms < p.high_ms < 17.5


def test_a_batch_projection_takes_the_replayed_growth_and_without_it_the_windows_bound(trace_factory):
    def rows():
        return [make_row(i, wall=4.0, data=0.0, fwd=1.0, bwd=1.5, opt=1.0, samples=8) for i in range(60)]

    bound = _with_windows(rows(), cpu_op_ms=2.0, cpu_dispatch_ms=0.2)
    plain = _finding(analyze(trace_factory(bound, run={"cpu_count": 2})), "per_step_overhead").projection
    flat = _with_windows(
        rows(), cpu_op_ms=2.0, cpu_dispatch_ms=0.2, cpu_op_x2_ms=2.0, cpu_op_x4_ms=2.0, cpu_op_x8_ms=2.0
    )
    steep = _with_windows(
        rows(), cpu_op_ms=2.0, cpu_dispatch_ms=0.2, cpu_op_x2_ms=3.6, cpu_op_x4_ms=7.0, cpu_op_x8_ms=14.0
    )
    none_grows = _finding(analyze(trace_factory(flat, run={"cpu_count": 2})), "per_step_overhead").projection
    grows = _finding(analyze(trace_factory(steep, run={"cpu_count": 2})), "per_step_overhead").projection
    assert "profiled steps measure at least" in plain.rule
    assert "replayed on this machine at 2x" in none_grows.rule
    assert none_grows.step_ms < plain.step_ms < grows.step_ms  # measured, not the middle of the bound
    assert none_grows.high_ms - none_grows.low_ms < plain.high_ms - plain.low_ms  # and narrower

"""A CPU run's sampled profiler windows measure the shares its projections used to assume: the matmul share
bf16 autocast speeds up, and the per-call share of the work a larger micro-batch spreads (rules/measured.py).
The projection then says it measured them, and its range narrows where the measurement bounds it."""

import pytest

from analyzer import analyze
from analyzer.analysis import thresholds as T
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import EndInfo
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


def test_the_matmul_share_is_measured_and_the_fast_end_narrows(trace_factory):
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
    # the fast end takes f + CPU_MATMUL_SLACK, not all of forward + backward; the slow end is no gain either way
    # (the speed-up of each matmul shape is not in the trace)
    assert measured.low_ms > plain.low_ms
    assert measured.low_ms <= 20.0 - 18.0 * (0.7 + T.CPU_MATMUL_SLACK) * 0.5 + 1e-6
    assert measured.high_ms >= 20.0 and plain.high_ms >= 20.0


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

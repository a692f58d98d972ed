"""A CPU run's sampled profiler windows measure the matmul share bf16 autocast speeds up, which its precision
projection used to assume (rules/cpu_precision.py); the projection then says it measured it, and its range narrows.
A batch or micro-batch projection takes its model's own constant with or without them."""

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


@pytest.mark.parametrize("windows", [{}, {"cpu_op_ms": 9.0, "cpu_dispatch_ms": 1.8}])
def test_a_micro_batch_projection_uses_its_constant_with_or_without_windows(trace_factory, windows):
    # an older trace's cpu_dispatch_ms still reads, and moves nothing
    rows = [make_row(i, wall=19.0, data=6.0, fwd=5.0, bwd=7.0, opt=1.0, samples=16, data_cpu=6.0) for i in range(40)]
    end = EndInfo(status="ok", steps=40, loader_workers=0, fetches=320, fetch_samples=2)
    trace = trace_factory(_with_windows(rows, **windows), run={"cpu_count": 1}, end=end)
    p = _finding(analyze(trace), "micro_batch_overhead").projection
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

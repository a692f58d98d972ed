"""A CPU run gets precision advice where the CPU has native bf16 (AVX512_BF16/AMX flags), with a range
that says the matmul share is not measured, and the trial that measures it; not where it has none."""

import pytest

from analyzer import analyze
from analyzer.analysis import thresholds as T
from analyzer.analysis.fixes import PrecisionFix
from analyzer.planning.settling_trial import candidate_text
from analyzer.record.host_readers import bf16_flags
from tests.conftest import make_row


def _compute_bound(trace_factory, **run):
    rows = [make_row(i, wall=20.0, data=0.2, fwd=7.0, bwd=11.0, opt=1.5, samples=256) for i in range(40)]
    return trace_factory(rows, run={"cpu_count": 4, "param_dtype": "float32", **run})


def test_fp32_on_a_cpu_with_native_bf16_gets_bf16_autocast(trace_factory):
    r = analyze(_compute_bound(trace_factory, cpu_bf16="avx512_bf16,amx_bf16"))
    f = next(f for f in r.findings if f.bottleneck == "kernels")
    assert f.cause == "cpu_fp32_math" and f.projection.fix == PrecisionFix("bfloat16")
    p = f.projection
    assert p.low_ms < p.step_ms < p.current_ms <= p.high_ms  # the matmul share is not measured: up to no gain
    assert "torch.autocast('cpu', dtype=torch.bfloat16)" in f.recommendations[0]
    assert candidate_text(f) == "autocast=bf16"


def test_no_precision_advice_without_native_bf16(trace_factory):
    for flags in ("", None):
        r = analyze(_compute_bound(trace_factory, cpu_bf16=flags))
        assert all(f.bottleneck != "kernels" for f in r.findings)


def test_bf16_flags_from_cpuinfo():
    text = "processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_tile amx_bf16\n\nprocessor\t: 1\n"
    assert bf16_flags(text) == "avx512_bf16,amx_bf16"
    assert bf16_flags("flags\t: fpu avx2\n") == "" and bf16_flags("") is None and bf16_flags(None) is None


def test_amx_bounds_the_fast_end_at_the_tile_rate_not_the_avx512_one(trace_factory):
    avx = next(
        f for f in analyze(_compute_bound(trace_factory, cpu_bf16="avx512_bf16")).findings if f.bottleneck == "kernels"
    )
    amx = next(
        f
        for f in analyze(_compute_bound(trace_factory, cpu_bf16="avx512_bf16,amx_bf16")).findings
        if f.bottleneck == "kernels"
    )
    # forward + backward 18 ms of a 20 ms step: all of it matmul at 2x (AVX512_BF16: 11 ms) or 16x (AMX: 3.1 ms),
    # each widened by the step's own noise
    assert avx.projection.low_ms > 9.0
    assert amx.projection.low_ms < 6.0


def test_the_precision_point_takes_its_own_matmul_share_not_the_batch_models(trace_factory, monkeypatch):
    trace = _compute_bound(trace_factory, cpu_bf16="avx512_bf16")
    before = next(f for f in analyze(trace).findings if f.bottleneck == "kernels").projection.step_ms
    monkeypatch.setattr(T, "BATCH_UNMEASURED_FIXED", 0.1)
    assert next(f for f in analyze(trace).findings if f.bottleneck == "kernels").projection.step_ms == before
    monkeypatch.setattr(T, "CPU_MATMUL_UNMEASURED", 1.0)
    assert next(f for f in analyze(trace).findings if f.bottleneck == "kernels").projection.step_ms < before


def test_a_float64_model_is_flagged_on_any_cpu_with_the_float32_rate(trace_factory):
    # no native bf16: a float32 model gets nothing, a float64 one the float32 fix (twice the SIMD lanes)
    rows = [make_row(i, wall=20.0, data=0.2, fwd=7.0, bwd=11.0, opt=1.5, samples=256) for i in range(40)]
    r = analyze(trace_factory(rows, run={"cpu_count": 4, "param_dtype": "float64", "cpu_bf16": ""}))
    f = next(f for f in r.findings if f.cause == "cpu_fp32_math")
    assert f.projection.fix == PrecisionFix("float32") and candidate_text(f) is None  # no trial converts a model
    p = f.projection
    assert p.step_ms == pytest.approx(20.0 - 18.0 * T.CPU_MATMUL_UNMEASURED * (1 - 1 / T.FLOAT64_SPEEDUP), rel=0.01)
    assert "model.float()" in f.recommendations[0] and "float64" in f.summary
    assert any(e.metric == "cpu_float64_params" for e in f.supporting)


def test_an_unmeasured_bf16_speed_up_reaches_no_gain_at_the_slow_end(trace_factory):
    # the speed-up depends on each matmul's shape, which the trace does not hold: the slow end is no gain, so the
    # range reaches the current step and the advice stays below medium confidence
    f = next(
        f for f in analyze(_compute_bound(trace_factory, cpu_bf16="avx512_bf16")).findings if f.bottleneck == "kernels"
    )
    p = f.projection
    assert p.step_ms == pytest.approx(20.0 - 18.0 * T.CPU_MATMUL_UNMEASURED * (1 - 1 / T.CPU_BF16_SPEEDUP), rel=0.01)
    assert p.high_ms >= p.current_ms and f.confidence.level != "high" and f.confidence.value < T.CONFIDENCE_MEDIUM


def test_a_float64_model_on_a_busy_gpu_without_kernel_statistics_is_flagged(trace_factory):
    from tests.test_rules import _gpu_rows

    run = {"param_dtype": "float64", "gpu_name": "NVIDIA H100 80GB HBM3"}
    r = analyze(trace_factory(_gpu_rows(wall=20.0, busy=19.0), run=run))
    f = next(f for f in r.findings if f.bottleneck == "kernels")
    assert f.cause == "fp32_math" and "float64" in f.recommendations[0]

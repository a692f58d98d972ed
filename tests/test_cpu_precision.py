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


def _replayed_windows(rows, **replay):
    """Rows whose steps 20-22 carry a sampled CPU window: 12.6 of 20 ms in matmul (f = 0.7), and ``replay``."""
    from gpuanalyze.ingest import schema as S

    for r in rows:
        if r[S.STEP] in range(20, 23):
            r[S.KERNEL_STATS] = S.encode_kernel_stats(S.KernelStats(cpu_matmul_ms=12.6, cpu_op_ms=16.0, **replay))
    return rows


def test_the_speed_up_is_the_replay_of_the_runs_matmuls_not_the_flags_bound(trace_factory):
    rows = [make_row(i, wall=20.0, data=0.2, fwd=7.0, bwd=11.0, opt=1.5, samples=256) for i in range(40)]
    run = {"cpu_count": 4, "param_dtype": "float32", "cpu_bf16": "avx512_bf16,amx_bf16"}
    # replayed: the matmuls 4x faster with the forward casts, 6x from bf16 inputs, 2.5x with every input cast
    replay = {
        "cpu_matmul_bf16_ms": 12.6 / 4,
        "cpu_matmul_bf16_fast_ms": 12.6 / 6,
        "cpu_matmul_bf16_slow_ms": 12.6 / 2.5,
    }
    f = next(
        f
        for f in analyze(trace_factory(_replayed_windows(rows, **replay), run=run)).findings
        if f.cause == "cpu_fp32_math"
    )
    p = f.projection
    assert p.step_ms == pytest.approx(20.0 - 18.0 * 0.7 * (1 - 1 / 4), rel=0.01)  # not AMX's 16x
    assert p.low_ms <= 20.0 - 18.0 * 0.8 * (1 - 1 / 6) + 1e-6  # the fast end: more matmul, bf16 inputs
    assert p.high_ms >= 20.0 - 18.0 * 0.6 * (1 - 1 / 2.5) - 1e-6  # the slow end: less matmul, every cast
    assert "replayed on this machine" in p.rule and "4.00x" in p.rule
    assert "replayed on this machine ran 4.0x faster" in f.summary


def test_matmuls_the_replay_found_slower_in_bf16_get_no_precision_advice(trace_factory):
    rows = [make_row(i, wall=20.0, data=0.2, fwd=7.0, bwd=11.0, opt=1.5, samples=256) for i in range(40)]
    run = {"cpu_count": 4, "param_dtype": "float32", "cpu_bf16": "avx512_bf16,amx_bf16"}
    slower = {"cpu_matmul_bf16_ms": 12.6 * 3, "cpu_matmul_bf16_fast_ms": 12.6 * 2, "cpu_matmul_bf16_slow_ms": 12.6 * 4}
    report = analyze(trace_factory(_replayed_windows(rows, **slower), run=run))
    assert all(f.cause != "cpu_fp32_math" for f in report.findings)  # tiny matmuls: bf16 would slow the step

"""A CPU run gets precision advice where the CPU has native bf16 (AVX512_BF16/AMX flags), with a range
that says the matmul share is not measured, and the trial that measures it; not where it has none."""

from analyzer import analyze
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

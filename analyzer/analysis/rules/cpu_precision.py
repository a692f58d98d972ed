"""kernels on a CPU run: float32 forward and backward on a CPU with native bf16, or float64 on any CPU.

A CPU whose flags (``/proc/cpuinfo``, recorded as ``RunInfo.cpu_bf16``) include AVX512_BF16 or AMX_BF16
computes bf16 dot products natively: VDPBF16PS multiplies two bf16 pairs per fp32 lane (Intel 64 and
IA-32 Architectures Software Developer's Manual, Vol. 2, VDPBF16PS), twice the fp32 FMA's products per
instruction; AMX tiles (TDPBF16PS) more. ``torch.autocast('cpu', dtype=torch.bfloat16)`` runs matmuls
and convolutions that way. How much faster a given matmul runs depends on its shape (a small one can run
slower in bf16: packing costs more than it saves), which the trace does not hold: the point takes the
VDPBF16PS rate CPU_BF16_SPEEDUP, the fast end the flag's bound (CPU_AMX_BF16_SPEEDUP with AMX_BF16), the slow
end no gain; ``run --try --candidates autocast=bf16`` measures it.

Float64 parameters are a fix on any CPU: a SIMD register and FMA hold half as many float64 lanes as float32 ones
at the same instruction rate (Intel SDM Vol. 1, "Packed and scalar floating-point data types": a 512-bit register
holds 8 doubles or 16 singles), so float32 matmuls run FLOAT64_SPEEDUP times the rate; autocast does not cast
float64, the model and its inputs are converted (``model.float()``).

A share f of forward + backward is matmul: measured from the trace's sampled profiler windows where it has them
(matmul_share), the range f +- CPU_MATMUL_SLACK; without them the range spans all of it (the fast
end) to none of it (no gain, the slow end), the point at CPU_MATMUL_UNMEASURED (this model's own constant).
"""

from __future__ import annotations

from analyzer.analysis import thresholds as T
from analyzer.analysis.aggregate import clamp
from analyzer.analysis.findings import Evidence, Projection
from analyzer.analysis.fixes import PrecisionFix
from analyzer.analysis.rerun import rerun_command
from analyzer.analysis.rules.rule import Context, Detection, bounded
from gpuanalyze.ingest.trace import schema as S

CAUSE = "cpu_fp32_math"


def compute_ms(ctx: Context) -> float:
    """Mean forward + backward ms per step."""
    m = ctx.m
    return (m.mean_ms.get(S.FORWARD_MS) or 0.0) + (m.mean_ms.get(S.BACKWARD_MS) or 0.0)


def window_ms(ctx: Context, field: str) -> tuple[float, int] | None:
    """(ms per step of a KernelStats CPU field, sampled steps): its share of the sampled steps' wall time times
    the mean step (a profiled step runs slower, and the host's speed moves between the window and the rest:
    the share carries over, the milliseconds do not); None when no sampled CPU window recorded ATen op time
    (a GPU run, or a CPU run recorded without kernel windows: ingest/cpu_ops.py)."""
    km = ctx.m.kernels
    if ctx.gpu or km is None or km.steps <= 0 or km.wall_ms <= 0 or km.totals_ms.get("cpu_op_ms", 0.0) <= 0:
        return None
    return km.totals_ms.get(field, 0.0) / km.wall_ms * ctx.wall, km.steps


def matmul_share(ctx: Context, compute: float) -> tuple[float, str] | None:
    """Share of ``compute`` (mean forward + backward ms per step) in matmul/convolution ops, and what measured it."""
    got = window_ms(ctx, "cpu_matmul_ms")
    if got is None or compute <= 0:
        return None
    mm, steps = got
    return clamp(
        mm / compute
    ), f"matmul/convolution ops {mm:.2f} ms of the mean step (their share of {steps} profiled steps)"


def matmul_range(ctx: Context) -> tuple[float, float, float, str | None]:
    """(point, low, high) of the matmul share f of forward + backward, and what measured it (None: the constant)."""
    got = matmul_share(ctx, compute_ms(ctx))
    if got is None:
        return T.CPU_MATMUL_UNMEASURED, 0.0, 1.0, None
    f = got[0]
    return f, max(0.0, f - T.CPU_MATMUL_SLACK), min(1.0, f + T.CPU_MATMUL_SLACK), got[1]


def native_bf16(ctx: Context) -> str | None:
    """The CPU's native bf16 flags ('avx512_bf16,amx_bf16'), None when it has none or the trace does not say."""
    return ctx.run.cpu_bf16 or None


def float64(ctx: Context) -> bool:
    """The model's parameters are float64: the fix is float32 (autocast leaves float64 as it is)."""
    return ctx.run.param_dtype == "float64"


def speedups(ctx: Context) -> tuple[float, float, float]:
    """(point, fast end, slow end) matmul rate of the fix: float64 to float32 FLOAT64_SPEEDUP throughout; float32 to
    bf16 the VDPBF16PS rate at the point, the flag's bound (AMX tiles where it has AMX_BF16) at the fast end, and
    no gain at the slow end (the shape decides, and the trace does not hold it)."""
    if float64(ctx):
        return T.FLOAT64_SPEEDUP, T.FLOAT64_SPEEDUP, T.FLOAT64_SPEEDUP
    flags = (native_bf16(ctx) or "").split(",")
    return T.CPU_BF16_SPEEDUP, T.CPU_AMX_BF16_SPEEDUP if "amx_bf16" in flags else T.CPU_BF16_SPEEDUP, 1.0


def detect(ctx: Context, relaxed: bool) -> Detection | None:
    """Forward + backward a material part of the step, in float64, or in float32 on a CPU with native bf16."""
    flags = native_bf16(ctx)
    fp32 = ctx.run.param_dtype == "float32" and flags is not None
    if ctx.gpu or not (fp32 or float64(ctx)) or ctx.wall <= 0:
        return None
    share = compute_ms(ctx) / ctx.wall
    if share < (T.RELAXED if relaxed else T.FP32_MATH.value):
        return None
    where = f"float32 on a CPU with native bf16 arithmetic ({flags})" if fp32 else "float64"
    return Detection(
        cause=CAUSE,
        share=share * matmul_range(ctx)[0],
        consistency=1.0,
        evidence_steps=ctx.m.steps,
        summary=f"Forward and backward take {share:.0%} of the step in {where}: {_rate(ctx)}.",
    )


def evidence(ctx: Context) -> tuple[Evidence, ...]:
    dtype = "float64" if float64(ctx) else "float32"
    precision = (
        Evidence("cpu_float64_params", 1.0, 1.0, ">=", "flag", "the parameters are float64 (RunInfo.param_dtype)")
        if float64(ctx)
        else Evidence(
            "cpu_native_bf16",
            1.0 if native_bf16(ctx) else 0.0,
            1.0,
            ">=",
            "flag",
            f"/proc/cpuinfo flags {native_bf16(ctx) or 'none'}: AVX512_BF16 (VDPBF16PS) or AMX_BF16 (Intel SDM Vol. 2)",
        )
    )
    return (
        precision,
        Evidence(
            "cpu_compute_share",
            compute_ms(ctx) / ctx.wall,
            T.FP32_MATH.value,
            ">=",
            "fraction of step time",
            f"forward + backward in {dtype}",
        ),
        Evidence(
            "cpu_matmul_share",
            matmul_range(ctx)[0],
            T.CPU_MATMUL_SLACK,
            ">=",
            "fraction of forward + backward",
            _basis(matmul_range(ctx)[3]),
        ),
    )


def _rate(ctx: Context) -> str:
    """The fix's matmul rate, in words."""
    if float64(ctx):
        return f"float32 matmuls run {T.FLOAT64_SPEEDUP:g}x the float64 rate (twice the SIMD lanes)"
    return f"matmuls under bf16 autocast run up to {speedups(ctx)[1]:g}x the products per instruction"


def _basis(got: str | None) -> str:
    """Where the matmul share came from, in words."""
    if got is None:
        return (
            f"not measured (no sampled CPU profiler window in the trace): the constant CPU_MATMUL_UNMEASURED "
            f"{T.CPU_MATMUL_UNMEASURED:.0%}, the range 0 to 1"
        )
    return f"measured: {got} (+-{T.CPU_MATMUL_SLACK:.0%})"


def project(ctx: Context) -> Projection:
    compute = min(compute_ms(ctx), ctx.wall)
    r, r_fast, r_slow = speedups(ctx)

    def at(f: float, r: float) -> float:
        """The step when a share ``f`` of forward + backward is matmul that the fix speeds up ``r`` times."""
        return ctx.wall - compute * f * (1 - 1 / r)

    f, lo_f, hi_f, got = matmul_range(ctx)
    if float64(ctx):
        rate = f"at {r:g}x in float32 (a SIMD register holds twice as many float32 lanes as float64)"
    else:
        rate = (
            f"at {r:g}x under bf16 autocast (VDPBF16PS: two bf16 products per fp32 lane), the fast end {r_fast:g}x "
            "(the CPU's bf16 bound), the slow end no gain (the speed-up depends on each matmul's shape, which the "
            "trace does not hold: run --try measures it)"
        )
    rule = (
        f"forward + backward {compute:.2f} ms, a share f of it matmul {rate}: step {ctx.wall:.2f} - {compute:.2f} x f "
        f"x (1 - 1/{r:.3g}); f {_basis(got)}: the point takes {f:.0%} ({at(f, r):.2f} ms), the range {hi_f:.0%} "
        f"({at(hi_f, r_fast):.2f} ms) to {lo_f:.0%} ({at(lo_f, r_slow):.2f} ms)"
    )
    return bounded(
        ctx,
        at(f, r),
        "float32 matmuls" if float64(ctx) else "bf16 matmuls",
        {"forward + backward at the fix's rate": at(1.0, r_fast)},
        rule,
        fix=PrecisionFix("float32" if float64(ctx) else "bfloat16"),
        model=(at(hi_f, r_fast), at(lo_f, r_slow)),
    )


def unfused_attention(ctx: Context) -> float | None:
    """Share of forward + backward in softmax and batched matmuls where the profiled steps ran no fused attention
    (attention written as matmul, softmax, matmul: a Python loop over heads); None when not that pattern."""
    soft, bmm = window_ms(ctx, "cpu_softmax_ms"), window_ms(ctx, "cpu_bmm_ms")
    sdpa = window_ms(ctx, "cpu_sdpa_ms")
    compute = compute_ms(ctx)
    if soft is None or bmm is None or sdpa is None or compute <= 0 or sdpa[0] > 0 or soft[0] <= 0 or bmm[0] <= 0:
        return None
    share = (soft[0] + bmm[0]) / compute
    return share if share >= T.CPU_UNFUSED_ATTENTION else None


def advise(ctx: Context) -> tuple[str, ...]:
    if float64(ctx):
        return (
            "Train in float32: model.float() and float32 inputs (torch.set_default_dtype(torch.float32) where "
            "tensors are created); autocast does not cast float64. Check that the loss curve does not need float64.",
        )
    recs = [
        "Run forward and loss under torch.autocast('cpu', dtype=torch.bfloat16): this CPU computes bf16 natively "
        f"({native_bf16(ctx)}); keep the optimizer's master weights in float32 and check the loss curve.",
        f"Measure it before adopting it: gpuanalyze run --try --candidates autocast=bf16 -- {rerun_command(ctx.run)}",
    ]
    attention = unfused_attention(ctx)
    if attention is not None:
        recs.append(
            f"Softmax and batched matmuls take {attention:.0%} of forward + backward with no fused attention in the "
            "profiled steps: attention computed as matmul, softmax, matmul (a loop over heads). Use "
            "torch.nn.functional.scaled_dot_product_attention on all heads at once (its CPU kernel fuses them)."
        )
    return tuple(recs)

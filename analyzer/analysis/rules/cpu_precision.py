"""kernels on a CPU run: fp32 forward and backward on a CPU with native bf16 arithmetic.

A CPU whose flags (``/proc/cpuinfo``, recorded as ``RunInfo.cpu_bf16``) include AVX512_BF16 or AMX_BF16
computes bf16 dot products natively: VDPBF16PS multiplies two bf16 pairs per fp32 lane (Intel 64 and
IA-32 Architectures Software Developer's Manual, Vol. 2, VDPBF16PS), twice the fp32 FMA's products per
instruction; AMX tiles (TDPBF16PS) more. ``torch.autocast('cpu', dtype=torch.bfloat16)`` runs matmuls
and convolutions that way. A share f of forward + backward is matmul: measured from the trace's sampled
profiler windows where it has them (rules.measured.matmul_share), the range f +- CPU_MATMUL_SLACK; without
them the range spans all of it at the speed-up bound (the fast end) to none of it (no gain, the slow end),
the point at CPU_MATMUL_UNMEASURED (this model's own constant). The speed-up bound is per flag:
CPU_AMX_BF16_SPEEDUP where the CPU has AMX_BF16, else CPU_BF16_SPEEDUP;
``run --try --candidates autocast=bf16`` measures it.

Where the recorder replayed the run's float32 matmul shapes in bf16 on the machine (record/bf16_replay.py:
KernelStats ``cpu_matmul_bf16*_ms``), the speed-up is that measurement, not the flag's bound: the point
takes forward matmuls with the casts of their inputs and backward ones from bf16 inputs, the fast end
every matmul from bf16 inputs at the high end of the share, the slow end every matmul with its casts at
the low end. A speed-up below 1 (tiny matmuls: bf16's packing costs more than it saves) projects no
gain, and the rule does not fire.
"""

from __future__ import annotations

from analyzer.analysis import thresholds as T
from analyzer.analysis.findings import Evidence, Projection
from analyzer.analysis.fixes import PrecisionFix
from analyzer.analysis.rerun import rerun_command
from analyzer.analysis.rules.measured import Measured, matmul_share, window_ms
from analyzer.analysis.rules.rule import Context, Detection, bounded
from gpuanalyze.ingest import schema as S

CAUSE = "cpu_fp32_math"


def compute_ms(ctx: Context) -> float:
    """Mean forward + backward ms per step."""
    m = ctx.m
    return (m.mean_ms.get(S.FORWARD_MS) or 0.0) + (m.mean_ms.get(S.BACKWARD_MS) or 0.0)


def matmul_range(ctx: Context) -> tuple[float, float, float, Measured | None]:
    """(point, low, high) of the matmul share f of forward + backward, and its measurement (None: the constant)."""
    got = matmul_share(ctx, compute_ms(ctx))
    if got is None:
        return T.CPU_MATMUL_UNMEASURED, 0.0, 1.0, None
    f = got.share
    return f, max(0.0, f - T.CPU_MATMUL_SLACK), min(1.0, f + T.CPU_MATMUL_SLACK), got


def native_bf16(ctx: Context) -> str | None:
    """The CPU's native bf16 flags ('avx512_bf16,amx_bf16'), None when it has none or the trace does not say."""
    return ctx.run.cpu_bf16 or None


def speedup(ctx: Context) -> float:
    """The bf16 / fp32 matmul rate bound of this CPU's flags: AMX tiles where it has AMX_BF16, else VDPBF16PS."""
    flags = (native_bf16(ctx) or "").split(",")
    return T.CPU_AMX_BF16_SPEEDUP if "amx_bf16" in flags else T.CPU_BF16_SPEEDUP


def replayed(ctx: Context) -> tuple[float, float, float] | None:
    """(point, fast end, slow end) matmul speed-ups under bf16 autocast measured by replaying the run's float32
    matmul shapes on the machine (matmul time over its time under bf16); None when the recorder did not."""
    matmul = window_ms(ctx, "cpu_matmul_ms")
    got = [window_ms(ctx, f) for f in ("cpu_matmul_bf16_ms", "cpu_matmul_bf16_fast_ms", "cpu_matmul_bf16_slow_ms")]
    if matmul is None or matmul[0] <= 0 or any(g is None or g[0] <= 0 for g in got):
        return None
    point, fast, slow = (matmul[0] / g[0] for g in got if g is not None)
    return point, fast, slow


def detect(ctx: Context, relaxed: bool) -> Detection | None:
    """fp32 parameters, a CPU with native bf16 and forward + backward a material part of the step."""
    flags = native_bf16(ctx)
    if ctx.gpu or flags is None or ctx.run.param_dtype != "float32" or ctx.wall <= 0:
        return None
    share = compute_ms(ctx) / ctx.wall
    if share < (T.RELAXED if relaxed else T.FP32_MATH.value):
        return None
    return Detection(
        cause=CAUSE,
        share=share * matmul_range(ctx)[0],
        consistency=1.0,
        evidence_steps=ctx.m.steps,
        summary=f"Forward and backward take {share:.0%} of the step in float32 on a CPU with native bf16 "
        f"arithmetic ({flags}): {_rate(ctx)}.",
    )


def evidence(ctx: Context) -> tuple[Evidence, ...]:
    return (
        Evidence(
            "cpu_native_bf16",
            1.0 if native_bf16(ctx) else 0.0,
            1.0,
            ">=",
            "flag",
            f"/proc/cpuinfo flags {native_bf16(ctx) or 'none'}: AVX512_BF16 (VDPBF16PS) or AMX_BF16 (Intel SDM Vol. 2)",
        ),
        Evidence(
            "cpu_compute_share",
            compute_ms(ctx) / ctx.wall,
            T.FP32_MATH.value,
            ">=",
            "fraction of step time",
            "forward + backward in float32",
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
    """The matmul speed-up under bf16 autocast, in words: measured by replay, else the flag's bound."""
    r = replayed(ctx)
    if r is None:
        return f"matmuls under bf16 autocast run up to {speedup(ctx):g}x the products per instruction"
    return (
        f"this run's matmuls replayed on this machine ran {r[0]:.1f}x faster under bf16 autocast "
        f"({r[2]:.1f}x with every input cast, {r[1]:.1f}x from bf16 inputs)"
    )


def _basis(got: Measured | None) -> str:
    """Where the matmul share came from, in words."""
    if got is None:
        return (
            f"not measured (no sampled CPU profiler window in the trace): the constant CPU_MATMUL_UNMEASURED "
            f"{T.CPU_MATMUL_UNMEASURED:.0%}, the range 0 to 1"
        )
    return f"measured: {got.basis} (+-{T.CPU_MATMUL_SLACK:.0%})"


def project(ctx: Context) -> Projection:
    compute = min(compute_ms(ctx), ctx.wall)
    measured = replayed(ctx)
    bound = speedup(ctx)
    r, r_fast, r_slow = measured if measured is not None else (bound, bound, bound)

    def at(f: float, r: float) -> float:
        """The step when a share ``f`` of forward + backward is matmul that bf16 speeds up ``r`` times."""
        return ctx.wall - compute * f * (1 - 1 / r)

    f, lo_f, hi_f, got = matmul_range(ctx)
    if measured is None:
        how = "AMX tiles (TDPBF16PS)" if r == T.CPU_AMX_BF16_SPEEDUP else "VDPBF16PS: two bf16 products per fp32 lane"
        rate = f"at {r:g}x under bf16 autocast ({how})"
    else:
        rate = (
            f"at {r:.2f}x under bf16 autocast (this run's matmul shapes replayed on this machine: forward ones with "
            f"their input casts; the fast end {r_fast:.2f}x from bf16 inputs, the slow end {r_slow:.2f}x with every "
            "input cast)"
        )
    rule = (
        f"forward + backward {compute:.2f} ms, a share f of it matmul {rate}: step {ctx.wall:.2f} - {compute:.2f} x f "
        f"x (1 - 1/{r:.3g}); f {_basis(got)}: the point takes {f:.0%} ({at(f, r):.2f} ms), the range {hi_f:.0%} "
        f"({at(hi_f, r_fast):.2f} ms) to {lo_f:.0%} ({at(lo_f, r_slow):.2f} ms)"
    )
    return bounded(
        ctx,
        at(f, r),
        "bf16 matmuls",
        {"forward + backward at the bf16 rate": at(1.0, r_fast)},
        rule,
        fix=PrecisionFix("bfloat16"),
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

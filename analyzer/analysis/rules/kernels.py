"""kernels: GPU time spent in slow kernels: fp32 GEMMs/convolutions off the tensor cores, or unfused
memory-bound elementwise/reduction chains.

Only kernel time on the critical path shortens the step: the projection scales the kernel time a
fix removes by the GPU-busy share (a GPU that idles half the step gets half the gain), so a
host-bound run is never promised what faster kernels cannot give it. The tensor-core speed-up is
the measured bf16/fp32 matmul ratio of this machine, else the datasheet's, else the smallest ratio
in the datasheet table (a lower bound).
"""

from __future__ import annotations

from typing import ClassVar

from analyzer.analysis import thresholds as T
from analyzer.analysis.findings import Evidence, Projection
from analyzer.analysis.fixes import PrecisionFix
from analyzer.analysis.rules import cpu_precision
from analyzer.analysis.rules.rule import Context, Detection, FixRunsOn, Rule, bounded
from analyzer.machine.datasheet import lookup
from analyzer.machine.tensor_cores import TensorCores, capability, tensor_cores
from gpuanalyze.ingest.trace import schema as S

FP32_CATEGORIES = ("gemm_simt_fp32", "conv")
MEMORY_BOUND_CATEGORIES = ("elementwise", "reduction")


def generation(ctx: Context) -> tuple[TensorCores, str] | None:
    """The tensor-core generation of the run's GPU and where its compute capability comes from; None when
    unknown (AMD or a GPU neither the trace nor the name table places)."""
    cc = capability(ctx.run.gpu_name, ctx.run.compute_capabilities)
    if cc is None:
        return None
    return tensor_cores(cc[0]), cc[1]


def autocast_dtype(ctx: Context) -> str | None:
    """The 16-bit precision this GPU's tensor cores run: float16 on Volta/Turing, bfloat16 from Ampere and
    on GPUs of unknown generation (today's usual choice); None on GPUs without tensor cores."""
    gen = generation(ctx)
    if gen is None or gen[0].bf16:
        return "bfloat16"
    return "float16" if gen[0].fp16 else None


def tensor_core_ratio(ctx: Context, dtype: str = "bfloat16") -> tuple[float, str]:
    """16-bit / fp32 matmul speed: measured on this machine, else the datasheet's, else the table's smallest."""
    short = {"bfloat16": "bf16", "float16": "fp16"}[dtype]
    c = ctx.ceilings
    if c is not None and c.matmul_tflops.get("float32") and c.matmul_tflops.get(dtype):
        ratio = c.matmul_tflops[dtype] / c.matmul_tflops["float32"]
        return ratio, f"measured matmul {short}/fp32 = {ratio:.1f}x by {c.source('matmul')}"
    spec = lookup(ctx.run.gpu_name)
    peak = spec.peak_tflops(dtype) if spec is not None else None
    if spec is not None and peak:
        ratio = peak / spec.fp32_tflops
        return ratio, f"{spec.name} datasheet {short}/fp32 = {ratio:.1f}x ({spec.source})"
    return T.FALLBACK_TENSOR_CORE_RATIO, (
        f"{ctx.run.gpu_name or 'this GPU'} is not in the datasheet table: the table's smallest 16-bit/fp32 ratio, "
        f"{T.FALLBACK_TENSOR_CORE_RATIO:.1f}x (RTX 4090), a lower bound on the gain"
    )


class Kernels(Rule):
    bottleneck = "kernels"
    headline = "KERNELS: the GPU code itself sets the pace"
    cpu_headline = "KERNELS: the compute itself sets the pace"
    fix_runs_on = FixRunsOn.HOST_ON_CPU_RUNS
    high = T.KERNELS_HIGH
    defining: ClassVar[dict[str, tuple[str, ...]]] = {
        "fp32_math": ("fp32_gemm_conv_share",),
        "memory_bound": ("memory_bound_kernel_share",),
        cpu_precision.CAUSE: ("cpu_native_bf16", "cpu_compute_share"),
    }

    def _shares(self, ctx: Context) -> tuple[float, float, bool]:
        """(fp32-math share of kernel time, memory-bound share of kernel time, from kernel statistics)."""
        km = ctx.m.kernels
        if km is not None:
            fp32 = sum(km.share_of_kernel_time(c) for c in FP32_CATEGORIES)
            memory = sum(km.share_of_kernel_time(c) for c in MEMORY_BOUND_CATEGORIES)
            return fp32, memory, True
        return (1.0 if ctx.run.param_dtype in ("float32", "float64") else 0.0), 0.0, False

    def detect(self, ctx: Context, *, relaxed: bool) -> Detection | None:
        if not ctx.gpu:
            return cpu_precision.detect(ctx, relaxed)
        util = ctx.m.gpu_util or 0.0
        fp32, memory, measured = self._shares(ctx)
        fp32_on = fp32 >= (T.RELAXED if relaxed else T.FP32_MATH.value)
        memory_on = measured and memory >= (T.RELAXED if relaxed else T.MEMORY_BOUND.value)
        if not measured and util < T.GPU_HEALTHY.value:
            return None  # no kernel statistics and a GPU that is not the limit: feeding it comes first
        if not (fp32_on or memory_on):
            return None
        cause = "fp32_math" if fp32_on and (fp32 >= memory or not memory_on) else "memory_bound"
        share = util * ((fp32 if fp32_on else 0.0) + (memory if memory_on else 0.0))
        km = ctx.m.kernels
        what = []
        if fp32_on:
            what.append(
                f"{fp32:.0%} of kernel time is fp32 GEMM/convolution off the tensor cores"
                if measured
                else f"parameters are {ctx.run.param_dtype} and no kernel statistics say "
                "whether matmuls run on tensor cores"
            )
        if memory_on:
            what.append(f"{memory:.0%} is memory-bound elementwise/reduction kernels")
        return Detection(
            cause=cause,
            share=share,
            consistency=ctx.m.consistency(S.GPU_BUSY_MS, T.GPU_UTIL_LOW.value),
            evidence_steps=km.steps if km is not None else min(ctx.m.steps, T.FEW_STEPS - 1),
            summary=f"The GPU is busy {util:.0%} of the step and " + "; ".join(what) + ".",
        )

    def evidence(self, ctx: Context, d: Detection) -> tuple[Evidence, ...]:
        if d.cause == cpu_precision.CAUSE:
            return cpu_precision.evidence(ctx)
        fp32, memory, measured = self._shares(ctx)
        util = ctx.m.gpu_util or 0.0
        ev = [
            Evidence(
                "gpu_utilization",
                util,
                T.GPU_UTIL_LOW.value,
                ">=",
                "fraction of step time",
                "kernel time is a material part of the step",
            )
        ]
        if measured and (d.cause == "fp32_math" or fp32 >= T.FP32_MATH.value):
            ev.append(
                Evidence(
                    "fp32_gemm_conv_share", fp32, T.FP32_MATH.value, ">=", "fraction of kernel time", T.FP32_MATH.source
                )
            )
        if measured and (d.cause == "memory_bound" or memory >= T.MEMORY_BOUND.value):
            ev.append(
                Evidence(
                    "memory_bound_kernel_share",
                    memory,
                    T.MEMORY_BOUND.value,
                    ">=",
                    "fraction of kernel time",
                    T.MEMORY_BOUND.source,
                )
            )
        if not measured:
            ev.append(
                Evidence(
                    "steps_with_kernel_statistics",
                    0,
                    1,
                    ">=",
                    "steps",
                    "without kernel statistics the kernels' precision is assumed from the parameters",
                )
            )
        return tuple(ev)

    def project(self, ctx: Context, d: Detection) -> Projection | None:
        if d.cause == cpu_precision.CAUSE:
            return cpu_precision.project(ctx)
        fp32, memory, measured = self._shares(ctx)
        util = ctx.m.gpu_util or 0.0
        busy = ctx.busy
        dtype = autocast_dtype(ctx)
        ratio, source = tensor_core_ratio(ctx, dtype or "bfloat16")
        parts, removed = [], 0.0
        tensor_cores = dtype is not None and (fp32 >= T.FP32_MATH.value or d.cause == "fp32_math")
        if tensor_cores:
            gain = busy * fp32 * (1 - 1 / ratio)
            removed += gain
            parts.append(f"fp32 GEMM/conv {busy * fp32:.2f} ms x (1 - 1/{ratio:.1f}) = {gain:.2f} ms ({source})")
        if measured and (memory >= T.MEMORY_BOUND.value or d.cause == "memory_bound"):
            gain = busy * memory * (1 - 1 / T.FUSION_SPEEDUP)
            removed += gain
            parts.append(
                f"memory-bound {busy * memory:.2f} ms x (1 - 1/{T.FUSION_SPEEDUP:.0f}) = {gain:.2f} ms "
                "(fusion, assumed)"
            )
        if removed <= 0:
            return None
        saved = removed * util
        rule = (
            f"step {ctx.wall:.2f} ms minus kernel time removed x GPU-busy share {util:.0%} "
            f"(only kernel time on the critical path shortens the step): "
            + " + ".join(parts)
            + ("" if measured else "; no kernel statistics: all GPU-busy time treated as fp32 matmul, an upper bound")
        )
        fix = PrecisionFix(dtype) if tensor_cores and fp32 > 0 and dtype is not None else None
        return bounded(
            ctx,
            ctx.wall - saved,
            "faster kernels",
            {"the host time around the kernels": ctx.wall - busy},
            rule,
            fix=fix,
        )

    def advise(self, ctx: Context, d: Detection, p: Projection) -> tuple[str, ...]:
        if d.cause == cpu_precision.CAUSE:
            return cpu_precision.advise(ctx)
        fp32, memory, measured = self._shares(ctx)
        recs = []
        if fp32 >= T.FP32_MATH.value or d.cause == "fp32_math":
            if ctx.run.param_dtype == "float64":  # autocast leaves float64 as it is
                recs.append("The parameters are float64: convert the model and its inputs to float32 first.")
            recs += precision_advice(ctx)
        if measured and (memory >= T.MEMORY_BOUND.value or d.cause == "memory_bound"):
            softmax = softmax_share(ctx)
            if softmax >= T.UNFUSED_SOFTMAX:
                recs.append(
                    f"Softmax kernels take {softmax:.0%} of kernel time: attention computed as matmul, softmax, "
                    "matmul. Use fused attention: torch.nn.functional.scaled_dot_product_attention (Flash/"
                    "memory-efficient SDPA backends; attn_implementation='sdpa' in Hugging Face models)."
                )
            recs.append(
                "Fuse memory-bound elementwise/normalisation chains with torch.compile(model)"
                + ("." if ctx.forward_only else "; use fused optimizers (e.g. AdamW(fused=True)).")
            )
        if not measured:
            recs.append(
                "Record kernel evidence to confirm: keep analyzer.profile's sampled kernel windows on, or "
                "import a torch.profiler trace of a few steps."
            )
        return tuple(recs)


def precision_advice(ctx: Context) -> list[str]:
    """Tensor-core precision advice for this GPU's generation (analyzer.machine.tensor_cores)."""
    gen = generation(ctx)
    if gen is not None and not gen[0].bf16:
        tc, where = gen
        if not tc.fp16:
            return [
                f"This GPU has no tensor cores ({where}; {tc.source}): fp32 matmul time stays; a GPU from Volta "
                "(sm70) on runs it in fp16 on tensor cores."
            ]
        scaled = (
            "around the forward (no GradScaler: nothing is backpropagated)"
            if ctx.forward_only
            else "around forward and loss, with torch.amp.GradScaler('cuda') scaling the loss "
            "(scaler.scale(loss).backward(); scaler.step(opt); scaler.update())"
        )
        return [
            f"Run matmuls and convolutions on tensor cores in fp16: torch.autocast('cuda', dtype=torch.float16) "
            f"{scaled}. {tc.generation} tensor cores run fp16, not bf16 or TF32 ({where}; {tc.source}).",
        ]
    recs = [
        "Run matmuls and convolutions on tensor cores: torch.autocast('cuda', dtype=torch.bfloat16) around "
        + ("the forward." if ctx.forward_only else "forward and loss."),
        "Allow TF32 for the fp32 matmuls that remain: torch.set_float32_matmul_precision('high') and "
        "torch.backends.cudnn.allow_tf32 = True.",
    ]
    if gen is not None:
        tc, where = gen
        recs[0] = recs[0][:-1] + f" ({tc.generation}: {where}; {tc.source})."
        if tc.fp8:
            recs.append(
                f"After bf16, large linear layers can run in FP8 on {tc.generation} tensor cores with NVIDIA "
                "Transformer Engine (te.Linear under te.fp8_autocast); check "
                + ("the outputs' accuracy" if ctx.forward_only else "the loss curve")
                + " against bf16."
            )
    return recs


def softmax_share(ctx: Context) -> float:
    """Share of kernel time in kernels named softmax among the top kernels (a lower bound: only the top ones)."""
    km = ctx.m.kernels
    if km is None:
        return 0.0
    total = sum(km.totals_ms[f"{c}_ms"] for c in S.KERNEL_CATEGORIES)
    soft = sum(ms for name, ms, _ in km.top_kernels if "softmax" in name.lower())
    return soft / total if total else 0.0

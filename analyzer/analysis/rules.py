"""Rules that turn step metrics into findings, and the choice of one primary bottleneck.

Each rule is a pure function of the metrics. A finding's ``share`` estimates the fraction of
step time a fix could give back; the primary bottleneck is the finding with the largest share.
"""

from __future__ import annotations

import polars as pl

from analyzer.analysis import thresholds as T
from analyzer.analysis.findings import Evidence, Finding
from analyzer.analysis.metrics import StepMetrics
from analyzer.machine.bandwidth import allreduce_bandwidths
from analyzer.machine.ceilings import Ceilings
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.runinfo import RunInfo


def _consistency(m: StepMetrics, column: str, threshold: float, *, below: bool = False) -> float:
    if column not in m.step_share.columns or m.step_share.height == 0:
        return 0.0
    values = m.step_share.get_column(column).fill_null(0.0)
    hits = (values < threshold) if below else (values >= threshold)
    return float(hits.mean())


def _recoverable(m: StepMetrics, share: float) -> float:
    """Host waiting costs GPU time only while the GPU idles: on GPU traces cap it by the idle share."""
    if m.gpu_util is None:
        return share
    return min(share, max(0.0, 1.0 - m.gpu_util))


def _idle_evidence(m: StepMetrics) -> list[Evidence]:
    if m.gpu_util is None:
        return []
    return [
        Evidence(
            "gpu_idle_share",
            1.0 - m.gpu_util,
            T.DATA_WAIT_MODERATE.value,
            ">=",
            "fraction of step time",
            "waiting on the host costs GPU time only while the GPU is idle (docs/thresholds.md)",
        )
    ]


def _severity(share: float, high: T.Threshold) -> str:
    return "high" if share >= high.value else "moderate"


def data_loading(m: StepMetrics, ceilings: Ceilings | None = None) -> Finding | None:
    share = m.share[S.DATA_WAIT_MS] or 0.0
    recoverable = _recoverable(m, share)
    if share < T.DATA_WAIT_MODERATE.value or recoverable < T.DATA_WAIT_MODERATE.value:
        return None
    severity = _severity(share, T.DATA_WAIT_HIGH)
    threshold = T.DATA_WAIT_HIGH if severity == "high" else T.DATA_WAIT_MODERATE
    wait = m.breakdown_ms[S.DATA_WAIT_MS] or 0.0
    evidence = [
        Evidence("data_wait_share", share, threshold.value, ">=", "fraction of step time", threshold.source),
        *_idle_evidence(m),
    ]
    if ceilings is not None and ceilings.loader_samples_per_s and m.samples_per_s:
        evidence.append(
            Evidence(
                "achieved_samples_per_s",
                m.samples_per_s,
                ceilings.loader_samples_per_s,
                "<",
                "samples/s",
                f"synthetic input pipeline measured by `gpuanalyze bench dataloader` on {ceilings.device} ({ceilings.path}); "
                "its samples are not yours, so read it as what this host's workers and link can deliver",
            )
        )
    return Finding(
        bottleneck="data_loading",
        severity=severity,
        share=recoverable,
        summary=f"The training loop waits for the next batch {share:.0%} of the time (median {wait:.1f} ms per step).",
        evidence=tuple(evidence),
        recommendations=(
            "Load in parallel: DataLoader(num_workers=N) with N up to the CPU cores per GPU process (the projection uses "
            "min(8, cores)), and raise prefetch_factor if waits are bursty.",
            "Keep workers alive between epochs with persistent_workers=True.",
            "Use pin_memory=True and move batches with .to(device, non_blocking=True) so the copy overlaps compute.",
            "Make Dataset.__getitem__ cheaper: decode/augment once offline, cache, or move augmentation to the GPU.",
        ),
        consistency=_consistency(m, S.DATA_WAIT_MS, T.DATA_WAIT_MODERATE.value),
    )


_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}


def _allreduce_bandwidth(m: StepMetrics, run: RunInfo, ceilings: Ceilings | None) -> list[Evidence]:
    """Achieved gradient all-reduce bus bandwidth (one all-reduce of every gradient per step, timed by the
    communication kernels of sampled windows) against the bus bandwidth `gpuanalyze bench` measured."""
    world = run.world
    params, itemsize = run.model_params, _DTYPE_BYTES.get(str(run.param_dtype))
    comm_ms = m.kernels.totals_ms["communication_ms"] / max(m.kernels.steps, 1)
    if world < 2 or not params or not itemsize or comm_ms <= 0:
        return []
    _, busbw = allreduce_bandwidths(params * itemsize, comm_ms / 1e3, world)
    if ceilings is None or not ceilings.busbw_gbps:
        return [
            Evidence(
                "allreduce_busbw_gbps",
                busbw,
                0.0,
                ">=",
                "GB/s",
                "gradient bytes x 2(n-1)/n over communication kernel time (nccl-tests busbw); no measured ceiling",
            )
        ]
    return [
        Evidence(
            "allreduce_busbw_gbps",
            busbw,
            ceilings.busbw_gbps,
            "<",
            "GB/s",
            f"achieved {busbw / ceilings.busbw_gbps:.0%} of the bus bandwidth measured by `gpuanalyze bench "
            f"allreduce` on {ceilings.device} ({ceilings.path})",
        )
    ]


def sync(m: StepMetrics, run: RunInfo | None = None, ceilings: Ceilings | None = None) -> Finding | None:
    share = m.share[S.SYNC_MS] or 0.0
    recoverable = _recoverable(m, share)
    comm = m.kernels.share_of_wall("comm_exposed_ms") if m.kernels else 0.0
    host_sync = share >= T.SYNC_MODERATE.value and recoverable >= T.SYNC_MODERATE.value
    if not host_sync and comm < T.SYNC_MODERATE.value:
        return None
    worst = max(share, comm)
    threshold = T.SYNC_HIGH if worst >= T.SYNC_HIGH.value else T.SYNC_MODERATE
    evidence = [
        Evidence("sync_share", share, threshold.value, ">=", "fraction of step time", threshold.source),
        *_idle_evidence(m),
    ]
    recs = [
        "Remove per-step .item(), .cpu(), .tolist() and print(loss): accumulate metrics on the device and read them every N steps.",
        "Drop explicit torch.cuda.synchronize() calls from the loop (time with CUDA events instead).",
        "In DDP, overlap communication with backward (bucket_cap_mb, gradient_as_bucket_view=True) and use no_sync() during gradient accumulation.",
    ]
    if m.kernels is not None:
        evidence.append(
            Evidence(
                "exposed_communication_share",
                comm,
                T.SYNC_MODERATE.value,
                ">=",
                "fraction of step time",
                "GPU time when only communication kernels run (nothing to overlap them with)",
            )
        )
        evidence += _allreduce_bandwidth(m, run or RunInfo(), ceilings)
        if comm >= T.SYNC_MODERATE.value:
            recs.insert(
                0,
                "Communication is exposed: let DDP/FSDP overlap it with backward (smaller buckets, "
                "FSDP backward_prefetch), or check for a straggler rank that makes the others wait.",
            )
    return Finding(
        bottleneck="sync",
        severity="high" if worst >= T.SYNC_HIGH.value else "moderate",
        share=max(recoverable if host_sync else 0.0, comm),
        summary=f"The host is blocked on device synchronisation {share:.0%} of the time"
        + (f"; communication is exposed {comm:.0%} of the time." if comm >= T.SYNC_MODERATE.value else "."),
        evidence=tuple(evidence),
        recommendations=tuple(recs),
        consistency=_consistency(m, S.SYNC_MS, T.SYNC_MODERATE.value) if host_sync else 1.0,
    )


def straggler(m: StepMetrics) -> Finding | None:
    """One rank slower than the others makes every other rank wait in collectives: a sync bottleneck."""
    d = m.distributed
    if d is None or not d.stragglers:
        return None
    s = d.stragglers[0]
    share = min(1.0, s.excess_ms / d.step_median_ms) if d.step_median_ms else 0.0
    waiting = [r.sync_share for r in d.per_rank if r.rank != s.rank]
    evidence = (
        Evidence(
            "straggler_slow_step_fraction",
            s.steps_slow / s.steps,
            T.STRAGGLER_FRACTION,
            ">=",
            "fraction of steps",
            f"rank {s.rank} has the most work and exceeds the step's baseline by > {T.SLOW_STEP_MIN_MS} ms and "
            f"> {T.SLOW_STEP_FRACTION:.0%} of the median step (analyzer/distributed.py)",
        ),
        Evidence(
            "straggler_excess_ms",
            s.excess_ms,
            T.SLOW_STEP_MIN_MS,
            ">=",
            "ms per slow step",
            "median over its slow steps",
        ),
        Evidence(
            f"straggler_{s.phase}_excess_ms",
            s.phase_excess_ms,
            0.0,
            ">=",
            "ms per step",
            "the phase whose median on this rank exceeds the other ranks' median the most",
        ),
        Evidence(
            "other_ranks_sync_share",
            max(waiting) if waiting else 0.0,
            T.SYNC_MODERATE.value,
            ">=",
            "fraction of step time",
            "time the other ranks wait in collectives for it",
        ),
    )
    fixes = {
        "data": f"Rank {s.rank} waits longest for input: check its node's data path (disk, network storage, CPU cores for DataLoader workers) and give it more workers.",
        "forward": f"Rank {s.rank} is slow in forward: check that node's GPU (clocks, thermals, a different GPU model), uneven inputs (sequence lengths) or extra work done only on that rank.",
        "backward": f"Rank {s.rank} is slow in backward: check its GPU and uneven inputs; shapes that differ per rank change the work.",
        "optimizer": f"Rank {s.rank} is slow in the optimizer step: look for rank-specific work (logging, checkpointing, EMA) in the loop.",
    }
    return Finding(
        bottleneck="sync",
        severity="high",
        share=share,
        summary=f"Rank {s.rank} is a straggler: slowest on {s.steps_slow} of {s.steps} steps by a median "
        f"{s.excess_ms:.1f} ms, mostly in {s.phase}; the other ranks wait for it in gradient all-reduce.",
        evidence=evidence,
        recommendations=(
            fixes.get(s.phase, fixes["forward"]),
            "Balance work across ranks (bucket samples by length, equal shards) and move rank-0-only work out of the step.",
        ),
        consistency=s.steps_slow / s.steps,
    )


def batch_size(m: StepMetrics) -> Finding | None:
    if m.gpu_util is None or m.gpu_util >= T.GPU_UTIL_LOW.value:
        return None
    idle = max(0.0, 1.0 - m.gpu_util - (m.share[S.DATA_WAIT_MS] or 0.0) - (m.share[S.SYNC_MS] or 0.0))
    if idle < T.DATA_WAIT_MODERATE.value:
        return None
    evidence = [
        Evidence(
            "gpu_utilization", m.gpu_util, T.GPU_UTIL_LOW.value, "<", "fraction of step time", T.GPU_UTIL_LOW.source
        )
    ]
    recs = [
        "Give the GPU more work per launch: raise the batch size (scale the learning rate with it) or use gradient accumulation less.",
        "Cut launch overhead: torch.compile(model, mode='reduce-overhead') or CUDA graphs fuse small kernels and replay them.",
    ]
    if m.kernels is not None and m.kernels.kernel_median_us is not None:
        km = m.kernels
        evidence.append(
            Evidence(
                "kernel_median_us",
                km.kernel_median_us,
                T.SHORT_KERNEL_US.value,
                "<",
                "microseconds",
                T.SHORT_KERNEL_US.source,
            )
        )
        if km.idle_ms:
            launch_bound = (km.totals_ms["idle_launch_ms"] + km.totals_ms["idle_host_wait_ms"]) / km.idle_ms
            evidence.append(
                Evidence(
                    "idle_from_launch_or_host_wait",
                    launch_bound,
                    0.5,
                    ">=",
                    "fraction of GPU idle time",
                    "HTA idle-time breakdown: host wait + kernel-launch gaps (docs/thresholds.md)",
                )
            )
    if m.peak_mem_bytes and m.gpu_memory_bytes:
        used = m.peak_mem_bytes / m.gpu_memory_bytes
        evidence.append(
            Evidence(
                "peak_memory_fraction",
                used,
                T.MEM_HEADROOM.value,
                "<",
                "fraction of device memory",
                T.MEM_HEADROOM.source,
            )
        )
        if used < T.MEM_HEADROOM.value and m.batch_samples:
            fit = int(m.batch_samples * 0.9 / used)
            recs.insert(
                0,
                f"Memory headroom: peak {used:.0%} of the device; a batch of about {fit} samples (from {m.batch_samples:.0f}) should still fit.",
            )
    return Finding(
        bottleneck="batch_size",
        severity="high" if m.gpu_util < T.GPU_UTIL_LOW.value / 2 else "moderate",
        share=idle,
        summary=f"The GPU is busy only {m.gpu_util:.0%} of the step, and the idle time is not spent waiting for data or sync.",
        evidence=tuple(evidence),
        recommendations=tuple(recs),
        consistency=_consistency(m, S.GPU_BUSY_MS, T.GPU_UTIL_LOW.value, below=True),
    )


def kernels(m: StepMetrics, run: RunInfo) -> Finding | None:
    if m.gpu_util is None or m.gpu_util < T.GPU_UTIL_BUSY.value:
        return None
    dtype = run.param_dtype
    evidence = [
        Evidence(
            "gpu_utilization", m.gpu_util, T.GPU_UTIL_BUSY.value, ">=", "fraction of step time", T.GPU_UTIL_BUSY.source
        )
    ]
    recs = []
    severity = "high" if dtype == "float32" else "moderate"
    km = m.kernels
    if km is not None:
        simt = km.share_of_kernel_time("gemm_simt_fp32")
        memory_bound = km.share_of_kernel_time("elementwise") + km.share_of_kernel_time("reduction")
        evidence.append(
            Evidence(
                "simt_fp32_gemm_share",
                simt,
                T.SIMT_GEMM_SHARE.value,
                ">=",
                "fraction of kernel time",
                T.SIMT_GEMM_SHARE.source,
            )
        )
        evidence.append(
            Evidence(
                "memory_bound_kernel_share",
                memory_bound,
                T.MEMORY_BOUND_SHARE.value,
                ">=",
                "fraction of kernel time",
                T.MEMORY_BOUND_SHARE.source,
            )
        )
        severity = (
            "high" if simt >= T.SIMT_GEMM_SHARE.value or memory_bound >= T.MEMORY_BOUND_SHARE.value else "moderate"
        )
        if simt >= T.SIMT_GEMM_SHARE.value:
            recs.append(
                f"{simt:.0%} of kernel time is fp32 GEMM on SIMT cores (sgemm): use bf16 autocast or TF32 to run it on tensor cores."
            )
        if memory_bound >= T.MEMORY_BOUND_SHARE.value:
            recs.append(
                f"{memory_bound:.0%} of kernel time is memory-bound elementwise/reduction kernels: fuse them with torch.compile."
            )
    recs += [
        "Use tensor-core precisions: torch.autocast('cuda', dtype=torch.bfloat16) for forward and loss.",
        "Allow TF32 for remaining fp32 matmuls: torch.set_float32_matmul_precision('high').",
        "Fuse memory-bound elementwise chains with torch.compile(model); use fused optimizers (e.g. AdamW(fused=True)).",
    ]
    return Finding(
        bottleneck="kernels",
        severity=severity,
        share=m.gpu_util * T.KERNEL_RECOVERABLE,
        summary=f"The GPU is busy {m.gpu_util:.0%} of the step"
        + (f" (parameters in {dtype})" if dtype else "")
        + ": the kernels set the pace.",
        evidence=tuple(evidence),
        recommendations=tuple(recs),
        consistency=_consistency(m, S.GPU_BUSY_MS, T.GPU_UTIL_BUSY.value),
    )


def classify(m: StepMetrics, run: RunInfo, ceilings: Ceilings | None = None) -> tuple[str, float, tuple[Finding, ...]]:
    """(primary bottleneck, confidence, findings ranked by recoverable share)."""
    lagging = straggler(m)
    found = [
        f
        for f in (data_loading(m, ceilings), lagging or sync(m, run, ceilings), batch_size(m), kernels(m, run))
        if f is not None
    ]
    found.sort(key=lambda f: f.share, reverse=True)
    if found:
        return found[0].bottleneck, round(found[0].consistency, 3), tuple(found)
    quiet = m.step_share.select(
        ((pl.col(S.DATA_WAIT_MS) < T.DATA_WAIT_MODERATE.value) & (pl.col(S.SYNC_MS) < T.SYNC_MODERATE.value)).mean()
    ).item()
    return "none", round(float(quiet or 0.0), 3), ()

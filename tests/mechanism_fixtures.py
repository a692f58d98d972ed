"""Small Kineto traces reproducing mechanisms seen in real GPU traces, with known answers."""

from __future__ import annotations

from typing import Any

from tests.kineto_fixtures import ev


def _doc(events: list[dict[str, Any]], name: str, cc: tuple[int, int] | None, devices: int = 1) -> dict[str, Any]:
    props = [{"id": i, "name": name, "totalGlobalMem": 16 * 10**9} for i in range(devices)]
    if cc is not None:
        for p in props:
            p.update(computeMajor=cc[0], computeMinor=cc[1])
    return {"schemaVersion": 1, "traceEvents": events, "deviceProperties": props}


def fp32_gemm_trace(name: str, cc: tuple[int, int] | None, *, steps: int = 12, devices: int = 1) -> dict[str, Any]:
    """``steps`` 1000 us steps, each a 980 us fp32 SIMT GEMM: the GPU is busy 98%, all of it off the tensor cores."""
    events = []
    for i in range(steps):
        lo = i * 1000.0
        events += [
            ev("user_annotation", f"ProfilerStep#{i}", lo, 1000),
            ev("cuda_runtime", "cudaLaunchKernel", lo + 2, 5, correlation=i + 1),
            ev("kernel", "volta_sgemm_128x64_nn", lo + 10, 980, stream=7, correlation=i + 1),
        ]
    return _doc(events, name, cc, devices)


def tail_trace(*, steps: int = 4, tail_us: float = 158_000.0) -> dict[str, Any]:
    """Item 3: ``steps`` 10 ms steps, each with 3 ms of kernels inside its window; the last step also launches a
    ``tail_us`` kernel that runs after the step ended, under a final cudaDeviceSynchronize.
    Utilisation over the steps is 30% (the tail is outside them)."""
    events = []
    corr = 0
    for i in range(steps):
        lo = i * 10_000.0
        events.append(ev("user_annotation", f"ProfilerStep#{i}", lo, 10_000))
        for j in range(3):
            corr += 1
            t = lo + 1000 + j * 2000
            events += [
                ev("cuda_runtime", "cudaLaunchKernel", t - 20, 5, correlation=corr),
                ev("kernel", "void at::native::vectorized_elementwise_kernel<4>", t, 1000, stream=7, correlation=corr),
            ]
    end = steps * 10_000.0
    corr += 1
    events += [
        ev("cuda_runtime", "cudaLaunchKernel", end - 100, 5, correlation=corr),
        ev("kernel", "ampere_sgemm_128x64_nn", end - 50, tail_us, stream=7, correlation=corr),
        ev("cuda_runtime", "cudaDeviceSynchronize", end + 10, tail_us, correlation=corr + 1),
    ]
    return _doc(events, "NVIDIA A100-SXM4-40GB", (8, 0))


def single_step_trace(step_us: float = 42_900_000.0) -> dict[str, Any]:
    """Item 6: one ProfilerStep of 42.9 s (a benchmark warm-up), GPU busy a tenth of it in short kernels."""
    events = [ev("user_annotation", "ProfilerStep#0", 0, step_us)]
    n = 200
    for j in range(n):
        t = j * step_us / n
        events += [
            ev("cuda_runtime", "cudaLaunchKernel", t + 1, 5, correlation=j + 1),
            ev(
                "kernel",
                "void at::native::vectorized_elementwise_kernel<4>",
                t + 10,
                step_us / n / 10,
                stream=7,
                correlation=j + 1,
            ),
        ]
    return _doc(events, "NVIDIA H100 80GB HBM3", (9, 0))


def pageable_copy_trace(*, steps: int = 12, cpu_ops: bool = True) -> dict[str, Any]:
    """Item 2: 200 ms steps; 50 ms of kernels, then, under ``record_function("metrics")``, ``aten::to`` (its
    inner ``aten::copy_``) -> cudaMemcpyAsync of 704 B device-to-host into pageable memory that blocks the host
    146 ms until the GPU drains (the copy itself takes 2 us). ``cpu_ops=False``: without the CPU ops."""
    events = []
    corr = 0
    for i in range(steps):
        lo = i * 200_000.0
        events.append(ev("user_annotation", f"ProfilerStep#{i}", lo, 200_000))
        for j in range(5):
            corr += 1
            t = lo + 1000 + j * 10_000
            events += [
                ev("cuda_runtime", "cudaLaunchKernel", t - 50, 5, correlation=corr),
                ev("kernel", "ampere_bf16_s16816gemm_bf16_128x128", t, 9_000, stream=7, correlation=corr),
            ]
        corr += 1
        t = lo + 52_000
        events += [
            ev("user_annotation", "metrics", t - 20, 146_040),
            ev("cpu_op", "aten::to", t - 10, 146_020),
            ev("cpu_op", "aten::copy_", t - 5, 146_010),
            ev("cuda_runtime", "cudaMemcpyAsync", t, 146_000, correlation=corr),
            ev("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", t + 145_990, 2, stream=7, correlation=corr, bytes=704),
        ]
    if not cpu_ops:
        events = [e for e in events if e["cat"] not in ("cpu_op", "user_annotation") or e["name"].startswith("Prof")]
    return _doc(events, "NVIDIA A100-SXM4-40GB", (8, 0))


def short_gap_long_kernel_trace(*, steps: int = 12) -> dict[str, Any]:
    """Item 5: 1000 us steps of 60 us kernels with 20 us gaps between them, all launched at the step's start:
    the gaps are short (launch-overhead class), but the kernels are 3x the launch-overhead scale."""
    events = []
    corr = 0
    for i in range(steps):
        lo = i * 1000.0
        events.append(ev("user_annotation", f"ProfilerStep#{10 + i}", lo, 1000))
        for j in range(12):
            corr += 1
            events += [
                ev("cuda_runtime", "cudaLaunchKernel", lo + 1 + j * 0.5, 0.4, correlation=corr),
                ev(
                    "kernel",
                    "ampere_bf16_s16816gemm_bf16_128x128",
                    lo + 20 + j * 80,
                    60,
                    stream=7,
                    correlation=corr,
                ),
            ]
    return _doc(events, "NVIDIA A100-SXM4-40GB", (8, 0))


def straggler_rank(rank: int, *, slow_forward_ms: float, gpu: bool, steps: int = 12) -> dict[str, Any]:
    """Item 7/8: one rank of a 2-rank DDP run, 100 ms steps: forward (step start to the first backward op)
    20 ms + ``slow_forward_ms``, backward 30 ms, optimizer 5 ms; the faster rank waits the difference in a
    blocking sync (the all-reduce wait). ``gpu``: with one kernel per step (else a gloo CPU run)."""
    events = []
    fwd = 20_000.0 + slow_forward_ms * 1e3
    for i in range(steps):
        lo = i * 100_000.0
        bwd = lo + fwd
        events += [
            ev("user_annotation", f"ProfilerStep#{10 + i}", lo, 100_000),
            ev("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", bwd, 30_000),
            ev("cpu_op", "Optimizer.step#SGD.step", bwd + 30_000, 5_000),
        ]
        wait = 100_000.0 - fwd - 35_000 - 1_000
        if wait > 0:
            name = "cudaStreamSynchronize" if gpu else "cudaDeviceSynchronize"
            events.append(ev("cuda_runtime", name, bwd + 35_000, wait, correlation=900_000 + i))
        if gpu:
            events += [
                ev("cuda_runtime", "cudaLaunchKernel", lo + 100, 5, correlation=i + 1),
                ev("kernel", "ampere_bf16_s16816gemm_bf16_128x128", lo + 200, 5_000, stream=7, correlation=i + 1),
            ]
    doc = _doc(events, "NVIDIA A100-SXM4-40GB", (8, 0)) if gpu else {"schemaVersion": 1, "traceEvents": events}
    doc["distributedInfo"] = {"backend": "nccl" if gpu else "gloo", "rank": rank, "world_size": 2}
    return doc


def preprocessing_trace(*, steps: int = 12) -> dict[str, Any]:
    """Item 4: 382 ms steps; 218 ms of CPU ops (video decode, an image processor: not in a DataLoader) before the
    step's first kernel, then 164 ms of back-to-back kernels in 1 ms blocks: a bf16 GEMM 470 us, an unfused
    softmax 430 us, an elementwise add 100 us (softmax 43% of kernel time)."""
    events = []
    corr = 0
    for i in range(steps):
        lo = i * 382_000.0
        events += [
            ev("user_annotation", f"ProfilerStep#{10 + i}", lo, 382_000),
            ev("cpu_op", "torchvision::decode_video", lo + 100, 150_000),
            ev("cpu_op", "OwlViTProcessor.__call__", lo + 150_200, 67_000),
        ]
        t = lo + 218_000
        for b in range(164):
            for name, dur in (
                ("ampere_bf16_s16816gemm_bf16_128x128", 470.0),
                ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", 430.0),
                ("void at::native::vectorized_elementwise_kernel<4>", 100.0),
            ):
                corr += 1
                events += [
                    ev("cuda_runtime", "cudaLaunchKernel", t - 5 if b == 0 else t - 50, 3, correlation=corr),
                    ev("kernel", name, t, dur, stream=7, correlation=corr),
                ]
                t += dur
    return _doc(events, "NVIDIA H100 80GB HBM3", (9, 0))


#: Start-up work of a warm-up step in startup_trace (80 ms of its 100 ms): the events that make it, by kind.
STARTUP_WORK: dict[str, list[tuple[str, str, float, float]]] = {
    # torch.compile: nested dynamo_timed phases (they count once)
    "compile": [
        ("cpu_op", "_compile.compile_inner (dynamo_timed)", 0, 80_000),
        ("cpu_op", "OutputGraph.call_user_compiler (dynamo_timed)", 5_000, 70_000),
        ("cpu_op", "PyCodeCache.load_by_key_path (dynamo_timed)", 10_000, 40_000),
    ],
    # first allocations: the caching allocator growing
    "malloc": [("cuda_runtime", "cudaMalloc", j * 10_000.0, 10_000) for j in range(8)],
    # module loading on first launch: the driver call and CUPTI's overhead record
    "module": [("cuda_driver", "cuModuleLoadData", j * 20_000.0, 10_000) for j in range(4)]
    + [("overhead", "Lazy Function Loading", j * 20_000.0 + 10_000, 10_000) for j in range(4)],
}


def startup_trace(work: list[str], *, first: int = 0) -> dict[str, Any]:
    """Item 6: one step per entry of ``work`` from ProfilerStep#``first``: a STARTUP_WORK kind is a 100 ms warm-up
    step, 80 ms of that start-up work and then the steady body; '' is a steady 10 ms step, the body alone: three
    1 ms kernels launched 2 ms apart (GPU busy 30%, the idle is host wait). Every step runs under a
    "Torch-Compiled Region" with a "TorchDynamo Cache Lookup", as every step of a compiled model does: not start-up."""
    events = []
    corr, lo = 0, 0.0
    for i, kind in enumerate(work):
        length = 100_000.0 if kind else 10_000.0
        body = lo + length - 10_000.0
        events += [
            ev("user_annotation", f"ProfilerStep#{first + i}", lo, length),
            ev("cpu_op", "TorchDynamo Cache Lookup", body + 10, 20),
            ev("cpu_op", "Torch-Compiled Region: 0/0", body + 50, 9_000),
            ev("cpu_op", "CompiledFunction", body + 60, 8_900),
        ]
        events += [ev(cat, name, lo + 100 + at, dur) for cat, name, at, dur in STARTUP_WORK.get(kind, [])]
        for j in range(3):
            corr += 1
            t = body + 1000 + j * 2000
            events += [
                ev("cuda_runtime", "cudaLaunchKernel", t - 20, 5, correlation=corr),
                ev("kernel", "void at::native::vectorized_elementwise_kernel<4>", t, 1000, stream=7, correlation=corr),
            ]
        lo += length
    return _doc(events, "NVIDIA H100 80GB HBM3", (9, 0))


def graph_launch_trace(*, fp32: bool) -> dict[str, Any]:
    """Item 8: one ProfilerStep in which the host issues 25 cudaGraphLaunch calls in 26 ms and then waits; each graph
    runs ten 0.6 ms GEMMs back to back, the GPU busy 150 ms after the first launch (fp32 SIMT or bf16 tensor-core)."""
    name = "ampere_sgemm_128x64_nn" if fp32 else "ampere_bf16_s16816gemm_bf16_128x128"
    events, t = [], 0.0
    for i in range(25):
        events.append(ev("cuda_runtime", "cudaGraphLaunch", t, 1000, correlation=i + 1))
        events += [ev("kernel", name, 1100 + (i * 10 + j) * 600, 599.5, stream=7, correlation=i + 1) for j in range(10)]
        t += 1040
    events.append(ev("cuda_runtime", "cudaDeviceSynchronize", t + 10, 1100 + 150_000 - t, correlation=999))
    events.insert(0, ev("user_annotation", "ProfilerStep#0", 0, t + 20))
    return _doc(events, "NVIDIA A100-SXM4-40GB", (8, 0))


def owned_rows(
    owners: dict[str, float],
    *,
    steps: int = 1,
    wall: float = 100.0,
    copies: float = 0.0,
    comm: float = 0.0,
    fp32: float = 0.0,
    pageable: bool = False,
    kernels: int = 2000,
    frames: tuple[tuple[str, str, float], ...] = (),
    training: bool = False,
) -> list[dict[str, Any]]:
    """Imported-capture rows built from the idle owners' documented meaning (docs/idle-owners.md): ``steps`` steps of
    ``wall`` ms whose GPU idles ``sum(owners)`` ms, each owner holding its ms of it; the busy rest is ``copies`` ms
    filled only by host<->device copies, ``comm`` ms only by communication kernels and the remainder by compute, a
    share ``fp32`` of it SIMT fp32 GEMMs (else tensor-core GEMMs). ``frames``: (owner, user frame, ms) per step."""
    from gpuanalyze.ingest.trace import schema as S
    from tests.conftest import make_row

    idle = sum(owners.values())
    busy = wall - idle
    compute = max(0.0, busy - copies - comm)
    stats = S.KernelStats(
        gpu_span_ms=wall,
        gpu_busy_ms=busy,
        compute_ms=compute,
        non_compute_ms=copies + comm,
        comm_exposed_ms=comm,
        copy_busy_ms=copies,
        gemm_simt_fp32_ms=compute * fp32,
        gemm_tensor_core_ms=compute * (1 - fp32),
        communication_ms=comm,
        memcpy_ms=copies,
        memcpy_h2d_ms=copies / 2,
        memcpy_d2h_ms=copies / 2,
        memcpy_pageable_ms=copies if pageable else 0.0,
        idle_host_wait_ms=idle,
        window_idle_ms=idle,
        kernel_count=kernels,
        kernel_median_us=1e3 * busy / kernels,
        owner_frames=tuple(S.OwnerFrame(owner=o, frame=f, ms=ms) for o, f, ms in frames),
        owners=True,
        **{S.owner_field(o): ms for o, ms in owners.items()},
    )
    rows = []
    for i in range(steps):
        data, sync = owners.get("data_loader", 0.0), owners.get("sync", 0.0)
        row = make_row(i, wall=wall, data=data, fwd=0.0, bwd=0.0, opt=0.0, sync=sync, busy=busy, samples=None)
        row[S.FORWARD_MS] = row[S.BACKWARD_MS] = None
        if training:
            row[S.BACKWARD_MS] = row[S.OTHER_MS] * 0.5
            row[S.OTHER_MS] *= 0.5
        row[S.KERNEL_STATS] = S.encode_kernel_stats(stats)
        rows.append(row)
    return rows


#: The run of owned_rows: an imported capture on an H100.
OWNED_RUN = {"source": "kineto:synthetic.json", "gpu_name": "NVIDIA H100 80GB HBM3", "compute_capabilities": ["9.0"]}

"""Build small synthetic Kineto traces with known answers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def ev(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": args}


def two_step_trace(*, rank: int | None = 0, world: int = 1) -> dict[str, Any]:
    """Two 1000 us steps. Step 0: 300 us DataLoader wait, kernels 400..600 and 650..750 (a 50 us gap
    whose kernel was launched at 620, after the gap began: host wait); sgemm 200 us, elementwise 100 us.
    Step 1: a 100 us cudaDeviceSynchronize, one nccl kernel 1200..1500 alone on the GPU."""
    events = [
        ev("user_annotation", "ProfilerStep#7", 0, 1000),
        ev("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 300),
        ev("cuda_runtime", "cudaLaunchKernel", 350, 10, correlation=1),
        ev("kernel", "volta_sgemm_128x64_nn", 400, 200, stream=7, correlation=1),
        ev("cuda_runtime", "cudaLaunchKernel", 620, 10, correlation=2),
        ev("kernel", "void at::native::vectorized_elementwise_kernel<4>", 650, 100, stream=7, correlation=2),
        ev("cpu_op", "Optimizer.step#SGD.step", 800, 50),
        ev("user_annotation", "ProfilerStep#8", 1000, 1000),
        ev("cuda_runtime", "cudaLaunchKernel", 1100, 10, correlation=3),
        ev("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float", 1200, 300, stream=9, correlation=3),
        ev("cuda_runtime", "cudaDeviceSynchronize", 1150, 100, correlation=4),
    ]
    doc: dict[str, Any] = {
        "schemaVersion": 1,
        "traceEvents": events,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85 * 10**9}],
    }
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    return doc


def write(path: Path, doc: Any, *, gz: bool = False) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def loader_bound_trace(loader_us: float, *, steps: int = 6, step_us: float = 10_000.0) -> dict[str, Any]:
    """``steps`` steps on an A100: each waits ``loader_us`` on the DataLoader (the GPU idle, owned by the loader),
    then launches one GEMM that runs to 100 us before the step ends."""
    events = []
    for i in range(steps):
        lo = i * step_us
        events += [
            ev("user_annotation", f"ProfilerStep#{i + 10}", lo, step_us),
            ev("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", lo, loader_us),
            ev("cuda_runtime", "cudaLaunchKernel", lo + loader_us + 10, 5, correlation=i + 1),
            ev(
                "kernel",
                "ampere_bf16_s16816gemm",
                lo + loader_us + 20,
                step_us - loader_us - 120,
                stream=7,
                correlation=i + 1,
            ),
        ]
    props = [
        {"id": 0, "name": "NVIDIA A100-SXM4-40GB", "totalGlobalMem": 40 * 10**9, "computeMajor": 8, "computeMinor": 0}
    ]
    return {"schemaVersion": 1, "traceEvents": events, "deviceProperties": props}

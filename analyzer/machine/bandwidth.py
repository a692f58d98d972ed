"""Collective bandwidth as nccl-tests defines it (github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md):
algbw = bytes / time; busbw = algbw x a factor that makes the number comparable with the link's
peak whatever the rank count. The benchmarks and the analysis both use these.
"""

from __future__ import annotations


def busbw_factor(kind: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor: all-reduce 2(n-1)/n; all-gather / reduce-scatter (n-1)/n."""
    if kind == "allreduce":
        return 2 * (n - 1) / n
    if kind in ("allgather", "reducescatter"):
        return (n - 1) / n
    return 1.0


def allreduce_bandwidths(size_bytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s, exactly as nccl-tests defines them."""
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * busbw_factor("allreduce", world_size)

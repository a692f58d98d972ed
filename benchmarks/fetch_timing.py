"""What timing the fetch's parts costs per DataLoader fetch (record/patch_fetcher.py: torch's dataset fetcher and its
collate, timed on every fetch of every profiled run), measured side by side in one run: a single-process
DataLoader over an in-memory TensorDataset (batch 8 of 16 floats: the cheapest fetch, where the cost shows most),
plain, with the fetch wrappers the profiler always installed (``__next__``, ``__iter__``) and with the dataset
fetcher's timing added; 5 alternating rounds of 5,000 fetches, the best of each.

    python benchmarks/fetch_timing.py
"""

from __future__ import annotations

import os
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from analyzer.record.patch_fetcher import DatasetCall
from analyzer.record.patches import Patches


def _per_fetch_us(data: TensorDataset, n: int = 5000) -> float:
    it = iter(DataLoader(data, batch_size=8))
    next(it)
    start = time.perf_counter()
    for _ in range(n):
        next(it)
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(100_000, 16))
    best = {"plain": float("inf"), "fetch wrappers": float("inf"), "+ dataset fetcher timed": float("inf")}
    for _ in range(5):
        best["plain"] = min(best["plain"], _per_fetch_us(data))
        for name, cell in (("fetch wrappers", None), ("+ dataset fetcher timed", DatasetCall())):
            patches = Patches()
            patches.install(lambda *a: None, lambda kind: None, cell)
            try:
                best[name] = min(best[name], _per_fetch_us(data))
            finally:
                patches.remove()
    print(f"load average {os.getloadavg()[0]:.2f}; us per fetch (best of 5 rounds of 5,000):")
    for name, us in best.items():
        print(f"  {name:26s} {us:6.2f}  ({us - best['plain']:+.2f})")


if __name__ == "__main__":
    main()

"""Do the cpu backend's numbers agree with numpy's and torch's own? Measured side by side, in one run.

    python benchmarks/cpu_agreement.py [--rounds 5]

For each round: `gpuanalyze bench`'s fp32 matmul (numpy BLAS, 1024^3) against ``torch.matmul``
on the same shape. Best against best (the machine is
shared: the fastest repeat is the least disturbed one). Prints each rate and the ratio ours /
reference; the expectation is a ratio near 1 (0.5-2 on a noisy machine). These were unit tests
once; timings are not tests, so they live here.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np

from gpuanalyze.kernels.backend import select
from gpuanalyze.kernels.matmul import run_matmul


def best_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def matmul_tflops_torch(n: int = 1024) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    a, b = torch.rand(n, n), torch.rand(n, n)
    return 2 * n**3 / best_seconds(lambda: a @ b, 20) / 1e12


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cpu = select("cpu")
    print(f"{cpu.device}, load average {os.getloadavg()[0]:.2f} at start, best of each round")
    print(f"{'round':>5}  {'fp32 mm ours':>12} {'torch':>8} {'ratio':>6}")
    mm_ratios = []
    for i in range(args.rounds):
        results, _ = run_matmul(cpu, quick=True)
        ours_mm = next(r.max for r in results if r.dtype == "float32")
        ref_mm = matmul_tflops_torch()
        mm = f"{ours_mm:12.3f} {ref_mm:8.3f} {ours_mm / ref_mm:6.2f}" if ref_mm else f"{ours_mm:12.3f}  (no torch)"
        if ref_mm:
            mm_ratios.append(ours_mm / ref_mm)
        print(f"{i:>5}  {mm} TFLOP/s")
    if mm_ratios:
        print(f"median ratio: fp32 matmul {np.median(mm_ratios):.2f}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()

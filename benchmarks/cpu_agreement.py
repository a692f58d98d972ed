"""Do the cpu backend's numbers agree with numpy's and torch's own? Measured side by side, in one run.

    python benchmarks/cpu_agreement.py [--rounds 5]

For each round, alternately: `gpuanalyze bench`'s copy kernel (memory_bandwidth, copy, 2^25
float32) against numpy's ``np.copyto`` on arrays of the same size, and its fp32 matmul (numpy
BLAS, 1024^3) against ``torch.matmul`` on the same shape. Best against best (the machine is
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

from gpuanalyze.kernels.babelstream import run_memory
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


def copy_gbps_numpy(n: int = 2**25) -> float:
    a = np.full(n, 0.1, np.float32)
    c = np.empty_like(a)
    return 2 * a.nbytes / best_seconds(lambda: np.copyto(c, a), 10) / 1e9


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
    print(
        f"{'round':>5}  {'copy ours':>10} {'numpy':>10} {'ratio':>6}   {'fp32 mm ours':>12} {'torch':>8} {'ratio':>6}"
    )
    copy_ratios, mm_ratios = [], []
    for i in range(args.rounds):
        ours_copy = next(r.max for r in run_memory(cpu, quick=True) if r.variant == "copy")
        ref_copy = copy_gbps_numpy()
        results, _ = run_matmul(cpu, quick=True)
        ours_mm = next(r.max for r in results if r.dtype == "float32")
        ref_mm = matmul_tflops_torch()
        copy_ratios.append(ours_copy / ref_copy)
        mm = f"{ours_mm:12.3f} {ref_mm:8.3f} {ours_mm / ref_mm:6.2f}" if ref_mm else f"{ours_mm:12.3f}  (no torch)"
        if ref_mm:
            mm_ratios.append(ours_mm / ref_mm)
        print(f"{i:>5}  {ours_copy:7.1f} GB/s {ref_copy:5.1f} GB/s {copy_ratios[-1]:6.2f}   {mm} TFLOP/s")
    print(
        f"median ratio: copy {np.median(copy_ratios):.2f}"
        + (f", fp32 matmul {np.median(mm_ratios):.2f}" if mm_ratios else "")
    )
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()

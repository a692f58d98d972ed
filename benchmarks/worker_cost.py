"""What handing a batch over from a DataLoader worker process costs, on each side, for in-memory
data (no per-sample work): the costs the data-loading projection charges for workers
(analyzer/analysis/thresholds.py WORKER_MAIN_*, WORKER_SIDE_*).

CPU time, not wall time, because the projection shares the host's cores among compute, loading and
the hand-over: the training process's CPU time per batch while it receives batches (main side), and
the workers' CPU time per batch (read from RUSAGE_CHILDREN once they have exited) less what building
the same batch costs in the training process (worker side). Differences between a long and a short
epoch remove the workers' start-up. Wall time per batch for 0/1/2/4 workers is printed alongside,
with what the projection's constants predict for 2 and 4 workers (`model`): the constants are set
from wall time, which CPU time undercounts (scheduling, pipe wake-ups).

    python benchmarks/worker_cost.py [--batches 300]
"""

from __future__ import annotations

import argparse
import os
import resource
import time
import warnings

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from analyzer.analysis import thresholds as T


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def epoch(data: TensorDataset, batch: int, workers: int, n: int) -> tuple[float, float, float]:
    """(wall s, training-process CPU s, worker CPU s) for n batches, workers started and joined."""
    loader = DataLoader(data, batch_size=batch, num_workers=workers)
    kids, cpu, wall = children_cpu_s(), time.process_time(), time.perf_counter()
    it = iter(loader)
    for _ in range(n):
        next(it)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    del it  # workers exit and are reaped: their CPU time lands in RUSAGE_CHILDREN
    return wall, cpu, children_cpu_s() - kids


def per_batch_ms(data: TensorDataset, batch: int, workers: int, n: int) -> tuple[float, float, float]:
    """Per-batch (wall, main CPU, worker CPU) in ms: long minus short epoch, median of 3."""
    runs = []
    for _ in range(3):
        short = epoch(data, batch, workers, n // 4)
        long = epoch(data, batch, workers, n)
        runs.append([(b - a) / (n - n // 4) * 1e3 for a, b in zip(short, long, strict=True)])
    wall, main_cpu, worker_cpu = np.median(np.array(runs), axis=0)
    return float(wall), float(main_cpu), float(worker_cpu)


def model_ms(fetch: float, size_mib: float, workers: int, cores: int) -> float:
    """The data-loading projection's step for a loop with no compute (rules/data_loading.py)."""
    main, side = T.WORKER_MAIN_COST_MS, T.WORKER_SIDE_COST_MS + T.WORKER_SIDE_MS_PER_MIB * size_mib
    return max(main, (fetch + side) / min(workers, cores), (main + fetch + side) / cores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    n = args.batches
    print(f"torch {torch.__version__}; {os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}; ms per batch")
    print(
        f"{'batch bytes':>12} {'fetch cpu':>9} {'main cpu':>9} {'side cpu':>9}"
        f" {'wall w=0':>9} {'w=1':>7} {'w=2':>7} {'model':>7} {'w=4':>7} {'model':>7}"
    )
    cores = os.cpu_count() or 1
    mains, sides, sizes = [], [], []
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    for features in (16, 256, 4096):
        for batch in (1, 32, 256):
            data = TensorDataset(torch.randn((n + 10) * batch, features), torch.randn((n + 10) * batch, 1))
            wall0, fetch, _ = per_batch_ms(data, batch, 0, n)
            runs = {w: per_batch_ms(data, batch, w, n) for w in (1, 2, 4)}
            walls = {w: r[0] for w, r in runs.items()}
            _, main_side, worker_cpu = runs[2]  # the CPU split is read at 2 workers
            side = max(0.0, worker_cpu - fetch)
            size = batch * (features + 1) * 4
            mains.append(main_side)
            sides.append(side)
            sizes.append(size / 2**20)
            print(
                f"{size:>12,} {fetch:>9.3f} {main_side:>9.3f} {side:>9.3f}"
                f" {wall0:>9.3f} {walls[1]:>7.3f} {walls[2]:>7.3f} {model_ms(fetch, size / 2**20, 2, cores):>7.3f}"
                f" {walls[4]:>7.3f} {model_ms(fetch, size / 2**20, 4, cores):>7.3f}"
            )
    main_slope, main_base = np.polyfit(np.array(sizes), np.array(mains), 1)
    side_slope, side_base = np.polyfit(np.array(sizes), np.array(sides), 1)
    print(
        f"fit (2 workers): training process {main_base:.2f} ms + {main_slope:.2f} ms per MiB; "
        f"worker {side_base:.2f} ms + {side_slope:.2f} ms per MiB"
    )


if __name__ == "__main__":
    main()

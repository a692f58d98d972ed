"""What passing a batch from DataLoader worker processes costs, side by side with loading in the
training process, for in-memory data (no per-sample work): the per-batch cost the data-loading
projection charges for workers (analyzer/analysis/thresholds.py WORKER_BATCH_COST_MS and
WORKER_COST_MS_PER_MIB).

    python benchmarks/worker_cost.py [--workers 2] [--batches 200]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


def per_batch_ms(loader: DataLoader, n: int) -> float:
    it = iter(loader)
    next(it)  # workers started, first batch delivered
    t0 = time.perf_counter()
    for _ in range(n):
        next(it)
    return (time.perf_counter() - t0) / n * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}; {args.workers} worker(s); ms per batch, median of the iteration time")
    print(f"{'batch bytes':>12} {'main process':>13} {'workers':>9} {'extra':>7}")
    for features in (16, 256, 4096):
        for batch in (1, 32, 256):
            n = args.batches
            data = TensorDataset(torch.randn((n + 10) * batch, features), torch.randn((n + 10) * batch, 1))
            main_ms = per_batch_ms(DataLoader(data, batch_size=batch, num_workers=0), n)
            workers_ms = per_batch_ms(DataLoader(data, batch_size=batch, num_workers=args.workers), n)
            size = batch * (features + 1) * 4
            print(f"{size:>12,} {main_ms:>13.3f} {workers_ms:>9.3f} {workers_ms - main_ms / args.workers:>7.3f}")


if __name__ == "__main__":
    main()

"""The bf16 / float32 matmul speed-up of this CPU by shape, as the recorder's replay measures it.

    python benchmarks/bf16_replay.py [--threads N]

For each shape (M x K times K x N, torch.mm) it prints the float32 rate, the bf16 rate from bf16 inputs, the bf16
rate from float32 inputs cast first (what autocast does in forward), in GFLOP/s, and the two speed-ups, side by
side: the per-shape numbers record/bf16_replay.py measures for a run's own matmuls instead of a per-flag bound.
Also the load average (other work on the host slows all three alike: they are interleaved).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from analyzer.record.bf16_replay import _time_shape
from analyzer.record.run_facts import cpu_bf16

SHAPES = ((2, 64, 128), (64, 64, 64), (128, 128, 128), (256, 256, 256), (128, 1024, 2048), (1024, 1024, 1024))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), bf16 flags {cpu_bf16()!r}, load {os.getloadavg()[0]:.2f}"
    )
    print(f"{'M x K x N':>18} {'fp32':>9} {'bf16':>9} {'bf16+cast':>9}  {'bf16/fp32':>9} {'cast/fp32':>9}  (GFLOP/s)")
    for m, k, n in SHAPES:
        got = _time_shape("aten::mm", ((m, k), (k, n)), ())
        if got is None:
            continue
        flops = 2 * m * k * n / 1e9
        print(
            f"{f'{m} x {k} x {n}':>18} {flops / got.fp32:9.1f} {flops / got.bf16:9.1f} {flops / got.cast:9.1f}  "
            f"{got.fp32 / got.bf16:9.2f} {got.fp32 / got.cast:9.2f}"
        )
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())

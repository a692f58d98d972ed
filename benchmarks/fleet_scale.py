"""`gpuanalyze fleet` over many runs: time and peak memory (driver and workers).

    python benchmarks/fleet_scale.py                      # 1,000 synthetic runs (the goal)
    python benchmarks/fleet_scale.py --runs 200 --workers 2 --engine ray
    python benchmarks/fleet_scale.py --runs 500 --steps 30 --dir /tmp/fleet500   # 500 tiny runs (goal: <= 10 s)

Generates --runs synthetic runs into --dir (kept and reused) with tests/scale_fixtures.py: nine in
ten are one rank, one in ten a directory of 4 ranks with a straggler, one in a hundred a broken
file; 200 steps each. Then triages them with ``analyzer.fleet.triage.triage`` (the engine's
process pool, each worker analysing one run at a time) and prints the wall time, the runs per
second, and the peak RSS of the driver and of the largest worker (getrusage). Prints the load
average next to the timing: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "ingest"), str(ROOT / "kernels")]  # this checkout's, not an install's


def load() -> str:
    """The 1/5/15-minute load averages (as `uptime` prints them)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def generate(directory: Path, runs: int, steps: int) -> float:
    from tests.scale_fixtures import write_ranks

    marker = directory / ".complete"
    if marker.exists() and marker.read_text() == f"{runs}x{steps}":
        return 0.0
    t0 = time.perf_counter()
    for i in range(runs):
        run = directory / f"team{i % 10}" / f"run{i:05d}"
        run.mkdir(parents=True, exist_ok=True)
        if i % 100 == 99:
            (run / "trace.arrow").write_bytes(b"truncated by a full disk")
        elif i % 10 == 9:
            write_ranks(run, 4, steps, seed=i, stragglers={i % 4: ("forward", 1.0 + i % 7)})
        else:
            (path,) = write_ranks(run, 1, steps, seed=i, stragglers={0: ("data", float(i % 13))})
            path.rename(run / "trace.arrow")
    marker.write_text(f"{runs}x{steps}")
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--workers", type=int, default=None, help="default: the cores")
    parser.add_argument("--engine", default="local", choices=("local", "ray"))
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "gpuanalyze-fleet-bench")
    args = parser.parse_args()

    from analyzer.fleet.fleet_options import FleetOptions, RunLength
    from analyzer.fleet.triage import triage
    from analyzer.measure.engine import cores

    took = generate(args.dir, args.runs, args.steps)
    if took:
        print(f"generated {args.runs:,} runs x {args.steps} steps in {args.dir} in {took:.1f} s")
    options = FleetOptions(
        length=RunLength(price_per_gpu_hour=2.5, steps_per_run=1e6), engine=args.engine, workers=args.workers
    )
    t0 = time.perf_counter()
    fleet = triage(str(args.dir), options)
    seconds = time.perf_counter() - t0
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    driver, workers = me.ru_maxrss / 1024, kids.ru_maxrss / 1024
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    print(
        f"fleet: {len(fleet.rows):,} runs analysed, {len(fleet.skipped):,} skipped, in {seconds:.1f} s "
        f"({(len(fleet.rows) + len(fleet.skipped)) / seconds:.1f} runs/s) on {args.engine} "
        f"with {args.workers or cores()} worker(s); load average {load()}"
    )
    print(f"CPU {cpu:.1f} s (driver and workers; generation included when it ran); budget for 500 tiny runs: 10 s")
    print(f"peak RSS: driver {driver:.0f} MiB, largest worker {workers:.0f} MiB")
    top = fleet.rows[0]
    print(f"top: {top.run} ({top.bottleneck}) saves ${top.saved_usd_per_run:,.2f} per run")


if __name__ == "__main__":
    main()

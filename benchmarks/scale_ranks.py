"""Analysis time and memory for a large multi-rank run: 256 ranks x 10,000 steps by default.

    python benchmarks/scale_ranks.py [--ranks 256] [--steps 10000]

Generates one trace file per rank (synthetic timings, rank 7 made slow in its forward pass) in
a temporary directory, then times `analyzer.analyze(DIR)` (load all ranks, metrics, straggler
query, classification) and reports the process's peak resident memory. Target: <= 10 s.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from analyzer import analyze
from gpuanalyze.ingest import schema as S


def write_rank(directory: Path, rank: int, ranks: int, steps: int, rng: np.random.Generator) -> None:
    fwd = rng.normal(5.0, 0.2, steps) + (4.0 if rank == 7 else 0.0)
    bwd, data, opt = rng.normal(8.0, 0.3, steps), rng.normal(1.0, 0.1, steps), np.full(steps, 1.0)
    work = fwd + bwd + data + opt
    wall = np.full(steps, 20.0) + rng.normal(0, 0.05, steps)
    sync = np.maximum(wall - work, 0.0)
    cols = {
        S.STEP: np.arange(steps),
        S.RANK: np.full(steps, rank, np.int32),
        S.START_UNIX_NS: np.arange(steps) * 20_000_000,
        S.WALL_MS: wall,
        S.DATA_WAIT_MS: data,
        S.H2D_MS: None,
        S.FORWARD_MS: fwd,
        S.BACKWARD_MS: bwd,
        S.OPTIMIZER_MS: opt,
        S.SYNC_MS: sync,
        S.OTHER_MS: np.maximum(wall - work - sync, 0.0),
        S.GPU_BUSY_MS: None,
        S.BATCH_SAMPLES: np.full(steps, 32),
        S.PEAK_MEM_BYTES: None,
        S.KERNEL_STATS: None,
    }
    schema = S.arrow_schema({"world_size": ranks, "rank": rank})
    arrays = [
        pa.nulls(steps, f.type) if cols[f.name] is None else pa.array(cols[f.name], type=f.type) for f in S.FIELDS
    ]
    table = pa.Table.from_arrays(arrays, schema=schema)
    with pa.OSFile(str(directory / f"trace.rank{rank}.arrow"), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
        w.write_table(table, max_chunksize=1000)
        w.write_batch(pa.RecordBatch.from_pylist([], schema=schema), custom_metadata={S.END_KEY: b'{"status": "ok"}'})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        t0 = time.perf_counter()
        for rank in range(args.ranks):
            write_rank(directory, rank, args.ranks, args.steps, rng)
        gen = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in directory.iterdir())
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        report = analyze(directory)
        took = time.perf_counter() - t0
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    s = report.metrics.distributed.stragglers
    print(
        f"{args.ranks} ranks x {args.steps} steps = {args.ranks * args.steps:,} rows, {size / 1e6:.0f} MB on disk "
        f"(generated in {gen:.1f} s)"
    )
    print(f"analyze(DIR): {took:.2f} s; peak RSS {rss1 / 1024:.0f} MiB (was {rss0 / 1024:.0f} MiB before analysis)")
    print(f"verdict {report.bottleneck}; stragglers {[(x.rank, x.phase, round(x.excess_ms, 2)) for x in s]}")


if __name__ == "__main__":
    main()

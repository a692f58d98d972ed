"""Time and size of the HTML report for a large multi-rank run: 1024 ranks x 10,000 steps by default.

    python benchmarks/report_speed.py [--ranks 1024] [--steps 10000] [--keep report.html]

Writes one synthetic trace file per rank (rank 7 slow in its forward pass, so there is a
straggler to outline) into a temporary directory, then runs what `gpuanalyze report DIR` runs,
timing each stage: load (read every rank file), analyze, render (chart aggregation in polars +
plotly figures + page), write. Goal: report (render + write) under 10 s and the file under 10 MB.
The machine is shared, so the load average is printed with the numbers.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the synthetic run in tests/report_helpers

from analyzer.api import analyze
from analyzer.files import write_bytes
from analyzer.render.html_report import render_html
from gpuanalyze.ingest.sources import load_any
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo
from tests.report_helpers import synthetic_table


def write_rank(directory: Path, rank: int, ranks: int, steps: int, rng: np.random.Generator) -> None:
    run = RunInfo(world_size=ranks, rank=rank, gpu_name="NVIDIA H100 80GB HBM3", gpu_memory_bytes=80 * 2**30)
    schema = S.arrow_schema(run)
    ranks_col = np.full(steps, rank, np.int32)
    table = synthetic_table(ranks_col, np.arange(steps, dtype=np.int64), rng, straggler=7, schema=schema)
    with pa.OSFile(str(directory / f"trace.rank{rank}.arrow"), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
        w.write_table(table, max_chunksize=10_000)
        S.write_end_marker(w, schema, EndInfo(status="ok", steps=steps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, help="Also keep the report here.")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "run"
        directory.mkdir()
        t0 = time.perf_counter()
        for rank in range(args.ranks):
            write_rank(directory, rank, args.ranks, args.steps, rng)
        gen = time.perf_counter() - t0
        times = {}
        t0 = time.perf_counter()
        trace = load_any(directory)
        times["load"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        report = analyze(trace)
        times["analyze"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        page = render_html(report, trace).encode()
        times["render"] = time.perf_counter() - t0
        out = Path(tmp) / "report.html"
        t0 = time.perf_counter()
        write_bytes(out, page, force=False)
        times["write"] = time.perf_counter() - t0
        if args.keep:
            write_bytes(args.keep, page, force=True)
    load1, load5, _ = os.getloadavg()
    rows = args.ranks * args.steps
    print(f"{args.ranks} ranks x {args.steps} steps = {rows:,} rows (generated in {gen:.1f} s)")
    print(", ".join(f"{k} {v:.2f} s" for k, v in times.items()))
    print(
        f"report (render + write): {times['render'] + times['write']:.2f} s; "
        f"end to end (load + analyze + report): {sum(times.values()):.2f} s"
    )
    print(f"report file: {len(page) / 1e6:.2f} MB; verdict {report.bottleneck}")
    print(f"load average (1 min, 5 min): {load1:.2f}, {load5:.2f} on {os.cpu_count()} CPU(s)")


if __name__ == "__main__":
    main()

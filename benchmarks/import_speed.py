"""Kineto import speed and memory vs HolisticTraceAnalysis, side by side on the same files.

    pip install holistictraceanalysis   # optional benchmark dependency (extra "bench")
    python benchmarks/import_speed.py [TRACE.json.gz ...]   # default: the largest ../shared/external_traces

For each file: gpuanalyze's parse + import (ingest.kineto_import.load_kineto) and HTA's
``TraceAnalysis(trace_dir=...)`` parse, alternating, median of --repeats; MB/s of uncompressed
JSON; the speed ratio; and gpuanalyze's peak traced memory (tracemalloc), in MB and as a multiple of
the uncompressed JSON size (the streaming reader's buffers are fixed, ~16 MB, so small files show a
large multiple; benchmarks/import_memory.py measures a 2 GB trace). Target: ratio >= 5.
"""

from __future__ import annotations

import argparse
import gzip
import logging
import os
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from gpuanalyze.ingest.kineto_import import load_kineto

DEFAULT_DIR = Path(__file__).resolve().parent.parent.parent / "shared" / "external_traces" / "hta"


def ours(path: Path) -> float:
    t0 = time.perf_counter()
    load_kineto(path)
    return time.perf_counter() - t0


def hta_parse(path: Path) -> float:
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / path.name).symlink_to(path)
        t0 = time.perf_counter()
        TraceAnalysis(trace_dir=tmp)
        return time.perf_counter() - t0


def peak_traced(path: Path) -> int:
    tracemalloc.start()
    load_kineto(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    files = args.traces or sorted(DEFAULT_DIR.rglob("*.json.gz"), key=lambda p: p.stat().st_size, reverse=True)[:3]
    logging.disable(logging.WARNING)
    try:
        import hta  # noqa: F401

        have_hta = True
    except ImportError:
        have_hta = False
        print("HTA is not installed (pip install holistictraceanalysis): printing gpuanalyze's numbers only")
    for path in files:
        size = len(gzip.decompress(path.read_bytes())) if path.suffix == ".gz" else path.stat().st_size
        mine, theirs = [], []
        for _ in range(args.repeats):
            mine.append(ours(path))
            if have_hta:
                theirs.append(hta_parse(path))
        m = statistics.median(mine)
        line = f"{path.name}: {size / 1e6:.1f} MB JSON | gpuanalyze {m * 1e3:.0f} ms ({size / m / 1e6:.0f} MB/s)"
        if theirs:
            h = statistics.median(theirs)
            line += f" | HTA {h * 1e3:.0f} ms ({size / h / 1e6:.1f} MB/s) | speed-up {h / m:.1f}x"
        peak = peak_traced(path)
        line += f" | peak traced memory {peak / 1e6:.0f} MB ({peak / size:.2f}x JSON) | load {os.getloadavg()[0]:.2f}"
        print(line)


if __name__ == "__main__":
    main()

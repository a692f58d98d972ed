"""Kineto import speed and memory vs HolisticTraceAnalysis, side by side on the same files.

    pip install holistictraceanalysis   # optional benchmark dependency (extra "bench")
    python benchmarks/import_speed.py [TRACE.json.gz ...]   # default: the largest ../shared/external_traces

For each file: gpuanalyze's parse + import (ingest.kineto_import.load_kineto) and HTA's
``TraceAnalysis(trace_dir=...)`` parse, alternating, median of --repeats; MB/s of uncompressed
JSON; the speed ratio; and gpuanalyze's peak traced memory (tracemalloc), in MB and as a multiple of
the uncompressed JSON size (the streaming reader's buffers are fixed, ~16 MB, so small files show a
large multiple; benchmarks/import_memory.py measures a large trace). Beside them, the floor: the same file only
inflated (zlib, in 8 MiB chunks), and inflated and parsed by a plain streaming JSON parser (ijson's C backend,
``ijson.items(fh, "traceEvents.item")``, when installed), and gpuanalyze's time as a multiple of each.
Target (issue #41): >= 10x HTA's parse.

    python benchmarks/import_speed.py --against REV [TRACE ...]   # this checkout against a git revision

``--against``: the same import by this checkout and by REV (a temporary ``git worktree``), each in its own
process, rounds alternating, best of --repeats inside each round; prints the medians over the rounds of wall and
CPU time (``time.process_time``, every thread) and their ratios (this / REV), so a change is judged against the
code before it on the same machine at the same time.
"""

from __future__ import annotations

import argparse
import gzip
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import zlib
from pathlib import Path

from gpuanalyze.ingest.kineto.parse import load_kineto

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


def inflated(path: Path) -> float:
    """Seconds to read and inflate the file, nothing parsed."""
    t0 = time.perf_counter()
    with open(path, "rb") as fh:
        d = zlib.decompressobj(wbits=47)  # gzip or zlib header, detected
        while chunk := fh.read(8 << 20):
            d.decompress(chunk) if path.suffix == ".gz" else None
    return time.perf_counter() - t0


def streamed(path: Path) -> float | None:
    """Seconds to inflate and parse the file with ijson's C backend (None without ijson)."""
    try:
        import ijson
    except ImportError:
        return None
    t0 = time.perf_counter()
    with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as fh:
        for _ in ijson.items(fh, "traceEvents.item"):
            pass
    return time.perf_counter() - t0


def peak_traced(path: Path) -> int:
    tracemalloc.start()
    load_kineto(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


ROOT = Path(__file__).resolve().parent.parent
#: What each process runs: the import, best of N, as (wall seconds, CPU seconds of the process). A busy machine's
#: other work stretches wall time; CPU time counts every thread of ours (the read-ahead thread too).
_CHILD = """
import sys, time, logging
logging.disable(logging.WARNING)
from gpuanalyze.ingest.kineto.parse import load_kineto
runs = []
for _ in range(int(sys.argv[2])):
    w, c = time.perf_counter(), time.process_time()
    load_kineto(sys.argv[1])
    runs.append((time.perf_counter() - w, time.process_time() - c))
print(min(r[0] for r in runs), min(r[1] for r in runs))
"""


def _timed(tree: Path, path: Path, repeats: int) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(tree / d) for d in (".", "ingest", "kernels"))}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path.resolve()), str(repeats)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    wall, cpu = out.stdout.split()[-2:]
    return float(wall), float(cpu)


def against(rev: str, files: list[Path], repeats: int, rounds: int) -> None:
    """This checkout's import beside REV's, alternating rounds (module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        ref = Path(tmp) / "ref"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(ref), rev], check=True)
        try:
            for path in files:
                mine: list[tuple[float, float]] = []
                theirs: list[tuple[float, float]] = []
                for i in range(rounds):
                    order = [(ROOT, mine), (ref, theirs)]
                    for tree, out in order if i % 2 == 0 else order[::-1]:
                        out.append(_timed(tree, path, repeats))
                mw, tw = (statistics.median(x[0] for x in r) for r in (mine, theirs))
                mc, tc = (statistics.median(x[1] for x in r) for r in (mine, theirs))
                print(
                    f"{path.name}: wall this {mw * 1e3:.0f} ms / {rev} {tw * 1e3:.0f} ms = {mw / tw:.3f}; CPU this "
                    f"{mc * 1e3:.0f} ms / {rev} {tc * 1e3:.0f} ms = {mc / tc:.3f} (best of {repeats}, median of "
                    f"{rounds} alternating rounds) | load {os.getloadavg()[0]:.2f}"
                )
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(ref)], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--against", metavar="REV", help="compare with the import of this git revision")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds with --against")
    args = parser.parse_args()
    files = args.traces or sorted(DEFAULT_DIR.rglob("*.json.gz"), key=lambda p: p.stat().st_size, reverse=True)[:3]
    if args.against:
        against(args.against, files, args.repeats, args.rounds)
        return
    logging.disable(logging.WARNING)
    try:
        import hta  # noqa: F401

        have_hta = True
    except ImportError:
        have_hta = False
        print("HTA is not installed (pip install holistictraceanalysis): printing gpuanalyze's numbers only")
    for path in files:
        size = len(gzip.decompress(path.read_bytes())) if path.suffix == ".gz" else path.stat().st_size
        mine, theirs, gunzip, plain = [], [], [], []
        for _ in range(args.repeats):
            mine.append(ours(path))
            gunzip.append(inflated(path))
            plain.append(streamed(path))
            if have_hta:
                theirs.append(hta_parse(path))
        m = statistics.median(mine)
        line = f"{path.name}: {size / 1e6:.1f} MB JSON | gpuanalyze {m * 1e3:.0f} ms ({size / m / 1e6:.0f} MB/s)"
        if theirs:
            h = statistics.median(theirs)
            line += f" | HTA {h * 1e3:.0f} ms ({size / h / 1e6:.1f} MB/s) | speed-up {h / m:.1f}x"
        g = statistics.median(gunzip)
        line += f" | floor: inflate {g * 1e3:.0f} ms (ours {m / g:.1f}x)"
        if None not in plain:
            j = statistics.median(x for x in plain if x is not None)
            line += f", inflate + ijson parse {j * 1e3:.0f} ms (ours {m / j:.2f}x)"
        peak = peak_traced(path)
        line += f" | peak traced memory {peak / 1e6:.0f} MB ({peak / size:.2f}x JSON) | load {os.getloadavg()[0]:.2f}"
        print(line)


if __name__ == "__main__":
    main()

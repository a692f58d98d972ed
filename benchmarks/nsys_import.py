"""Nsight Systems SQLite import against its floor, plain sqlite3 reading the same tables, side by side in one run.

    python benchmarks/nsys_import.py                  # the shared 2-rank export repeated to ~1 GB (k_copies.py)
    python benchmarks/nsys_import.py --k 100          # x100 (241 MB)
    python benchmarks/nsys_import.py --source EXPORT.sqlite --k 1
    python benchmarks/nsys_import.py --one-process    # the same ~1 GB as one process: the most one conversion holds
    python benchmarks/nsys_import.py --steps          # with a ProfilerStep range per iteration (step ranges)
    python benchmarks/nsys_import.py --against DIR    # also another checkout's importer, side by side

The export is built in a temporary directory (its size printed; deleted afterwards unless --keep) from --source
repeated --k times (default: as many copies as make --size). Each side runs in a fresh process, alternating,
--repeats times:

- gpuanalyze: ``gpuanalyze.ingest.sources.load_nsys`` (every table read, rows per rank and step);
- floor: the standard library's sqlite3 iterating every row and column (``SELECT *``) of the kernel, runtime,
  memcpy, memset, synchronization, NVTX and StringIds tables, nothing kept ("read in full");
- floor, its columns: the same tables, only the columns the importer reads (names as ids): the tighter floor;
- with ``--against DIR``: ``load_nsys`` of the checkout at DIR (a branch, main), its ratio to this one's printed.

Prints wall and CPU seconds (the child's ``process_time``), peak RSS (VmHWM) and the load average around each run
(the machine is shared: CPU time is the steadier number), then the ratios of the medians. Goals (issue #41, 1 GB):
time <= 2x the floor, peak RSS <= 600 MiB. Then the verdict and mean step time of the source and of its copies
(``analyzer.analyze``): a longer capture of the same run must give the same answer.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT.parent / "shared" / "nsys_traces" / "nsysai_mfu_train_2gpu_before.sqlite"
TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
    "StringIds",
)
#: The columns the importer reads, per table (the tighter floor).
COLUMNS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": "start, end, globalPid, streamId, correlationId, demangledName",
    "CUPTI_ACTIVITY_KIND_RUNTIME": "start, end, globalTid, correlationId, nameId",
    "CUPTI_ACTIVITY_KIND_MEMCPY": "start, end, globalPid, streamId, correlationId, copyKind, srcKind, dstKind",
    "CUPTI_ACTIVITY_KIND_MEMSET": "start, end, globalPid, streamId, correlationId, memKind",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": "globalPid, correlationId",
    "NVTX_EVENTS": "start, end, globalTid, text, textId",
    "StringIds": "id, value",
}
_CHILD = r"""
import sys, time
sys.path[:0] = [{root!r}, {root!r} + "/ingest", {root!r} + "/kernels"]
wall, cpu = time.perf_counter(), time.process_time()
if {mode!r} == "gpuanalyze":
    import logging
    logging.disable(logging.WARNING)
    from pathlib import Path
    from gpuanalyze.ingest.sources import load_nsys
    rows = load_nsys(Path({path!r})).frame.height
else:
    import sqlite3
    conn = sqlite3.connect("file:" + {path!r} + "?mode=ro&immutable=1", uri=True)
    tables = {{n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}}
    rows = 0
    for table, columns in {queries!r}.items():
        if table in tables:
            cur = conn.execute(f"SELECT {{columns}} FROM {{table}}")
            while batch := cur.fetchmany(8192):
                rows += len(batch)
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(time.perf_counter() - wall, time.process_time() - cpu, int(hwm.split()[1]) / 1024, rows)
"""
MODES = {
    "gpuanalyze": {},
    "floor": dict.fromkeys(TABLES, "*"),
    "floor, its columns": COLUMNS,
}


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def run(mode: str, path: Path, root: Path = ROOT) -> tuple[float, float, float, int]:
    code = _CHILD.format(root=str(root), path=str(path), mode=mode, queries=MODES[mode])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{mode} failed on {path}:\n{out.stderr[-3000:]}")
    wall, cpu, rss, rows = out.stdout.split()
    return float(wall), float(cpu), float(rss), int(rows)


def verdicts(source: Path, path: Path) -> None:
    code = (
        "import sys, logging; logging.disable(logging.WARNING); from analyzer.api import analyze; "
        "r = analyze(sys.argv[1]); print(r.bottleneck, r.metrics.step_mean_ms, r.metrics.steps)"
    )
    for p in (source, path):
        out = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, cwd=ROOT, check=True)
        verdict, mean, steps = out.stdout.split()
        print(f"  {p.name}: verdict {verdict}, mean step {float(mean):.2f} ms, {int(steps):,} steps analysed")


def compare(path: Path, repeats: int, against: Path | None = None) -> None:
    other = f"at {against.name}" if against else ""
    roots = {m: ROOT for m in MODES} | ({other: against} if against else {})
    results: dict[str, list[tuple[float, float, float, int]]] = {m: [] for m in roots}
    for i in range(repeats):
        for mode in list(roots) if i % 2 == 0 else list(roots)[::-1]:
            before = load()
            r = run(mode if mode in MODES else "gpuanalyze", path, roots[mode])
            results[mode].append(r)
            print(
                f"  {mode:18s}: wall {r[0]:6.2f} s, CPU {r[1]:6.2f} s, peak RSS {r[2]:5.0f} MiB "
                f"| load before {before}, after {load()}"
            )
    med = {m: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for m, v in results.items()}
    peak = {m: max(r[2] for r in v) for m, v in results.items()}
    for floor in ("floor", "floor, its columns"):
        print(
            f"  gpuanalyze / {floor}: wall {med['gpuanalyze'][0] / med[floor][0]:.2f}x, CPU "
            f"{med['gpuanalyze'][1] / med[floor][1]:.2f}x (medians of {repeats})"
        )
    if against:
        print(
            f"  gpuanalyze / gpuanalyze {other}: CPU {med['gpuanalyze'][1] / med[other][1]:.2f}x, peak RSS "
            f"{peak['gpuanalyze']:.0f} / {peak[other]:.0f} MiB (rows {results['gpuanalyze'][0][3]:,} / "
            f"{results[other][0][3]:,})"
        )
    goal = "met" if peak["gpuanalyze"] <= 600 else f"NOT met (by {peak['gpuanalyze'] - 600:.0f} MiB)"
    ratio = med["gpuanalyze"][1] / med["floor"][1]
    print(f"  goals: CPU <= 2x the floor: {'met' if ratio <= 2 else 'NOT met'}; peak RSS <= 600 MiB: {goal}")


def with_steps(src: Path, dst: Path) -> Path:
    """``dst``: ``src`` with a ``ProfilerStep#`` NVTX range on each rank's loop thread (the thread with the most
    runtime calls) per step its import finds (iterations, for the shared exports): a capture with step ranges."""
    from gpuanalyze.ingest.nsys.db import NsysDb
    from gpuanalyze.ingest.nsys.events import NsysEvents
    from gpuanalyze.ingest.nsys.load import load_nsys_ranks
    from gpuanalyze.ingest.nsys.meta import read_meta
    from gpuanalyze.ingest.trace.byte_source import ReadLimits

    logging.disable(logging.WARNING)
    with NsysDb(src) as db:
        meta = read_meta(db)
        epoch, keys = meta.epoch_ns or 0, NsysEvents(db, meta, ReadLimits(), None).keys
    shutil.copyfile(src, dst)
    conn = sqlite3.connect(dst)
    for key, trace in zip(keys, load_nsys_ranks(src), strict=True):
        pid = "((globalTid >> 24) & 16777215)"
        sql = f"SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE {pid} = ? GROUP BY 1 ORDER BY count(*) DESC"
        (tid,) = conn.execute(sql, (key,)).fetchone()
        f = trace.frame
        rows = [
            (round(t - epoch), round(t - epoch + w * 1e6), 59, "ProfilerStep#", tid)
            for t, w in zip(f["start_unix_ns"].to_list(), f["wall_ms"].to_list(), strict=True)
        ]
        conn.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?,?,?,?,?)", rows)
    conn.commit()
    conn.close()
    return dst


def number_steps(path: Path) -> None:
    """Number the copies' ProfilerStep ranges in order (a repeated number is a restarted step)."""
    conn = sqlite3.connect(path)
    conn.execute("UPDATE NVTX_EVENTS SET text = 'ProfilerStep#' || rowid WHERE text = 'ProfilerStep#'")
    conn.commit()
    conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--k", type=int, default=None, help="copies of the source (default: as many as make --size)")
    parser.add_argument("--size", type=float, default=1e9, help="bytes the copies should reach (default 1e9)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--keep", type=Path, default=None, help="keep the export at this path (reused if there)")
    parser.add_argument(
        "--one-process", action="store_true", help="relabel every rank onto one process first: all events in one"
    )
    parser.add_argument(
        "--steps", action="store_true", help="a ProfilerStep NVTX range per iteration the source's import finds"
    )
    parser.add_argument("--against", type=Path, default=None, help="another checkout whose importer runs beside")
    args = parser.parse_args()
    if args.against is not None and not (args.against / "ingest" / "gpuanalyze").is_dir():
        parser.error(f"--against {args.against}: not a gpuanalyze checkout (no ingest/gpuanalyze in it)")
    sys.path.insert(0, str(ROOT))
    from benchmarks.k_copies import one_process, repeat_nsys

    k = args.k or max(1, math.ceil(args.size / args.source.stat().st_size))
    tmp = None
    path = args.keep
    if path is None:
        tmp = Path(tempfile.mkdtemp(prefix="gpuanalyze-nsys-bench-"))
        path = tmp / f"x{k}.sqlite"
    try:
        if not path.exists():
            free = shutil.disk_usage(path.parent).free
            if free < 1.5 * k * args.source.stat().st_size:
                raise SystemExit(f"{path.parent}: {free / 1e9:.1f} GB free, too little for {k} copies")
            source = with_steps(args.source, path.with_suffix(".steps.sqlite")) if args.steps else args.source
            repeat_nsys(source, path, k) if k > 1 else shutil.copyfile(source, path)
            if args.steps:
                source.unlink()
                number_steps(path)
            if args.one_process:
                print(f"processes {one_process(path)} relabelled as one")
        print(f"{path}: {path.stat().st_size / 1e6:,.0f} MB, {k} copies of {args.source.name} | load {load()}")
        compare(path, args.repeats, args.against)
        verdicts(args.source, path)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

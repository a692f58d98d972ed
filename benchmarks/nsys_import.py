"""Nsight Systems SQLite import: time and peak memory, side by side with plain sqlite3 queries as the floor.

    python benchmarks/nsys_import.py                        # the largest shared export and a synthetic one
    python benchmarks/nsys_import.py --steps 2000 --kernels 2000   # 659 MB, 16 million rows (built once, reused)

Imports run in fresh processes, alternating with the floor --repeats times:

- gpuanalyze: ``gpuanalyze.ingest.sources.load_nsys`` (every table read, Kineto events per rank, step rows);
- floor: the same columns of the kernel, memcpy, runtime and NVTX tables (names joined from StringIds) read with
  the standard library's sqlite3 and iterated, nothing kept: what an ``nsys stats``-style report reads.

The synthetic export is tests/nsys_fixtures.py's: 2 ranks; per step and rank an NVTX step range, a copy,
--kernels kernels with their launches and a cudaStreamSynchronize. Prints time, rows/s, peak RSS (VmHWM)
and the ratios; the goal is peak RSS <= 600 MiB whatever the size.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "nsys_traces"

_CHILD = r"""
import sys, time
sys.path[:0] = [{root!r}, {root!r} + "/ingest", {root!r} + "/kernels"]
from pathlib import Path
t0 = time.perf_counter()
if {mode!r} == "gpuanalyze":
    from gpuanalyze.ingest.sources import load_nsys
    rows = load_nsys(Path({path!r})).frame.height
else:
    import sqlite3
    conn = sqlite3.connect("file:" + {path!r} + "?mode=ro&immutable=1", uri=True)
    tables = {{n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}}
    name = "(SELECT value FROM StringIds WHERE id = {{}})"
    device = "SELECT start, end, globalPid, streamId, correlationId, "
    queries = {{
        "CUPTI_ACTIVITY_KIND_KERNEL": device + name.format("demangledName"),
        "CUPTI_ACTIVITY_KIND_MEMCPY": device + "copyKind, srcKind, dstKind",
        "CUPTI_ACTIVITY_KIND_RUNTIME": "SELECT start, end, globalTid, correlationId, " + name.format("nameId"),
        "NVTX_EVENTS": "SELECT start, end, globalTid, COALESCE(text, " + name.format("textId") + ")",
    }}
    rows = 0
    for table, sql in queries.items():
        if table in tables:
            cur = conn.execute(sql + " FROM " + table)
            while batch := cur.fetchmany(8192):
                rows += len(batch)
took = time.perf_counter() - t0
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(took, int(hwm.split()[1]) / 1024, rows)
"""


def run(mode: str, path: Path) -> tuple[float, float, int]:
    code = _CHILD.format(root=str(ROOT), path=str(path), mode=mode)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{mode} failed on {path}:\n{out.stderr[-3000:]}")
    took, rss, rows = out.stdout.split()
    return float(took), float(rss), int(rows)


def rows_in(path: Path) -> int:
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    wanted = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
    return sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in wanted if t in tables)


def compare(path: Path, repeats: int) -> None:
    rows = rows_in(path)
    print(f"{path.name}: {path.stat().st_size / 1e6:.1f} MB, {rows:,} activity and NVTX rows")
    results: dict[str, list[tuple[float, float, int]]] = {"gpuanalyze": [], "floor": []}
    for i in range(repeats):
        for mode in ("gpuanalyze", "floor") if i % 2 == 0 else ("floor", "gpuanalyze"):
            results[mode].append(run(mode, path))
    for mode, res in results.items():
        took = statistics.median(r[0] for r in res)
        rss = max(r[1] for r in res)
        print(f"  {mode:10s}: {took:7.2f} s, {rows / took / 1e6:6.2f} M rows/s, peak RSS {rss:6.0f} MiB")
    t = {m: statistics.median(r[0] for r in v) for m, v in results.items()}
    m = {m: max(r[1] for r in v) for m, v in results.items()}
    ratio_t, ratio_m = t["gpuanalyze"] / t["floor"], m["gpuanalyze"] / m["floor"]
    goal = "met" if m["gpuanalyze"] <= 600 else "NOT met"
    print(f"  gpuanalyze / floor: time {ratio_t:.2f}x, peak RSS {ratio_m:.2f}x; peak RSS <= 600 MiB: {goal}")


def build(out: Path, steps: int, kernels: int) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.nsys_fixtures import Export, build_export

    tmp = out.with_suffix(".partial")
    tmp.unlink(missing_ok=True)
    build_export(tmp, Export(pids=(101, 102), steps=steps, kernels_per_step=kernels))
    tmp.replace(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200, help="steps per rank of the synthetic export")
    parser.add_argument("--kernels", type=int, default=1000, help="kernels per step")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="the synthetic export's path (default: temp; reused)")
    args = parser.parse_args()
    shared = sorted(SHARED.glob("*.sqlite"), key=lambda p: p.stat().st_size) if SHARED.is_dir() else []
    if shared:
        compare(shared[-1], args.repeats)
    name = f"gpuanalyze-nsys-synthetic-{args.steps}x{args.kernels}.sqlite"
    out = args.out or Path(tempfile.gettempdir()) / name
    if not out.exists():
        t0 = time.perf_counter()
        build(out, args.steps, args.kernels)
        print(f"built {out} in {time.perf_counter() - t0:.0f} s")
    compare(out, args.repeats)


if __name__ == "__main__":
    main()

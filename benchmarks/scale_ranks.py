"""Out-of-core analysis of a large multi-rank run: time and peak memory, and the ratio to the in-memory path.

    python benchmarks/scale_ranks.py                          # 1,024 ranks x 100,000 steps (the goal)
    python benchmarks/scale_ranks.py --ranks 256 --steps 10000 --compare   # both paths, side by side

Generates one gpuanalyze trace per rank (tests/scale_fixtures.py: every step lasts as long as the
slowest rank's work; rank 7 is a straggler in un-instrumented host time, rank 300 a milder one in
forward) into --dir (kept and reused: generating 11 GB takes minutes), then runs, each in a fresh
process so peak RSS (VmHWM) is the analysis's own:

- out of core: ``analyzer.analyze(DIR)`` (per-rank partials on the local process pool, one
  quantile pass, blocks of steps for the cross-rank pass);
- in memory (--compare, or automatically when it fits in half the RAM): ``analyze(load_any(DIR))``
  (every row in one frame, the path gpuanalyze had before);
- report (--report): ``analyzer.api.report_parts(DIR)``, the analysis plus the chart pass (the
  report's chart data, out of core), without rendering;
- polars streaming (--streaming): the same quantiles and means (median and p90 step, the median of
  every phase and of the batch size, the phases' means) by ``pl.scan_ipc(files).select(...)
  .collect(engine="streaming")`` over copies of the rank files in the Arrow IPC *file* format
  (scan_ipc cannot read the IPC streams gpuanalyze writes; the copies are made once, untimed, and
  kept next to the rank files). It does only that query: no reader validation, no per-rank warm-up
  by row count (every rank here has steps 0..N-1, so the warm-up is ``step >= skip``), no sampled
  windows, no cross-rank pass; it prints whether its numbers equal the out-of-core ones.

Prints the load average (`uptime`) and the CPU seconds (the analysis process and its workers) next to
every timing: the machine is shared, and CPU time says less about the other users' load than the wall
clock. Goal: <= 30 s and <= 1 GiB peak RSS with the workers at 1,024 x 100,000 on the
2-core machine, same verdict and stragglers as in memory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ROW_BYTES_IN_MEMORY = 500  # measured: 256 x 10,000 rows took 1.3 GiB in memory


def load() -> str:
    """The 1/5/15-minute load averages (as `uptime` prints them)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def generate(directory: Path, ranks: int, steps: int) -> float:
    from tests.scale_fixtures import write_ranks

    marker = directory / ".complete"
    if marker.exists() and marker.read_text() == f"{ranks}x{steps}":
        return 0.0
    directory.mkdir(parents=True, exist_ok=True)
    for p in directory.glob("trace.rank*.arrow"):
        p.unlink()
    t0 = time.perf_counter()
    write_ranks(directory, ranks, steps, stragglers={7: ("other", 4.0), 300 % ranks: ("forward", 1.0)})
    marker.write_text(f"{ranks}x{steps}")
    return time.perf_counter() - t0


_CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from analyzer import analyze
from gpuanalyze.ingest.sources import load_any
def cpu():
    return sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))
c0 = cpu()
t0 = time.perf_counter()
if {mode!r} == "report":
    from analyzer.api import report_parts
    report, data = report_parts({path!r}, workers={workers!r})
else:
    report = analyze({path!r}, workers={workers!r}) if {mode!r} == "out_of_core" else analyze(load_any({path!r}))
took = time.perf_counter() - t0
cpu_s = cpu() - c0  # this process and its workers (reaped when the pool closed)
hwm = [ln for ln in open("/proc/self/status") if ln.startswith("VmHWM")][0]
m = report.metrics
d = report.metrics.distributed
print(json.dumps({{
    "seconds": took,
    "cpu_s": cpu_s,
    "peak_rss_mib": int(hwm.split()[1]) / 1024,
    "verdict": report.bottleneck,
    "stragglers": [[s.rank, s.phase, round(s.excess_ms, 6), s.steps_slow] for s in d.stragglers] if d else [],
    "rows": m.accounting.rows,
    "quantiles": [
        m.step_median_ms, m.step_p90_ms, *[m.breakdown_ms[p] for p in sorted(m.breakdown_ms)], m.batch_samples
    ],
    "means": [m.mean_ms[p] for p in sorted(m.mean_ms)],
}}))
"""

_STREAMING = """
import json, sys, time
sys.path.insert(0, {root!r})
import polars as pl
from analyzer.analysis.metrics import warmup_steps
from gpuanalyze.ingest.trace import schema as S
files = {files!r}
t0 = time.perf_counter()
skip = warmup_steps({steps!r})
parts = sorted(S.PARTS)
lf = pl.scan_ipc(files).filter(pl.col(S.STEP) >= skip)
known = [p for p in parts if p in {known!r}]
q = lf.select(
    pl.col(S.WALL_MS).median().alias("median"),
    pl.col(S.WALL_MS).quantile(0.9, "linear").alias("p90"),
    *[pl.col(p).median().alias("med_" + p) for p in known],
    pl.col(S.BATCH_SAMPLES).median().alias("batch"),
    *[pl.col(p).mean().alias("mean_" + p) for p in known],
).collect(engine="streaming")
took = time.perf_counter() - t0
row = q.row(0, named=True)
hwm = [ln for ln in open("/proc/self/status") if ln.startswith("VmHWM")][0]
print(json.dumps({{
    "seconds": took,
    "peak_rss_mib": int(hwm.split()[1]) / 1024,
    "quantiles": [row["median"], row["p90"], *[row["med_" + p] if p in known else None for p in parts], row["batch"]],
    "means": [row["mean_" + p] if p in known else None for p in parts],
}}))
"""


def ipc_files(directory: Path) -> tuple[list[str], float]:
    """Copies of the rank files in the Arrow IPC file format (what scan_ipc reads), made once."""
    import pyarrow as pa

    out = directory / "ipc-file"
    out.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    files = []
    for src in sorted(directory.glob("trace.rank*.arrow")):
        dst = out / src.name
        if not dst.exists() or dst.stat().st_mtime < src.stat().st_mtime:
            with pa.memory_map(str(src)) as fh:
                table = pa.ipc.open_stream(fh).read_all()
            tmp = dst.with_suffix(".tmp")
            with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
                w.write_table(table)
            tmp.replace(dst)
        files.append(str(dst))
    return files, time.perf_counter() - t0


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        (x is None and y is None) or (x is not None and y is not None and abs(x - y) <= 1e-9 * max(1.0, abs(y)))
        for x, y in zip(a, b, strict=True)
    )


def run(mode: str, path: Path, workers: int | None, code: str | None = None) -> dict:
    code = code or _CHILD.format(root=str(ROOT), path=str(path), mode=mode, workers=workers)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=err, text=True)
        tree_peak = 0
        while proc.poll() is None:
            tree_peak = max(tree_peak, tree_rss_mib(proc.pid))
            time.sleep(0.2)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"{mode} failed:\n{err.read()[-3000:]}")
        result = json.loads(out.read().strip().splitlines()[-1])
    result["tree_peak_mib"] = max(tree_peak, result["peak_rss_mib"])
    return result


def tree_rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and all its descendants (the worker processes), from /proc."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = dict(line.split(":", 1) for line in (d / "status").read_text().splitlines() if ":" in line)
        except OSError:
            continue
        parent[int(d.name)] = int(fields.get("PPid", "0").strip())
        rss[int(d.name)] = int(fields.get("VmRSS", "0 kB").split()[0] or 0)
    tree, frontier = {pid}, [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p and c not in tree]
        tree.update(kids)
        frontier.extend(kids)
    return sum(rss.get(p, 0) for p in tree) / 1024


def S_PARTS() -> tuple[str, ...]:  # noqa: N802 - the schema's PARTS, imported late (sys.path)
    from gpuanalyze.ingest.trace import schema as S

    return S.PARTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=None, help="where the rank files go (default: a temp dir)")
    parser.add_argument("--workers", type=int, default=None, help="local engine processes (default: the cores)")
    parser.add_argument("--compare", action="store_true", help="also run the in-memory path (needs ~500 B/row)")
    parser.add_argument(
        "--report", action="store_true", help="also the report's analysis and chart data (report_parts), out of core"
    )
    parser.add_argument(
        "--streaming", action="store_true", help="also the quantiles by polars' streaming engine (IPC file copies)"
    )
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.gettempdir()) / f"gpuanalyze-scale-{args.ranks}x{args.steps}"
    gen = generate(directory, args.ranks, args.steps)
    size = sum(p.stat().st_size for p in directory.glob("trace.rank*.arrow"))
    rows = args.ranks * args.steps
    print(
        f"{args.ranks} ranks x {args.steps:,} steps = {rows:,} rows, {size / 1e9:.2f} GB on disk in {directory}"
        + (f" (generated in {gen:.0f} s)" if gen else " (reused)")
    )
    print(f"cores {os.cpu_count()}, RAM {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB")
    before = load()
    ooc = run("out_of_core", directory, args.workers)
    print(
        f"out of core : {ooc['seconds']:7.1f} s (cpu {ooc['cpu_s']:5.1f} s), peak RSS {ooc['peak_rss_mib']:6.0f} MiB "
        "(with workers "
        f"{ooc['tree_peak_mib']:6.0f} MiB) | load before {before}, after {load()} | verdict {ooc['verdict']}, "
        f"stragglers {ooc['stragglers']}"
    )
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if args.compare or rows * ROW_BYTES_IN_MEMORY < ram / 2:
        before = load()
        mem = run("in_memory", directory, None)
        print(
            f"in memory   : {mem['seconds']:7.1f} s (cpu {mem['cpu_s']:5.1f} s), peak RSS "
            f"{mem['peak_rss_mib']:6.0f} MiB | load before {before}, "
            f"after {load()} | verdict {mem['verdict']}, stragglers {mem['stragglers']}"
        )
        print(
            f"ratio out-of-core / in-memory: time {ooc['seconds'] / mem['seconds']:.2f}x, "
            f"peak RSS {ooc['tree_peak_mib'] / mem['peak_rss_mib']:.2f}x (with workers); same verdict and stragglers: "
            f"{ooc['verdict'] == mem['verdict'] and ooc['stragglers'] == mem['stragglers']}"
        )
    else:
        est = rows * ROW_BYTES_IN_MEMORY / 2**30
        print(f"in memory   : skipped (about {est:.0f} GiB at ~{ROW_BYTES_IN_MEMORY} B/row; pass --compare to try)")
    if args.report:
        before = load()
        rep = run("report", directory, args.workers)
        agree = rep["verdict"] == ooc["verdict"] and rep["stragglers"] == ooc["stragglers"]
        print(
            f"report      : {rep['seconds']:7.1f} s (cpu {rep['cpu_s']:5.1f} s), peak RSS "
            f"{rep['peak_rss_mib']:6.0f} MiB (with workers "
            f"{rep['tree_peak_mib']:6.0f} MiB) | load before {before}, after {load()} | analysis + chart pass, "
            f"same verdict and stragglers: {agree}"
        )
    if args.streaming:
        files, took = ipc_files(directory)
        print(f"IPC file copies for scan_ipc: {len(files)} files" + (f", made in {took:.0f} s" if took > 1 else ""))
        known = [p for p, v in zip(sorted(S_PARTS()), ooc["means"], strict=True) if v is not None]
        code = _STREAMING.format(root=str(ROOT), files=files, steps=args.steps, known=known)
        before = load()
        st = run("polars_streaming", directory, None, code)
        print(
            f"polars streaming (quantiles and means only): {st['seconds']:7.1f} s, peak RSS "
            f"{st['tree_peak_mib']:6.0f} MiB | load before {before}, after {load()} | same quantiles and means as "
            f"out of core: {same(st['quantiles'], ooc['quantiles']) and same(st['means'], ooc['means'])}"
        )
    ok = ooc["seconds"] <= 30 and ooc["tree_peak_mib"] <= 1024
    print(f"goal (<= 30 s, <= 1 GiB with workers, on 2 cores): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()

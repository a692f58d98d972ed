"""Kineto import of a large trace: streaming vs the in-memory path, time and peak memory side by side.

    python benchmarks/import_memory.py                 # ~650 MB of JSON (built once, then reused)
    python benchmarks/import_memory.py --size 2G --gzip

Builds a trace K times longer than a real one (default: the largest shared Kineto trace, tracelens'
MI300X xDiT SD3.5, 62 MB of JSON) with benchmarks/k_copies.py (timestamps shifted by the trace's span per copy,
correlation/flow/external ids and step numbers renumbered), K the copies that make --size bytes of JSON. Then
imports it (parse + per-step rows) in fresh processes, alternating --repeats times:

- streaming: ``gpuanalyze.ingest.timeline.model.parse_kineto`` (chunked decompression, batches of events);
- in memory: ``tests/kineto_oracle.parse_kineto_in_memory`` (the whole file read and decoded at
  once, as gpuanalyze did before; the same event handling after that).

Prints time, MB/s of JSON, peak RSS (VmHWM) of each, the ratios, whether both gave the same rows,
and the load average around every run (the machine is shared). Goals (issue #41): streaming peak RSS
<= 200 MB at ~650 MB of JSON.
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = ROOT.parent / "shared" / "external_traces" / "tracelens" / "mi300_xdit_sd35.json.gz"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def parse_size(text: str) -> int:
    units = {"K": 1e3, "M": 1e6, "G": 1e9}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def build(source: Path, out: Path, size: int, gz: bool) -> int:
    """``source`` repeated as many times as make ``size`` bytes of JSON (benchmarks/k_copies.py); the copies."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.k_copies import repeat_kineto

    raw = gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_bytes()
    k = max(1, math.ceil(size / len(raw)))
    tmp = out.with_name(out.name + (".part.gz" if gz else ".part"))
    repeat_kineto(source, tmp, k)
    tmp.replace(out)
    return k


_CHILD = """
import sys, time
sys.path.insert(0, {root!r})
from gpuanalyze.ingest.timeline.step_rows import import_kineto
t0 = time.perf_counter()
if {mode!r} == "streaming":
    from gpuanalyze.ingest.kineto.parse import parse_kineto
    from gpuanalyze.ingest.trace.byte_source import ReadLimits
    trace = import_kineto(parse_kineto({path!r}, ReadLimits(max_bytes=1 << 40)))
else:
    from tests.kineto_oracle import parse_kineto_in_memory
    trace = import_kineto(parse_kineto_in_memory({path!r}))
took = time.perf_counter() - t0
hwm = [ln for ln in open("/proc/self/status") if ln.startswith("VmHWM")][0]
digest = int(trace.frame.hash_rows().sum()) ^ hash(repr(trace.run)) ^ hash(trace.notes)
print(took, int(hwm.split()[1]) / 1024, trace.frame.height, digest)
"""


def run(mode: str, path: Path) -> tuple[float, float, int, int]:
    code = _CHILD.format(root=str(ROOT), path=str(path), mode=mode)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"}
    )
    if out.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{out.stderr[-3000:]}")
    took, rss, rows, digest = out.stdout.split()
    return float(took), float(rss), int(rows), int(digest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--size", default="650M", help="JSON bytes of the synthetic trace (e.g. 650M, 2G)")
    parser.add_argument("--gzip", action="store_true", help="write it as .json.gz")
    parser.add_argument("--out", type=Path, default=None, help="where the trace goes (default: a temp dir; reused)")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    size = parse_size(args.size)
    suffix = ".json.gz" if args.gzip else ".json"
    out = args.out or Path(tempfile.gettempdir()) / f"gpuanalyze-synthetic-{args.size}{suffix}"
    if not out.exists():
        t0 = time.perf_counter()
        k = build(args.source, out, size, args.gzip)
        print(f"built {out} ({k} copies of {args.source.name}) in {time.perf_counter() - t0:.0f} s")
    on_disk = out.stat().st_size
    json_bytes = on_disk if not args.gzip else sum(len(c) for c in _chunks(out))
    print(f"{out}: {on_disk / 1e9:.2f} GB on disk, {json_bytes / 1e9:.2f} GB of JSON, source {args.source.name}")
    results: dict[str, list[tuple[float, float, int, int]]] = {"streaming": [], "in_memory": []}
    for i in range(args.repeats):
        for mode in ("streaming", "in_memory") if i % 2 == 0 else ("in_memory", "streaming"):
            before = load()
            r = run(mode, out)
            results[mode].append(r)
            print(
                f"{mode:10s}: {r[0]:6.1f} s, {json_bytes / r[0] / 1e6:6.0f} MB/s, peak RSS {r[1]:6.0f} MiB, "
                f"{r[2]} steps | load before {before}, after {load()}"
            )
    s = {m: statistics.median(x[0] for x in v) for m, v in results.items()}
    m = {m: max(x[1] for x in v) for m, v in results.items()}
    same = len({x[2:] for v in results.values() for x in v}) == 1
    print(
        f"streaming / in-memory: throughput {s['in_memory'] / s['streaming']:.2f}x, peak RSS "
        f"{m['streaming'] / m['in_memory']:.2f}x; same rows, run info and notes: {same}"
    )
    peak_mb = m["streaming"] * 1.048576
    print(f"goal: streaming peak RSS <= 200 MB: {'met' if peak_mb <= 200 else f'NOT met ({peak_mb:.0f} MB)'}")


def _chunks(path: Path):
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            yield chunk


if __name__ == "__main__":
    main()

"""Kineto import of a large trace: streaming vs the in-memory path, time and peak memory side by side.

    python benchmarks/import_memory.py                 # a 2 GB trace (built once, then reused)
    python benchmarks/import_memory.py --size 500M --gzip

Builds a synthetic trace by repeating the steps of a real one (default: HTA's ns_resolution_trace,
V100, 5 ProfilerSteps, from ../shared/external_traces) with timestamps shifted past the previous copy
and correlation/flow/external ids and step numbers renumbered, until it reaches --size bytes of
JSON. Then imports it (parse + per-step rows) in fresh processes, alternating --repeats times:

- streaming: ``gpuanalyze.ingest.kineto.parse_kineto`` (chunked decompression, batches of events);
- in memory: ``tests/kineto_oracle.parse_kineto_in_memory`` (the whole file read and decoded at
  once, as gpuanalyze did before; the same event handling after that).

Prints time, MB/s of JSON, peak RSS (VmHWM) of each, the ratios, whether both gave the same rows,
and the load average around every run (the machine is shared). Goals: streaming peak RSS <= 600 MB
at 2 GB, and throughput >= 80% of the in-memory path's.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = (
    ROOT.parent
    / "shared"
    / "external_traces"
    / "hta"
    / "ns_resolution_trace"
    / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
)
_ID_ARGS = ("correlation", "External id", "Record function id", "Fwd thread id", "Sequence number")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def parse_size(text: str) -> int:
    units = {"K": 1e3, "M": 1e6, "G": 1e9}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def build(source: Path, out: Path, size: int, gz: bool) -> None:
    """Repeat ``source``'s events, shifted in time, until the JSON holds ``size`` bytes."""
    raw = gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_bytes()
    doc: dict[str, Any] = json.loads(raw)
    events: list[dict[str, Any]] = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), int | float)]
    lo = min(e["ts"] for e in timed)
    hi = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    period = (hi - lo) * 1.01 + 1000
    top_id = max([int(e["id"]) for e in events if isinstance(e.get("id"), int)] + [0])
    top_arg = max(
        [int(e["args"][k]) for e in events for k in _ID_ARGS if isinstance((e.get("args") or {}).get(k), int)] + [0]
    )
    steps = sorted({int(e["name"].split("#")[1]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")})
    step_span = (max(steps) - min(steps) + 1) if steps else 1
    enc = msgspec.json.Encoder()
    head = enc.encode(doc)[:-1] + (b', "traceEvents": [' if doc else b'{"traceEvents": [')
    tmp = out.with_name(out.name + ".part")
    written, copy = 0, 0
    with gzip.open(tmp, "wb", compresslevel=6) if gz else open(tmp, "wb") as fh:
        fh.write(head)
        first = True
        while written < size:
            shift_t, shift_id, shift_arg = copy * period, copy * (top_id + 1), copy * (top_arg + 1)
            parts = []
            for e in events:
                d = dict(e)
                if "ts" in d and isinstance(d["ts"], int | float):
                    d["ts"] = d["ts"] + shift_t
                if isinstance(d.get("id"), int):
                    d["id"] = d["id"] + shift_id
                args = d.get("args")
                if isinstance(args, dict) and any(isinstance(args.get(k), int) for k in _ID_ARGS):
                    d["args"] = {
                        k: (v + shift_arg if k in _ID_ARGS and isinstance(v, int) else v) for k, v in args.items()
                    }
                name = d.get("name")
                if isinstance(name, str) and name.startswith("ProfilerStep#"):
                    d["name"] = f"ProfilerStep#{int(name.split('#')[1]) + copy * step_span}"
                parts.append(enc.encode(d))
            chunk = (b"" if first else b",\n") + b",\n".join(parts)
            first = False
            fh.write(chunk)
            written += len(chunk)
            copy += 1
        fh.write(b"]}")
    tmp.replace(out)


_CHILD = """
import sys, time
sys.path.insert(0, {root!r})
from gpuanalyze.ingest.kineto_import import import_kineto
t0 = time.perf_counter()
if {mode!r} == "streaming":
    from gpuanalyze.ingest.kineto import parse_kineto
    from gpuanalyze.ingest.stream import ReadLimits
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
    parser.add_argument("--size", default="2G", help="JSON bytes of the synthetic trace (e.g. 500M, 2G)")
    parser.add_argument("--gzip", action="store_true", help="write it as .json.gz")
    parser.add_argument("--out", type=Path, default=None, help="where the trace goes (default: a temp dir; reused)")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    size = parse_size(args.size)
    suffix = ".json.gz" if args.gzip else ".json"
    out = args.out or Path(tempfile.gettempdir()) / f"gpuanalyze-synthetic-{args.size}{suffix}"
    if not out.exists():
        t0 = time.perf_counter()
        build(args.source, out, size, args.gzip)
        print(f"built {out} in {time.perf_counter() - t0:.0f} s")
    on_disk = out.stat().st_size
    json_bytes = size if not args.gzip else sum(len(c) for c in _chunks(out))
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
    print(
        f"goals: peak RSS <= 600 MB: {'met' if m['streaming'] * 1.048576 <= 600 else 'NOT met'}; "
        f"throughput >= 80% of in-memory: {'met' if s['in_memory'] / s['streaming'] >= 0.8 else 'NOT met'}"
    )


def _chunks(path: Path):
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            yield chunk


if __name__ == "__main__":
    main()

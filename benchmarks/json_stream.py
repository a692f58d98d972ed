"""Our incremental JSON cutter (ingest/stream.py + msgspec) against ijson's C backend (yajl2_c), side by side.

    pip install ijson && python benchmarks/json_stream.py [--rounds 5] [TRACE.json.gz ...]

Both read the same gzip-compressed Kineto trace from disk and produce every element of its
``traceEvents`` array: ours as msgspec structs of the fields the importer keeps (EventStream's
batches, the importer's own decoder), ijson as Python dicts of every field
(``ijson.items(fh, "traceEvents.item")``, its fastest backend). Prints the best time of each per
trace and the ratio, alternating the order each round (the machine is shared). Default traces: the
real ones in ../shared/external_traces. Our cutter is kept only where this says it wins.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuanalyze.ingest.kineto.stream import EventStream  # noqa: E402
from gpuanalyze.ingest.timeline.trace_events import decode_events  # noqa: E402
from gpuanalyze.ingest.trace.byte_source import ByteChunks, ReadLimits, open_regular  # noqa: E402


def ours(path: Path) -> int:
    limits = ReadLimits()
    with open_regular(path) as fh:
        stream = EventStream(
            iter(ByteChunks(fh, str(path), path.stat().st_size, limits)), str(path), limits, decode_events
        )
        return sum(len(batch) for batch in stream.batches())


def with_ijson(path: Path) -> int:
    import ijson

    with gzip.open(path, "rb") as fh:
        return sum(1 for _ in ijson.items(fh, "traceEvents.item"))


def best(fn: object, path: Path, rounds: int) -> tuple[float, int]:
    times, n = [], 0
    for _ in range(rounds):
        t = time.perf_counter()
        n = fn(path)  # type: ignore[operator]
        times.append(time.perf_counter() - t)
    return min(times), n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    try:
        import ijson
    except ImportError:
        print("ijson is not installed: pip install ijson")
        return 2
    traces = args.traces or sorted((ROOT.parent / "shared" / "external_traces").rglob("*.json.gz"))
    print(f"ijson {ijson.__version__} backend {ijson.backend}; best of {args.rounds} rounds, alternating")
    print(f"{'trace':46} {'events':>9} {'ours s':>8} {'ijson s':>8} {'ijson/ours':>10}")
    for path in traces:
        a = b = (float("inf"), 0)
        for r in range(args.rounds):
            order = (ours, with_ijson) if r % 2 == 0 else (with_ijson, ours)
            for fn in order:
                got = best(fn, path, 1)
                if fn is ours:
                    a = min(a, got)
                else:
                    b = min(b, got)
        print(f"{path.name[:46]:46} {b[1]:>9,} {a[0]:>8.3f} {b[0]:>8.3f} {b[0] / a[0]:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Read a PyTorch profiler trace (.json, .json.gz) into the timeline, streaming: ``stream.EventStream`` decodes the
events in batches and ``timeline.model.TimelineSink`` keeps what the importer uses; ``load_kineto`` then reduces
it to the per-step rows (timeline.rows)."""

from __future__ import annotations

from pathlib import Path
from typing import IO

from analyzer.errors import TraceError
from gpuanalyze.ingest.kineto.stream import EventStream
from gpuanalyze.ingest.timeline.device_props import ROCM_KEYS
from gpuanalyze.ingest.timeline.model import Timeline, TimelineSink
from gpuanalyze.ingest.timeline.step_rows import import_kineto
from gpuanalyze.ingest.timeline.trace_events import decode_events
from gpuanalyze.ingest.trace.byte_source import ByteChunks, ReadLimits, open_regular
from gpuanalyze.ingest.trace.reader import Trace

#: Top-level keys the importer reads besides traceEvents.
KEPT_META = ("distributedInfo", "deviceProperties", *ROCM_KEYS)


def parse_kineto(path: str | Path, limits: ReadLimits | None = None) -> Timeline:
    """Parse a .json or .json.gz profiler trace; raises TraceError with a one-line reason."""
    path = Path(path)
    with open_regular(path) as fh:
        size = path.stat().st_size
        return parse_kineto_stream(fh, str(path), size, limits)


def parse_kineto_stream(fh: IO[bytes], name: str, size: int | None, limits: ReadLimits | None = None) -> Timeline:
    """Parse a trace from an open binary stream (a local file, or an fsspec file for a URL)."""
    limits = limits or ReadLimits()
    chunks = iter(ByteChunks(fh, name, size, limits))
    stream = EventStream(chunks, name, limits, decode_events, keep=KEPT_META)
    sink = TimelineSink(name, limits)
    try:
        for batch in stream.batches():
            sink.consume(batch)
            del batch  # not alive while the next batch decodes
    except OSError as exc:
        raise TraceError(f"{name}: cannot read ({exc.strerror or exc})") from exc
    if not stream.events_found:
        raise TraceError(f"{name}: the trace has no events")
    return sink.finish(stream.meta, stream.notes)


def load_kineto(path: str | Path, limits: ReadLimits | None = None) -> Trace:
    return import_kineto(parse_kineto(path, limits))

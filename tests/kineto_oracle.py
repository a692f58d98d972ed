"""The in-memory Kineto parse the streaming importer replaced, kept as the test oracle.

It reads the whole file, decodes the whole document at once (as gpuanalyze did before the
streaming reader) and feeds the events to the same TimelineSink: comparing the two isolates what
streaming changes (chunking, batch boundaries, metadata handling). benchmarks/import_memory.py
also uses it as the baseline for speed and memory.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import msgspec

from analyzer.errors import TraceError
from gpuanalyze.ingest.timeline.model import Timeline, TimelineSink
from gpuanalyze.ingest.timeline.trace_events import Event, LooseEvent
from gpuanalyze.ingest.trace.byte_source import ReadLimits


class _Doc(msgspec.Struct):
    traceEvents: list[Event] = []  # noqa: N815 - the JSON key
    deviceProperties: msgspec.Raw = msgspec.Raw()  # noqa: N815
    distributedInfo: msgspec.Raw = msgspec.Raw()  # noqa: N815


class _LooseDoc(msgspec.Struct):
    traceEvents: list[LooseEvent] = []  # noqa: N815
    deviceProperties: msgspec.Raw = msgspec.Raw()  # noqa: N815
    distributedInfo: msgspec.Raw = msgspec.Raw()  # noqa: N815


_DECODER = msgspec.json.Decoder(_Doc | list[Event])
_LOOSE_DECODER = msgspec.json.Decoder(_LooseDoc | list[LooseEvent])


def parse_kineto_in_memory(path: str | Path) -> Timeline:
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc: Any
    try:
        doc = _DECODER.decode(raw)
    except msgspec.ValidationError:
        doc = _LOOSE_DECODER.decode(raw)
    del raw
    events = doc if isinstance(doc, list) else doc.traceEvents
    meta: dict[str, bytes] = {}
    if not isinstance(doc, list):
        for key in ("distributedInfo", "deviceProperties"):
            value = bytes(getattr(doc, key))
            if value:
                meta[key] = value
    if not events:
        raise TraceError(f"{path}: the trace has no events")
    sink = TimelineSink(str(path), ReadLimits())
    sink.consume(events)
    return sink.finish(meta, [])

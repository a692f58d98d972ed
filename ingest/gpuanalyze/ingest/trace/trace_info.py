"""What a trace file says about its run, beside its rows: one type for both readers' results
(``reader.Trace`` adds the polars frame, ``columns.TraceColumns`` the numpy columns)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceInfo:
    path: Path
    run: RunInfo
    tags: dict[str, str]
    version: str
    complete: bool
    """True when the writer closed the file cleanly (the end marker is present)."""
    end: EndInfo | None
    """The end marker's content: status, exception (if the loop raised), step count."""
    notes: tuple[str, ...]
    """What the reader skipped or repaired, in words for the report."""


def info_fields(info: TraceInfo) -> dict[str, Any]:
    """``info``'s fields by name: what a reader passes on to the Trace or TraceColumns it builds."""
    return {f.name: getattr(info, f.name) for f in dataclasses.fields(TraceInfo)}

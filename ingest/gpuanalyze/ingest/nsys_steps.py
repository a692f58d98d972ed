"""Which NVTX ranges of an Nsight Systems export are the steps, and the ProfilerStep#N annotations made of them.

In this order: ``--step-range NAME`` (``NAME``, or ``NAME`` plus a number), else ``ProfilerStep#N``, else
gpuanalyze's own ``gpuanalyze:step#N`` (``analyzer.profile(nvtx=True)``); without any, no steps (the capture
is one window, or its iterations are found from repeated ops). The kind is decided once for the whole capture
(``step_kind``: one query for the ranges whose names start like a step's) before the ranks are read one at a
time, so every rank's steps are of the same kind.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from analyzer.errors import TraceError
from gpuanalyze.ingest.kineto_events import _Event
from gpuanalyze.ingest.nsys_db import NsysDb

OUR_STEP = "gpuanalyze:step#"
PROFILER_STEP = "ProfilerStep#"
NAMED, PROFILER, OURS = "named", "profiler", "ours"
_STEP_NUMBER = re.compile(r"[\s#:_=-]*(\d{1,15})$")
_Range = tuple[int | None, float, float, int]


@dataclass(slots=True)
class Steps:
    """Candidate step ranges of one rank by kind: (number or None, start us, end us, thread)."""

    by_kind: dict[str, list[_Range]] = field(default_factory=lambda: {NAMED: [], PROFILER: [], OURS: []})


def _number(rest: str) -> int | None:
    m = _STEP_NUMBER.fullmatch(rest)
    return int(m.group(1)) if m else None


def classify(text: str, step_range: str | None) -> tuple[str, int | None] | None:
    """(kind, step number or None) of a step range's name; None for any other range."""
    if step_range is not None and text.startswith(step_range):
        rest = text[len(step_range) :]
        if not rest or _number(rest) is not None:
            return NAMED, _number(rest) if rest else None
    if text.startswith(PROFILER_STEP):
        return PROFILER, _number(text[len(PROFILER_STEP) :])
    if text.startswith(OUR_STEP):
        return OURS, _number(text[len(OUR_STEP) :])
    return None


def describe(kind: str, step_range: str | None) -> str:
    """What the steps are, for the notes ('' without steps)."""
    if kind == NAMED:
        return f"NVTX ranges named {step_range!r}"
    return {PROFILER: "ProfilerStep#N NVTX ranges", OURS: "gpuanalyze:step#N NVTX ranges"}.get(kind, "")


def step_kind(db: NsysDb, path: str, name: str, where: str, step_range: str | None) -> str:
    """The kind of step ranges the capture has (NAMED, PROFILER, OURS or ''); ``name`` is the SQL of a range's
    name, ``where`` the NVTX_EVENTS filter. A --step-range no range is named by is one TraceError."""
    prefixes = [PROFILER_STEP, OUR_STEP] + ([step_range] if step_range else [])
    like = " OR ".join(f"substr(n, 1, {len(p)}) = ?" for p in prefixes)
    sql = f"SELECT n FROM (SELECT {name} AS n FROM NVTX_EVENTS WHERE {where}) WHERE {like}"
    found: set[str] = set()
    for rows in db.batches(sql, tuple(prefixes)):
        for (text,) in rows:
            got = classify(text, step_range) if isinstance(text, str) else None
            if got is not None:
                found.add(got[0])
        if NAMED in found or (step_range is None and PROFILER in found):
            break
    if step_range is not None:
        if NAMED not in found:
            common = _common(db, name, where)
            raise TraceError(f"{path}: no NVTX range named {step_range!r} (most frequent NVTX ranges: {common})")
        return NAMED
    return PROFILER if PROFILER in found else OURS if OURS in found else ""


def _common(db: NsysDb, name: str, where: str) -> str:
    sql = (
        f"SELECT substr(n, 1, 40), count(*) AS c FROM (SELECT {name} AS n FROM NVTX_EVENTS WHERE {where}) "
        "WHERE n IS NOT NULL GROUP BY n ORDER BY c DESC"
    )
    rows = db.small(sql, limit=5)
    return ", ".join(repr(n) for n, _ in rows) or "none"


def step_events(ranges: list[_Range]) -> list[_Event]:
    """ProfilerStep#N annotations of one rank's chosen step ranges: numbered by their own numbers where every
    range has one (a step that restarted, gpuanalyze's first step after the trace file opened, keeps its last
    range), else in time order."""
    ranges = sorted(ranges, key=lambda r: r[1])
    own = all(n is not None for n, *_ in ranges)
    if own:
        ranges = sorted({n: r for r in ranges if (n := r[0]) is not None}.values(), key=lambda r: r[1])
    out = []
    for i, (n, start, end, tid) in enumerate(ranges):
        step = n if own and n is not None else i
        out.append(_Event("X", "user_annotation", f"ProfilerStep#{step}", start, end - start, tid, None))
    return out

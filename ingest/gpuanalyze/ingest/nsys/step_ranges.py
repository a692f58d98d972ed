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
from gpuanalyze.ingest.nsys.db import NsysDb
from gpuanalyze.ingest.timeline.trace_events import Event

OUR_STEP = "gpuanalyze:step#"
PROFILER_STEP = "ProfilerStep#"
NAMED, PROFILER, OURS = "named", "profiler", "ours"
_STEP_NUMBER = re.compile(r"[\s#:_=-]*(\d{1,15})$")
_Range = tuple[int | None, float, float, int]
#: What torch.autograd.profiler.emit_nvtx appends to every op's range name (torch/csrc/profiler/standalone/
#: nvtx_observer.cpp, getNvtxStr): ", seq = N" (autograd's sequence number, given to ops and autograd functions,
#: never to a user's record_function), ", op_id = N", ", sizes = [...]" (record_shapes), ", input_op_ids = [...]".
_EMIT_NVTX = (", seq = ", ", op_id = ", ", sizes = ", ", input_op_ids = ")
#: An operator's schema name, ``namespace::name[.overload]`` (aten::mm, c10d::allreduce_, flash_attn::fwd); a
#: record_function's label (``FSDP::pre_forward (layers.0)``) has spaces or capitals in its namespace.
_OP_SCHEMA = re.compile(r"[a-z_][a-z0-9_]*::\w+(\.\w+)?")
#: c10d's collective ops record this op around each collective (a cpu_op in Kineto traces).
_OP_NAMES = ("record_param_comms",)


def emit_nvtx_name(text: str) -> tuple[str, bool]:
    """(the op's name without emit_nvtx's suffix, whether the range is an op: a CPU op in Kineto's terms) of an NVTX
    range's text. An op: its schema name, or an autograd sequence number (an autograd function, ``FlashAttnFunc``,
    ``MmBackward0``); anything else is an annotation (a record_function, a DataLoader fetch, a step)."""
    name, seq = nvtx_cut(text)
    return name, is_op(name, seq)


def nvtx_cut(text: str) -> tuple[str, bool]:
    """(the text without emit_nvtx's suffix, whether the suffix has a sequence number): cut at the earliest marker,
    found with one search where the first ``", "`` starts one (every range emit_nvtx makes)."""
    i = text.find(", ")
    if i >= 0 and not text.startswith(_EMIT_NVTX, i):
        i = min((j for m in _EMIT_NVTX if (j := text.find(m)) >= 0), default=-1)
    return (text, False) if i < 0 else (text[:i], text.find(_EMIT_NVTX[0], i) >= 0)


def is_op(name: str, seq: bool) -> bool:
    return seq or name.startswith(_OP_NAMES) or _OP_SCHEMA.fullmatch(name) is not None


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
    # the ranges whose stored text or StringIds value starts like a step's, before their names are made
    raw = [like.replace("n,", f"{c},") for c in ("text", "textId") if c in db.columns("NVTX_EVENTS")]
    if "textId" in db.columns("NVTX_EVENTS") and db.has("StringIds", "id", "value"):
        raw.append(f"textId IN (SELECT id FROM StringIds WHERE {like.replace('n,', 'value,')})")
    found_where = f"({' OR '.join(raw)}) AND {where}" if raw else where
    sql = f"SELECT n FROM (SELECT {name} AS n FROM NVTX_EVENTS WHERE {found_where}) WHERE {like}"
    params = tuple(prefixes) * (len(raw) + 1)
    found: set[str] = set()
    for rows in db.batches(sql, params):
        for (text,) in rows:
            got = classify(emit_nvtx_name(text)[0], step_range) if isinstance(text, str) else None
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
    """The most frequent range names, each without emit_nvtx's suffix (an op's ranges are one name, not one each)."""
    names = f"SELECT {name} AS n FROM NVTX_EVENTS WHERE {where}"
    for mark in _EMIT_NVTX:  # cut at each marker in turn: what is left is the text before the earliest
        names = f"SELECT substr(n, 1, instr(n || '{mark}', '{mark}') - 1) AS n FROM ({names})"
    sql = f"SELECT substr(n, 1, 40), count(*) AS c FROM ({names}) WHERE n IS NOT NULL GROUP BY n ORDER BY c DESC"
    rows = db.small(sql, limit=5)
    return ", ".join(repr(n) for n, _ in rows) or "none"


def step_events(ranges: list[_Range]) -> list[Event]:
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
        out.append(Event("X", "user_annotation", f"ProfilerStep#{step}", start, end - start, tid, None))
    return out

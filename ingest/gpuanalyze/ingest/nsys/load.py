"""Import an Nsight Systems capture: an SQLite export (``nsys export --type sqlite``) or, when ``nsys`` is on
PATH, a ``.nsys-rep``/``.qdrep`` report exported to a temporary directory first.

The export is read read-only (nsys/db.py), its rows become Kineto events per rank (nsys/events.py) and each
rank goes through the Kineto importer's conversion (step_rows.import_kineto), so the trace has the same
rows, kernel statistics and idle owners as a PyTorch profiler trace of the same run. Step start times are
moved onto UTC with the export's session start time (nsys/meta.py); ``ANALYSIS_DETAILS.duration`` is the session's
length, so a whole-process capture's set-up and teardown hold what was not recorded (capture_windows.py).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
import polars as pl

from analyzer.errors import TraceError
from gpuanalyze.ingest.nsys.db import NsysDb, is_sqlite_file
from gpuanalyze.ingest.nsys.events import GPU_TABLES, VERSION_SUFFIX, NsysEvents
from gpuanalyze.ingest.nsys.meta import NsysMeta, read_meta
from gpuanalyze.ingest.nsys.notes import merge_rank_notes
from gpuanalyze.ingest.timeline.free_memory import return_freed_memory
from gpuanalyze.ingest.timeline.model import Timeline
from gpuanalyze.ingest.timeline.step_rows import gc_paused, import_kineto
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.byte_source import ReadLimits
from gpuanalyze.ingest.trace.reader import Trace

SQLITE_SUFFIXES = (".sqlite", ".sqlite3", ".db")
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
#: Longest a ``nsys export`` of a report may take.
EXPORT_TIMEOUT_S = 600
WINDOW_NOTE = (
    "no step NVTX ranges (--step-range NAME, ProfilerStep#N, or gpuanalyze:step#N from gpuanalyze run --nvtx): "
    "the window from the capture's first GPU work to its last is analysed as one step"
)


def is_nsys_path(path: Path) -> bool:
    """A path that names an Nsight Systems capture: a report by its suffix, an export by suffix or SQLite header."""
    name = path.name.lower()
    if name.endswith(REPORT_SUFFIXES) or name.endswith(SQLITE_SUFFIXES):
        return True
    return not name.endswith((".arrow", ".json", ".json.gz", ".gz")) and is_sqlite_file(path)


def is_capture_name(name: str) -> bool:
    """A file name an Nsight Systems capture goes by in a directory: an export or a report (what it holds is
    checked when it is read)."""
    return name.lower().endswith(SQLITE_SUFFIXES + REPORT_SUFFIXES)


def rank_order(names: list[str]) -> dict[str, int]:
    """The rank of each per-rank Nsight Systems capture of a directory (``nsys profile -o report.%q{RANK}`` writes
    one per process): their names in natural order, numbers read as numbers (report.2 before report.10)."""
    key = [[int(p) if p.isdigit() else p for p in re.split(r"(\d+)", n)] for n in names]
    return {names[i]: rank for rank, i in enumerate(sorted(range(len(names)), key=lambda i: (key[i], names[i])))}


def rank_note(n: int) -> str:
    """What the report says of a directory's Nsight Systems captures (``rank_order``, ``as_rank``)."""
    ranks = "rank 0" if n == 1 else f"ranks 0-{n - 1}"
    return (
        f"{n} Nsight Systems capture(s), one rank each: the RANK its process ran with (torchrun sets it), else "
        f"{ranks} in the natural order of their names (report.2 before report.10)"
    )


def as_rank(trace: Trace, rank: int, world: int) -> Trace:
    """A directory's per-rank capture as rank ``rank`` of ``world``, unless its process's environment named its place
    (nsys/meta.py: the import's world size is then that); a TraceError when it holds several processes with GPU
    work (a capture of its own run, read alone)."""
    held = trace.frame.get_column(S.RANK).n_unique()
    if held > 1:
        raise TraceError(
            f"{trace.path}: {held} processes ran GPU work in this capture; a directory's Nsight Systems captures are "
            f"read as one rank each (analyse it alone: gpuanalyze {trace.path.name})"
        )
    if (trace.run.world_size or 1) > 1:
        return trace
    frame = trace.frame.with_columns(pl.lit(rank, dtype=pl.Int32).alias(S.RANK))
    return dataclasses.replace(trace, frame=frame, run=msgspec.structs.replace(trace.run, rank=rank, world_size=world))


def _export_command(report: Path, out: Path) -> list[str]:
    return ["nsys", "export", "--type", "sqlite", "--output", str(out), str(report)]


@contextmanager
def sqlite_of(path: Path) -> Iterator[Path]:
    """The SQLite export of ``path``: itself, or a report exported by ``nsys`` into a temporary directory."""
    if not path.name.lower().endswith(REPORT_SUFFIXES):
        yield path
        return
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    nsys = shutil.which("nsys")
    with tempfile.TemporaryDirectory(prefix="gpuanalyze-nsys-") as tmp:
        out = Path(tmp) / (path.stem + ".sqlite")
        if nsys is None:
            shown = " ".join(_export_command(path, path.with_suffix(".sqlite")))
            raise TraceError(f"{path}: nsys is not on PATH; export the report first: {shown}")
        cmd = [nsys, *_export_command(path, out)[1:]]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=EXPORT_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TraceError(f"{path}: nsys export failed ({exc})") from exc
        if done.returncode != 0 or not out.is_file():
            last = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise TraceError(f"{path}: nsys export failed (exit {done.returncode}: {last[0][:200]})")
        yield out


#: The columns each activity table must have to be read (every export under ../shared/nsys_traces, 2022.1 to
#: 2026.2, has them).
NEEDED = {
    **{t: ("start", "end") for t in GPU_TABLES},
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid"),
    "NVTX_EVENTS": ("start", "end", "globalTid"),
}


def _layout(db: NsysDb, path: Path) -> list[str]:
    """Activity tables present without the columns they are read by: one TraceError when no table can be read
    (an export layout this importer does not read), else a note naming those skipped."""
    odd = {t: [c for c in cols if c not in db.columns(t)] for t, cols in NEEDED.items() if t in db.tables}
    odd = {t: missing for t, missing in odd.items() if missing}
    if not odd:
        return []
    shown = "; ".join(f"{t} has no {', '.join(m)}" for t, m in odd.items())
    if all(t in odd for t in NEEDED if t in db.tables):
        raise TraceError(
            f"{path}: an export layout this importer does not read ({shown}); export the report again with a "
            "current nsys: nsys export --type sqlite REPORT"
        )
    return [f"skipped tables of an unknown layout ({shown})"]


def _notes(meta: NsysMeta, ranked: bool, world: int, placed: bool) -> list[str]:
    version = f"Nsight Systems {meta.version}" if meta.version else "an Nsight Systems export of unknown version"
    notes = [f"imported from {version}" + (f" (command: {meta.command[:200]})" if meta.command else "")]
    if not meta.version:
        notes.append(
            "the export names no nsys version (no META_DATA_EXPORT or EXPORT_META_DATA table: an older exporter); "
            "its tables are read by their columns"
        )
    if ranked and world > 1:
        notes.append(f"{world} processes with GPU activity in one capture: analysed as ranks 0-{world - 1}")
    if placed:  # NsysEvents.place: a one-process capture whose environment named its place
        notes.append("rank and world size: the RANK and WORLD_SIZE its process ran with (recorded by nsys)")
    if not meta.gpus:
        notes.append("the export has no TARGET_INFO_GPU table: GPU model and memory unknown")
    return notes


#: Runtime calls named in the reason a capture has no GPU activity.
_NAMED_CALLS = 4


def no_gpu_reason(db: NsysDb, nvtx: Counter[str]) -> str:
    """Why a capture without kernel, copy or memset rows gives no verdict: which tables are missing, what the CUDA
    trace (or, without one, its NVTX ranges: ``nvtx``, counted by name) holds instead, and how to capture the GPU."""
    missing = [t for t in GPU_TABLES if t not in db.tables]
    what = f"no {', '.join(missing)} table" if missing else "no rows in its CUDA activity tables"
    calls = ""
    if db.has("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"):
        name = db.string_sql("nameId")
        rows = db.small(f"SELECT {name} FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT {_NAMED_CALLS + 1}")
        names = list(dict.fromkeys(VERSION_SUFFIX.sub("", n) for (n,) in rows if isinstance(n, str)))
        if names:
            shown = ", ".join(names[:_NAMED_CALLS]) + (", ..." if len(rows) > _NAMED_CALLS else "")
            calls = f"; its CUDA trace holds only runtime calls ({shown})"
    if not calls and nvtx:
        calls = (
            f"; it holds only {sum(nvtx.values()):,} NVTX ranges ({', '.join(n[:40] for n, _ in nvtx.most_common(4))})"
        )
    return (
        f"no GPU activity recorded: the export has {what}{calls}: nothing the GPU ran is in the capture, so no "
        "verdict is read from it; capture with nsys profile -t cuda,nvtx,osrt"
    )


def _session(db: NsysDb, k: Timeline) -> tuple[float, float] | None:
    """The capture session as (0, its duration) in us, where the export records it and it holds every event."""
    rows = db.small("SELECT duration FROM ANALYSIS_DETAILS", limit=1) if db.has("ANALYSIS_DETAILS", "duration") else []
    arrays = [a for a in (k.gpu, k.runtime, k.cpu, k.host_ops) if a.end.size]
    if not rows or not isinstance(rows[0][0], int) or not arrays or min(float(a.start.min()) for a in arrays) < 0:
        return None
    return (0.0, rows[0][0] / 1e3) if max(float(a.end.max()) for a in arrays) <= rows[0][0] / 1e3 else None


def load_nsys_ranks(path: Path, limits: ReadLimits | None = None, step_range: str | None = None) -> list[Trace]:
    """One Trace per rank of an Nsight Systems capture; raises TraceError with a one-line reason. The ranks are
    read and converted one at a time, so the peak is one rank's events and their conversion."""
    limits = limits or ReadLimits()
    out = []
    return_freed_memory()
    with gc_paused(), sqlite_of(path) as export, NsysDb(export) as db:
        meta = read_meta(db)
        skipped = _layout(db, path)
        events = NsysEvents(db, meta, limits, step_range, name=str(path))
        if not events.ranked and not any(
            db.has(t, "start", "end") for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
        ):
            raise TraceError(
                f"{path}: the export has no CUDA activity, runtime calls or NVTX ranges to analyse "
                "(capture with nsys profile -t cuda,nvtx,osrt)"
            )
        kind = events.step_kind()
        notes = _notes(meta, events.ranked, len(events.keys), events.place is not None) + skipped
        if kind:
            notes.append(f"steps from {kind}")
        utc = (pl.col(S.START_UNIX_NS) + (meta.epoch_ns or 0)).alias(S.START_UNIX_NS)  # on UTC (nsys/meta.py)
        for k in events.traces():
            k = dataclasses.replace(k, path=str(path), notes=[*notes, *k.notes], span=_session(db, k))
            no_device = None if events.ranked else no_gpu_reason(db, events.nvtx_names)
            got = import_kineto(k, source="nsys", no_steps=WINDOW_NOTE, no_device=no_device)
            out.append(dataclasses.replace(got, frame=got.frame.with_columns(utc)))
            del k
            return_freed_memory()
        backend = events.backend
    merged = tuple(merge_rank_notes([list(t.notes) for t in out]))  # said once, with the ranks where they differ
    return [
        dataclasses.replace(
            t,
            notes=merged,
            run=msgspec.structs.replace(t.run, backend=backend) if backend and t.run.backend is None else t.run,
        )
        for t in out
    ]

"""Open whatever the user points at: a gpuanalyze .arrow trace, a Kineto JSON trace, an Nsight Systems
capture (SQLite export or report), or a directory holding one trace per rank."""

from __future__ import annotations

import dataclasses
import glob
import itertools
import re
import stat
from pathlib import Path

import msgspec
import polars as pl

from analyzer.errors import MixedRunsError, TraceError
from gpuanalyze.ingest.kineto.parse import load_kineto
from gpuanalyze.ingest.nsys.load import as_rank, is_capture_name, is_nsys_path, load_nsys_ranks, rank_note, rank_order
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.byte_source import ReadLimits
from gpuanalyze.ingest.trace.ipc_guard import IpcReader
from gpuanalyze.ingest.trace.reader import Trace, load_trace
from gpuanalyze.ingest.trace.runinfo import GpuSummary, RunInfo, read_run


def is_json_trace(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(".json") or name.endswith(".json.gz")


NO_TRACES = "no .arrow, profiler .json(.gz) or Nsight Systems (.sqlite, .nsys-rep) traces in this directory"


def is_imported(name: str) -> bool:
    """A file name of a directory's traces that are imported (not read as they are): Kineto JSON, Nsight Systems
    captures (one per rank: nsys/load.py rank_order)."""
    return is_json_trace(Path(name)) or is_capture_name(name)


def in_directory(name: str) -> bool:
    """A file name a directory's traces go by: gpuanalyze .arrow, or one imported (``is_imported``)."""
    return name.endswith(".arrow") or is_imported(name)


_RANK_FILE = re.compile(r"^(?P<stem>.+)\.rank\d+(?:-\d+)?$")


class RankFiles(list[Path]):
    """The per-rank files of one run; ``note`` says which run was picked when several share the name."""

    note: str | None = None


def rank_siblings(path: Path) -> RankFiles:
    """Per-rank files of the run ``path`` names: ``trace.arrow``, ``trace.rank3.arrow`` or
    ``trace.rank3-1.arrow`` -> the ``trace.rank<N>[-<k>].arrow`` beside it that belong to one run
    (empty when there are none).

    A second run into the same name writes ``trace.rank<N>-1.arrow``; files are grouped by the
    run id in their run information (by the ``-<k>`` suffix for traces without one). A rank file
    picks its own run; ``trace.arrow`` picks the newest, and ``note`` says so."""
    match = _RANK_FILE.match(path.stem)
    stem = match.group("stem") if match else path.stem
    pattern = re.compile(rf"^{re.escape(stem)}\.rank\d+(?P<k>-\d+)?{re.escape(path.suffix)}$")
    named = sorted(
        (p, m) for p in path.parent.glob(f"{glob.escape(stem)}.rank*{path.suffix}") if (m := pattern.match(p.name))
    )
    files = [p for p, _ in named]
    runs: dict[str, list[Path]] = {}
    started: dict[str, float] = {}
    for f, m in named:
        run = read_run_info(f)
        key = run.run_id if run is not None and run.run_id else f"name{m.group('k') or ''}"
        runs.setdefault(key, []).append(f)
        start = run.start_unix_ns / 1e9 if run is not None and run.start_unix_ns else _mtime(f)
        started[key] = max(started.get(key, 0.0), start)
    if len(runs) <= 1:
        return RankFiles(files)
    mine = [key for key, members in runs.items() if path in members]
    key = mine[0] if mine else max(runs, key=lambda k: started[k])
    chosen = RankFiles(runs[key])
    which = f"the run of {path.name}" if mine else "the newest run"
    other = next(members[0].name for k, members in runs.items() if k != key)
    chosen.note = (
        f"{len(files)} files named {stem}.rank*{path.suffix} hold {len(runs)} runs; analysing {which} "
        f"({len(chosen)} rank file(s): {', '.join(p.name for p in chosen[:4])}{' ...' if len(chosen) > 4 else ''}); "
        f"pass a file of another run (e.g. {other}) to analyse it"
    )
    return chosen


def read_run_info(path: Path) -> RunInfo | None:
    """The run information of a trace file (its schema only is read), or None when it cannot be read
    (loading it says why)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # never open a FIFO or a device to peek at it
            return None
        with open(path, "rb") as fh:  # the schema message only, read within ipc_guard's bounds
            meta = IpcReader(path, fh).schema.metadata or {}
        raw = meta.get(S.META_RUN)
        return None if raw is None else read_run(raw)[0]
    except Exception:  # noqa: BLE001 - grouping is best-effort; the loader reports bad files
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _noted(trace: Trace, note: str | None) -> Trace:
    return trace if note is None else dataclasses.replace(trace, notes=(note, *trace.notes))


def load_any(path: str | Path, limits: ReadLimits | None = None) -> Trace:
    """One Trace, in memory, from a file or a directory of per-rank files; raises TraceError with the reason.

    A multi-rank run's file (``trace.rank0.arrow``, or the ``trace.arrow`` passed to
    ``analyzer.profile``) brings in all its sibling rank files. In a directory, files that cannot be
    read (not a trace, unreadable, not a regular file) are skipped with a note. For runs too large
    to hold in memory, ``analyzer.analyze`` measures directories out of core instead.
    """
    path = Path(path)
    if path.suffix == ".arrow" and (siblings := rank_siblings(path)) and (not path.exists() or path in siblings):
        return _noted(_merge(path, [load_trace(p) for p in siblings]), siblings.note)
    if not path.exists():
        raise TraceError(f"{path}: no such file or directory")
    if path.is_dir():
        return _load_dir(path, limits)
    return load_file(path, limits)


def load_file(path: Path, limits: ReadLimits | None = None) -> Trace:
    """One trace file: a Kineto JSON trace, an Nsight Systems capture, or a gpuanalyze .arrow trace."""
    if is_json_trace(path):
        return load_kineto(path, limits)
    if is_nsys_path(path):
        return load_nsys(path, limits)
    return load_trace(path)


def load_files(path: Path, files: list[Path]) -> Trace:
    """One Trace from exactly ``files`` (no sibling discovery), named ``path``: one file as itself,
    several merged as the ranks of one run."""
    traces = [load_trace(f) for f in files]
    return dataclasses.replace(traces[0], path=path) if len(traces) == 1 else _merge(path, traces)


def load_nsys(path: Path, limits: ReadLimits | None = None, step_range: str | None = None) -> Trace:
    """An Nsight Systems capture as one Trace, its ranks merged (nsys/load.py); a capture of one rank of a larger job
    is that rank, as a Kineto rank file is (which ranks are missing is said of a directory, not of each file)."""
    return _merge(path, load_nsys_ranks(path, limits, step_range), say_missing=False)


def _load_dir(path: Path, limits: ReadLimits | None) -> Trace:
    files = sorted(p for p in path.iterdir() if in_directory(p.name) and not p.is_dir())
    if not files:
        raise TraceError(f"{path}: {NO_TRACES}")
    ranks = rank_order([f.name for f in files if is_capture_name(f.name) and f.is_file()])  # as storage.list_dir
    traces, skipped = [], []
    for f in files:
        try:
            if f.name in ranks:
                traces.append(as_rank(load_nsys(f, limits), ranks[f.name], len(ranks)))
            else:
                traces.append(load_kineto(f, limits) if is_json_trace(f) else load_trace(f))
        except TraceError as exc:
            skipped.append((f, exc))
        except OSError as exc:  # e.g. PermissionError
            skipped.append((f, TraceError(f"{f}: cannot read ({exc.strerror or exc})")))
    if not traces:
        raise skipped[0][1]
    merged = _merge(path, traces)
    notes = [f"skipped {f.name}: {str(exc).removeprefix(str(f) + ': ')}" for f, exc in skipped]
    notes += [rank_note(len(ranks))] if ranks else []
    return dataclasses.replace(merged, notes=tuple(dict.fromkeys([*notes, *merged.notes])))


#: A trace may claim a world at most this many times the rank files present (else the claim is ignored).
WORLD_CLAIM_FACTOR = 64


def missing_ranks_note(world: int, present: set[int]) -> str | None:
    """A note on the ranks of ``world`` without a trace; never enumerates a claimed world it cannot hold."""
    if world > max(len(present), 1) * WORLD_CLAIM_FACTOR:
        return (
            f"the traces claim a world of {world:,} ranks but only {len(present)} rank file(s) are here; "
            f"analysing the {len(present)} present"
        )
    missing = world - len([r for r in present if r < world])
    if missing <= 0:
        return None
    shown = [str(r) for r in itertools.islice((r for r in range(world) if r not in present), 10)]
    more = " ..." if missing > 10 else ""
    return (
        f"{missing} of {world} rank(s) have no trace here (ranks {', '.join(shown)}{more}); "
        f"analysing the {len(present)} present"
    )


def mean_summary(summaries: list[GpuSummary]) -> GpuSummary:
    """The GPU breakdown of a multi-rank run: each percentage averaged over the ranks that have one."""
    n = len(summaries)
    return GpuSummary(
        busy_pct=sum(s.busy_pct for s in summaries) / n,
        idle_pct=sum(s.idle_pct for s in summaries) / n,
        compute_pct=sum(s.compute_pct for s in summaries) / n,
        non_compute_pct=sum(s.non_compute_pct for s in summaries) / n,
    )


def run_of(runs: list[RunInfo], ranks: int) -> RunInfo:
    """The run description of several rank files (lowest rank first): the first, with the GPU
    breakdown averaged over every rank that has one."""
    first = runs[0]
    summaries = [r.gpu_summary for r in runs if r.gpu_summary is not None]
    if ranks > 1 and len(summaries) > 1:
        first = msgspec.structs.replace(first, gpu_summary=mean_summary(summaries))
    return first


def _merge(path: Path, traces: list[Trace], *, say_missing: bool = True) -> Trace:
    by_rank: dict[int, Path] = {}
    for t in traces:
        for rank in t.frame.get_column(S.RANK).unique().to_list():
            if rank in by_rank:
                raise MixedRunsError(path, f"rank {rank} appears in both {by_rank[rank].name} and {t.path.name}")
            by_rank[rank] = t.path
    worlds = {t.run.world_size for t in traces if t.run.world_size}
    if len(worlds) > 1:
        raise MixedRunsError(path, f"traces disagree on the world size ({sorted(worlds)})")
    notes = [n for t in traces for n in t.notes]
    note = missing_ranks_note(worlds.pop() if worlds else len(by_rank), set(by_rank)) if say_missing else None
    if note:
        notes.insert(0, note)
    ordered = sorted(traces, key=lambda t: int(t.run.rank_or_zero))
    first = ordered[0]
    return Trace(
        path=path,
        frame=pl.concat([t.frame for t in traces]).sort([S.RANK, S.STEP]),
        run=run_of([t.run for t in ordered], len(by_rank)),
        tags=first.tags,
        version=first.version,
        complete=all(t.complete for t in traces),
        end=first.end,
        notes=tuple(dict.fromkeys(notes)),
    )

"""Open whatever the user points at: a gpuanalyze .arrow trace, a Kineto JSON trace, or a directory
holding one trace per rank."""

from __future__ import annotations

import glob
import re
from pathlib import Path

import polars as pl

from analyzer.errors import TraceError
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.kineto_import import load_kineto
from gpuanalyze.ingest.reader import Trace, load_trace


def is_json_trace(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(".json") or name.endswith(".json.gz")


_RANK_FILE = re.compile(r"^(?P<stem>.+)\.rank\d+$")


def rank_siblings(path: Path) -> list[Path]:
    """Per-rank files of the run ``path`` names: ``trace.arrow`` or ``trace.rank3.arrow`` ->
    every ``trace.rank<N>.arrow`` beside it (empty when there are none)."""
    match = _RANK_FILE.match(path.stem)
    stem = match.group("stem") if match else path.stem
    pattern = re.compile(rf"^{re.escape(stem)}\.rank\d+{re.escape(path.suffix)}$")
    return sorted(p for p in path.parent.glob(f"{glob.escape(stem)}.rank*{path.suffix}") if pattern.match(p.name))


def load_any(path: str | Path) -> Trace:
    """One Trace from a file or a directory of per-rank files; raises TraceError with the reason.

    A multi-rank run's file (``trace.rank0.arrow``, or the ``trace.arrow`` passed to
    ``analyzer.profile``) brings in all its sibling rank files."""
    path = Path(path)
    if path.suffix == ".arrow" and (siblings := rank_siblings(path)) and (not path.exists() or path in siblings):
        return _merge(path, [load_trace(p) for p in siblings])
    if not path.exists():
        raise TraceError(f"{path}: no such file or directory")
    if path.is_dir():
        return _load_dir(path)
    if is_json_trace(path):
        return load_kineto(path)
    return load_trace(path)


def _load_dir(path: Path) -> Trace:
    files = sorted(p for p in path.iterdir() if p.is_file() and (is_json_trace(p) or p.suffix == ".arrow"))
    if not files:
        raise TraceError(f"{path}: no .arrow or profiler .json(.gz) traces in this directory")
    return _merge(path, [load_kineto(f) if is_json_trace(f) else load_trace(f) for f in files])


def _merge(path: Path, traces: list[Trace]) -> Trace:
    by_rank: dict[int, Path] = {}
    for t in traces:
        for rank in t.frame.get_column(S.RANK).unique().to_list():
            if rank in by_rank:
                raise TraceError(
                    f"{path}: rank {rank} appears in both {by_rank[rank].name} and {t.path.name}; "
                    "the directory mixes runs, keep one run per directory"
                )
            by_rank[rank] = t.path
    worlds = {t.run.world_size for t in traces if t.run.world_size}
    if len(worlds) > 1:
        raise TraceError(f"{path}: traces disagree on the world size ({sorted(worlds)}); the directory mixes runs")
    notes = [n for t in traces for n in t.notes]
    world = worlds.pop() if worlds else len(by_rank)
    missing = sorted(set(range(int(world))) - set(by_rank))
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        notes.insert(
            0,
            f"{len(missing)} of {world} rank(s) have no trace here (ranks {shown}); "
            f"analysing the {len(by_rank)} present",
        )
    first = min(traces, key=lambda t: int(t.run.rank_or_zero))
    return Trace(
        path=path,
        frame=pl.concat([t.frame for t in traces]).sort([S.RANK, S.STEP]),
        run=first.run,
        tags=first.tags,
        version=first.version,
        complete=all(t.complete for t in traces),
        end=first.end,
        notes=tuple(dict.fromkeys(notes)),
    )

"""What `gpuanalyze watch` shows of a trace that may still be growing: a snapshot per refresh.

A directory is watched as its newest run (the traces of one run share a run id); a file as
itself and its sibling rank files. Whether the run is still going comes from the writers'
locks (gpuanalyze.ingest.trace.writer.is_being_written), not from the file's age. ``Watch`` holds the
files it opened (held.py): a path replaced or removed mid-watch is said, and the file first opened
is still the one shown.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from analyzer.errors import GpuAnalyzeError, TraceError
from analyzer.run.held import HeldFiles
from gpuanalyze.ingest.sources import load_any, load_files, rank_siblings, read_run_info
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import Trace
from gpuanalyze.ingest.trace.writer import is_being_written

#: Steps in the rolling window of the phase table.
ROLLING_STEPS = 20


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One look at the watched run."""

    path: Path
    files: tuple[Path, ...]
    live: bool
    """A writer still holds one of the files."""
    complete: bool
    """Every file has its end marker: the run has ended cleanly."""
    steps: int = 0
    ranks: int = 0
    elapsed_s: float | None = None
    rolling_ms: tuple[tuple[str, float], ...] = ()
    """Median ms per step of each part over the last ROLLING_STEPS steps (wall first)."""
    bottleneck: str | None = None
    confidence: str | None = None
    """The verdict's confidence level (low, medium, high)."""
    verdict: str | None = None
    """The top finding's summary, or why there is no verdict yet."""
    end_status: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def ended(self) -> bool:
        """The run is over: cleanly, or its writers are gone without closing the trace."""
        return bool(self.files) and (self.complete or not self.live)


def trace_files(path: Path) -> list[Path]:
    """The files of the run ``path`` names (empty while nothing has been written yet)."""
    if path.is_dir():
        candidates = sorted(path.glob("*.arrow"))
        if not candidates:
            return []
        # a file that is not a trace (no readable header, no writer) is skipped, as `gpuanalyze DIR` does
        traces = [p for p in candidates if read_run_info(p) is not None or is_being_written(p)]
        candidates = traces or candidates
        newest = max(candidates, key=_started)
        siblings = rank_siblings(newest)
        return list(siblings) if siblings else [newest]
    if path.exists() and not (path.suffix == ".arrow" and path in rank_siblings(path)):
        return [path]
    return list(rank_siblings(path)) if path.suffix == ".arrow" else []


class Watch:
    """Successive looks at one run, reading the files first opened even when their paths are replaced."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.held = HeldFiles()

    def snapshot(self) -> Snapshot:
        return snapshot(self.path, self.held)

    def final(self) -> Path | Trace | None:
        """What the final report analyses: the run's first file, or the held files when replaced."""
        files = trace_files(self.path)
        readable = self.held.resolve(files)
        if not readable:
            return None
        return load_files(self.path, readable) if self.held.replaced else readable[0]

    def close(self) -> None:
        self.held.close()


def replaced_note(path: Path) -> str:
    return f"{path} was replaced or removed after watch opened it; still showing the file watch opened"


def snapshot(path: Path, held: HeldFiles | None = None) -> Snapshot:
    """Look at the run now; raises TraceError for a file that is not a readable trace and not being
    written. ``held``: the files opened before (Watch), read in place of paths that were replaced."""
    files = trace_files(path)
    readable = files
    if held is not None:
        readable = held.resolve(files)
        files = [*files, *(f for f in held.paths if f not in files)]
    if not files:
        return Snapshot(path=path, files=(), live=False, complete=False)
    replaced = tuple(replaced_note(f) for f, r in zip(files, readable, strict=True) if f != r)
    live = any(is_being_written(f) for f in readable)
    skipped = tuple(
        f"skipped {p.name}: not a gpuanalyze trace"
        for p in (sorted(path.glob("*.arrow")) if path.is_dir() else [])
        if p not in files and read_run_info(p) is None and not is_being_written(p)
    )
    try:
        trace = load_files(path, readable) if replaced else load_any(files[0])
    except TraceError:
        if live:  # created a moment ago: its header is not on disk yet
            return Snapshot(path=path, files=tuple(files), live=True, complete=False, notes=replaced)
        raise
    if skipped or replaced:
        trace = dataclasses.replace(trace, notes=(*replaced, *skipped, *trace.notes))
    return _describe(path, tuple(files), live, trace)


def _describe(path: Path, files: tuple[Path, ...], live: bool, trace: Trace) -> Snapshot:
    from analyzer.api import analyze

    frame = trace.frame
    base = Snapshot(path=path, files=files, live=live, complete=trace.complete, notes=trace.notes)
    if frame.height == 0:
        return base
    elapsed = frame.select(
        ((pl.col(S.START_UNIX_NS) + pl.col(S.WALL_MS) * 1e6).max() - pl.col(S.START_UNIX_NS).min()) / 1e9
    ).item()
    last = int(frame.get_column(S.STEP).max())  # type: ignore[arg-type]  # height > 0
    recent = frame.filter(pl.col(S.STEP) > last - ROLLING_STEPS)
    rolling = []
    for name in (S.WALL_MS, *S.PARTS):
        value = recent.get_column(name).median()
        if isinstance(value, int | float):
            rolling.append((name, float(value)))
    bottleneck = confidence = verdict = None
    try:
        report = analyze(trace)
        bottleneck, confidence = report.bottleneck, report.confidence.level
        verdict = report.findings[0].summary if report.findings else None
    except GpuAnalyzeError as exc:
        verdict = f"no verdict yet ({exc})"
    except Exception as exc:  # noqa: BLE001 - a live view keeps going; the final report will say more
        verdict = f"no verdict ({type(exc).__name__}: {exc})"
    return Snapshot(
        path=path,
        files=files,
        live=live,
        complete=trace.complete,
        steps=frame.get_column(S.STEP).n_unique(),
        ranks=frame.get_column(S.RANK).n_unique(),
        elapsed_s=float(elapsed),
        rolling_ms=tuple(rolling),
        bottleneck=bottleneck,
        confidence=confidence,
        verdict=verdict,
        end_status=None if trace.end is None else trace.end.status,
        notes=trace.notes,
    )


def _started(path: Path) -> float:
    run = read_run_info(path)
    if run is not None and run.start_unix_ns:
        return run.start_unix_ns / 1e9
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0

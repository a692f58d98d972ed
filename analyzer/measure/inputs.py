"""Load what the user points at and measure it: one file in memory, or many rank files out of core.

A directory (or the rank files of one run, ``trace.rank<N>.arrow``) is measured without ever
holding more than one rank's rows per worker: each file is reduced by a task (import first for
Kineto JSON, reusing an up-to-date import), the partials are combined as they arrive, a second
pass answers quantile brackets when needed, and the cross-rank pass reads work vectors in blocks.
Files that cannot be read are skipped with a note; a directory where none can be read is an error.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from analyzer.analysis.chart_sums import ChartSums, chart_grid, trace_chart_sums
from analyzer.analysis.combine import AnswerFn, Answers, Combined, Combiner
from analyzer.analysis.host_facts import samples_of
from analyzer.analysis.metrics import StepMetrics, warmup_steps
from analyzer.analysis.partial import RankPartial, Without
from analyzer.analysis.quantiles import Bracket
from analyzer.analysis.road import measured, rows_road, trace_road
from analyzer.analysis.steady import SteadyState
from analyzer.analysis.thresholds import WARMUP_MAX_STEPS
from analyzer.errors import GpuAnalyzeError, MixedRunsError, TraceError
from analyzer.measure import storage
from analyzer.measure.chart_pass import ChartJob, chart_pass
from analyzer.measure.engine import LocalEngine, RayEngine, make_engine
from analyzer.measure.file_rows import file_columns, file_samples, rank_rows
from analyzer.measure.import_cache import cache_dir
from analyzer.measure.rank_tasks import BracketJob, FileGroup, FileJob, FileResult, answer_file, run_file, run_files
from gpuanalyze.ingest.nsys.load import REPORT_SUFFIXES, SQLITE_SUFFIXES, is_capture_name, rank_note, rank_order
from gpuanalyze.ingest.sources import (
    NO_TRACES,
    in_directory,
    is_imported,
    is_json_trace,
    load_file,
    missing_ranks_note,
    rank_siblings,
    run_of,
)
from gpuanalyze.ingest.timeline.free_memory import return_freed_memory
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.byte_source import ReadLimits
from gpuanalyze.ingest.trace.host_sample import HostSample
from gpuanalyze.ingest.trace.reader import Trace
from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo

#: Below this much input, work runs in this process: starting worker processes would cost more.
PARALLEL_MIN_BYTES = 64 << 20
#: Files from which a directory is read by the pool whatever their size.
PARALLEL_MIN_FILES = 200


def _workers(files: list[storage.Entry], engine: str, workers: int | None) -> int | None:
    """The pool size: as asked, else one process for small inputs, else the cores (engine default).
    Many small files are not a small input: each costs milliseconds of fixed work (3,000 tiny rank
    files took 96 s in one process), so PARALLEL_MIN_FILES of them use the pool too."""
    if workers is not None or engine != "local":
        return workers
    small = sum(e.size for e in files) < PARALLEL_MIN_BYTES and len(files) < PARALLEL_MIN_FILES
    return 1 if small else None


@dataclass(frozen=True, slots=True)
class Measured:
    """What the analysis needs from loading: the run's description and its step metrics."""

    path: str
    run: RunInfo
    end: EndInfo | None
    complete: bool
    notes: tuple[str, ...]
    metrics: StepMetrics
    """Every analysed step (run time, cost, the report's numbers)."""
    steady: SteadyState
    """The steady state found from pass 1's per-step sums (analysis.road)."""
    judged: StepMetrics
    """The analysed steps without the steady state's left-out ones: what the rules judge."""
    charts: ChartSums | None = None
    """What the report's charts draw, made with these metrics (asked for with ``charts``)."""

    samples: tuple[HostSample, ...] = ()
    """The system sampler's readings (of the lowest rank's file when there are several)."""


def measure_trace(trace: Trace, *, charts: bool = False) -> Measured:
    """Measure a trace held in memory (one group of the out-of-core road, analysis.road); ``charts``:
    also its chart sums (the same per-rank reduction)."""
    road = trace_road(trace)
    m = road.metrics
    sums = None
    if charts:
        drop = m.accounting.profiler_windows > 0
        sums = trace_chart_sums(trace.frame, skip=m.warmup_steps, drop_all_sampled=drop, median_ms=m.step_median_ms)
    return Measured(
        str(trace.path),
        trace.run,
        trace.end,
        trace.complete,
        trace.notes,
        m,
        road.steady,
        road.judged,
        charts=sums,
        samples=samples_of(trace.frame),
    )


def measure(
    path: str | Path,
    *,
    engine: str = "local",
    workers: int | None = None,
    limits: ReadLimits | None = None,
    charts: bool = False,
) -> Measured:
    """Measure a trace file, a directory of rank files (local or a URL), or the rank files of a run;
    ``charts``: also what the report's charts draw (one more pass over the rank files). What the
    passes freed is given back to the system at the end (return_freed_memory: the next run starts low)."""
    try:
        return _measure(str(path), _How(engine, workers, limits or ReadLimits(), charts))
    finally:
        return_freed_memory()


def _measure(p: str, how: _How) -> Measured:
    if storage.is_url(p):
        if storage.is_dir(p):
            return _measure_dir(p, how)
        with storage.local_copy(p) as local:
            return _measure_file(local, how)
    local = Path(p)
    if local.suffix == ".arrow" and (siblings := rank_siblings(local)) and (not local.exists() or local in siblings):
        entries = [storage.Entry(str(s), s.name, *_stat(s)) for s in siblings]
        run_note = [siblings.note] if siblings.note else []  # which of several runs into one name this is
        return _measure_files(p, entries, how, cache=None, notes=run_note)
    if not local.exists() and not local.is_symlink():
        raise TraceError(f"{local}: no such file or directory")
    if local.is_dir():
        return _measure_dir(p, how)
    return _measure_file(local, how)


def _measure_file(local: Path, how: _How) -> Measured:
    """One file in this process: from its numpy columns when the column reader reads it (a .arrow
    trace the reader leaves as it is: no polars frame, the same rows, run information and notes),
    else from the reader's trace (charts are drawn from its frame)."""
    cols = None if how.charts else file_columns(local)
    if cols is None:
        return measure_trace(_load_one(local, how.limits), charts=how.charts)
    road = rows_road(rank_rows(cols), cols.run.gpu_memory_bytes)
    return Measured(
        str(local),
        cols.run,
        cols.end,
        cols.complete,
        cols.notes,
        road.metrics,
        road.steady,
        road.judged,
        samples=file_samples(str(local)),
    )


@dataclass(frozen=True, slots=True)
class _How:
    """How a measurement runs: the engine, its workers, the read limits, whether charts are wanted."""

    engine: str
    workers: int | None
    limits: ReadLimits
    charts: bool


def _stat(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return 0, 0
    return st.st_size, st.st_mtime_ns


def _load_one(path: Path, limits: ReadLimits) -> Trace:
    try:
        return load_file(path, limits)
    except OSError as exc:  # e.g. PermissionError
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _measure_dir(path: str, how: _How) -> Measured:
    entries = storage.list_dir(path)
    notes = [f"skipped {e.name}: not a regular file" for e in entries if not e.regular and in_directory(e.name)]
    files = [e for e in entries if e.regular and in_directory(e.name)]
    if not files:
        raise TraceError(f"{path}: {NO_TRACES}")
    notes += _ranked(files)
    cache, tmp = cache_dir(path) if any(is_imported(e.name) for e in files) else (None, None)
    try:
        return _measure_files(path, files, how, cache=cache, notes=notes)
    finally:
        if tmp is not None:
            tmp.cleanup()


def _ranked(files: list[storage.Entry]) -> list[str]:
    """The note on how a directory's Nsight Systems captures are ranked (none without any)."""
    captures = sum(1 for e in files if is_capture_name(e.name))
    return [rank_note(captures)] if captures else []


def _stem(name: str) -> str:
    for suffix in (".json.gz", ".json", *SQLITE_SUFFIXES, *REPORT_SUFFIXES):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def file_jobs(
    files: list[storage.Entry],
    cache: str | None,
    limits: ReadLimits,
    *,
    skip: int,
    reduce: bool = True,
    force: bool,
    without: Without = frozenset(),
    is_cache: bool = False,
) -> list[FileJob]:
    jobs = []
    outs: dict[str, str] = {}
    ranks = rank_order([e.name for e in files if is_capture_name(e.name)])  # Nsight Systems: one rank a file
    for e in files:
        kineto = is_json_trace(Path(e.name))
        imports = kineto or e.name in ranks
        out = storage.join(cache, _stem(e.name) + ".arrow") if imports and cache is not None else None
        if out is not None and out in outs:
            raise GpuAnalyzeError(f"{outs[out]} and {e.name} would both import to {_name(out)}; keep one of them")
        if out is not None:
            outs[out] = e.name
        common = (e.size, e.mtime_ns, limits.max_bytes, force, reduce, skip, without, is_cache)
        jobs.append(FileJob(e.path, kineto, out, *common, rank=ranks.get(e.name), world=len(ranks)))
    return jobs


class _Files:
    """Bookkeeping of the files of one measurement: which rank is where, their notes and metadata."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.by_rank: dict[int, str] = {}
        self.ok: list[FileResult] = []
        self.errors: list[FileResult] = []

    def add(self, res: FileResult) -> None:
        if res.error is not None:
            self.errors.append(res)
            return
        name = _name(res.source)
        for rank in res.ranks:
            if rank in self.by_rank:
                raise MixedRunsError(self.path, f"rank {rank} appears in both {self.by_rank[rank]} and {name}")
            self.by_rank[rank] = name
        self.ok.append(res)


def _name(source: str) -> str:
    return source.rstrip("/").rsplit("/", 1)[-1]


def _measure_files(
    path: str,
    files: list[storage.Entry],
    how: _How,
    *,
    cache: str | None,
    notes: list[str] | None = None,
) -> Measured:
    notes = list(notes or [])
    with make_engine(how.engine, workers=_workers(files, how.engine, how.workers)) as engine:
        skip = WARMUP_MAX_STEPS
        while True:
            combiner, book, alt = _reduce(path, files, engine, how, cache, skip)
            right = warmup_steps(combiner.min_rows) if combiner.partials else skip
            if right == skip:
                break
            combiner.close()
            if alt is not None and alt[0] == right:  # every file already reduced with that warm-up
                combiner = Combiner(right, quartiles=how.charts)
                for p in alt[1]:
                    combiner.add(p)
                skip = right
                break
            skip = right  # some rank has fewer than WARMUP_MAX_STEPS / WARMUP_FRACTION rows: redo with its warm-up
        try:
            for res in book.errors:
                notes.append(f"skipped {_name(res.source)}: {_reason(res)}")
            if not combiner.partials:
                raise TraceError(f"{path}: the trace holds no steps (the run stopped before its first step ended)")
            run, note = _run_info(path, book)
            if note:
                notes.insert(0, note)
            reduced = [res for res in book.ok if res.arrow is not None and res.steps]

            def answer(without: Without) -> AnswerFn:
                def ask(wanted: dict[str, list[Bracket]], drop: bool) -> Iterator[Answers]:
                    jobs = [
                        BracketJob(r.arrow, skip, drop, wanted, r.fast, r.stamp, without) for r in reduced if r.arrow
                    ]
                    for per_file in engine.map(answer_file, jobs):
                        yield from per_file

                return ask

            def again(without: Without) -> Combiner:
                return _reduce(path, files, engine, how, cache, skip, without)[0]

            road = measured(combiner, skip, run.gpu_memory_bytes, again=again, answer=answer)
            combined, metrics = road.combined, road.metrics
        finally:
            combiner.close()
        sums = _charts(engine, reduced, book, combined, metrics) if how.charts else None
    first = min(book.ok, key=lambda r: min(r.ranks) if r.ranks else math.inf)
    file_notes = [n for res in book.ok for n in res.notes]
    return Measured(
        path=path,
        run=run,
        end=first.end,
        complete=all(r.complete for r in book.ok),
        notes=tuple(dict.fromkeys([*notes, *file_notes])),
        metrics=metrics,
        steady=road.steady,
        judged=road.judged,
        charts=sums,
        samples=file_samples(first.arrow),
    )


def _charts(
    engine: LocalEngine | RayEngine, reduced: list[FileResult], book: _Files, combined: Combined, m: StepMetrics
) -> ChartSums:
    """The chart pass over the reduced files, on the grid the analysis gives."""
    q = combined.quantiles
    grid = chart_grid(
        first=min((r.first_step for r in reduced), default=0),
        last=max((r.last_step for r in reduced), default=0),
        ranks=tuple(sorted(book.by_rank)),
        skip=m.warmup_steps,
        drop_all_sampled=m.accounting.profiler_windows > 0,
        median_ms=m.step_median_ms,
        quartiles=(q.get((S.WALL_MS, 0.25), 0.0), q.get((S.WALL_MS, 0.75), 0.0)),
        wall_range=combined.wall_range,
    )
    jobs = [ChartJob(r.arrow, grid, r.fast, r.stamp) for r in reduced if r.arrow]
    return chart_pass(engine, jobs, grid)


def _reason(res: FileResult) -> str:
    assert res.error is not None
    text = res.error
    prefix = res.source + ": "
    return text[len(prefix) :] if text.startswith(prefix) else text


def _reduce(
    path: str,
    files: list[storage.Entry],
    engine: LocalEngine | RayEngine,
    how: _How,
    cache: str | None,
    skip: int,
    without: Without = frozenset(),
) -> tuple[Combiner, _Files, tuple[int, list[RankPartial]] | None]:
    """The partials combined with ``skip``, the files' bookkeeping, and (warm-up, partials) when
    every file also reduced itself with one same smaller warm-up (FileResult.alt_skip)."""
    combiner = Combiner(skip, quartiles=how.charts)
    book = _Files(path)
    alt_skip: int | None = None
    alts: list[RankPartial] | None = []
    jobs = file_jobs(files, cache, how.limits, skip=skip, force=True, without=without, is_cache=True)
    try:
        groups = _groups(jobs, engine.parallelism)
        for group in engine.map(run_files, groups, window=2 * engine.parallelism):  # ~25 MB a result
            for res in group.results:
                book.add(dataclasses.replace(res, alt_partials=()))  # the metadata, not the vectors
                if res.error is None and res.ranks and alts is not None:
                    if res.alt_skip is None or (alt_skip is not None and res.alt_skip != alt_skip):
                        alts = None  # files disagree: a second pass with the common warm-up
                    else:
                        alt_skip = res.alt_skip
                        alts.extend(res.alt_partials)
            combiner.merge(group.reduced)
    except BaseException:
        combiner.close()
        raise
    if not book.ok:
        first = book.errors[0]
        raise TraceError(first.error or f"{first.source}: unreadable")
    return combiner, book, (None if alts is None or alt_skip is None else (alt_skip, alts))


#: Most files one task reduces (tasks.FileGroup): enough that the driver's share (adding a group's
#: per-step sums) is small beside the workers'; few enough that every worker has several tasks.
GROUP_FILES = 16


def _groups(jobs: list[FileJob], parallelism: int) -> list[FileGroup]:
    """Consecutive files in groups, at least four per worker when there are that many files."""
    size = max(1, min(GROUP_FILES, len(jobs) // (4 * max(1, parallelism))))
    return [FileGroup(tuple(jobs[i : i + size])) for i in range(0, len(jobs), size)]


def _run_info(path: str, book: _Files) -> tuple[RunInfo, str | None]:
    """The run's description (sources.run_of) and a note on ranks the world size says are missing."""
    ok = sorted(book.ok, key=lambda r: min(r.ranks) if r.ranks else math.inf)
    runs = [r.run for r in ok if r.run is not None]
    worlds = {r.world_size for r in runs if r.world_size}
    if len(worlds) > 1:
        raise MixedRunsError(path, f"traces disagree on the world size ({sorted(worlds)})")
    note = missing_ranks_note(worlds.pop() if worlds else len(book.by_rank), set(book.by_rank))
    return run_of(runs, len(book.by_rank)), note


def import_dir(
    source: str,
    out: str,
    *,
    engine: str = "local",
    workers: int | None = None,
    limits: ReadLimits | None = None,
    force: bool = False,
) -> tuple[list[FileResult], list[str]]:
    """`gpuanalyze import DIR -o OUTDIR`: every Kineto file and per-rank Nsight Systems capture of ``source`` to
    OUTDIR/<name>.arrow, in parallel, reusing up-to-date outputs. Returns the results and the notes (skipped files,
    how the captures are ranked)."""
    _check_out_dir(out)
    files, notes = _import_files(source)
    jobs = file_jobs(files, out, limits or ReadLimits(), skip=0, reduce=False, force=force)
    if not force:
        _refuse_foreign_outputs(jobs)
    with make_engine(engine, workers=_workers(files, engine, workers)) as eng:
        results = list(eng.map(run_file, jobs))
    ok = [r for r in results if r.error is None]
    notes += [f"skipped {_name(r.source)}: {_reason(r)}" for r in results if r.error is not None]
    if not ok:
        raise TraceError(results[0].error or f"{source}: nothing could be imported")
    return ok, notes


def _check_out_dir(out: str) -> None:
    """The output directory of an import must exist (gpuanalyze never creates directories)."""
    if storage.is_url(out) or Path(out).is_dir():
        return
    if Path(out).exists():
        raise GpuAnalyzeError(
            f"{out}: not a directory (importing a directory of traces, -o names an existing directory)"
        )
    raise GpuAnalyzeError(f"{out}: no such directory (create it first; gpuanalyze does not create directories)")


def _import_files(source: str) -> tuple[list[storage.Entry], list[str]]:
    """The regular Kineto and Nsight Systems files of ``source``, and notes on the ones that are not regular files
    and on how the captures are ranked."""
    entries = [e for e in storage.list_dir(source) if is_imported(e.name)]
    notes = [f"skipped {e.name}: not a regular file" for e in entries if not e.regular]
    files = [e for e in entries if e.regular]
    if not files:
        raise TraceError(f"{source}: no profiler .json(.gz) or Nsight Systems traces in this directory")
    return files, notes + _ranked(files)


def _refuse_foreign_outputs(jobs: list[FileJob]) -> None:
    """Refuse, before writing anything, to overwrite an output that is not an import of its source."""
    from analyzer.measure.rank_tasks import job_provenance, recorded_provenance

    stale = []
    for j in jobs:
        if j.out is None or not storage.exists(j.out):
            continue
        if recorded_provenance(j.out) != job_provenance(j):
            stale.append(j.out)
    if stale:
        shown = ", ".join(_name(s) for s in stale[:3]) + (" ..." if len(stale) > 3 else "")
        raise GpuAnalyzeError(
            f"{len(stale)} output(s) exist and are not imports of these files ({shown}); pass --force to overwrite them"
        )

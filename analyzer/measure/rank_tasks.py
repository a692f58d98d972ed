"""The per-file tasks an engine runs: import a Kineto trace to a per-rank .arrow file (or reuse an
up-to-date one), reduce a rank file to partials, answer a quantile bracket pass.

Tasks are top-level functions of frozen, picklable jobs; they never raise for bad input: a
GpuAnalyzeError comes back as the result's ``error`` (the driver decides whether to skip the file
with a note or to stop), so one bad rank file cannot take a whole fleet analysis down.

"Up to date" (reuse of an import): the output exists and its metadata records the same source file
name, size, modification time (ns), importer version (step_rows.IMPORTER_VERSION) and trace
format version as now; anything else is imported again.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from analyzer.analysis.combine import Answers, Reduced
from analyzer.analysis.metrics import warmup_steps
from analyzer.analysis.partial import (
    KERNEL_MEDIAN,
    RankPartial,
    Rows,
    StepVectors,
    Without,
    bracket_answers,
    bracket_answers_of,
    partial_of,
)
from analyzer.analysis.quantiles import Bracket
from analyzer.errors import GpuAnalyzeError
from analyzer.measure import storage
from analyzer.measure.file_rows import rank_rows
from gpuanalyze.ingest.kineto.parse import parse_kineto_stream
from gpuanalyze.ingest.nsys.load import as_rank
from gpuanalyze.ingest.sources import load_nsys
from gpuanalyze.ingest.timeline.free_memory import return_freed_memory
from gpuanalyze.ingest.timeline.model import Timeline
from gpuanalyze.ingest.timeline.step_rows import IMPORTER_VERSION, import_kineto, trace_writer
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.byte_source import ReadLimits
from gpuanalyze.ingest.trace.columns import READ, TraceColumns, frame_columns, load_columns, raw_columns
from gpuanalyze.ingest.trace.read_ahead import read_ahead
from gpuanalyze.ingest.trace.reader import Trace, load_trace
from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo
from gpuanalyze.ingest.trace.trace_info import TraceInfo, info_fields

#: Tag (in the trace's tags metadata) recording where an imported file came from.
PROVENANCE = "gpuanalyze.import"


def source_name(source: str) -> str:
    """A file's name, from a local path or a URL."""
    return source.rstrip("/").rsplit("/", 1)[-1] if storage.is_url(source) else Path(source).name


def provenance(name: str, size: int, mtime_ns: int, rank: tuple[int, int] | None = None) -> str:
    """What an import was made from; ``rank``: an Nsight Systems capture's (rank, world) in its directory, which
    another file added or renamed there changes (the import is then redone)."""
    made = {"source": name, "size": size, "mtime_ns": mtime_ns, "importer": IMPORTER_VERSION}
    return json.dumps({**made, "format": S.FORMAT_VERSION, **({"rank": list(rank)} if rank else {})}, sort_keys=True)


def job_provenance(job: FileJob) -> str:
    rank = None if job.rank is None else (job.rank, job.world)
    return provenance(source_name(job.source), job.size, job.mtime_ns, rank)


def recorded_provenance(path: str) -> str | None:
    """The provenance tag of an existing .arrow file (reads only its schema); None if absent, unreadable
    or not a regular file (a FIFO is never opened: that would block)."""
    if not storage.is_url(path) and not storage.is_regular(path):
        return None
    try:
        with storage.local_copy(path) as local, pa.OSFile(str(local), "rb") as fh:
            schema = pa.ipc.open_stream(fh).schema
    except (OSError, pa.ArrowException, ValueError, GpuAnalyzeError):
        return None
    raw = (schema.metadata or {}).get(S.META_TAGS)
    try:
        tags = json.loads(raw) if raw else {}
    except ValueError:
        return None
    value = tags.get(PROVENANCE) if isinstance(tags, dict) else None
    return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class FileJob:
    """One input file: a gpuanalyze .arrow trace, or a Kineto .json[.gz] to import to ``out``."""

    source: str
    kineto: bool
    out: str | None = None
    """Where the import goes (None: import in memory only)."""
    size: int = 0
    mtime_ns: int = 0
    max_bytes: int | None = None
    force: bool = False
    """Replace an ``out`` that is not up to date (the import cache; `import --force`)."""
    reduce: bool = True
    """Also reduce the rows to per-rank partials (analysis); False: import only."""
    skip: int = 0
    """Warm-up steps per rank (analysis)."""
    without: Without = frozenset()
    """Post-warm-up steps left out (the steady state's, analysis.road's second reduction)."""
    cache: bool = False
    """``out`` is the import cache: written without an fsync (a torn entry is redone: its end
    marker or provenance is missing), a per-file cost thousands of tiny files would pay."""
    rank: int | None = None
    """A directory's Nsight Systems capture, imported to ``out`` as this rank (nsys/load.py rank_order)."""
    world: int = 0
    """How many such captures the directory holds (the run's world size)."""

    @property
    def imports(self) -> bool:
        """A Kineto trace or an Nsight Systems capture: imported, not read as it is."""
        return self.kineto or self.rank is not None


@dataclass(frozen=True, slots=True)
class FileResult:
    source: str
    arrow: str | None = None
    """The .arrow holding this file's rows (the source itself, or its import)."""
    partials: tuple[RankPartial, ...] = ()
    run: RunInfo | None = None
    tags: dict[str, str] = field(default_factory=dict)
    version: str = ""
    complete: bool = True
    end: EndInfo | None = None
    notes: tuple[str, ...] = ()
    steps: int = 0
    ranks: tuple[int, ...] = ()
    reused: bool = False
    imported: bool = False
    fast: bool = False
    """The file's rows are exactly its raw rows (the reader dropped, repaired and reordered nothing),
    so the quantile pass may read its columns directly instead of loading it again."""
    stamp: tuple[int, int] = (0, 0)
    """(size, mtime_ns) of ``arrow`` when it was reduced."""
    first_step: int = 0
    last_step: int = 0
    """The file's smallest and largest step number (0 for a file without rows)."""
    error: str | None = None
    alt_skip: int | None = None
    """The warm-up this file's own row count implies, when it is below the job's ``skip``."""
    alt_partials: tuple[RankPartial, ...] = ()
    """The partials with ``alt_skip``: when every file implies the same warm-up (ranks of one run
    record the same steps), the analysis uses them instead of reading every file a second time."""


def _import(job: FileJob) -> tuple[Trace, bool, bool]:
    """(trace, reused, imported) of a Kineto or Nsight Systems job."""
    prov = job_provenance(job)
    if job.out is not None and _up_to_date(job, prov):
        with storage.local_copy(job.out) as local:
            return load_trace(local), True, False
    limits = ReadLimits(max_bytes=job.max_bytes)
    if job.rank is not None:
        with storage.local_copy(job.source) as local:
            trace = as_rank(load_nsys(Path(local), limits), job.rank, job.world)
        trace = dataclasses.replace(trace, tags={**trace.tags, PROVENANCE: prov})
    else:
        trace = import_kineto(_parse(job, limits), tags={PROVENANCE: prov})
    if job.out is not None:
        storage.write(job.out, trace_writer(trace), force=job.force, durable=not job.cache)
    return trace, False, True


def _parse(job: FileJob, limits: ReadLimits) -> Timeline:
    """A Kineto job's timeline, streamed from a URL's local copy or parsed from its path."""
    if storage.is_url(job.source):
        with storage.local_copy(job.source) as local, open(local, "rb") as fh:
            return parse_kineto_stream(fh, job.source, job.size or None, limits)
    from gpuanalyze.ingest.kineto.parse import parse_kineto

    return parse_kineto(job.source, limits)


def _up_to_date(job: FileJob, prov: str) -> bool:
    assert job.out is not None
    return storage.exists(job.out) and recorded_provenance(job.out) == prov


def _reused_columns(job: FileJob) -> FileResult | None:
    """An importing job whose import is up to date and local, read as the plain .arrow it is (the
    column reader, without polars: the fixed cost of thousands of tiny files); None otherwise."""
    if job.out is None or storage.is_url(job.out) or not storage.is_regular(job.out):
        return None
    cols = load_columns(job.out)  # the provenance is read from the same schema, not opened again
    if cols is None or cols.tags.get(PROVENANCE) != job_provenance(job):
        return None
    return dataclasses.replace(_from_columns(job, cols, job.out), reused=True)


def run_file(job: FileJob) -> FileResult:
    """Import and/or reduce one file; errors come back in ``FileResult.error``."""
    try:
        if job.imports:
            reused_cols = _reused_columns(job)
            if reused_cols is not None:
                return reused_cols
            trace, reused, imported = _import(job)
            return _from_trace(job, trace, job.out, reused=reused, imported=imported)
        if not storage.is_url(job.source):
            cols = load_columns(job.source)  # the common case: a file the reader leaves as it is
            if cols is not None:
                return _from_columns(job, cols, job.source)
        with storage.local_copy(job.source) as local:
            trace = load_trace(local)
        return _from_trace(job, trace, job.source, reused=False, imported=False)
    except GpuAnalyzeError as exc:
        return FileResult(source=job.source, error=str(exc))
    except OSError as exc:  # e.g. PermissionError from the reader's own open()
        return FileResult(source=job.source, error=f"{job.source}: cannot read ({exc.strerror or exc})")
    except MemoryError:
        return FileResult(source=job.source, error=f"{job.source}: out of memory while reading it")


#: File size from which the reduction gives what reading the file freed back (return_freed_memory) when it
#: ends: a long file's decoded batches and columns are 0.1-0.3 GiB; thousands of tiny files skip it.
RELEASE_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class FileGroup:
    """Files one task reduces together (consecutive ranks): its result carries their per-step sums,
    not every rank's vectors (combine.Reduced)."""

    jobs: tuple[FileJob, ...]


@dataclass(frozen=True, slots=True)
class GroupResult:
    results: tuple[FileResult, ...]
    """Per file, as run_file gives it but without ``partials`` (they are in ``reduced``)."""
    reduced: Reduced


def run_files(group: FileGroup) -> GroupResult:
    """run_file of every file of a group; their partials reduced here (Reduced.add, in file order).
    While one file is reduced, a thread asks the disk for what the next one will read (read_ahead)."""
    reduced = Reduced()
    results = []
    plain = [j.source if _plain(j) else None for j in group.jobs]
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuanalyze-read-ahead") as thread:
        ahead = thread.submit(read_ahead, plain[0], READ) if plain and plain[0] else None
        for i, job in enumerate(group.jobs):
            if ahead is not None:
                ahead.result()  # its requests are queued: the rest of the file is read as it is used
            nxt = plain[i + 1] if i + 1 < len(plain) else None
            ahead = thread.submit(read_ahead, nxt, READ) if nxt else None
            res = run_file(job)
            for p in res.partials:
                reduced.add(p)
            results.append(dataclasses.replace(res, partials=()))
            if job.size >= RELEASE_BYTES:
                del res
                return_freed_memory()  # the file's decoded batches and columns, before the next file's
    return GroupResult(tuple(results), reduced)


def _plain(job: FileJob) -> bool:
    """A local .arrow trace (what load_columns reads)."""
    return not job.imports and not storage.is_url(job.source)


def _reduced(
    job: FileJob, per_rank: dict[int, Rows]
) -> tuple[tuple[RankPartial, ...], int | None, tuple[RankPartial, ...]]:
    """(partials, alt_skip, alt_partials) of one file's ranks (FileResult)."""
    if not job.reduce or not per_rank:
        return (), None, ()
    ranks = sorted(per_rank)
    partials = tuple(_owning(partial_of(per_rank[r], r, job.skip, job.without)) for r in ranks)
    own = warmup_steps(min(len(per_rank[r][S.STEP]) for r in ranks))
    if own >= job.skip or job.without:
        return partials, None, ()
    return partials, own, tuple(_owning(partial_of(per_rank[r], r, own)) for r in ranks)


def _owning(p: RankPartial) -> RankPartial:
    """The partial with its step vectors copied where they are views of the file's columns: the file's
    columns (every column of every row) are then freed when the reduction of the file ends, not when
    the driver has added the vectors to its sums."""
    v = p.vectors
    arrays = [a if a.base is None else a.copy() for a in dataclasses.astuple(v)]
    return dataclasses.replace(p, vectors=StepVectors(*arrays))


def _from_columns(job: FileJob, cols: TraceColumns, arrow: str) -> FileResult:
    step = cols.columns[S.STEP].values
    per_rank = rank_rows(cols)
    # the rows are the file's raw rows: the quantile and chart passes may read its columns directly
    fast = job.reduce and not cols.notes and not (cols.absent & set(_RAW_COLUMNS))
    return dataclasses.replace(
        _result(job, cols, per_rank),
        arrow=arrow,
        steps=cols.rows,
        first_step=int(step.min()),
        last_step=int(step.max()),
        ranks=tuple(sorted(per_rank)),
        fast=fast,
        stamp=storage.stat(arrow) if job.reduce else (0, 0),
    )


def _result(job: FileJob, src: TraceInfo, per_rank: dict[int, Rows]) -> FileResult:
    """The FileResult fields both readers fill alike: the file's metadata (TraceInfo's fields but its path,
    which ``source`` names) and its ranks' partials."""
    partials, alt_skip, alt_partials = _reduced(job, per_rank)
    meta = {name: value for name, value in info_fields(src).items() if name != "path"}
    return FileResult(source=job.source, partials=partials, alt_skip=alt_skip, alt_partials=alt_partials, **meta)


def _from_trace(job: FileJob, trace: Trace, arrow: str | None, *, reused: bool, imported: bool) -> FileResult:
    frame = trace.frame
    ranks = tuple(int(r) for r in frame.get_column(S.RANK).unique().sort().to_list())
    fast, stamp = False, (0, 0)
    per_rank: dict[int, Rows] = {}
    if job.reduce and frame.height:
        parts = frame.partition_by(S.RANK, as_dict=True)
        per_rank = {r: frame_columns(by_step(parts[(r,)])) for r in ranks}
        if arrow is not None and not storage.is_url(arrow):
            stamp = storage.stat(arrow)
            # a note means the reader dropped or repaired something; a file imported here was
            # written from this very frame (its raw rows are these rows)
            fast = not trace.notes and (imported or _raw_matches(Path(arrow), frame))
    return dataclasses.replace(
        _result(job, trace, per_rank),
        arrow=arrow,
        steps=frame.height,
        first_step=int(frame.get_column(S.STEP).min() or 0),  # type: ignore[arg-type]
        last_step=int(frame.get_column(S.STEP).max() or 0),  # type: ignore[arg-type]
        ranks=ranks,
        reused=reused,
        imported=imported,
        fast=fast,
        stamp=stamp,
    )


def by_step(frame: pl.DataFrame) -> pl.DataFrame:
    """One rank's rows sorted by step (the reader's frame already is: checking is cheaper than sorting)."""
    return frame if frame.get_column(S.STEP).is_sorted() else frame.sort(S.STEP)


#: Columns the quantile pass reads.
_RAW_COLUMNS = (S.STEP, S.RANK, S.WALL_MS, *S.PARTS, S.BATCH_SAMPLES, S.KERNEL_STATS)
_RAW_TYPES = {f.name: f.type for f in S.FIELDS if f.name in _RAW_COLUMNS}


def _raw_table(table: pa.Table) -> bool:
    return all(table.schema.field(c).type == t for c, t in _RAW_TYPES.items() if c in table.column_names) and all(
        c in table.column_names for c in _RAW_TYPES
    )


def _raw_matches(path: Path, frame: pl.DataFrame) -> bool:
    """The file's raw rows are the loaded frame's rows, in order (nothing dropped, repaired or sorted)."""
    try:
        with pa.memory_map(str(path)) as src:
            table = pa.ipc.open_stream(src).read_all()
            if table.num_rows != frame.height or not _raw_table(table):
                return False
            for c in (S.STEP, S.RANK):
                if not np.array_equal(table.column(c).to_numpy(), frame.get_column(c).to_numpy()):
                    return False
            return True
    except (OSError, pa.ArrowException, ValueError):
        return False


@dataclass(frozen=True, slots=True)
class BracketJob:
    arrow: str
    skip: int
    drop_all_sampled: bool
    wanted: dict[str, list[Bracket]]
    fast: bool = False
    stamp: tuple[int, int] = (0, 0)
    without: Without = frozenset()


def answer_file(job: BracketJob) -> list[Answers]:
    """Every rank's answers (second quantile pass) of one .arrow file; the same rows as run_file. Only
    files too long for exact sketches get here: what reading it freed is given back (return_freed_memory)."""
    try:
        return _answer_file(job)
    finally:
        return_freed_memory()


def _answer_file(job: BracketJob) -> list[Answers]:
    if job.fast and KERNEL_MEDIAN not in job.wanted:
        if storage.stat(job.arrow) != job.stamp:
            raise GpuAnalyzeError(f"{job.arrow}: the file changed during the analysis; run it again")
        return _answer_raw(job)
    with storage.local_copy(job.arrow) as local:
        trace = load_trace(local)
    parts = trace.frame.partition_by(S.RANK, as_dict=True)
    return [
        bracket_answers(by_step(parts[key]), job.skip, job.drop_all_sampled, job.wanted, job.without)
        for key in sorted(parts)
    ]


def _answer_raw(job: BracketJob) -> list[Answers]:
    """answer_file from the raw columns (only those read: ingest.columns.raw_columns), for files whose raw
    rows are the analysed rows' source: per rank the same rows as partial.analysed_columns, NaN as null."""
    cols = raw_columns(job.arrow, tuple(dict.fromkeys((S.RANK, S.STEP, S.KERNEL_STATS, *job.wanted))))
    rank = cols[S.RANK].values
    bounds = [0, *(np.flatnonzero(np.diff(rank)) + 1).tolist(), rank.size]
    return [
        bracket_answers_of(
            {c: col.rows(slice(a, b)) for c, col in cols.items()},
            job.skip,
            job.drop_all_sampled,
            job.wanted,
            job.without,
        )
        for a, b in itertools.pairwise(bounds)
    ]

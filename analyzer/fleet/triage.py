"""`gpuanalyze fleet`: find the runs, analyse them on an engine, rank them by what the top fix saves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from analyzer.errors import GpuAnalyzeError
from analyzer.fleet.discover import find_runs
from analyzer.fleet.fleet_options import FleetOptions
from analyzer.fleet.run_row import A_TRIAL, RunJob, RunRow, Skipped, analyse_run
from analyzer.render.safe import clean

#: What the table is ranked by, from the most to the least informed.
RANKINGS = {
    "saved_usd_per_run": "USD saved per run by the top fix",
    "saved_gpu_hours_per_run": "GPU-hours saved per run by the top fix (give --price-per-gpu-hour for dollars)",
    "saved_gpu_ms_per_step": "GPU-ms saved per step by the top fix (give --steps-per-run or --hours-per-run "
    "for savings per run)",
}


@dataclass(frozen=True, slots=True)
class Fleet:
    """The ranked rows, the runs skipped and why, and what the ranking is by."""

    root: str
    rows: tuple[RunRow, ...]
    skipped: tuple[Skipped, ...]
    notes: tuple[str, ...]
    ranked_by: str
    """A key of RANKINGS."""


def ranking_key(options: FleetOptions) -> str:
    if options.length.has_length and options.length.price_per_gpu_hour is not None:
        return "saved_usd_per_run"
    if options.length.has_length:
        return "saved_gpu_hours_per_run"
    return "saved_gpu_ms_per_step"


def rank(rows: list[RunRow], by: str) -> list[RunRow]:
    """Largest saving first; ties by idle GPU-hours, then by name (a stable order)."""

    def key(row: RunRow) -> tuple[float, float, str]:
        value = getattr(row, by)
        return (-(value or 0.0), -(row.idle_gpu_hours_per_run or 0.0), row.run)

    return sorted(rows, key=key)


#: Why a run is skipped whose worker process died (the system killed it, e.g. for memory).
WORKER_DIED = "the worker analysing it died (killed by the system, e.g. out of memory); the others went on"


def _lost(job: RunJob) -> Skipped:
    return Skipped(run=job.run.name, reason=WORKER_DIED)


def triage(
    root: str,
    options: FleetOptions,
    *,
    progress: Callable[[int, int], None] | None = None,
    task: Callable[[RunJob], RunRow | Skipped] = analyse_run,
) -> Fleet:
    """Every run beneath ``root`` analysed on ``options.engine`` (``task`` per run), ranked; a run whose
    worker dies is skipped with a note. Raises GpuAnalyzeError when there is none."""
    from analyzer.measure.engine import LocalEngine, make_engine

    targets, notes = find_runs(root)
    jobs = [RunJob(t, options.length) for t in targets]
    rows: list[RunRow] = []
    skipped: list[Skipped] = []
    engine = make_engine(options.engine, workers=options.workers)
    try:
        results = engine.map(task, jobs, on_lost=_lost) if isinstance(engine, LocalEngine) else engine.map(task, jobs)
        for done, result in enumerate(results, 1):
            if isinstance(result, RunRow):
                rows.append(result)
            else:
                skipped.append(result)
            if progress is not None:
                progress(done, len(jobs))
    finally:
        engine.close()
    trials = [s for s in skipped if s.reason == A_TRIAL]
    if trials:
        skipped = [s for s in skipped if s.reason != A_TRIAL]
        notes.append(
            f"left out {len(trials)} trial(s) of `gpuanalyze run --try`, e.g. {trials[0].run}: its table has them"
        )
    if skipped and not rows:
        first = skipped[0]
        raise GpuAnalyzeError(
            clean(f"{root}: none of its {len(skipped)} run(s) could be analysed ({first.run}: {first.reason})")
        )
    by = ranking_key(options)
    return Fleet(root, tuple(rank(rows, by)), tuple(skipped), tuple(notes), by)

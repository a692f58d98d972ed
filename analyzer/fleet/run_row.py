"""One run of a fleet analysed, as one table row: the task each engine worker runs.

A worker analyses one run at a time (its rank files one by one, out of core) and returns only the
row, so no process holds more than one run's frames and the driver holds only rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from analyzer.errors import GpuAnalyzeError
from analyzer.fleet.discover import RunTarget
from analyzer.fleet.fleet_options import RunLength
from analyzer.render.output.commands import FleetRow as RunRow  # the declared output: one row, as written out
from analyzer.render.output.commands import Skipped

if TYPE_CHECKING:
    from analyzer.planning.outcome import Report

__all__ = ["A_TRIAL", "TRIAL_TAG", "RunJob", "RunRow", "Skipped", "analyse_run", "row_of", "trial_of"]


@dataclass(frozen=True, slots=True)
class RunJob:
    """What a worker is sent: the run and the length and price to cost it with."""

    run: RunTarget
    length: RunLength


#: The tag `gpuanalyze run --try` writes into every trial's trace (analyzer.run.trials): a trial is not a run.
TRIAL_TAG = "gpuanalyze_trial"
#: Why a trial's trace is left out of the ranking.
A_TRIAL = "a trial of `gpuanalyze run --try`"


def trial_of(target: str) -> str | None:
    """The setting of the `run --try` trial whose trace ``target`` is (its tags only are read), else None."""
    from gpuanalyze.ingest.trace import schema as S
    from gpuanalyze.ingest.trace.ipc_guard import IpcReader
    from gpuanalyze.ingest.trace.runinfo import read_tags

    path = Path(target)
    first = min(path.glob("*.arrow"), default=path) if path.is_dir() else path
    try:
        with open(first, "rb") as fh:
            raw = (IpcReader(first, fh).schema.metadata or {}).get(S.META_TAGS)
        return None if raw is None else read_tags(raw)[0].get(TRIAL_TAG)
    except Exception:  # noqa: BLE001 - not a readable .arrow trace: the analysis says what it is
        return None


def analyse_run(job: RunJob) -> RunRow | Skipped:
    """Analyse one run in this process (serially: the engine parallelises across runs); never raises."""
    from analyzer.api import ReadOptions, analyze

    if trial_of(job.run.target) is not None:
        return Skipped(run=job.run.name, reason=A_TRIAL)
    try:
        report = analyze(job.run.target, ReadOptions(workers=1))
        return row_of(job, report)
    except GpuAnalyzeError as exc:
        return Skipped(run=job.run.name, reason=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except Exception as exc:  # noqa: BLE001 - one bad run must not end the triage of thousands
        return Skipped(run=job.run.name, reason=f"{type(exc).__name__}: {str(exc)[:200]}")


def row_of(job: RunJob, report: Report) -> RunRow:
    from analyzer.planning.cost import CostInputs, run_cost, savings
    from analyzer.render.words import run_state

    m = report.metrics
    top = report.findings[0] if report.findings else None
    step_ms = m.step_mean_ms
    gpus = report.run.world
    saved_ms = top.projection.saved_ms if top is not None else 0.0
    steps_per_run = job.length.steps_for(step_ms)
    gpu_hours = saved_gpu_hours = saved_usd = idle = None
    if steps_per_run is not None:
        inputs = CostInputs(price_per_gpu_hour=job.length.price_per_gpu_hour, steps_per_run=steps_per_run)
        cost = run_cost(step_ms, inputs, batch_samples=m.batch_samples, world_size=gpus)
        saved = savings(saved_ms, cost)
        gpu_hours, saved_gpu_hours, saved_usd = cost.gpu_hours, saved.gpu_hours_per_run, saved.usd_per_run
        if m.gpu_util is not None:
            idle = cost.gpu_hours * max(0.0, 1.0 - m.gpu_util)
    return RunRow(
        run=job.run.name,
        ranks=m.ranks,
        gpu=report.run.gpu_name,
        bottleneck=report.bottleneck,
        confidence=report.confidence.value,
        confidence_level=report.confidence.level,
        step_time_mean_ms=step_ms,
        steps=m.steps,
        top_fix=None if top is None else top.cause,
        fix_summary=None if top is None else top.summary,
        projected_step_time_ms=None if top is None else top.projection.step_ms,
        saved_ms_per_step=saved_ms,
        saved_gpu_ms_per_step=saved_ms * gpus,
        gpu_hours_per_run=gpu_hours,
        saved_gpu_hours_per_run=saved_gpu_hours,
        saved_usd_per_run=saved_usd,
        idle_gpu_hours_per_run=idle,
        complete=report.complete,
        state=run_state(report)[0],
    )

"""The one measurement road from ranks' rows to what the rules judge, for every input.

Pass 1 reduces every rank to a partial and combines them (combine.py); the steady state (steady.py)
is found from pass 1's per-step sums; when it leaves steps out, every rank is reduced again without
them and combined: those are the rules' metrics. A trace held in memory is one group of this road
(its ranks reduced in this process, combined as a worker's group is), a directory of rank files is
many groups reduced by workers (analyzer.measure.inputs): a file and a directory of the same run give
the rules the same inputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from analyzer.analysis.combine import AnswerFn, Answers, Combined, Combiner, Reduced, StepSums
from analyzer.analysis.metrics import StepMetrics, metrics_from, warmup_steps
from analyzer.analysis.partial import Rows, Without, bracket_answers_of, partial_of
from analyzer.analysis.quantiles import Bracket
from analyzer.analysis.steady import SteadyState, steady_state
from analyzer.errors import TraceError
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.columns import frame_columns
from gpuanalyze.ingest.trace.reader import Trace


@dataclass(frozen=True, slots=True)
class Road:
    """Every analysed step's metrics, the steady state found from them, and what the rules see."""

    combined: Combined
    """Pass 1's combination (the chart pass reads its quantiles and range); its per-step sums are
    dropped once ``metrics.per_step`` is made from them."""
    metrics: StepMetrics
    """Every analysed step: run time, cost, the report's numbers."""
    steady: SteadyState
    judged: StepMetrics
    """The analysed steps without the steady state's left-out ones: what the rules judge."""


def measured(
    first: Combiner,
    skip: int,
    gpu_memory_bytes: int | None,
    *,
    again: Callable[[Without], Combiner],
    answer: Callable[[Without], AnswerFn],
) -> Road:
    """The road after pass 1 (``first``, its ranks combined with warm-up ``skip``): ``again(without)``
    reduces every rank again without the given steps, ``answer(without)`` answers quantile brackets
    over the same rows."""
    combined = first.finish(answer(frozenset()))
    metrics = metrics_from(combined, skip, gpu_memory_bytes)
    # the per-step sums live on in metrics.per_step: not held twice (1M steps' sums are ~0.1 GiB)
    combined = dataclasses.replace(combined, step_sums=StepSums())
    steady = steady_state(metrics)
    judged = metrics
    if steady.left_out:
        second = again(steady.left_out)
        try:
            # a rank left with no analysed step keeps them all (its rows cannot be judged without them)
            if all(p.n or not first.partials[r].n for r, p in second.partials.items()):
                judged = metrics_from(second.finish(answer(steady.left_out)), skip, gpu_memory_bytes)
        finally:
            second.close()
    return Road(combined, metrics, steady, judged)


def rows_road(per_rank: dict[int, Rows], gpu_memory_bytes: int | None, *, quartiles: bool = False) -> Road:
    """The road of ranks held in memory, as one group (``quartiles``: also the wall time's, for charts)."""
    skip = warmup_steps(min(len(rows[S.STEP]) for rows in per_rank.values()))
    ranks = sorted(per_rank)

    def reduce(without: Without) -> Combiner:
        group = Reduced()
        for r in ranks:
            group.add(partial_of(per_rank[r], r, skip, without))
        combiner = Combiner(skip, quartiles=quartiles)
        combiner.merge(group)
        return combiner

    def answer(without: Without) -> AnswerFn:
        def ask(wanted: dict[str, list[Bracket]], drop: bool) -> list[Answers]:
            return [bracket_answers_of(per_rank[r], skip, drop, wanted, without) for r in ranks]

        return ask

    first = reduce(frozenset())
    try:
        return measured(first, skip, gpu_memory_bytes, again=reduce, answer=answer)
    finally:
        first.close()


def trace_rows(trace: Trace) -> dict[int, Rows]:
    """A trace's rows per rank as numpy columns (the reader's frame is sorted by rank and step)."""
    frame = trace.frame
    if frame.height == 0:
        raise TraceError(f"{trace.path}: the trace holds no steps (the run stopped before its first step ended)")
    return {int(k[0]): frame_columns(v) for k, v in frame.partition_by(S.RANK, as_dict=True).items()}


def trace_road(trace: Trace, *, quartiles: bool = False) -> Road:
    """The road of a trace held in memory."""
    return rows_road(trace_rows(trace), trace.run.gpu_memory_bytes, quartiles=quartiles)

"""What DataLoader worker processes would give on the host as measured.

Workers overlap loading with compute, but every batch is handed over between processes (the
training process pays WORKER_MAIN_COST_MS to receive it, a worker WORKER_SIDE_COST_MS plus
WORKER_SIDE_MS_PER_MIB to send it), and loading that is CPU work needs cores the training loop
uses too. The plan divides CPU work among the cores *free* to the job (``HostFacts.cores_free``),
never assumes more workers than free cores, and charges forward and backward for the cores the
workers take when the training process computes on more than the cores left to it. Never more
workers than free cores, except for loading that mostly sleeps on I/O (a network or disk read):
such workers run beyond the cores, as many as their CPU parts fit. Its range: no contention and every
core of the job (other work yielding them: the scheduler shares cores among runnable threads) at the low end, to
the workers' full share of the cores taken from compute, on every free core when the sampler did not measure how
many it computes on, and loading CPU-bound unless the sampler measured the host (high).

Only the Dataset's ``__getitem__`` calls and the collate move into the workers: torch's DataLoader draws the
sampler's indices in the training process and sends them to the workers (``_MultiProcessingDataLoaderIter.
_try_put_index`` calls ``_next_index()`` there; ``_worker_loop`` runs the dataset fetcher, ``__getitem__`` and
collate). The part of a fetch outside the dataset fetcher (the sampler, the iterator's own work: the end marker's
``fetch_ms`` less ``fetch_dataset_ms`` and ``fetch_collate_ms``) stays on the training process's path.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import cast

from analyzer.analysis import thresholds as T
from analyzer.analysis.aggregate import clamp
from analyzer.analysis.fixes import WorkerFix
from analyzer.analysis.rules.accumulation import micro_batches
from analyzer.analysis.rules.rule import Context

#: Fixed-point passes for the step time that the workers' core usage depends on.
_PASSES = 4


def cores_free(ctx: Context) -> float:
    """Cores free to the training process and its workers (the job's share, minus other work)."""
    return max(1.0, ctx.host.cores_free)


def free_word(ctx: Context) -> str:
    """``free``, or ``assumed free`` where the trace records neither the host's CPUs nor system readings
    (an imported trace: the cores are DEFAULT_CORES, never to be read as measured)."""
    return "free" if ctx.host.sampled or ctx.run.cpu_count is not None else "assumed free"


def max_workers(ctx: Context) -> int:
    """The most workers a projection assumes, at most MAX_WORKERS: never more than the free cores,
    except for loading that mostly sleeps on I/O (CPU share below CPU_BOUND_LOADING): such a worker
    takes only its CPU share of a core, so as many run as their CPU parts fit the free cores."""
    cpu = loader_cpu_share(ctx)
    free = cores_free(ctx)
    if cpu is not None and cpu < T.CPU_BOUND_LOADING:
        free = free / max(cpu, 1.0 / T.MAX_WORKERS)
    return max(1, min(T.MAX_WORKERS, math.floor(free + 1e-9)))


def handover_ms(ctx: Context) -> tuple[float, float]:
    """Per-step hand-over cost (in the training process, in a worker) of passing batches between
    processes: per batch, the worker's part growing with the batch's bytes when the trace recorded
    them, times the batches fetched per step (micro-batches under gradient accumulation)."""
    size = ctx.end.batch_bytes if ctx.end is not None else None
    side = T.WORKER_SIDE_COST_MS + (T.WORKER_SIDE_MS_PER_MIB * size / 2**20 if size else 0.0)
    n = micro_batches(ctx) or 1
    return n * T.WORKER_MAIN_COST_MS, n * side


def loader_cpu_share(ctx: Context) -> float | None:
    """Share of the data wait that is CPU work, corrected for a loaded host: there a CPU-bound fetch
    gets only part of a core, so its CPU time reads low against its wall time (None: not recorded)."""
    cpu = ctx.m.data_cpu_fraction
    if cpu is None:
        return None
    load = ctx.host.load_avg
    if ctx.host.oversubscribed and load is not None and load > ctx.host.cores_available:
        cpu = cpu * load / ctx.host.cores_available
    return min(1.0, cpu)


def main_process_share(ctx: Context) -> float:
    """Share of a fetch that stays in the training process with workers: all of it but the dataset fetcher's
    ``__getitem__`` calls and collate (the sampler, the iterator); from the end marker's fetch timing of a loop
    without workers, 0 when not timed (the whole fetch then moves)."""
    end = ctx.end
    if end is None or end.loader_workers != 0 or not end.fetch_ms or end.fetch_dataset_ms is None:
        return 0.0
    return clamp(1.0 - (end.fetch_dataset_ms + (end.fetch_collate_ms or 0.0)) / end.fetch_ms)


def compute_threads(ctx: Context) -> tuple[float, float]:
    """(point, most) cores the training process computes on: what the sampler measured (1 when not
    sampled); on a CPU run not sampled, up to every free core (torch's intra-op threads default to
    the cores), the high end of the range."""
    point = max(1.0, ctx.host.process_cpu_cores or 1.0)
    most = point if ctx.host.sampled or ctx.gpu else max(point, cores_free(ctx))
    return point, most


def concurrent(workers: int, cores: float, cpu_share: float) -> float:
    """Fetches that progress at once: every worker, as far as their CPU part fits the cores (a
    CPU-bound fetch takes a core; one that sleeps on I/O for most of its time takes its share)."""
    if cpu_share <= 0:
        return float(workers)
    return min(float(workers), max(1.0, cores / cpu_share))


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    """What moving loading into worker processes would give."""

    workers: int
    """Workers the projection assumes (0: the loop already has all the workers its cores allow)."""
    step_ms: float
    rule: str
    low_ms: float | None = None
    """The step with compute untouched by the workers and every core of the job."""
    high_ms: float | None = None
    """The step with the workers' cores taken from compute."""

    @property
    def fix(self) -> WorkerFix | None:
        """The fix this plan sizes (None: no more workers are possible)."""
        return WorkerFix(self.workers) if self.workers > 0 else None


@dataclass(frozen=True, slots=True)
class _Model:
    compute: float
    data: float
    cpu_share: float
    workers: int
    cores: float
    threads: float

    def step(self, ctx: Context, contention: bool) -> tuple[float, float, float]:
        """(step, loading per batch, compute as slowed by the workers) under these assumptions."""
        main, side = handover_ms(ctx)
        parallel = concurrent(self.workers, self.cores, self.cpu_share)
        loading = (self.data + side) / parallel
        cpu_work = self.data * self.cpu_share + side
        cores_bound = (self.compute * self.threads + main + cpu_work) / self.cores
        compute = self.compute
        step = max(compute + main, loading, cores_bound)
        for _ in range(_PASSES if contention else 0):
            taken = min(float(self.workers), cpu_work / step) if step > 0 else 0.0
            left = max(self.cores - taken, self.cores / (self.workers + 1))
            compute = self.compute * max(1.0, self.threads / left)
            step = max(compute + main, loading, cores_bound)
        return step, loading, compute


def worker_plan(ctx: Context, data_ms: float, workers: int | None = None) -> WorkerPlan | None:
    """The projected step with more DataLoader workers (``workers``, default: what the free cores
    allow); None when the trace does not say how many ran. Computed once per evaluation: the rules
    that read it (data_loading's detection, evidence and projection, batch_size's per-step fetch)
    share it through ``ctx.memo``."""
    key = ("worker_plan", round(data_ms, 9), workers)
    if key not in ctx.memo:
        ctx.memo[key] = _plan(ctx, data_ms, workers)
    return cast("WorkerPlan | None", ctx.memo[key])


def _plan(ctx: Context, data_ms: float, workers: int | None) -> WorkerPlan | None:
    current = ctx.end.loader_workers if ctx.end is not None else None
    if current is None:
        return None
    if current == 0:
        if workers is not None:
            return _from_zero(ctx, data_ms, workers)
        # the fewest workers within WORKERS_ENOUGH of the best the free cores allow: more add processes,
        # memory and hand-over for nothing
        # (the steps alone first: the stability bootstrap plans every resample, and the words cost 4x the numbers)
        steps = {k: _zero_model(ctx, data_ms, k).step(ctx, True)[0] for k in range(1, max_workers(ctx) + 1)}
        best = min(steps.values())
        return _from_zero(ctx, data_ms, next(k for k, s in steps.items() if s <= best * (1 + T.WORKERS_ENOUGH)))
    return _more(ctx, data_ms, current, workers)


def _zero_model(ctx: Context, data_ms: float, workers: int) -> _Model:
    """The model of ``workers`` loading what a loop without workers waits ``data_ms`` for."""
    stays = data_ms * main_process_share(ctx)  # the sampler and the iterator: on the training process's path
    cpu = loader_cpu_share(ctx)
    threads = compute_threads(ctx)[0]
    return _Model(
        ctx.wall - data_ms + stays, data_ms - stays, 1.0 if cpu is None else cpu, workers, cores_free(ctx), threads
    )


def _from_zero(ctx: Context, data_ms: float, workers: int) -> WorkerPlan:
    model = _zero_model(ctx, data_ms, workers)
    stays, data_ms, compute = data_ms - model.data, model.data, model.compute
    cpu = loader_cpu_share(ctx)
    most = compute_threads(ctx)[1]
    step, loading, slowed = model.step(ctx, True)
    # The low end: the other work on the host yielding the job's cores to it
    # (the scheduler shares cores among runnable threads; the measured free cores are the worst case).
    roomy = dataclasses.replace(model, cores=max(model.cores, float(ctx.host.cores_available)))
    low, _, _ = roomy.step(ctx, False)
    # Not sampled, the loader's CPU share may read low (a loaded host gives it part of a core): the high
    # end takes loading as CPU-bound.
    worst = model.cpu_share if ctx.host.sampled else 1.0
    high, _, _ = dataclasses.replace(model, threads=most, cpu_share=worst).step(ctx, True)
    main, side = handover_ms(ctx)
    basis = "CPU time not recorded: loading assumed CPU-bound" if cpu is None else f"{cpu:.0%} of the wait is CPU time"
    cores = f"{model.cores:g}"
    charged = f" (slowed to {slowed:.2f} ms: the workers take cores it computes on)" if slowed > compute + 1e-9 else ""
    kept = f"; {stays:.2f} ms of each fetch (sampler, iterator) stays in the training process" if stays else ""
    rule = (
        f"num_workers={workers}: each batch takes a worker {data_ms:.2f} ms to load ({basis}{kept}) + {side:.2f} ms "
        f"to hand over, {concurrent(workers, model.cores, model.cpu_share):.3g} at a time: {loading:.2f} ms per batch; "
        f"the training process computes {compute:.2f} ms{charged} + receives {main:.2f} ms; all of it shares "
        f"the {cores} core(s) {free_word(ctx)} to this job: "
        f"max({slowed:.2f} + {main:.2f}, {loading:.2f}, ({compute:.2f} x "
        f"{model.threads:g} + {main:.2f} + {data_ms * model.cpu_share:.2f} + {side:.2f})/{cores}) = {step:.2f} ms"
    )
    return WorkerPlan(workers, step, rule, low_ms=min(low, step), high_ms=max(high, step))


def _more(ctx: Context, data_ms: float, current: int, workers: int | None) -> WorkerPlan:
    compute = ctx.wall - data_ms
    free = cores_free(ctx)
    workers = workers or min(T.MAX_WORKERS, math.floor(free) - 1, 2 * current)
    if workers <= current:
        return WorkerPlan(0, ctx.wall, f"num_workers={current} already uses the {free:g} {free_word(ctx)} core(s)")
    # With `current` workers each batch takes a worker current x step to build; more workers divide that,
    # as far as the free cores run them at once.
    loading = ctx.wall * current / workers
    step = max(compute, loading)
    crowded = ctx.wall * current / min(workers, max(current, math.floor(free)))
    rule = (
        f"num_workers {current} -> {workers}: batches arrive every {ctx.wall:.2f} x {current}/{workers} = "
        f"{loading:.2f} ms, overlapped with the {compute:.2f} ms compute path"
    )
    return WorkerPlan(workers, step, rule, low_ms=step, high_ms=max(step, compute, crowded))

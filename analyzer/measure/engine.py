"""Where per-rank work runs: in this process, in a local process pool, or as Ray tasks.

An engine maps a top-level function over items and yields the results in the items' order. The
functions it runs are the per-rank import and reduction tasks of ``analyzer.measure.rank_tasks``: they
read and write only through paths every worker can reach and return small results, so the
driver combines without holding any rank's rows.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from analyzer.errors import GpuAnalyzeError

T = TypeVar("T")
R = TypeVar("R")

ENGINES = ("local", "ray")


def cores() -> int:
    """CPU cores this process may use (the affinity mask, e.g. a container's limit)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class LocalEngine:
    """A process pool sized to the cores (``workers``), started on first use; serial for one item or one worker."""

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        if workers is not None and workers < 1:
            raise GpuAnalyzeError("--workers must be at least 1")
        self.workers = workers or cores()
        self._pool: ProcessPoolExecutor | None = None

    @property
    def parallelism(self) -> int:
        """Tasks that run at once."""
        return self.workers

    def map(
        self,
        fn: Callable[[T], R],
        items: Sequence[T],
        *,
        window: int | None = None,
        on_lost: Callable[[T], R] | None = None,
    ) -> Iterator[R]:
        """``window``: most items submitted and not yet yielded (default: four per worker); results
        that are large (a group of files' sums) want fewer held at once. ``on_lost``: the result for
        an item whose worker died (killed for memory: BrokenProcessPool). The pool is restarted and
        each item it held is run again alone in a one-worker pool, so only the item that kills its
        worker there gets ``on_lost``; without it the BrokenProcessPool is raised."""
        if self.workers <= 1 or len(items) <= 1 or not _spawn_works():
            for item in items:
                yield fn(item)
            return
        window = window or 4 * self.workers
        pending: list[tuple[T, Future[R]]] = []
        for item in items:
            pending.append((item, self._submit(fn, item)))
            if len(pending) >= window:
                yield self._settle(fn, *pending.pop(0), on_lost)
        for item, fut in pending:
            yield self._settle(fn, item, fut, on_lost)

    def _submit(self, fn: Callable[[T], R], item: T) -> Future[R]:
        if self._pool is None:
            # spawn: the parent runs polars' thread pool, which a fork would copy in a locked state
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=get_context("spawn"))
        try:
            return self._pool.submit(fn, item)
        except BrokenProcessPool:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
            return self._submit(fn, item)

    def _settle(self, fn: Callable[[T], R], item: T, fut: Future[R], on_lost: Callable[[T], R] | None) -> R:
        try:
            return fut.result()
        except BrokenProcessPool:
            if on_lost is None:
                raise
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None  # the next submit starts a new one
        with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as alone:
            try:
                return alone.submit(fn, item).result()
            except BrokenProcessPool:
                return on_lost(item)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __enter__(self) -> LocalEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _spawn_works() -> bool:
    """Spawned workers re-import the main script: impossible when it came from stdin ('<stdin>')."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return path is None or getattr(getattr(main, "__spec__", None), "name", None) is not None or Path(path).exists()


class RayEngine:
    """Ray tasks: on the cluster ``RAY_ADDRESS`` or ``ray.init(address="auto")`` finds, else a local Ray.

    Results are fetched as tasks finish, at most ``window`` in flight, so the driver holds a
    bounded number of results at once.
    """

    name = "ray"

    def __init__(self, *, num_cpus: int | None = None, address: str | None = None) -> None:
        try:
            import ray
        except ImportError as exc:
            raise GpuAnalyzeError("--engine ray needs Ray: pip install 'gpuanalyze[ray]'") from exc
        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            try:
                ray.init(address=address or "auto", log_to_driver=False, logging_level=logging.ERROR)
            except (ConnectionError, RuntimeError, ValueError):
                # no running cluster: start a local one (limited to num_cpus when given)
                try:
                    ray.init(
                        num_cpus=num_cpus, log_to_driver=False, logging_level=logging.ERROR, include_dashboard=False
                    )
                except Exception as exc:  # Ray raises many types when it cannot start
                    raise GpuAnalyzeError(f"--engine ray: Ray could not start ({str(exc)[:160]})") from exc
            self._started = True
        self.parallelism = max(1, int(ray.cluster_resources().get("CPU", 1)))
        """Tasks that run at once (the cluster's CPUs)."""
        self.window = max(4, 2 * self.parallelism)

    def map(self, fn: Callable[[T], R], items: Sequence[T], *, window: int | None = None) -> Iterator[R]:
        ray = self._ray
        window = window or self.window
        remote = ray.remote(fn)
        refs: list[Any] = []
        it = iter(items)
        for item in it:
            refs.append(remote.remote(item))
            if len(refs) >= window:
                yield _get(ray, refs.pop(0))
        for ref in refs:
            yield _get(ray, ref)

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()
            self._started = False

    def __enter__(self) -> RayEngine:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _get(ray: Any, ref: Any) -> Any:
    """A task's result (tasks return user errors as values; anything raised is a bug or a lost worker)."""
    return ray.get(ref)


def make_engine(name: str = "local", *, workers: int | None = None) -> LocalEngine | RayEngine:
    if name == "local":
        return LocalEngine(workers)
    if name == "ray":
        return RayEngine(num_cpus=workers)
    raise GpuAnalyzeError(f"--engine {name!r}: choose one of {', '.join(ENGINES)}")

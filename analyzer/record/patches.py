"""Temporary class-level wrappers that time DataLoader iteration and host-device syncs.

They are installed only while a profile is active and restored on exit. Each wrapper calls
the original unchanged and reports elapsed host time to a callback that never raises.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Report = Callable[[str, int, Any, Any, int], None]
"""report(kind, elapsed_ns, owner, result, cpu_ns) with kind in {"fetch", "iter", "backward", "sync"};
cpu_ns, the calling thread's CPU time in the call, is measured for data fetches only (0 otherwise)."""
DATA_KINDS = ("fetch", "iter")
Before = Callable[[str], None]
"""before(kind), called just before the wrapped call starts."""


@dataclass(slots=True)
class FetcherCall:
    """The last call of torch's dataset fetcher (the Dataset's ``__getitem__`` calls and the collate of one fetch):
    written by the wrapper, read and cleared by record.loaders.LoaderWatch."""

    fetcher: Any = None
    ns: int = 0
    collate_ns: int = 0


class Patches:
    """Installs and removes the wrappers; each attribute is restored exactly as found."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []
        # What the wrappers call before each call, read at every call so that it can change while
        # they are installed: the common step then pays for no call that would do nothing.
        self._before_fetch: list[Before] = []
        """Before each DataLoader fetch and ``iter()``, until ``fetches_end_no_step`` empties it."""
        self._before_backward: list[Before] = []
        """Before each backward once ``time_backward_start`` gave it (CUDA timing); empty on CPU."""

    def install(self, report: Report, before: Before, dataset_call: FetcherCall | None = None) -> None:
        """``dataset_call`` is set after each call of torch's dataset fetcher."""
        import torch
        from torch.utils.data import DataLoader
        from torch.utils.data._utils import fetch
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        if dataset_call is not None:
            for fetcher in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher):
                original = fetcher.__dict__["fetch"]
                self._saved.append((fetcher, "fetch", original))
                fetcher.fetch = functools.wraps(original)(_dataset_wrapper(original, dataset_call))
        self._before_fetch[:] = [before]
        self._wrap(_BaseDataLoaderIter, "__next__", "fetch", report, self._before_fetch)
        self._wrap(DataLoader, "__iter__", "iter", report, self._before_fetch)
        # Tensor.backward calls torch.autograd.backward through the module attribute.
        self._wrap(torch.autograd, "backward", "backward", report, self._before_backward)

    def fetches_end_no_step(self) -> None:
        """From now on no fetch can end a step (an optimizer or ``prof.step()`` ends them): the fetch
        wrappers stop calling ``before``."""
        self._before_fetch.clear()

    def time_backward_start(self, before: Before) -> None:
        """From now on the backward wrapper calls ``before("backward")`` before each backward."""
        self._before_backward[:] = [before]

    def install_sync(self, report: Report) -> None:
        """Host-device syncs: only meaningful (and only installed) when the model runs on a GPU."""
        import torch

        self._wrap(torch.cuda, "synchronize", "sync", report, [])
        for name in ("item", "tolist", "cpu"):
            self._wrap(torch.Tensor, name, "sync", report, [])

    def install_compile(self, compiled: Callable[[Any, Any], None]) -> None:
        """``torch.compile(module)`` calls ``compiled(module, result)`` so that the returned wrapper,
        which runs eagerly, carries the forward timing instead of the module it compiles."""
        import torch

        original = torch.compile
        self._saved.append((torch, "compile", original))

        @functools.wraps(original)
        def compile_wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if args and result is not args[0]:
                compiled(args[0], result)
            return result

        torch.compile = compile_wrapper

    def remove(self) -> None:
        while self._saved:
            owner, name, original = self._saved.pop()
            setattr(owner, name, original)

    def _wrap(self, owner: Any, name: str, kind: str, report: Report, before: list[Before]) -> None:
        """Wrap ``owner.name``; the callable in ``before`` when there is one (it may be put there later on) runs
        before each call."""
        original = owner.__dict__[name] if name in getattr(owner, "__dict__", {}) else getattr(owner, name)
        self._saved.append((owner, name, original))
        make = _data_wrapper if kind in DATA_KINDS else _timed_wrapper
        wrapper = make(original, kind, report, before)
        setattr(owner, name, functools.wraps(original)(wrapper))


# Two wrapper shapes, so that the common call pays for no clock it does not read: data fetches
# also measure the thread's CPU time, the others report cpu_ns=0. They run on every fetch,
# backward and sync of the loop. ``before`` is a list read at each call (empty: nothing to call).


def _data_wrapper(original: Any, kind: str, report: Report, before: list[Before]) -> Callable[..., Any]:
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before:
            before[0](kind)
        t0, c0 = clock(), cpu_clock()
        result = None
        try:
            result = original(*args, **kwargs)
            return result
        finally:
            report(kind, clock() - t0, args[0] if args else None, result, cpu_clock() - c0)

    return wrapper


def _timed_wrapper(original: Any, kind: str, report: Report, before: list[Before]) -> Callable[..., Any]:
    clock = time.perf_counter_ns

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before:
            before[0](kind)
        t0 = clock()
        result = None
        try:
            result = original(*args, **kwargs)
            return result
        finally:
            report(kind, clock() - t0, args[0] if args else None, result, 0)

    return wrapper


def _dataset_wrapper(original: Any, cell: FetcherCall) -> Callable[..., Any]:
    """Times one call of a dataset fetcher, and the collate within it, into ``cell``; the fetcher's collate_fn is
    put back as found when the call returns (the user's collate is called once, as it would have been)."""
    clock = time.perf_counter_ns

    def wrapper(fetcher: Any, *args: Any, **kwargs: Any) -> Any:
        collate = fetcher.collate_fn
        took = [0]

        def timed_collate(batch: Any) -> Any:
            t = clock()
            try:
                return collate(batch)
            finally:
                took[0] = clock() - t

        fetcher.collate_fn = timed_collate
        t0 = clock()
        try:
            return original(fetcher, *args, **kwargs)
        finally:
            fetcher.collate_fn = collate
            cell.fetcher, cell.ns, cell.collate_ns = fetcher, clock() - t0, took[0]

    return wrapper

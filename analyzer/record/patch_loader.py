"""The DataLoader patch: its iterators' ``__next__`` (a fetch) and ``DataLoader.__iter__`` (an epoch started), each
timed with the calling thread's CPU time too (a Dataset that runs in this process spends it)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from analyzer.record.timed_call import Before, Patch, Report

DATA_KINDS = ("fetch", "iter")


def loader_patches(report: Report, before: list[Before]) -> list[Patch]:
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    return [
        (_BaseDataLoaderIter, "__next__", lambda original: data_wrapper(original, "fetch", report, before)),
        (DataLoader, "__iter__", lambda original: data_wrapper(original, "iter", report, before)),
    ]


def data_wrapper(original: Any, kind: str, report: Report, before: list[Before]) -> Callable[..., Any]:
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

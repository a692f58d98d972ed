"""The patch on torch's private dataset fetchers (``_MapDatasetFetcher.fetch``, ``_IterableDatasetFetcher.fetch``):
one fetch's ``__getitem__`` calls and its collate, timed apart where the Dataset runs in this process."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from analyzer.record.timed_call import Patch


@dataclass(slots=True)
class DatasetCall:
    """The last call of torch's dataset fetcher (the Dataset's ``__getitem__`` calls and the collate of one fetch):
    written by the wrapper, read and cleared by record.loaders.LoaderWatch."""

    fetcher: Any = None
    ns: int = 0
    collate_ns: int = 0


def fetcher_patches(cell: DatasetCall) -> list[Patch]:
    from torch.utils.data._utils import fetch

    return [
        (fetcher, "fetch", lambda original: _dataset_wrapper(original, cell))
        for fetcher in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher)
    ]


def _dataset_wrapper(original: Any, cell: DatasetCall) -> Callable[..., Any]:
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

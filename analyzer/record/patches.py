"""Temporary class-level wrappers, one module per patch (``patch_*.py``), installed only while a profile is
active and each attribute restored exactly as found on exit."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from analyzer.record.patch_backward import backward_patches
from analyzer.record.patch_compile import compile_patches
from analyzer.record.patch_fetcher import DatasetCall, fetcher_patches
from analyzer.record.patch_loader import loader_patches
from analyzer.record.patch_sync import sync_patches
from analyzer.record.timed_call import Before, Patch, Report


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

    def install(self, report: Report, before: Before, dataset_call: DatasetCall | None = None) -> None:
        """``dataset_call`` is set after each call of torch's dataset fetcher."""
        if dataset_call is not None:
            self.apply(fetcher_patches(dataset_call))
        self._before_fetch[:] = [before]
        self.apply(loader_patches(report, self._before_fetch))
        self.apply(backward_patches(report, self._before_backward))

    def fetches_end_no_step(self) -> None:
        """From now on no fetch can end a step (an optimizer or ``prof.step()`` ends them): the fetch
        wrappers stop calling ``before``."""
        self._before_fetch.clear()

    def time_backward_start(self, before: Before) -> None:
        """From now on the backward wrapper calls ``before("backward")`` before each backward."""
        self._before_backward[:] = [before]

    def install_sync(self, report: Report) -> None:
        self.apply(sync_patches(report))

    def install_compile(self, compiled: Callable[[Any, Any], None]) -> None:
        self.apply(compile_patches(compiled))

    def remove(self) -> None:
        while self._saved:
            owner, name, original = self._saved.pop()
            setattr(owner, name, original)

    def apply(self, patches: list[Patch]) -> None:
        for owner, name, wrap in patches:
            original = owner.__dict__[name] if name in getattr(owner, "__dict__", {}) else getattr(owner, name)
            self._saved.append((owner, name, original))
            setattr(owner, name, functools.wraps(original)(wrap(original)))

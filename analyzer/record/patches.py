"""Temporary class-level wrappers that time DataLoader iteration and host-device syncs.

They are installed only while a profile is active and restored on exit. Each wrapper calls
the original unchanged and reports elapsed host time to a callback that never raises.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

Report = Callable[[str, int, Any, Any, int], None]
"""report(kind, elapsed_ns, owner, result, cpu_ns) with kind in {"fetch", "iter", "backward", "sync"};
cpu_ns, the calling thread's CPU time in the call, is measured for data fetches only (0 otherwise)."""
DATA_KINDS = ("fetch", "iter")
Before = Callable[[str], None]
"""before(kind), called just before the wrapped call starts."""


def _zero() -> int:
    return 0


class Patches:
    """Installs and removes the wrappers; each attribute is restored exactly as found."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def install(self, report: Report, before: Before) -> None:
        import torch
        from torch.utils.data import DataLoader
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        self._wrap(_BaseDataLoaderIter, "__next__", "fetch", report, before)
        self._wrap(DataLoader, "__iter__", "iter", report, before)
        # Tensor.backward calls torch.autograd.backward through the module attribute.
        self._wrap(torch.autograd, "backward", "backward", report, before)

    def install_sync(self, report: Report) -> None:
        """Host-device syncs: only meaningful (and only installed) when the model runs on a GPU."""
        import torch

        self._wrap(torch.cuda, "synchronize", "sync", report, None)
        for name in ("item", "tolist", "cpu"):
            self._wrap(torch.Tensor, name, "sync", report, None)

    def install_compile(self, compiled: Callable[[Any, Any], None]) -> None:
        """``torch.compile(module)`` calls ``compiled(module, result)`` so that the returned wrapper,
        which runs eagerly, carries the forward hooks instead of the module it compiles."""
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

    def _wrap(self, owner: Any, name: str, kind: str, report: Report, before: Before | None) -> None:
        original = owner.__dict__[name] if name in getattr(owner, "__dict__", {}) else getattr(owner, name)
        self._saved.append((owner, name, original))
        clock = time.perf_counter_ns
        cpu_clock = time.thread_time_ns if kind in DATA_KINDS else _zero

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if before is not None:
                before(kind)
            t0, c0 = clock(), cpu_clock()
            result = None
            try:
                result = original(*args, **kwargs)
                return result
            finally:
                report(kind, clock() - t0, args[0] if args else None, result, cpu_clock() - c0)

        setattr(owner, name, wrapper)

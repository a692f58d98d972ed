"""Which autocast the profiled forwards ran under: read, never set, at each outermost forward.

Autocast leaves parameters float32 and a CPU trace records no dtypes, so ``compare`` tells an autocast run from its
float32 twin by this (planning/run_differences.py). ``torch.is_autocast_enabled(device_type)`` and
``torch.get_autocast_dtype(device_type)`` (torch 2.4+) read the thread's autocast state; nothing is changed.
"""

from __future__ import annotations

from typing import Any

_DEVICES = ("cuda", "cpu")


class AutocastWatch:
    """The first autocast seen in a profiled forward, as ``'cpu:bfloat16'`` (None: none seen, or an older torch)."""

    __slots__ = ("_dtype", "_enabled", "seen")

    def __init__(self, torch: Any) -> None:
        self.seen: str | None = None
        self._enabled = getattr(torch, "is_autocast_enabled", None)
        self._dtype = getattr(torch, "get_autocast_dtype", None)

    def read(self) -> None:
        if self.seen is not None or self._dtype is None or self._enabled is None:
            return
        for device in _DEVICES:
            if self._enabled(device):
                self.seen = f"{device}:{str(self._dtype(device)).removeprefix('torch.')}"
                return

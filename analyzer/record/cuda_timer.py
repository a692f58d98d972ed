"""CUDA-event timing of step phases, resolved lazily so the host never waits for the device."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

Interval = tuple[str, Any, Any]


class CudaPhaseTimer:
    """Records an event pair around each phase on the current stream; no synchronisation."""

    def __init__(self) -> None:
        import torch

        self._event = torch.cuda.Event
        self._open: dict[str, Any] = {}
        self._intervals: list[Interval] = []

    def begin(self, phase: str) -> None:
        event = self._event(enable_timing=True)
        event.record()
        self._open[phase] = event

    def end(self, phase: str) -> None:
        start = self._open.pop(phase, None)
        if start is None:
            return
        event = self._event(enable_timing=True)
        event.record()
        self._intervals.append((phase, start, event))

    def take(self) -> list[Interval]:
        """The intervals of the step that just closed; starts a fresh list."""
        taken, self._intervals = self._intervals, []
        return taken


class LazyResolver:
    """Holds closed steps until their events have completed on the device, then emits them.

    Events complete in stream order, so only the oldest pending step is polled with
    ``query()``; the host never blocks, except once in ``drain(force=True)`` at exit.
    """

    def __init__(self, emit: Callable[[Any, dict[str, float] | None], None]) -> None:
        self._emit = emit
        self._pending: deque[tuple[Any, list[Interval]]] = deque()

    def push(self, closed: Any, intervals: list[Interval]) -> None:
        self._pending.append((closed, intervals))
        self.drain(force=False)

    def drain(self, *, force: bool) -> None:
        while self._pending:
            closed, intervals = self._pending[0]
            if intervals and not intervals[-1][2].query():
                if not force:
                    return
                intervals[-1][2].synchronize()
            self._pending.popleft()
            device_ms: dict[str, float] = {}
            for phase, start, end in intervals:
                device_ms[phase] = device_ms.get(phase, 0.0) + start.elapsed_time(end)
            self._emit(closed, device_ms if intervals else None)

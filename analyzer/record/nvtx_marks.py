"""NVTX ranges for gpuanalyze's steps and phases (``analyzer.profile(nvtx=True)``, ``gpuanalyze run --nvtx``), so
that an Nsight Systems capture of the run (``nsys profile -t cuda,nvtx gpuanalyze run --nvtx -- python train.py``)
shows them, and ``gpuanalyze`` reads them back from its export (ingest/nsys/events.py): one range
``gpuanalyze:step#<N>`` per step and ``gpuanalyze:forward``, ``gpuanalyze:backward``, ``gpuanalyze:optimizer``
(schema.EXPORT_PHASE_NAMES) around each phase that the CUDA phase timer times.

The ranges are start/end ranges (``torch.cuda.nvtx.range_start``/``range_end``), not push/pop: a phase that
never ends (an exception in forward) leaves no push unpopped on the thread's stack. They ride on the CUDA phase
timer's begin/end/take, so NVTX costs nothing unless asked for (the plain timer is used), and nothing is emitted
without CUDA (no timer, and ``torch.cuda.nvtx`` is not called).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from analyzer.record.cuda_timer import CudaPhaseTimer, Interval
from gpuanalyze.ingest.trace import schema as S

#: The NVTX range of a step, as ingest/nsys/events.py reads it.
STEP_RANGE = "gpuanalyze:step#{}"


class NvtxPhaseTimer(CudaPhaseTimer):
    """The CUDA phase timer, with an NVTX range around each phase and each step."""

    def __init__(self, nvtx: Any, step_index: Callable[[], int]) -> None:
        super().__init__()
        self._range_start: Callable[[str], Any] = nvtx.range_start
        self._range_end: Callable[[Any], None] = nvtx.range_end
        self._step_index = step_index
        self._ranges: dict[str, Any] = {}
        self._step: Any = self._range_start(STEP_RANGE.format(step_index()))

    def begin(self, phase: str) -> None:
        super().begin(phase)
        old = self._ranges.pop(phase, None)
        if old is not None:
            self._range_end(old)
        self._ranges[phase] = self._range_start(S.EXPORT_PHASE_NAMES[phase])

    def end(self, phase: str) -> None:
        super().end(phase)
        rid = self._ranges.pop(phase, None)
        if rid is not None:
            self._range_end(rid)

    def take(self) -> list[Interval]:
        """A step closed (or restarted): its range ends and the current step's begins."""
        self._range_end(self._step)
        self._step = self._range_start(STEP_RANGE.format(self._step_index()))
        return super().take()


def phase_timer(nvtx: bool, step_index: Callable[[], int]) -> CudaPhaseTimer:
    """The CUDA phase timer; with ``nvtx``, the one that also emits NVTX ranges."""
    if not nvtx:
        return CudaPhaseTimer()
    import torch

    if not torch.cuda.is_available():
        return CudaPhaseTimer()
    return NvtxPhaseTimer(torch.cuda.nvtx, step_index)

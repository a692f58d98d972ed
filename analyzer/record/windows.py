"""Sampled kernel windows: torch.profiler runs for a few steps now and then, and each window is
reduced at once to per-step kernel statistics (ingest.kernel_stats) stored with those steps.

The profiler's own start/stop/export cost is kept out of the neighbouring steps' timings; the
window steps themselves run under the profiler, so their step times are not used for step-time
statistics when unprofiled steps exist (see analyzer.analysis.metrics). The window only records: nothing of
the run is called again.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuanalyze.ingest.kineto.parse import parse_kineto
from gpuanalyze.ingest.timeline.kernel_stats import StepKernels
from gpuanalyze.ingest.trace.schema import KernelStats


class KernelWindows:
    def __init__(self, *, first: int, every: int, steps: int, cuda: bool) -> None:
        self.first, self.every, self.steps, self.cuda = first, every, steps, cuda
        self._prof: Any = None
        self._start_step = -1

    @property
    def active(self) -> bool:
        return self._prof is not None

    @property
    def start_step(self) -> int:
        return self._start_step

    def abort(self) -> None:
        """Stop an active window without using it (profiling is being switched off)."""
        prof, self._prof = self._prof, None
        if prof is not None:
            with contextlib.suppress(Exception), quiet_profiler():  # already failing; nothing more to report
                prof.stop()

    def due(self, step: int) -> bool:
        return not self.active and step >= self.first and (step - self.first) % self.every == 0

    def start(self, step: int) -> None:
        import torch

        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        # A schedule (always RECORD) makes torch.profiler emit ProfilerStep#N markers at step().
        prof = torch.profiler.profile(activities=activities, schedule=lambda _: torch.profiler.ProfilerAction.RECORD)
        with quiet_profiler():
            prof.start()
        self._prof, self._start_step = prof, step

    def step_closed(self, step: int) -> dict[int, KernelStats] | None:
        """Called after step ``step`` closed; returns {step: stats} when the window just ended."""
        if not self.active:
            return None
        if step - self._start_step + 1 < self.steps:
            self._prof.step()
            return None
        return self.finish()

    def finish(self) -> dict[int, KernelStats]:
        prof, self._prof = self._prof, None
        with quiet_profiler():
            prof.stop()
        fd, path = tempfile.mkstemp(suffix=".json", prefix="gpuanalyze-window-")
        os.close(fd)
        try:
            prof.export_chrome_trace(path)
            k = parse_kineto(path)
        finally:
            Path(path).unlink()
        kernels = StepKernels(k)
        return {self._start_step + num: kernels.stats(lo, hi) for num, lo, hi in k.steps}


#: What libkineto prints on every profiler start and stop ("USDT:... profiler_start").
_NOISE_PREFIX = b"USDT:"


@contextlib.contextmanager
def quiet_profiler() -> Iterator[None]:
    """Keep libkineto's start/stop lines off the user's stderr; anything else written meanwhile is
    passed on unchanged when the block ends. Does nothing when fd 2 cannot be swapped."""
    try:
        sys.stderr.flush()
        sink = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
    except (OSError, ValueError, AttributeError):
        yield
        return
    try:
        saved = os.dup(2)
    except OSError:
        sink.close()
        yield
        return
    os.dup2(sink.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        with sink:
            sink.seek(0)
            kept = b"".join(line for line in sink.read().splitlines(True) if not line.startswith(_NOISE_PREFIX))
        if kept:
            with contextlib.suppress(OSError):
                os.write(2, kept)

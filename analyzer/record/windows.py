"""Sampled kernel windows: torch.profiler runs for a few steps now and then, and each window is
reduced at once to per-step kernel statistics (ingest.kernel_stats) stored with those steps.

The profiler's own start/stop/export cost is kept out of the neighbouring steps' timings; the
window steps themselves run under the profiler, so their step times are not used for step-time
statistics when unprofiled steps exist (see analyzer.analysis.metrics).

On a CPU run on a CPU with native bf16 the first window also records the ops' shapes, and its float32
matmul shapes are replayed in bf16 when it ends (record.bf16_replay): every window's steps then carry
their matmul time under bf16 (KernelStats ``cpu_matmul_bf16*_ms``). On every CPU run the first window
records shapes, and its ops that touched the batch are replayed at 2, 4 and 8 times its samples
(record.sample_replay): every window's steps carry their op time at those batch sizes (``cpu_op_x*_ms``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from analyzer.record import bf16_replay, sample_replay
from analyzer.record.run_facts import cpu_bf16
from gpuanalyze.ingest.kernel_stats import StepKernels
from gpuanalyze.ingest.kineto import KinetoTrace, parse_kineto
from gpuanalyze.ingest.schema import KernelStats

#: What the sample replay needs when the window ends: the samples of one forward's batch (None: not seen) and
#: the profiled models as (name, module) pairs (their parameters' shapes are not the batch's).
BatchFacts = Callable[[], tuple[int | None, Any]]


class KernelWindows:
    def __init__(self, *, first: int, every: int, steps: int, cuda: bool, batch: BatchFacts | None = None) -> None:
        self.first, self.every, self.steps, self.cuda = first, every, steps, cuda
        self._prof: Any = None
        self._start_step = -1
        self._replay = not cuda and bool(cpu_bf16())
        """Replay the first window's float32 matmuls in bf16 (a CPU run on a CPU with native bf16)."""
        self._bf16: dict[str, float] | None = None
        """Per bf16_replay.FIELDS, the matmul time under bf16 as a share of it (None: not replayed yet)."""
        self._batch = None if cuda else batch
        """Replay the first window's ops at larger batches (a CPU run whose batch the recorder sees)."""
        self._grown: dict[str, float] | None = None
        """Per sample_replay.FIELDS and UNREPLAYED, a share of the op time (None: not replayed yet)."""

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
        prof = torch.profiler.profile(
            activities=activities,
            schedule=lambda _: torch.profiler.ProfilerAction.RECORD,
            record_shapes=self._shapes_wanted,  # the shapes the replays need
        )
        with quiet_profiler():
            prof.start()
        self._prof, self._start_step = prof, step

    @property
    def _shapes_wanted(self) -> bool:
        return (self._replay and self._bf16 is None) or (self._batch is not None and self._grown is None)

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
            trace = parse_kineto(path)
            if self._replay and self._bf16 is None:
                self._bf16 = _replayed(path)
            if self._batch is not None and self._grown is None:
                self._grown = _grown(path, *self._batch())
        finally:
            Path(path).unlink()
        return self._per_step(trace)

    def _per_step(self, k: KinetoTrace) -> dict[int, KernelStats]:
        kernels = StepKernels(k)
        stats = {self._start_step + num: kernels.stats(lo, hi) for num, lo, hi in k.steps}
        bf16, grown = self._bf16 or {}, self._grown or {}
        if not bf16 and not grown:
            return stats
        return {
            n: msgspec.structs.replace(
                s, **{f: s.cpu_matmul_ms * bf16[f] for f in bf16}, **{f: s.cpu_op_ms * grown[f] for f in grown}
            )
            for n, s in stats.items()
        }


def _replayed(path: str) -> dict[str, float]:
    """The window's matmul time under bf16 as a share of it, per bf16_replay.FIELDS ({} when nothing replayed: a
    window with no float32 matmul, or one the replay could not read)."""
    try:
        calls, union_us, reduced = bf16_replay.window_calls(path)
        return bf16_replay.ratios(calls, union_us, bf16_replay.replay(calls), reduced=reduced)
    except (OSError, ValueError, KeyError, TypeError):  # the profiler's JSON not as expected: not measured
        return {}


def _grown(path: str, samples: int | None, models: Any) -> dict[str, float]:
    """The window's op time at larger batches as a share of it, per sample_replay.FIELDS and UNREPLAYED ({}
    when the batch was not seen, or the profiler's JSON not as expected)."""
    if not samples:
        return {}
    try:
        params = frozenset(tuple(p.shape) for _, m in models or () for p in m.parameters())
        window = sample_replay.window_ops(path, samples, params)
        return sample_replay.fields(window, sample_replay.replay(window.calls, samples, params))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


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

"""``analyzer.profile``: a context manager that times every step of a PyTorch training loop.

Step boundaries come, in order of precedence, from explicit ``prof.step()`` calls, from the
optimizer's ``step`` (global optimizer hooks), or from the model's forward when no optimizer
steps. Every hook is guarded: an internal failure warns once, removes all hooks and lets the
training loop run on. Hooks only observe; they never change tensors, so results are unchanged.
"""

from __future__ import annotations

import functools
import time
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analyzer.errors import GpuAnalyzeWarning
from analyzer.record.batch import batch_size_of
from analyzer.record.cuda_timer import CudaPhaseTimer, LazyResolver
from analyzer.record.options import ProfileOptions
from analyzer.record.patches import Patches
from analyzer.record.paths import free_path, rank_path
from analyzer.record.runinfo import collect_run_info
from analyzer.record.steps import StepTimes
from analyzer.record.windows import KernelWindows
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.runinfo import EndInfo
from gpuanalyze.ingest.schema import KernelStats
from gpuanalyze.ingest.writer import TraceWriter

_clock = time.perf_counter_ns
_active: list[Profiler] = []


def describe(exc: BaseException) -> str:
    """'Type: message' for the trace and warnings; never raises, even when the exception's __str__ does."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not replace the user's exception
        text = "<unprintable>"
    return f"{type(exc).__name__}: {text}"[:2000]


def _guarded(method: Callable[..., Any]) -> Callable[..., None]:
    """Run a hook body only while enabled; turn any exception into a clean shutdown. Returns None."""

    @functools.wraps(method)
    def hook(self: Profiler, *args: Any) -> None:
        if self.enabled:
            try:
                method(self, *args)
            except Exception as exc:  # noqa: BLE001 - the training loop must never see it
                self._fail(exc)

    return hook


class Profiler:
    """Created by ``analyzer.profile``; use it as a context manager around the training loop."""

    def __init__(self, model: Any, *, optimizer: Any = None, dataloader: Any = None, options: ProfileOptions) -> None:
        self.model = model
        self.options = options
        self.path: Path | None = None
        """The file actually written (differs from ``options.out`` when that already existed)."""
        self.enabled = False
        self.error: BaseException | None = None
        self.steps_recorded = 0
        self._optimizer = optimizer
        self._loader = dataloader
        self._loader_iters: weakref.WeakSet[Any] = weakref.WeakSet()
        self._loader_workers: int | None = None
        self._manual = options.manual_steps
        self._by_optimizer = optimizer is not None
        self._handles: list[Any] = []
        self._patches = Patches()
        self._writer: TraceWriter | None = None
        self._timer: CudaPhaseTimer | None = None
        self._resolver: LazyResolver | None = None
        self._rank = 0
        self._step = StepTimes(index=0, start_ns=_clock())
        self._cuda: Any = None
        self._windows: KernelWindows | None = None
        self._window_stats: dict[int, KernelStats] = {}
        self._held: dict[int, dict[str, Any]] = {}

    def __enter__(self) -> Profiler:
        if _active:
            warnings.warn(
                "gpuanalyze: a profile is already active; this one records nothing", GpuAnalyzeWarning, stacklevel=2
            )
            return self
        try:
            self._start()
        except Exception as exc:  # noqa: BLE001 - e.g. unwritable directory; training goes on
            self._fail(exc)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        status = "ok" if exc is None else "interrupted" if isinstance(exc, KeyboardInterrupt) else "exception"
        described = None if exc is None else describe(exc)
        if self.enabled:
            try:
                if self._forward_ends_step:
                    self._close(_clock())
                if self._resolver is not None:
                    self._resolver.drain(force=True)
                if self._windows is not None and self._windows.active:
                    self._window_stats.update(self._windows.finish())
                for index in sorted(self._held):
                    self._write(self._held.pop(index))
            except Exception as exc2:  # noqa: BLE001
                self._fail(exc2)
        self._teardown(
            EndInfo(
                status=status,
                exception=described,
                end_unix_ns=time.time_ns(),
                steps=self.steps_recorded,
                loader_workers=self._loader_workers,
            )
        )

    def step(self) -> None:
        """Mark the end of a step explicitly; from then on automatic boundaries are ignored."""
        self._manual = True
        self._mark_step()

    @_guarded
    def _mark_step(self) -> None:
        self._close(_clock())

    def _start(self) -> None:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        opts = self.options
        on_gpu = any(p.is_cuda for p in self.model.parameters())
        cuda = opts.device == "cuda" or (opts.device == "auto" and torch.cuda.is_available() and on_gpu)
        run = collect_run_info(self.model, "cuda" if cuda else "cpu")
        self._rank = run.rank_or_zero
        self.path = self._choose_path(rank_path(opts.out, self._rank, run.world))
        self._writer = TraceWriter(path=self.path, run=run, tags=dict(opts.tags), options=opts.writer_options())
        self._writer.open()
        _active.append(self)
        self.enabled = True
        if cuda:
            self._cuda = torch.cuda
            self._timer = CudaPhaseTimer()
            self._resolver = LazyResolver(self._emit)
            torch.cuda.reset_peak_memory_stats()
        self._handles += [
            self.model.register_forward_pre_hook(self._on_forward_pre),
            self.model.register_forward_hook(self._on_forward),
            register_optimizer_step_pre_hook(self._on_optimizer_pre),
            register_optimizer_step_post_hook(self._on_optimizer_post),
        ]
        self._patches.install(self._on_patched_call, self._before_call, sync=cuda)
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        if run.world > 1 and trainable:
            # The first parameter is normally the last to receive its gradient in backward: time after
            # it until backward returns is the rank waiting for gradient all-reduce (exposed comm).
            self._handles.append(trainable[0].register_post_accumulate_grad_hook(self._on_last_grad))
        if opts.kernel_windows:
            self._windows = KernelWindows(
                first=opts.window_first, every=opts.window_every, steps=opts.window_steps, cuda=cuda
            )
        self._step = StepTimes(index=0, start_ns=_clock())

    def _choose_path(self, path: Path) -> Path:
        if path.exists() and self.options.overwrite:
            path.unlink()
        chosen = free_path(path)
        if chosen != path:
            warnings.warn(
                f"gpuanalyze: {path} exists and overwrite=False; writing {chosen} instead",
                GpuAnalyzeWarning,
                stacklevel=4,
            )
        return chosen

    @property
    def _forward_ends_step(self) -> bool:
        """Without optimizer steps or prof.step(), the next forward (or fetch) after a forward starts a new step."""
        return not self._manual and not self._by_optimizer and self._step.forwards > 0

    # -- hooks ------------------------------------------------------------------------------
    @_guarded
    def _on_forward_pre(self, module: Any, args: Any) -> None:
        now = _clock()
        if self._forward_ends_step:
            self._close(now)
        step = self._step
        step.forward_start = now
        if step.loader_samples is None:  # the DataLoader's batch, when seen, is the better count
            step.add_samples(batch_size_of(args), from_loader=False)
        if self._timer is not None:
            self._timer.begin(S.FORWARD_MS)

    @_guarded
    def _on_forward(self, module: Any, args: Any, output: Any) -> None:
        step = self._step
        if step.forward_start is not None:
            step.forward_ns += _clock() - step.forward_start
            step.forward_start = None
        step.forwards += 1
        if self._timer is not None:
            self._timer.end(S.FORWARD_MS)

    @_guarded
    def _on_last_grad(self, param: Any) -> None:
        self._step.last_grad_ns = _clock()

    @_guarded
    def _on_optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._optimizer is None:
            self._optimizer = optimizer
        self._step.optimizer_start = _clock()
        if self._timer is not None:
            self._timer.begin(S.OPTIMIZER_MS)

    @_guarded
    def _on_optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        now = _clock()
        step = self._step
        if step.optimizer_start is not None:
            step.optimizer_ns += now - step.optimizer_start
            step.optimizer_start = None
        if self._timer is not None:
            self._timer.end(S.OPTIMIZER_MS)
        if optimizer is self._optimizer and not self._manual:
            self._by_optimizer = True
            self._close(now)

    @_guarded
    def _before_call(self, kind: str) -> None:
        if kind == "backward":
            if self._timer is not None:
                self._timer.begin(S.BACKWARD_MS)
        elif self._forward_ends_step:
            self._close(_clock())

    @_guarded
    def _on_patched_call(self, kind: str, elapsed_ns: int, owner: Any, result: Any) -> None:
        step = self._step
        if kind == "sync":
            step.sync_ns += elapsed_ns
            return
        if kind == "backward":
            end = _clock()
            waited = 0
            if step.last_grad_ns is not None and end - elapsed_ns <= step.last_grad_ns <= end:
                waited = end - step.last_grad_ns
                step.last_grad_ns = None
            step.backward_ns += elapsed_ns - waited
            step.sync_ns += waited
            if self._timer is not None:
                self._timer.end(S.BACKWARD_MS)
            return
        if kind == "iter" and hasattr(owner, "num_workers"):
            self._loader_workers = max(self._loader_workers or 0, int(owner.num_workers))
        if self._loader is not None:
            if kind == "iter" and owner is self._loader and result is not None:
                self._loader_iters.add(result)
            if owner is not self._loader and owner not in self._loader_iters:
                return
        step.data_ns += elapsed_ns
        if kind == "fetch" and result is not None:
            step.add_samples(batch_size_of(result), from_loader=True)

    # -- step rows ----------------------------------------------------------------------------
    def _close(self, end_ns: int) -> None:
        step = self._step
        self._step = StepTimes(index=step.index + 1, start_ns=end_ns)
        if self._resolver is not None and self._timer is not None:
            peak = int(self._cuda.max_memory_allocated())
            self._cuda.reset_peak_memory_stats()
            self._resolver.push((step, end_ns, peak), self._timer.take())
        else:
            self._emit((step, end_ns, None), None)
        if self._windows is not None:
            self._advance_windows(self._windows, step.index)
        if self._writer is not None and self._writer.error is not None:
            self._fail(self._writer.error)

    def _advance_windows(self, windows: KernelWindows, closed: int) -> None:
        """Start, step or finish a kernel window; its own cost is excluded from the next step."""
        if not windows.active and not windows.due(closed + 1):
            return
        if windows.active:
            done = windows.step_closed(closed)
            if done is not None:
                self._window_stats.update(done)
                for index in sorted(self._held):
                    self._write(self._held.pop(index))
        else:
            windows.start(closed + 1)
        self._step = StepTimes(index=closed + 1, start_ns=_clock())

    def _emit(self, closed: tuple[StepTimes, int, int | None], device_ms: dict[str, float] | None) -> None:
        step, end_ns, peak = closed
        row = step.row(end_ns, self._rank, device_ms)
        row[S.PEAK_MEM_BYTES] = peak
        self.steps_recorded += 1
        windows = self._windows
        if windows is not None and windows.active and step.index >= windows.start_step:
            self._held[step.index] = row
        else:
            self._write(row)

    def _write(self, row: dict[str, Any]) -> None:
        row[S.KERNEL_STATS] = S.encode_kernel_stats(self._window_stats.pop(row[S.STEP], None))
        if self._writer is not None:
            self._writer.add(row)

    # -- shutdown -------------------------------------------------------------------------------
    def _fail(self, exc: BaseException) -> None:
        if self.error is not None:
            return
        self._warn(exc)
        self._teardown(EndInfo(status="profiler_error", error=describe(exc), steps=self.steps_recorded))

    def _warn(self, exc: BaseException) -> None:
        self.error = exc
        where = f"; the trace so far is in {self.path}" if self.path else ""
        warnings.warn(
            f"gpuanalyze: profiling switched off after an internal error ({describe(exc)}); training continues{where}",
            GpuAnalyzeWarning,
            stacklevel=4,
        )

    def _teardown(self, end: EndInfo) -> None:
        self.enabled = False
        if self._windows is not None:
            self._windows.abort()
        if self._writer is not None and self._writer.error is None:
            for index in sorted(self._held):
                self._write(self._held.pop(index))
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._patches.remove()
        if self in _active:
            _active.remove(self)
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close(end)
            if writer.error is not None and self.error is None:
                self._warn(writer.error)

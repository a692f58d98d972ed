"""``analyzer.profile``: a context manager that times every step of a PyTorch training loop.

This module holds the hooks and their wiring (the class-level wrappers: ``patches``). Which events end a step
(optimizer steps, ``prof.step()``, forwards; gradient accumulation) is the torch-free state machine in
``boundaries``; the trace file's lifecycle (created at the first step boundary, when ``torch.distributed`` knows
the rank; rows held during kernel windows; the end marker) is ``trace_output``. Every hook is guarded (``guard``;
inline in those that run at every step): an internal failure warns once, removes all hooks and lets the training
loop run on. Hooks only observe; they never change tensors. Rows are built on the writer's thread (``closed_row``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from analyzer.record.autocast_watch import AutocastWatch
from analyzer.record.batch import batch_size_of
from analyzer.record.boundaries import StepBoundaries
from analyzer.record.cuda_timer import CudaPhaseTimer, LazyResolver
from analyzer.record.data_block import DataBlock
from analyzer.record.guard import compiling_check, describe, guarded
from analyzer.record.loaders import LoaderWatch
from analyzer.record.memory_reader import Memory, MemoryReader
from analyzer.record.models import Named, discover, evaluating, named_models
from analyzer.record.module_hooks import ModuleHooks
from analyzer.record.notify import warn
from analyzer.record.nvtx_marks import phase_timer
from analyzer.record.nvtx_phases import NvtxPhases, nvtx_phases
from analyzer.record.patch_loader import DATA_KINDS
from analyzer.record.patches import Patches
from analyzer.record.profile_options import ProfileOptions
from analyzer.record.steps import StepTimes
from analyzer.record.sync_sites import SyncSites
from analyzer.record.trace_open import open_trace
from analyzer.record.trace_output import TraceOutput
from analyzer.record.windows import KernelWindows
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import EndInfo
from gpuanalyze.ingest.trace.writer import TraceWriter

_clock = time.perf_counter_ns
_getframe = sys._getframe
_active: list[Profiler] = []
#: Objects a forked child inherited from its parent's profile; kept alive (never closed or
#: collected) so that nothing in the child writes to the parent's trace file.
_inherited: list[Any] = []


class Profiler:
    """Created by ``analyzer.profile``; use it as a context manager around the training loop."""

    def __init__(
        self,
        model: Any,
        *,
        optimizer: Any = None,
        dataloader: Any = None,
        options: ProfileOptions,
        recorder: str = "profile",
        forward_hooks: bool = True,
        samples_from_loader: bool = True,
    ) -> None:
        import torch

        self._models: Named | None = named_models(model)
        self.options = options
        self.enabled = False
        self.error: BaseException | None = None
        self._compiling: Callable[[], bool]
        self._compiling, self._compile_flags = compiling_check(torch.compiler)
        self._grad_enabled: Callable[[], bool] = torch.is_grad_enabled
        self._recorder = recorder
        self._forward_hooks = forward_hooks
        self._optimizer = optimizer
        self._loaders = LoaderWatch(dataloader, samples_from_loader=samples_from_loader)
        self._steps = StepBoundaries(
            self._closed,
            clock=_clock,
            start_ns=_clock(),
            by_optimizer=optimizer is not None,
            manual=options.manual_steps,
        )
        self._per_model = self._steps.per_model = self._models is not None and len(self._models) > 1
        self._output = TraceOutput(
            options.out, tags=dict(options.tags), writer_options=options.writer_options(), overwrite=options.overwrite
        )
        self._handles: list[Any] = []
        self._module_hooks = ModuleHooks(self._on_forward_pre, self._on_forward)
        self._patches = Patches()
        self._cuda_on = False
        self._timer: CudaPhaseTimer | None = None
        self._nvtx: NvtxPhases | None = None
        self._resolver: LazyResolver | None = None
        self._depth = 0
        self._model_stack: list[tuple[str, int]] = []
        self._data_depth = 0
        self._data_start = 0
        self._data_cpu_start = 0
        self._data_block = DataBlock(self)
        self._cuda: Any = None
        self._memory = MemoryReader()
        self._windows: KernelWindows | None = None
        self._sync_sites, self._sync_depth, self._autocast = SyncSites(), 2, AutocastWatch(torch)

    @property
    def path(self) -> Path | None:
        """The file actually written (differs from ``options.out`` when that already existed); set at the first step."""
        return self._output.path

    @property
    def steps_recorded(self) -> int:
        return self._output.rows

    @property
    def _writer(self) -> TraceWriter | None:
        return self._output.writer

    # -- public API ------------------------------------------------------------------------------
    def __enter__(self) -> Profiler:
        if _active:
            if all(p._recorder == "run" for p in _active):
                for p in list(_active):  # `gpuanalyze run`'s automatic profile gives way to an explicit one
                    p.finish()
            else:
                warn("gpuanalyze: a profile is already active; this one records nothing")
                return self
        try:
            self._start()
        except Exception as exc:  # noqa: BLE001 - training goes on
            self._fail(exc)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.finish(exc)

    def finish(self, exc: BaseException | None = None) -> None:
        """End the profile (what ``__exit__`` does); ``exc`` is the exception the loop ended with, if any."""
        status = "ok" if exc is None else "interrupted" if isinstance(exc, KeyboardInterrupt) else "exception"
        described = None if exc is None else describe(exc)
        if self.enabled:
            try:
                self._steps.finish(_clock())
                if not self._output.opened and self._recorder != "run":
                    self._open_writer()  # no step at all: the trace still records how the run ended
                if self._resolver is not None:
                    self._resolver.drain(force=True)
                if self._windows is not None and self._windows.active:
                    self._output.window_ended(self._windows.finish())
                failed = self._output.flush()  # rows are built on the writer's thread: one that fails is ours
                if failed is not None:
                    self._fail(failed)
            except Exception as exc2:  # noqa: BLE001
                self._fail(exc2)
        end = EndInfo(status=status, exception=described, end_unix_ns=time.time_ns(), steps=self.steps_recorded)
        facts = {"sync_sites": self._sync_sites.stored(), "autocast": self._autocast.seen}
        self._teardown(msgspec.structs.replace(self._loaders.ended(end), **facts))

    def step(self) -> None:
        """Mark the end of a step explicitly; from then on automatic boundaries are ignored."""
        self._steps.manual = True
        self._patches.fetches_end_no_step()
        self._mark_step()

    def data(self) -> DataBlock:
        """``with prof.data(): batch = get_batch()`` times a custom loader as data wait."""
        return self._data_block

    # -- start ----------------------------------------------------------------------------------
    def _start(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        _active.append(self)
        self.enabled = True
        self._memory.open()
        self._handles += [
            register_optimizer_step_pre_hook(self._on_optimizer_pre),
            register_optimizer_step_post_hook(self._on_optimizer_post),
        ]
        self._patches.install(self._on_patched_call, self._before_call, self._loaders.dataset_call)
        if self._steps.by_optimizer or self._steps.manual:
            self._patches.fetches_end_no_step()
        self._patches.install_compile(self._on_compiled)
        if self._models is not None:
            self._use_models(self._models)
        self._steps.step = StepTimes(index=0, start_ns=_clock())

    def _use_models(self, named: Named) -> None:
        """Hook each model's forward and pick the timing device from where the models live."""
        self._models = named
        self._per_model = self._steps.per_model = len(named) > 1
        if self._forward_hooks:
            for name, module in named:
                self._module_hooks.hook(name, module)
        self._set_device(any(p.is_cuda for _, m in named for p in m.parameters()))

    def _set_device(self, on_gpu: bool) -> None:
        import torch

        opts = self.options
        cuda = opts.device == "cuda" or (opts.device == "auto" and on_gpu and torch.cuda.is_available())
        if cuda and not self._cuda_on:
            self._cuda_on = True
            self._cuda = torch.cuda
            self._timer = phase_timer(opts.nvtx, lambda: self._steps.step.index)
            self._resolver = LazyResolver(self._emit)
            self._patches.install_sync(self._on_patched_call)
            self._patches.time_backward_start(self._before_call)
            self._nvtx = nvtx_phases(opts.nvtx, torch.cuda)  # after the patches: it wraps their wrappers
            self._sync_depth = 2 if self._nvtx is None else 3  # _on_patched_call <- wrapper(s) <- the caller
            self._memory.use_cuda(torch.cuda)
        windows = opts.kernel_windows if opts.kernel_windows is not None else cuda
        if windows and self._windows is None:
            self._windows = KernelWindows(
                first=opts.window_first, every=opts.window_every, steps=opts.window_steps, cuda=cuda
            )

    @guarded
    def _on_compiled(self, module: Any, compiled: Any) -> None:
        self._module_hooks.moved(module, compiled)

    def _open_writer(self) -> None:
        """Create the trace file (first step boundary): rank, run id and models are known now."""
        cuda = self._cuda if self._cuda_on else None
        interval = self.options.system_interval_s
        handle = open_trace(
            self._output,
            self._models,
            cuda=cuda,
            recorder=self._recorder,
            interval_s=interval,
            on_last_grad=self._on_last_grad,
        )
        if handle is not None:
            self._handles.append(handle)

    # -- hooks ------------------------------------------------------------------------------
    # The hooks that run at every step check and catch what ``guarded`` does, inline: its call
    # would be one more between torch's work (docs/robustness.md, "Overhead").
    def _on_forward_pre(self, name: str, args: Any, kwargs: Any) -> bool:
        """Before a profiled model's call; True when it is timed (``_on_forward`` follows)."""
        if not self.enabled or self._compiling() or self._compile_flags._is_compiling_flag:
            return False
        try:
            now = _clock()
            if self._depth == 0:
                self._autocast.read()
                step = self._steps.forward_begin(now, self._grad_enabled)
                if step.loader_samples is None:  # the DataLoader's batch, when seen, is the better count
                    step.add_samples(batch_size_of(args) if args else batch_size_of(kwargs), from_loader=False)
                if self._timer is not None:
                    self._timer.begin(S.FORWARD_MS)
            self._depth += 1
            if self._per_model:
                self._model_stack.append((name, now))
        except Exception as exc:  # noqa: BLE001 - the training loop must never see it
            self._fail(exc)
            return False
        return True

    def _on_forward(self, name: str) -> None:
        """After a call that ``_on_forward_pre`` timed (not being traced then, nor now)."""
        if not self.enabled or self._depth == 0:  # switched off meanwhile, or began before the profile did
            return
        try:
            now = _clock()
            self._depth -= 1
            if self._model_stack:
                step = self._steps.step
                model, start = self._model_stack.pop()
                times = step.model_ns if step.model_ns is not None else {}
                times[model] = times.get(model, 0) + now - start
                step.model_ns = times
            if self._depth == 0:
                self._steps.forward_end(now)
                if self._timer is not None:
                    self._timer.end(S.FORWARD_MS)
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)

    def _forward_begin(self) -> None:
        """Framework integrations: the training step's forward begins (Lightning's batch start)."""
        name = self._models[0][0] if self._models else "model"
        self._on_forward_pre(name, (), {})

    def _forward_end(self) -> None:
        """Framework integrations: the training step's forward has ended (before backward)."""
        if self._depth:
            name = self._models[0][0] if self._models else "model"
            self._on_forward(name)

    @guarded
    def _on_last_grad(self, param: Any) -> None:
        self._steps.step.last_grad_ns = _clock()

    def _on_optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.enabled or self._compiling() or self._compile_flags._is_compiling_flag:
            return
        try:
            if self._optimizer is None:
                self._optimizer = optimizer
            if self._models is None:
                self._use_models(discover(optimizer))
            self._steps.optimizer_begin(_clock())
            if self._timer is not None:
                self._timer.begin(S.OPTIMIZER_MS)
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)

    def _on_optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.enabled or self._compiling() or self._compile_flags._is_compiling_flag:
            return
        try:
            now = _clock()
            if self._timer is not None:
                self._timer.end(S.OPTIMIZER_MS)
            steps = self._steps
            by_optimizer = steps.by_optimizer
            steps.optimizer_end(now, optimizer is self._optimizer)
            if steps.by_optimizer and not by_optimizer:  # from now on fetches cannot end steps
                self._patches.fetches_end_no_step()
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)

    @guarded
    def _before_call(self, kind: str) -> None:
        """Before a fetch (a forward-delimited step may end there) and, on CUDA, before a backward
        (``Patches.time_backward_start``): on CPU the backward wrapper does not call it."""
        if kind == "backward":
            if self._timer is not None:
                self._timer.begin(S.BACKWARD_MS)
            return
        steps = self._steps
        if not steps.by_optimizer and steps.forward_ends_step:
            steps.boundary(_clock())

    def _on_patched_call(self, kind: str, elapsed_ns: int, owner: Any, result: Any, cpu_ns: int = 0) -> None:
        if not self.enabled or self._compiling() or self._compile_flags._is_compiling_flag:
            return
        try:
            if kind == "backward":
                self._steps.backward(elapsed_ns)
                if self._timer is not None:
                    self._timer.end(S.BACKWARD_MS)
            elif kind in DATA_KINDS and evaluating(self._models, self._grad_enabled()):
                return  # an evaluation loader: its time is the step's host time, its samples no training's
            elif kind == "fetch" and self._loaders.loader is None and not self._data_depth:  # a plain loop's fetch
                self._steps.data(elapsed_ns, cpu_ns)
                if result is not None:
                    self._loaders.saw_batch(result, self._steps.step, elapsed_ns, owner)
            elif kind == "sync":
                self._steps.step.sync_ns += elapsed_ns
                caller = _getframe(self._sync_depth)  # the wrapper's caller: a key, no traceback (record.sync_sites)
                key = (id(caller.f_code), caller.f_lasti)
                site = self._sync_sites.sites.get(key) or self._sync_sites.at(key, caller)
                site[0] += 1
                site[1] += elapsed_ns
            elif self._loaders.saw(kind, owner, result, in_block=self._data_depth > 0):
                self._steps.data(elapsed_ns, cpu_ns)
                if kind == "fetch" and result is not None:
                    self._loaders.saw_batch(result, self._steps.step, elapsed_ns, owner)
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)

    @guarded
    def _data_enter(self) -> None:
        if self._data_depth == 0:
            self._steps.data_begin(_clock())
            self._data_start = _clock()
            self._data_cpu_start = time.thread_time_ns()
        self._data_depth += 1

    @guarded
    def _data_exit(self) -> None:
        if self._data_depth == 0:
            return
        self._data_depth -= 1
        if self._data_depth == 0:
            self._steps.data(_clock() - self._data_start, time.thread_time_ns() - self._data_cpu_start)

    @guarded
    def _mark_step(self) -> None:
        self._steps.mark(_clock())

    # -- closed steps -----------------------------------------------------------------------------
    def _closed(self, step: StepTimes, end_ns: int) -> bool:
        """The state machine closed ``step``: create the trace if this is the first, emit the row (once
        its CUDA events complete), advance kernel windows. False when profiling switched off."""
        opened_now = not self._output.opened
        if opened_now:
            if self._models is None:
                self._use_models(discover(None))
            self._open_writer()
        if self._resolver is not None and self._timer is not None:
            self._resolver.push((step, end_ns, self._memory.take()), self._timer.take())
        else:  # _emit, inline
            windows = self._windows
            hold = windows is not None and windows.active and step.index >= windows.start_step
            self._output.emit(step, end_ns, None, self._memory.take(), hold=hold)
        if self._windows is not None:
            self._advance_windows(self._windows, step.index)
        writer = self._output.writer
        failed = None if writer is None else writer.error or writer.row_error  # TraceOutput.error, inline
        if failed is not None:
            self._fail(failed)
        elif opened_now:  # creating the file is not part of the next step
            self._restart_step()
        return self.enabled

    @guarded
    def _skip_since_boundary(self) -> None:
        """Framework integrations: what ran since the last step boundary (a validation loop) is not training."""
        self._restart_step()

    def _restart_step(self) -> None:
        """Start the current step afresh now (what happened since the last boundary is not a step:
        creating the trace file, or a framework's validation loop)."""
        self._steps.restart(_clock())
        self._depth = 0
        self._model_stack.clear()
        self._data_depth = 0
        if self._timer is not None:
            self._timer.take()

    def _advance_windows(self, windows: KernelWindows, closed: int) -> None:
        """Start, step or finish a kernel window; its own cost is excluded from the next step."""
        if not windows.active and not windows.due(closed + 1):
            return
        if windows.active:
            done = windows.step_closed(closed)
            if done is not None:
                self._output.window_ended(done)
        else:
            windows.start(closed + 1)
        self._steps.step = StepTimes(index=closed + 1, start_ns=_clock())

    def _emit(self, closed: tuple[StepTimes, int, Memory], device_ms: dict[str, float] | None) -> None:
        step, end_ns, memory = closed
        windows = self._windows
        hold = windows is not None and windows.active and step.index >= windows.start_step
        self._output.emit(step, end_ns, device_ms, memory, hold=hold)

    # -- shutdown -------------------------------------------------------------------------------
    def _fail(self, exc: BaseException) -> None:
        if self.error is not None:
            return
        self.error = exc
        where = f"; the trace so far is in {self.path}" if self.path else ""
        warn(f"gpuanalyze: profiling switched off after an internal error ({describe(exc)}); training continues{where}")
        self._teardown(EndInfo(status="profiler_error", error=describe(exc), steps=self.steps_recorded))

    def _teardown(self, end: EndInfo) -> None:
        self.enabled = False
        if self._windows is not None:
            self._windows.abort()
        self._unhook()
        error = self._output.close(end)
        if error is not None and self.error is None:
            self.error = error
            warn(f"gpuanalyze: could not finish the trace {self.path} ({describe(error)})")

    def _unhook(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._module_hooks.remove()
        if self._nvtx is not None:
            self._nvtx.remove()
        self._patches.remove()
        self._memory.close()
        if self in _active:
            _active.remove(self)

    def _after_fork_in_child(self) -> None:
        """In a forked child (a DataLoader worker): never touch the parent's trace. An automatic
        profile re-arms, since a fork-started process may train (and then writes its own trace)."""
        restart = self._recorder == "run"
        _inherited.append((*self._output.forget(restart=restart), self._windows, self._resolver))
        self._windows = None
        if not restart:
            self.enabled = False
            self._unhook()
            return
        self._steps.drop_held()
        self._restart_step()
        self._steps.step.index = 0


def _forked() -> None:
    for prof in list(_active):
        prof._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)

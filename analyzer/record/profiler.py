"""``analyzer.profile``: a context manager that times every step of a PyTorch training loop.

Step boundaries come, in order of precedence, from explicit ``prof.step()`` calls, from the
optimizer's ``step`` (global optimizer hooks), or from the model's forward when no optimizer
steps. With gradient accumulation several forwards run before the first ``optimizer.step()``;
until it comes, a forward that follows a backward only *tentatively* ends a step, and the parts
are merged into one step when the optimizer steps (a loop that never steps an optimizer gets one
step per forward). Every hook is guarded: an internal failure warns once, removes all hooks and
lets the training loop run on. Hooks only observe; they never change tensors, so results are
unchanged. Under ``torch.compile`` the hooks do nothing while being traced (no graph breaks) and
the compiled wrapper, which runs eagerly, carries the forward timing.

The trace file is created at the first step boundary, not at ``__enter__``: by then
``torch.distributed`` is initialised even when the profile was entered before
``init_process_group``, so each rank names its file and records its rank correctly.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analyzer.record.batch import batch_bytes_of, batch_size_of
from analyzer.record.cuda_timer import CudaPhaseTimer, LazyResolver
from analyzer.record.models import Named, discover, named_models
from analyzer.record.notify import warn
from analyzer.record.patches import Patches
from analyzer.record.paths import create_new, rank_path
from analyzer.record.profile_options import ProfileOptions
from analyzer.record.run_facts import collect_run_info, placement, run_id
from analyzer.record.steps import StepTimes
from analyzer.record.windows import KernelWindows
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.runinfo import EndInfo
from gpuanalyze.ingest.schema import KernelStats
from gpuanalyze.ingest.writer import TraceWriter

_clock = time.perf_counter_ns
_active: list[Profiler] = []
#: Objects a forked child inherited from its parent's profile; kept alive (never closed or
#: collected) so that nothing in the child writes to the parent's trace file.
_inherited: list[Any] = []
#: Forward-delimited parts held back while no optimizer has stepped yet (gradient accumulation)
#: before concluding that the loop steps without an optimizer.
MAX_HELD_PARTS = 256


def describe(exc: BaseException) -> str:
    """'Type: message' for the trace and warnings; never raises, even when the exception's __str__ does."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not replace the user's exception
        text = "<unprintable>"
    return f"{type(exc).__name__}: {text}"[:2000]


def _guarded(method: Callable[..., Any]) -> Callable[..., None]:
    """Run a hook body only while enabled and not being traced by torch.compile; turn any
    exception into a clean shutdown. Returns None."""

    @functools.wraps(method)
    def hook(self: Profiler, *args: Any) -> None:
        if self._compiling():
            return
        if self.enabled:
            try:
                method(self, *args)
            except Exception as exc:  # noqa: BLE001 - the training loop must never see it
                self._fail(exc)

    return hook


class DataBlock:
    """``with prof.data():`` times its body as data wait (a custom loader such as ``get_batch()``)."""

    __slots__ = ("_prof",)

    def __init__(self, prof: Profiler) -> None:
        self._prof = prof

    def __enter__(self) -> DataBlock:
        self._prof._data_enter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._prof._data_exit()


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
        import weakref

        import torch

        self._models: Named | None = named_models(model)
        self.options = options
        self.path: Path | None = None
        """The file actually written (differs from ``options.out`` when that already existed); set at the first step."""
        self.enabled = False
        self.error: BaseException | None = None
        self.steps_recorded = 0
        self._compiling: Callable[[], bool] = torch.compiler.is_compiling
        self._grad_enabled: Callable[[], bool] = torch.is_grad_enabled
        self._recorder = recorder
        self._forward_hooks = forward_hooks
        self._samples_from_loader = samples_from_loader
        self._optimizer = optimizer
        self._loader = dataloader
        self._loader_iters: weakref.WeakSet[Any] = weakref.WeakSet()
        self._loader_workers: int | None = None
        self._manual = options.manual_steps
        self._by_optimizer = optimizer is not None
        self._no_optimizer = False
        self._handles: list[Any] = []
        self._module_handles: dict[int, tuple[str, list[Any]]] = {}
        self._patches = Patches()
        self._writer: TraceWriter | None = None
        self._opened = False
        self._cuda_on = False
        self._timer: CudaPhaseTimer | None = None
        self._resolver: LazyResolver | None = None
        self._rank = 0
        self._step = StepTimes(index=0, start_ns=_clock())
        self._held_parts: list[StepTimes] = []
        self._depth = 0
        self._model_stack: list[tuple[str, int]] = []
        self._per_model = self._models is not None and len(self._models) > 1
        self._data_depth = 0
        self._data_start = 0
        self._data_cpu_start = 0
        self._batch_bytes: int | None = None
        self._data_block = DataBlock(self)
        self._cuda: Any = None
        self._windows: KernelWindows | None = None
        self._window_stats: dict[int, KernelStats] = {}
        self._held: dict[int, dict[str, Any]] = {}

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
                if self._held_parts:  # no optimizer ever stepped: every part is a step of its own
                    self._release_held()
                if self._forward_ends_step:
                    self._close(_clock())
                if not self._opened and self._recorder != "run":
                    self._open_writer()  # no step at all: the trace still records how the run ended
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
                batch_bytes=self._batch_bytes,
            )
        )

    def step(self) -> None:
        """Mark the end of a step explicitly; from then on automatic boundaries are ignored."""
        self._manual = True
        self._mark_step()

    def data(self) -> DataBlock:
        """``with prof.data(): batch = get_batch()`` times a custom loader as data wait."""
        return self._data_block

    # -- start ----------------------------------------------------------------------------------
    def _start(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        _active.append(self)
        self.enabled = True
        self._handles += [
            register_optimizer_step_pre_hook(self._on_optimizer_pre),
            register_optimizer_step_post_hook(self._on_optimizer_post),
        ]
        self._patches.install(self._on_patched_call, self._before_call)
        self._patches.install_compile(self._on_compiled)
        if self._models is not None:
            self._use_models(self._models)
        self._step = StepTimes(index=0, start_ns=_clock())

    def _use_models(self, named: Named) -> None:
        """Hook each model's forward and pick the timing device from where the models live."""
        self._models = named
        self._per_model = len(named) > 1
        for name, module in named:
            self._hook_module(name, module)
        self._set_device(any(p.is_cuda for _, m in named for p in m.parameters()))

    def _set_device(self, on_gpu: bool) -> None:
        import torch

        opts = self.options
        cuda = opts.device == "cuda" or (opts.device == "auto" and on_gpu and torch.cuda.is_available())
        if cuda and not self._cuda_on:
            self._cuda_on = True
            self._cuda = torch.cuda
            self._timer = CudaPhaseTimer()
            self._resolver = LazyResolver(self._emit)
            self._patches.install_sync(self._on_patched_call)
            torch.cuda.reset_peak_memory_stats()
        windows = opts.kernel_windows if opts.kernel_windows is not None else cuda
        if windows and self._windows is None:
            self._windows = KernelWindows(
                first=opts.window_first, every=opts.window_every, steps=opts.window_steps, cuda=cuda
            )

    def _hook_module(self, name: str, module: Any) -> None:
        if not self._forward_hooks or getattr(module, "_compiled_call_impl", None) is not None:
            # module.compile() compiled it in place: hooks on it would be traced into its graph
            return
        self._module_handles[id(module)] = (
            name,
            [
                module.register_forward_pre_hook(functools.partial(self._on_forward_pre, name), with_kwargs=True),
                module.register_forward_hook(
                    functools.partial(self._on_forward, name), with_kwargs=True, always_call=True
                ),
            ],
        )

    @_guarded
    def _on_compiled(self, module: Any, compiled: Any) -> None:
        """``torch.compile(model)`` of a profiled model: the eager wrapper takes over its hooks, so the
        compiled graph never contains them (no graph break, no recompilation when the profile ends)."""
        import torch

        entry = self._module_handles.pop(id(module), None)
        if entry is None:
            return
        name, handles = entry
        for handle in handles:
            handle.remove()
        if isinstance(compiled, torch.nn.Module):
            self._hook_module(name, compiled)

    def _open_writer(self) -> None:
        """Create the trace file (first step boundary): rank, run id and models are known now."""
        opts = self.options
        self._opened = True
        where = placement()
        self._rank = where.rank
        models = self._models or []
        run = collect_run_info(
            [m for _, m in models],
            "cuda" if self._cuda_on else "cpu",
            where=where,
            run=run_id(where),
            model_names=[name for name, _ in models],
            recorder=self._recorder,
        )
        target = rank_path(opts.out, where.rank, where.world_size)

        def create(path: Path) -> None:
            writer = TraceWriter(path=path, run=run, tags=dict(opts.tags), options=opts.writer_options())
            writer.open()
            self._writer = writer

        self.path = create_new(target, create, overwrite=opts.overwrite)
        if self.path != target:
            why = "is not a regular file (never replaced)" if opts.overwrite else "exists and overwrite=False"
            warn(f"gpuanalyze: {target} {why}; writing {self.path} instead", stacklevel=3)
        trainable = [p for _, m in models for p in m.parameters() if p.requires_grad]
        if where.world_size > 1 and trainable:
            # The first parameter is normally the last to receive its gradient in backward: time after
            # it until backward returns is the rank waiting for gradient all-reduce (exposed comm).
            self._handles.append(trainable[0].register_post_accumulate_grad_hook(self._on_last_grad))

    @property
    def _forward_ends_step(self) -> bool:
        """Without optimizer steps or prof.step(), the next forward (or fetch) after a forward starts a new step."""
        step = self._step
        return not self._manual and not self._by_optimizer and step.forwards > 0 and step.optimizer_start is None

    # -- hooks ------------------------------------------------------------------------------
    @_guarded
    def _on_forward_pre(self, name: str, module: Any, args: Any, kwargs: Any) -> None:
        now = _clock()
        if self._depth == 0:
            if self._forward_ends_step:
                self._boundary(now)
            step = self._step
            step.forward_start = now
            if not self._by_optimizer and self._grad_enabled():
                step.grad_forwards += 1
            if step.loader_samples is None:  # the DataLoader's batch, when seen, is the better count
                step.add_samples(batch_size_of(args) if args else batch_size_of(kwargs), from_loader=False)
            if self._timer is not None:
                self._timer.begin(S.FORWARD_MS)
        self._depth += 1
        if self._per_model:
            self._model_stack.append((name, now))

    @_guarded
    def _on_forward(self, name: str, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        if self._depth == 0:  # began before the profile did
            return
        now = _clock()
        self._depth -= 1
        step = self._step
        if self._model_stack:
            model, start = self._model_stack.pop()
            times = step.model_ns if step.model_ns is not None else {}
            times[model] = times.get(model, 0) + now - start
            step.model_ns = times
        if self._depth == 0:
            if step.forward_start is not None:
                step.forward_ns += now - step.forward_start
                step.forward_start = None
            step.forwards += 1
            if self._timer is not None:
                self._timer.end(S.FORWARD_MS)

    def _forward_begin(self) -> None:
        """Framework integrations: the training step's forward begins (Lightning's batch start)."""
        name = self._models[0][0] if self._models else "model"
        self._on_forward_pre(name, None, (), {})

    def _forward_end(self) -> None:
        """Framework integrations: the training step's forward has ended (before backward)."""
        if self._depth:
            name = self._models[0][0] if self._models else "model"
            self._on_forward(name, None, (), {}, None)

    @_guarded
    def _on_last_grad(self, param: Any) -> None:
        self._step.last_grad_ns = _clock()

    @_guarded
    def _on_optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._optimizer is None:
            self._optimizer = optimizer
        if self._models is None:
            self._use_models(discover(optimizer))
        step = self._step
        now = _clock()
        # a forward still open (a framework timing its training step) counts as nested only from here on
        step.optimizer_nested_ns = step.phase_ns + (now - step.forward_start if step.forward_start is not None else 0)
        step.optimizer_start = now
        if self._timer is not None:
            self._timer.begin(S.OPTIMIZER_MS)

    @_guarded
    def _on_optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        now = _clock()
        step = self._step
        if step.optimizer_start is not None:
            nested = step.phase_ns - step.optimizer_nested_ns  # a closure's forward/backward, already counted
            step.optimizer_ns += max(0, now - step.optimizer_start - nested)
            step.optimizer_start = None
        if self._timer is not None:
            self._timer.end(S.OPTIMIZER_MS)
        if optimizer is self._optimizer and not self._manual:
            self._by_optimizer = True
            self._merge_held()
            self._close(now)

    @_guarded
    def _before_call(self, kind: str) -> None:
        if kind == "backward":
            if self._timer is not None:
                self._timer.begin(S.BACKWARD_MS)
        elif self._forward_ends_step:
            self._boundary(_clock())

    @_guarded
    def _on_patched_call(self, kind: str, elapsed_ns: int, owner: Any, result: Any, cpu_ns: int = 0) -> None:
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
            step.backwards += 1
            if self._timer is not None:
                self._timer.end(S.BACKWARD_MS)
            return
        if kind == "iter" and hasattr(owner, "num_workers"):
            self._loader_workers = max(self._loader_workers or 0, int(owner.num_workers))
        if self._data_depth:  # inside prof.data(): the block's time is the data wait
            return
        if self._loader is not None:
            if kind == "iter" and owner is self._loader and result is not None:
                self._loader_iters.add(result)
            if owner is not self._loader and owner not in self._loader_iters:
                return
        step.data_ns += elapsed_ns
        step.data_cpu_ns += cpu_ns
        if kind == "fetch" and result is not None and self._batch_bytes is None:
            self._batch_bytes = batch_bytes_of(result)
        if kind == "fetch" and result is not None and self._samples_from_loader:
            step.add_samples(batch_size_of(result), from_loader=True)

    @_guarded
    def _data_enter(self) -> None:
        if self._data_depth == 0:
            if self._forward_ends_step:
                self._boundary(_clock())
            self._data_start = _clock()
            self._data_cpu_start = time.thread_time_ns()
        self._data_depth += 1

    @_guarded
    def _data_exit(self) -> None:
        if self._data_depth == 0:
            return
        self._data_depth -= 1
        if self._data_depth == 0:
            self._step.data_ns += _clock() - self._data_start
            self._step.data_cpu_ns += time.thread_time_ns() - self._data_cpu_start

    @_guarded
    def _mark_step(self) -> None:
        self._merge_held()
        self._close(_clock())

    # -- step boundaries --------------------------------------------------------------------------
    def _boundary(self, now: int) -> None:
        """A forward-delimited boundary. Before any optimizer step, a part that ran a forward with
        autograd on or a backward may be one micro-batch of gradient accumulation (or one of several
        forwards of a step, as with several models): hold such parts until the optimizer steps, or
        until it is clear none will. Forwards under no_grad (evaluation, inference) end steps at once."""
        step = self._step
        holds = step.backwards > 0 or step.grad_forwards > 0 or self._per_model or self._held_parts
        if self._no_optimizer or not holds:
            self._close(now)
            return
        self._held_parts.append(step)
        self._step = StepTimes(index=step.index + 1, start_ns=now)
        if len(self._held_parts) >= MAX_HELD_PARTS:
            self._no_optimizer = True
            self._release_held()

    def _merge_held(self) -> None:
        """The optimizer stepped: the held parts and the current one are one step."""
        if not self._held_parts:
            return
        merged, *rest = self._held_parts
        self._held_parts = []
        for part in (*rest, self._step):
            merged.absorb(part)
        self._step = merged

    def _release_held(self) -> None:
        """No optimizer steps: each held part becomes a step, ending where the next began."""
        current = self._step
        parts, self._held_parts = self._held_parts, []
        ends = [p.start_ns for p in parts[1:]] + [current.start_ns]
        for part, end in zip(parts, ends, strict=True):
            self._step = part
            self._close(end)
            if not self.enabled:
                return
        current.index = self._step.index
        self._step = current

    def _close(self, end_ns: int) -> None:
        opened_now = not self._opened
        if opened_now:
            if self._models is None:
                self._use_models(discover(None))
            self._open_writer()
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
        elif opened_now:  # creating the file is not part of the next step
            self._restart_step()

    @_guarded
    def _skip_since_boundary(self) -> None:
        """Framework integrations: what ran since the last step boundary (a validation loop) is not training."""
        self._restart_step()

    def _restart_step(self) -> None:
        """Start the current step afresh now (what happened since the last boundary is not a step:
        creating the trace file, or a framework's validation loop)."""
        self._step = StepTimes(index=self._step.index, start_ns=_clock())
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
        self.error = exc
        where = f"; the trace so far is in {self.path}" if self.path else ""
        warn(f"gpuanalyze: profiling switched off after an internal error ({describe(exc)}); training continues{where}")
        self._teardown(EndInfo(status="profiler_error", error=describe(exc), steps=self.steps_recorded))

    def _teardown(self, end: EndInfo) -> None:
        self.enabled = False
        if self._windows is not None:
            self._windows.abort()
        if self._writer is not None and self._writer.error is None:
            for index in sorted(self._held):
                self._write(self._held.pop(index))
        self._unhook()
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close(end)
            if writer.error is not None and self.error is None:
                self.error = writer.error
                warn(f"gpuanalyze: could not finish the trace {self.path} ({describe(writer.error)})")

    def _unhook(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for _, handles in self._module_handles.values():
            for handle in handles:
                handle.remove()
        self._module_handles.clear()
        self._patches.remove()
        if self in _active:
            _active.remove(self)

    def _after_fork_in_child(self) -> None:
        """In a forked child (a DataLoader worker): never touch the parent's trace. An automatic
        profile re-arms, since a fork-started process may train (and then writes its own trace)."""
        _inherited.append((self._writer, self._windows, self._resolver))
        self._writer = None
        self._windows = None
        if self._recorder != "run":
            self.enabled = False
            self._unhook()
            return
        self._opened = False
        self.path = None
        self.steps_recorded = 0
        self._held.clear()
        self._held_parts = []
        self._window_stats.clear()
        self._restart_step()
        self._step.index = 0


def _forked() -> None:
    for prof in list(_active):
        prof._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)

"""Inside each Python process of a `gpuanalyze run --try` trial: apply the trial's setting and
stop after its bounded steps.

``start`` is called by analyzer.run.child once torch has loaded and the automatic profile is armed,
when a trial variable is set; it applies nothing unless they come from a running `gpuanalyze run
--try` (trial_env.genuine). It:

- logs the batch size of every DataLoader the process creates and replaces the setting's DataLoader
  arguments in **every** one (``DataLoader.__init__`` is wrapped; what the script passed is
  overridden), except the worker-only ones for a loader left without workers; a loader given torch's
  ``BatchSampler`` gets a new one of the trial's batch size over the same sampler (another batch
  sampler is the script's own: kept, and said); one JSON line per loader in the trial's log;
- writes the process's Python warnings to that log instead of stderr (printed once, after the table);
- allows TF32 and runs the outermost module forward under ``torch.autocast`` when asked;
- after ``GPUANALYZE_TRY_STOP_AFTER`` optimizer steps closes the trace (end status ``trial_stop``)
  and ends the process with ``os._exit(0)`` from the optimizer's step hook: the script's ``finally``
  blocks, atexit handlers and code after its loop do not run, so a trial saves nothing on its way out.

Anything that fails here is reported once and the script runs on unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from analyzer.errors import GpuAnalyzeError
from analyzer.run import trial_env


class _State:
    steps = 0
    stopping = False


def start(env: Mapping[str, str], profiler: Any, finish: Callable[[], None]) -> None:
    """Apply this trial's setting; ``finish`` closes the automatic profile (once). Never raises."""
    if not trial_env.genuine(env):
        names = ", ".join(sorted(k for k in env if trial_env.is_trial_variable(k)))
        _say(f"{names} ignored: not set by a running `gpuanalyze run --try` (unset them)")
        return
    try:
        setting, stop_after = trial_env.from_env(env)
    except GpuAnalyzeError as exc:
        _say(f"trial setting not applied: {exc}")
        return
    log = env.get(trial_env.LOG) or None
    for name, apply in (
        ("DataLoader", lambda: _patch_loader(setting.dataloader, log)),
        ("warnings", lambda: _keep_warnings(log) if log else None),
        ("TF32", lambda: _tf32() if setting.tf32 else None),
        ("autocast", lambda: _autocast(setting.autocast) if setting.autocast else None),
        ("step bound", lambda: _stop_after(stop_after, profiler, finish, log) if stop_after else None),
    ):
        try:
            apply()
        except Exception as exc:  # noqa: BLE001 - the script runs on unchanged
            _say(f"trial: {name} not applied ({type(exc).__name__}: {exc})")


def _patch_loader(values: tuple[tuple[str, trial_env.LoaderValue], ...], log: str | None) -> None:
    import inspect

    from torch.utils.data import DataLoader

    original = DataLoader.__init__
    signature = inspect.signature(original)
    wanted = dict(values)
    failed: list[bool] = []

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - it replaces DataLoader.__init__
        try:
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            changed = _override(bound.arguments, wanted)
        except Exception as exc:  # noqa: BLE001 - the loader is built as the script asked
            if not failed:
                failed.append(True)
                _say(f"trial: DataLoader setting not applied ({type(exc).__name__}: {exc})")
            original(self, *args, **kwargs)
            return
        original(*bound.args, **bound.kwargs)
        arguments = bound.arguments
        entry = {"event": "loader", "pid": os.getpid(), "dataset": _name(arguments.get("dataset")), "changed": changed}
        _log(log, {**entry, "batch_size": _batch_of(arguments), "batch_sampler": _name(arguments.get("batch_sampler"))})

    DataLoader.__init__ = __init__


def _override(arguments: dict[str, Any], wanted: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Set the wanted arguments in place; returns {name: [before, after]} for those that changed
    (and {name: [before, "skipped: why"]} for those this loader cannot take)."""
    changed: dict[str, list[Any]] = {}
    workers = wanted.get("num_workers", arguments.get("num_workers", 0))
    for key, value in wanted.items():
        if key not in arguments:
            continue
        if key in ("persistent_workers", "prefetch_factor") and not workers:
            changed[key] = [arguments[key], "skipped: no workers"]
        elif key == "batch_size" and arguments.get("batch_sampler") is not None:
            own = arguments["batch_sampler"]
            if _batch_of(arguments) is None:
                changed[key] = [None, f"skipped: batch_sampler {_name(own)}"]
            elif own.batch_size != value:
                changed[key] = [own.batch_size, value]
                arguments["batch_sampler"] = type(own)(own.sampler, value, own.drop_last)
        elif key == "batch_size" and arguments[key] is None:
            changed[key] = [None, "skipped: the loader does not batch"]
        elif arguments[key] != value:
            changed[key] = [arguments[key], value]
            arguments[key] = value
    return changed


def _batch_of(arguments: Mapping[str, Any]) -> int | None:
    """The loader's batch size (None: it does not batch, or batches with a sampler of the script's own)."""
    own = arguments.get("batch_sampler")
    if own is None:
        return arguments.get("batch_size")
    from torch.utils.data import BatchSampler

    return own.batch_size if type(own) is BatchSampler else None


def _name(value: Any) -> str | None:
    return None if value is None else type(value).__name__


def _keep_warnings(log: str) -> None:
    import warnings

    def keep(message: Warning | str, category: type[Warning], filename: str, lineno: int, *_: Any) -> None:
        _log(log, {"event": "warning", "text": f"{category.__name__}: {message}", "where": f"{filename}:{lineno}"})

    warnings.showwarning = keep  # type: ignore[assignment]


def _tf32() -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def _autocast(precision: str) -> None:
    import torch
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    device = "cuda" if torch.cuda.is_available() else "cpu"
    stack: list[Any] = []

    def pre(module: Any, args: Any) -> None:
        if torch.compiler.is_compiling():
            return
        if not stack:
            context = torch.autocast(device_type=device, dtype=dtype)
            context.__enter__()
            stack.append((module, context))
        else:
            stack.append((module, None))

    def post(module: Any, args: Any, output: Any) -> None:
        if torch.compiler.is_compiling() or not stack:
            return
        _, context = stack.pop()
        if context is not None:
            context.__exit__(None, None, None)

    register_module_forward_pre_hook(pre)
    register_module_forward_hook(post, always_call=True)


def _stop_after(steps: int, profiler: Any, finish: Callable[[], None], log: str | None) -> None:
    from torch.optim.optimizer import register_optimizer_step_post_hook

    _mark_trial_stop(profiler)

    def after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        _State.steps += 1
        if _State.steps < steps:
            return
        _State.stopping = True
        try:
            finish()
            _log(log, {"event": "stop", "pid": os.getpid(), "steps": _State.steps})
        except Exception as exc:  # noqa: BLE001 - stop anyway
            _say(f"trial: could not close the trace ({type(exc).__name__}: {exc})")
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.flush()
        os._exit(0)  # no exit handler of the script runs: a trial writes none of its outputs

    register_optimizer_step_post_hook(after_step)


def _mark_trial_stop(profiler: Any) -> None:
    """Close the trace of a bounded trial with status ``trial_stop`` instead of ``ok``. (The profile
    ends through its teardown with the EndInfo it built; the instance's teardown is wrapped.)"""
    teardown = getattr(profiler, "_teardown", None)
    if profiler is None or teardown is None:
        return
    import msgspec

    def marked(end: Any) -> None:
        if _State.stopping and getattr(end, "status", None) == "ok":
            end = msgspec.structs.replace(end, status=trial_env.TRIAL_STOP_STATUS)
        teardown(end)

    profiler._teardown = marked


def _log(path: str | None, entry: dict[str, Any]) -> None:
    if not path:
        return
    with contextlib.suppress(OSError, TypeError, ValueError):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(entry, default=str) + "\n").encode())
        finally:
            os.close(fd)


def _say(message: str) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.write(f"gpuanalyze: {message}\n")

"""Profiling inside each Python process of a `gpuanalyze run` command.

The bootstrap's sitecustomize calls ``activate()`` at interpreter start. Nothing is imported
then: a hook waits for ``import torch`` and, once torch has loaded, arms an automatic profile
(``Profiler(None, recorder="run")``): optimizer and DataLoader hooks, no file. The first
optimizer step finds the model and creates the trace, so processes that never train (the
torchrun agent, DataLoader workers, compiler workers, tools) leave nothing behind. The profile
closes at interpreter exit, recording an uncaught exception (or Ctrl-C) as the run's end.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

_state: dict[str, Any] = {"profiler": None, "exception": None, "finished": False}


def activate() -> None:
    """Arm profiling for when torch is imported (now, if it already is). Never raises."""
    try:
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "optim"):
            _arm()
        else:
            sys.meta_path.insert(0, _TorchWatcher())
    except Exception as exc:  # noqa: BLE001 - the user's program runs on, unprofiled
        _say(f"not profiling this process ({type(exc).__name__}: {exc})")


class _TorchWatcher(importlib.abc.MetaPathFinder):
    """Finds torch like the finders after it would, and arms profiling once torch has loaded."""

    def __init__(self) -> None:
        self._busy = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch" or self._busy:
            return None
        self._busy = True
        try:
            spec = next(
                (
                    found
                    for finder in list(sys.meta_path)
                    if finder is not self and hasattr(finder, "find_spec")
                    for found in [finder.find_spec(fullname, path, target)]
                    if found is not None
                ),
                None,
            )
        finally:
            self._busy = False
        loader = None if spec is None else spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            _unwatch()
            _arm()

        try:
            loader.exec_module = exec_module  # type: ignore[method-assign]
        except (AttributeError, TypeError):
            return spec
        return spec


def _unwatch() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _TorchWatcher)]


def _arm() -> None:
    """Start the automatic profile; a bad variable or any failure leaves the program unprofiled."""
    try:
        from analyzer.errors import GpuAnalyzeError
        from analyzer.record.profiler import Profiler
        from analyzer.run.env_vars import options_from_env

        try:
            options = options_from_env(os.environ)
            _make_out_dir(options.out.parent)
        except GpuAnalyzeError as exc:
            _say(f"not profiling: {exc}")
            return
        prof = Profiler(None, options=options, recorder="run")
        prof.__enter__()
        _state["profiler"] = prof
        atexit.register(_finish)
        previous = sys.excepthook

        def excepthook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
            _state["exception"] = exc
            previous(kind, exc, tb)

        sys.excepthook = excepthook
        from analyzer.run.trial_env import is_trial_variable

        if any(map(is_trial_variable, os.environ)):  # `gpuanalyze run --try`: apply the trial's setting
            from analyzer.run.trial_child import start

            start(os.environ, prof, _finish)
    except Exception as exc:  # noqa: BLE001 - never in the user's way
        _say(f"not profiling this process ({type(exc).__name__}: {exc})")


def _make_out_dir(directory: Path) -> None:
    """The traces' directory (set by a scheduler, it may not exist yet); never its parents."""
    from analyzer.run.launch import create_dir

    if not directory.is_dir():
        create_dir(directory, f"GPUANALYZE_OUT={directory}")


def _finish() -> None:
    prof = _state["profiler"]
    if prof is None or _state["finished"]:
        return
    _state["finished"] = True
    try:
        prof.finish(_state["exception"])
    except Exception as exc:  # noqa: BLE001 - at exit: one line, no traceback
        _say(f"could not close the trace ({type(exc).__name__}: {exc})")


def _say(message: str) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.write(f"gpuanalyze: {message}\n")

"""Hook bodies that can never hurt the training loop they observe.

Every profiler hook runs through ``guarded``: nothing while torch.compile traces it (no graph
break), nothing once profiling is off, and any exception becomes a clean shutdown (``_fail``)
instead of reaching the user's loop. The hooks that run at every step (forward, backward, fetch,
optimizer step) check and catch the same way inline, without the decorator's call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def describe(exc: BaseException) -> str:
    """'Type: message' for the trace and warnings; never raises, even when the exception's __str__ does."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not replace the user's exception
        text = "<unprintable>"
    return f"{type(exc).__name__}: {text}"[:2000]


def guarded(method: Callable[..., Any]) -> Callable[..., None]:
    """Run a hook body only while ``self.enabled`` and not being traced (``self._compiling()`` or
    ``self._compile_flags._is_compiling_flag``, see ``compiling_check``); turn any exception into
    ``self._fail(exc)``. Returns None."""

    @functools.wraps(method)
    def hook(self: Any, *args: Any) -> None:
        if self.enabled and not (self._compiling() or self._compile_flags._is_compiling_flag):
            try:
                method(self, *args)
            except Exception as exc:  # noqa: BLE001 - the training loop must never see it
                self._fail(exc)

    return hook


class _NoFlag:
    """Stands in for ``torch.compiler`` where it has no ``_is_compiling_flag``."""

    _is_compiling_flag = False


def compiling_check(compiler: Any) -> tuple[Callable[[], bool], Any]:
    """``(check, flags)``: being traced when ``check() or flags._is_compiling_flag``, which is
    ``torch.compiler.is_compiling()`` at a tenth of its cost (it runs in every hook, every step):
    Dynamo folds ``is_dynamo_compiling()`` to True while tracing, so the flag that other tracers
    (AOT, export) set is read only when running eagerly, and read inline (no extra call)."""
    dynamo = getattr(compiler, "is_dynamo_compiling", None)
    if dynamo is None or not hasattr(compiler, "_is_compiling_flag"):
        return compiler.is_compiling, _NoFlag
    return dynamo, compiler

"""The forward hooks on each timed module, and their move onto a ``torch.compile`` wrapper.

``torch.compile(model)`` returns a wrapper that runs eagerly: hooks on it are never traced into
the compiled graph (no graph break, no recompilation when the profile ends), so the model's hooks
move there. A module compiled in place (``module.compile()``) is left unhooked, since hooks on it
would be traced.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

PreHook = Callable[[str, Any, Any, Any], None]
PostHook = Callable[[str, Any, Any, Any, Any], None]


class ModuleHooks:
    """Installs ``pre(name, module, args, kwargs)`` and ``post(name, module, args, kwargs, output)``."""

    def __init__(self, pre: PreHook, post: PostHook) -> None:
        self._pre, self._post = pre, post
        self._handles: dict[int, tuple[str, list[Any]]] = {}

    def hook(self, name: str, module: Any) -> None:
        if getattr(module, "_compiled_call_impl", None) is not None:
            return  # module.compile() compiled it in place: hooks on it would be traced into its graph
        self._handles[id(module)] = (
            name,
            [
                module.register_forward_pre_hook(functools.partial(self._pre, name), with_kwargs=True),
                module.register_forward_hook(functools.partial(self._post, name), with_kwargs=True, always_call=True),
            ],
        )

    def moved(self, module: Any, compiled: Any) -> None:
        """``torch.compile(module)`` returned ``compiled``: its eager wrapper takes over the hooks."""
        import torch

        entry = self._handles.pop(id(module), None)
        if entry is None:
            return
        name, handles = entry
        for handle in handles:
            handle.remove()
        if isinstance(compiled, torch.nn.Module):
            self.hook(name, compiled)

    def remove(self) -> None:
        for _, handles in self._handles.values():
            for handle in handles:
                handle.remove()
        self._handles.clear()

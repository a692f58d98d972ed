"""The timing of each profiled module's calls, and its move onto a ``torch.compile`` wrapper.

Not forward hooks: a module with hooks takes ``Module._call_impl``'s slow path at every call (a
closure, a set, ``torch.compiler.is_compiling()``, the hook dicts walked), which cost a tiny loop
more than the timing itself. ``module(x)`` is ``Module._wrapped_call_impl``, which calls the
instance's ``_compiled_call_impl`` when set (the slot ``module.compile()`` fills) and
``_call_impl`` otherwise; the timed call sits in that slot and calls ``_call_impl``, which then
runs the module's own hooks, if any, on the fast path otherwise. So the time covers the whole
call, the module's hooks included. The slot is left out of pickles and deep copies
(``Module.__getstate__``), so a copy of the model taken during the profile (an EMA model) is a
plain module. Dynamo tracing a call to the module goes to ``_call_impl`` or ``forward`` directly,
never through the slot, so nothing of this is traced into a graph.

``torch.compile(model)`` returns a wrapper that runs eagerly: the timing moves there. A module
compiled in place (``module.compile()``) has its slot taken and is left untimed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PreHook = Callable[[str, Any, Any], bool]
"""pre(name, args, kwargs) before the call; True when the call is timed."""
PostHook = Callable[[str], None]
"""post(name) after a timed call, also when it raised."""

SLOT = "_compiled_call_impl"


class ModuleHooks:
    """Times each hooked module's calls: ``pre(name, args, kwargs)`` before, ``post(name)`` after."""

    def __init__(self, pre: PreHook, post: PostHook) -> None:
        self._pre, self._post = pre, post
        self._timed: dict[int, tuple[str, Any, TimedCall]] = {}

    def hook(self, name: str, module: Any) -> None:
        if getattr(module, SLOT, None) is not None:
            return  # module.compile() compiled it in place: the slot holds its compiled call
        timed = TimedCall(name, module._call_impl, self._pre, self._post)
        setattr(module, SLOT, timed)
        self._timed[id(module)] = (name, module, timed)

    def moved(self, module: Any, compiled: Any) -> None:
        """``torch.compile(module)`` returned ``compiled``: its eager wrapper takes over the timing."""
        import torch

        entry = self._timed.pop(id(module), None)
        if entry is None:
            return
        _unset(module, entry[2])
        if isinstance(compiled, torch.nn.Module):
            self.hook(entry[0], compiled)

    def remove(self) -> None:
        for _, module, timed_call in self._timed.values():
            _unset(module, timed_call)
        self._timed.clear()


class TimedCall:
    """What the slot holds: ``pre``, the module's own ``_call_impl``, ``post``."""

    __slots__ = ("_call", "_name", "_post", "_pre")

    def __init__(self, name: str, call: Callable[..., Any], pre: PreHook, post: PostHook) -> None:
        self._name, self._call, self._pre, self._post = name, call, pre, post

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self._pre(self._name, args, kwargs):  # not timed now (profiling off, or being traced)
            return self._call(*args, **kwargs)
        try:
            return self._call(*args, **kwargs)
        finally:
            self._post(self._name)

    def __deepcopy__(self, _memo: dict[int, Any]) -> None:
        """A copy of the module (a module whose ``__getstate__`` keeps the slot) is not timed: the
        copy of a function would be the function itself, calling the original module."""
        return None


def _unset(module: Any, timed_call: TimedCall) -> None:
    """Empty the slot unless something else (``module.compile()`` during the profile) took it."""
    if vars(module).get(SLOT) is timed_call:
        del vars(module)[SLOT]

"""How a patched call is timed: the callback types every patch shares and the plain timed wrapper (backward, syncs).

A wrapper calls the original unchanged and reports the elapsed host time to a callback that never raises.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

Report = Callable[[str, int, Any, Any, int], None]
"""report(kind, elapsed_ns, owner, result, cpu_ns) with kind in {"fetch", "iter", "backward", "sync"};
cpu_ns, the calling thread's CPU time in the call, is measured for data fetches only (0 otherwise)."""
Before = Callable[[str], None]
"""before(kind), called just before the wrapped call starts."""
Patch = tuple[Any, str, Callable[[Any], Callable[..., Any]]]
"""(owner, attribute, wrapper of the original): one attribute a patch replaces (record.patches installs it)."""


def timed_wrapper(original: Any, kind: str, report: Report, before: list[Before]) -> Callable[..., Any]:
    """The plain shape: no CPU clock (cpu_ns=0); ``before`` is a list read at each call (empty: nothing to call)."""
    clock = time.perf_counter_ns

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before:
            before[0](kind)
        t0 = clock()
        result = None
        try:
            result = original(*args, **kwargs)
            return result
        finally:
            report(kind, clock() - t0, args[0] if args else None, result, 0)

    return wrapper

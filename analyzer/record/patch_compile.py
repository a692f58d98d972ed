"""The ``torch.compile`` patch: ``compiled(module, result)`` is called so that the returned wrapper, which runs
eagerly, carries the forward timing instead of the module it compiles."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from analyzer.record.timed_call import Patch


def compile_patches(compiled: Callable[[Any, Any], None]) -> list[Patch]:
    import torch

    def wrap(original: Any) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if args and result is not args[0]:
                compiled(args[0], result)
            return result

        return wrapper

    return [(torch, "compile", wrap)]

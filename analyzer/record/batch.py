"""Find the batch size in whatever a DataLoader or a forward call carries."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

_TENSOR_TYPES: set[type] = set()
"""``torch.Tensor`` and ``torch.nn.Parameter`` once torch is imported (this module imports torch lazily)."""


def first_tensor(obj: Any, *, depth: int = 0) -> Any:
    """The first torch tensor in nested tuples, lists, dicts or dataclass-like outputs, or None."""
    import torch

    if not _TENSOR_TYPES:
        _TENSOR_TYPES.update((torch.Tensor, torch.nn.Parameter))
    if isinstance(obj, torch.Tensor):
        return obj
    if depth > 4:
        return None
    items: Iterable[Any]
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, list | tuple):
        items = obj
    elif hasattr(obj, "values") and callable(obj.values):
        try:
            items = list(obj.values())
        except Exception:  # noqa: BLE001 - not a mapping after all
            return None
    else:
        return None
    for item in items:
        found = first_tensor(item, depth=depth + 1)
        if found is not None:
            return found
    return None


def batch_size_of(obj: Any) -> int | None:
    """The number of samples in a batch: the leading dimension of the first tensor found, unless a batch of several
    tensors says otherwise (shared_dim)."""
    # The common batch, ``(x, y)`` or ``(x,)`` (every fetch and forward), without the search's calls.
    head = obj[0] if type(obj) in (tuple, list) and obj else None
    tensor = head if type(head) in _TENSOR_TYPES else first_tensor(obj)
    if tensor is None or tensor.dim() == 0:
        return None
    n = int(tensor.shape[0])
    return shared_dim(obj, tensor, n) if type(obj) in (tuple, list) and len(obj) > 1 else n


def shared_dim(batch: tuple[Any, ...] | list[Any], first: Any, n: int) -> int:
    """``n`` (the first tensor's leading dimension) when every other top-level tensor of the batch has a dimension
    of that size; else the first of the first tensor's dimensions that they all have: a sequence-first input
    [T, B, F] beside its targets [B, 1] holds B samples, not T."""
    others = [t for t in batch[1:] if type(t) in _TENSOR_TYPES and t.dim() > 0]
    if all(n in t.shape for t in others):
        return n
    for d in first.shape[1:]:
        if all(d in t.shape for t in others):
            return int(d)
    return n


def batch_bytes_of(obj: Any, *, depth: int = 0) -> int | None:
    """Bytes of every tensor in a batch (nested tuples, lists, dicts); None when it holds none."""
    import torch

    if isinstance(obj, torch.Tensor):
        return int(obj.nelement() * obj.element_size())
    if depth > 4:
        return None
    items: Iterable[Any] = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list | tuple) else ()
    sizes = [b for item in items if (b := batch_bytes_of(item, depth=depth + 1)) is not None]
    return sum(sizes) if sizes else None

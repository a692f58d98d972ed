"""A ring all-reduce written from point-to-point exchanges and our own add, for comparison with NCCL/gloo.

Reduce-scatter then all-gather over ``world`` chunks: each rank sends and receives
2(world-1) chunks, the bandwidth-optimal pattern that nccl-tests' busbw factor assumes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Exchange = Callable[[Any, Any], None]
"""exchange(send, recv): send ``send`` to rank+1 and receive rank-1's chunk into ``recv``, together."""


def chunk_bounds(n: int, world: int) -> list[tuple[int, int]]:
    base, extra = divmod(n, world)
    bounds, start = [], 0
    for i in range(world):
        size = base + (1 if i < extra else 0)
        bounds.append((start, start + size))
        start += size
    return bounds


def ring_allreduce(
    buf: Any, rank: int, world: int, exchange: Exchange, add_: Callable[[Any, Any], None], scratch: Any
) -> None:
    """Sum ``buf`` (1-D, sliceable) across ranks in place; ``scratch`` holds at least one chunk."""
    if world == 1:
        return
    bounds = chunk_bounds(len(buf), world)

    def chunk(i: int) -> Any:
        lo, hi = bounds[i % world]
        return buf[lo:hi]

    for step in range(world - 1):
        send, recv = chunk(rank - step), chunk(rank - step - 1)
        tmp = scratch[: len(recv)]
        exchange(send, tmp)
        add_(recv, tmp)
    for step in range(world - 1):
        exchange(chunk(rank - step + 1), chunk(rank - step))

"""Small helpers for reading aggregates as plain numbers: a polars value as a float, a share kept in [0, 1]."""

from __future__ import annotations


def number(value: object) -> float:
    """A polars aggregate as a float (polars types them as any Python literal)."""
    assert isinstance(value, int | float), value
    return float(value)


def clamp(x: float) -> float:
    """A share kept within [0, 1] (the metrics' shares of step time, the rules' shares and confidences)."""
    return min(1.0, max(0.0, x))

"""Small helpers for reading polars aggregates as plain numbers."""

from __future__ import annotations


def number(value: object) -> float:
    """A polars aggregate as a float (polars types them as any Python literal)."""
    assert isinstance(value, int | float), value
    return float(value)

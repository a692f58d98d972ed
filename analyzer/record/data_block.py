"""``with prof.data():``: a custom loader's time (``get_batch()``) counted as data wait."""

from __future__ import annotations

from typing import Any


class DataBlock:
    """``with prof.data():`` times its body as data wait (a custom loader such as ``get_batch()``)."""

    __slots__ = ("_prof",)

    def __init__(self, prof: Any) -> None:
        self._prof = prof

    def __enter__(self) -> DataBlock:
        self._prof._data_enter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._prof._data_exit()

"""Names interned to small integer ids, with a bound on how many distinct names are kept.

The Kineto sinks store each event's name as an id into one list: a trace names few things many times.
A hostile trace may name every event differently: past ``limit`` distinct names, new ones share ``other``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Self

import numpy as np

from gpuanalyze.ingest.timeline.kernel_names import MAX_NAME_CHARS


class NameTable:
    """Distinct names in first-seen order (``names``), each cut to MAX_NAME_CHARS; ``id`` interns one."""

    __slots__ = ("_ids", "_limit", "_other", "names")

    def __init__(self, limit: int, other: str) -> None:
        self.names: list[str] = []
        self._ids: dict[str, int] = {}
        self._limit = limit
        self._other = other

    def id(self, name: str) -> int:
        """The id of ``name`` (of ``other`` once ``limit`` distinct names are kept and it is not one of them)."""
        name = name[:MAX_NAME_CHARS]
        got = self._ids.get(name)
        if got is None and len(self.names) >= self._limit:
            name = self._other
            got = self._ids.get(name)
        if got is None:
            got = self._ids[name] = len(self.names)
            self.names.append(name)
        return got


class NamedEvents:
    """A dataclass of per-event arrays followed by the ``names`` the name ids index into; ``DTYPES`` holds
    the arrays' dtypes in field order, so that ``empty`` (no events) is stated once."""

    __slots__ = ()
    DTYPES: ClassVar[tuple[type, ...]]

    @classmethod
    def empty(cls) -> Self:
        make: Callable[..., Self] = cls  # the dataclass's fields: the arrays, then names
        return make(*(np.empty(0, dtype) for dtype in cls.DTYPES), ())


@dataclass(frozen=True, slots=True)
class HostIntervals(NamedEvents):
    """Events on the host's clock: where each starts and ends (microseconds)."""

    start: np.ndarray
    end: np.ndarray

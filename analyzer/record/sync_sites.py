"""Where the blocking calls come from: the user's ``file:line function`` of each host-device sync call site.

The sync wrapper (record.patches) already sees every call. Per call the profile adds only the caller's code object
and line as a key and two counters (no traceback, no string): ``SyncSites.at`` is called once per new call site,
and names the site then, walking out of torch's and gpuanalyze's own frames (``Tensor.item`` called inside torch is
charged to the user's line that called torch). The end marker stores the sites, most blocked time first
(``EndInfo.sync_sites``).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import CodeType, FrameType

from gpuanalyze.ingest.runinfo import CallSite

#: Call sites stored in the end marker (most blocked time first); the rest are summed into none.
KEPT = 64
#: Frames walked out of library code when naming a new site (deeper: the innermost library frame is named).
MAX_WALK = 32


def _library_roots() -> tuple[str, ...]:
    import torch

    return str(Path(torch.__file__ or "").parent) + os.sep, str(Path(__file__).parents[1]) + os.sep


class SyncSites:
    """Per call site (the caller's code object and line), [calls, blocked ns]; its name, found once."""

    __slots__ = ("_names", "_roots", "sites")

    def __init__(self) -> None:
        self.sites: dict[tuple[CodeType, int], list[int]] = {}
        self._names: dict[tuple[CodeType, int], str] = {}
        self._roots: tuple[str, ...] | None = None

    def at(self, key: tuple[CodeType, int], frame: FrameType | None) -> list[int]:
        """The counters of a site seen for the first time, named from ``frame`` (the caller's)."""
        if self._roots is None:
            self._roots = _library_roots()
        for _ in range(MAX_WALK):
            if frame is None or frame.f_back is None or not frame.f_code.co_filename.startswith(self._roots):
                break
            frame = frame.f_back
        code, line = (frame.f_code, frame.f_lineno) if frame is not None else key
        self._names[key] = f"{code.co_filename}:{line} {code.co_name}"
        counters = self.sites[key] = [0, 0]
        return counters

    def stored(self) -> tuple[CallSite, ...] | None:
        """The sites by name (several keys may name one user line), most blocked time first; None when none."""
        named: dict[str, list[int]] = {}
        for key, (calls, ns) in self.sites.items():
            total = named.setdefault(self._names[key], [0, 0])
            total[0] += calls
            total[1] += ns
        ranked = sorted(named.items(), key=lambda kv: -kv[1][1])[:KEPT]
        return tuple(CallSite(frame=name[:1024], count=c, ms=ns / 1e6) for name, (c, ns) in ranked) or None

"""Where the blocking calls come from: the user's ``file:line function`` of each host-device sync call site.

The sync wrapper (record.patches) already sees every call. Per call the profile adds only a key (the id of the
caller's code object and its instruction offset: two ints; hashing the code object or reading ``f_lineno`` costs
several times more) and two counters: no traceback, no string. ``SyncSites.at`` runs once per new call site: it
keeps the code object alive (its id is never reused) and names the site, walking out of torch's and gpuanalyze's
own frames (``Tensor.item`` called inside torch is charged to the user's line that called torch). The end marker
stores the sites by name, most blocked time first (``EndInfo.sync_sites``). ``python benchmarks/overhead.py
--sync-sites`` times a sync with and without its call site, side by side.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import FrameType

from gpuanalyze.ingest.trace.runinfo import CallSite

#: Call sites stored in the end marker (most blocked time first); the rest are summed into none.
KEPT = 64
#: Frames walked out of library code when naming a new site (deeper: the innermost library frame is named).
MAX_WALK = 32


def _library_roots() -> tuple[str, ...]:
    import torch

    return str(Path(torch.__file__ or "").parent) + os.sep, str(Path(__file__).parents[1]) + os.sep


class SyncSites:
    """Per call site (the id of the caller's code object, its instruction offset), [calls, blocked ns]; its name,
    found once."""

    __slots__ = ("_kept", "_names", "_roots", "sites")

    def __init__(self) -> None:
        self.sites: dict[tuple[int, int], list[int]] = {}
        self._names: dict[tuple[int, int], str] = {}
        self._kept: list[object] = []
        self._roots: tuple[str, ...] | None = None

    def at(self, key: tuple[int, int], frame: FrameType | None) -> list[int]:
        """The counters of a site seen for the first time, named from ``frame`` (the caller's)."""
        if self._roots is None:
            self._roots = _library_roots()
        if frame is not None:
            self._kept.append(frame.f_code)
        for _ in range(MAX_WALK):
            if frame is None or frame.f_back is None or not frame.f_code.co_filename.startswith(self._roots):
                break
            frame = frame.f_back
        name = "?" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}"
        self._names[key] = name
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

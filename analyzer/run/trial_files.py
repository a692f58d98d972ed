"""The files a `gpuanalyze run --try` trial changed: no trial may start from another's state.

Before the first trial, and after each, the launcher records the files under the working directory
and the paths on the command line (a directory there is walked too), breadth first: size,
modification time and inode (``os.lstat``: a file replaced by a rename has a new inode). A file of
one record that differs or is gone in the next was changed by that trial; a new file is not counted
(Lightning's ``lightning_logs/version_N``), but a change to what an earlier trial wrote is. Left out:
``__pycache__``, ``.git``, virtual environments (``pyvenv.cfg``), the trials' own directories and
the files the launcher's process group holds open (its ``> log`` or ``| tee log``). A record holds
at most MAX_FILES files and takes at most MAX_CHECK_S seconds.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from analyzer.run.trial_reap import processes

#: The most files one record holds (a working directory may hold a dataset).
MAX_FILES = 20_000
#: The most seconds one record takes (a network file system may be slow to list).
MAX_CHECK_S = 3.0

Stat = tuple[int, int, int]


class Files:
    """Where the trials' writes are looked for, the last record of it, and whether that record is
    ``complete`` (False: the bound left files out)."""

    def __init__(self, command: Sequence[str], skip: Sequence[Path]) -> None:
        words = [w.partition("=")[2] if w.startswith("-") else w for w in command[1:]]
        named = [os.path.normpath(w) for w in dict.fromkeys(words) if w and os.path.lexists(w)]
        self.roots = [os.curdir, *named]
        self.ours = _held_open() | {(st.st_dev, st.st_ino) for st in (p.stat() for p in skip if p.exists())}
        """(device, inode) of what is never looked at: ``skip`` and what this process group holds open."""
        self.last = self.record()

    def record(self) -> dict[str, Stat]:
        """{path: (size, modification time in ns, inode)} of every file in reach now."""
        out: dict[str, Stat] = {}
        queue, started = deque(self.roots), time.monotonic()
        while queue and len(out) < MAX_FILES and time.monotonic() - started < MAX_CHECK_S:
            path = queue.popleft()
            if os.path.basename(path) in ("__pycache__", ".git"):  # noqa: PTH119
                continue
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                if (st.st_dev, st.st_ino) in self.ours:
                    continue
                if not os.path.isdir(path) or os.path.islink(path):  # noqa: PTH112, PTH114
                    out[path] = (st.st_size, st.st_mtime_ns, st.st_ino)
                elif not os.path.exists(os.path.join(path, "pyvenv.cfg")):  # noqa: PTH110, PTH118
                    with os.scandir(path) as entries:
                        queue.extend(sorted(os.path.normpath(e.path) for e in entries))
        self.complete = not queue
        return out

    def changed(self) -> list[str]:
        """The files of the last record that changed or went since; records anew."""
        now = self.record()
        out = [path for path, before in self.last.items() if now.get(path) != before and _stat(path) != before]
        self.last = now
        return out


def _stat(path: str) -> Stat | None:
    """A file the record left out (past the bound), None when it is gone."""
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        return st.st_size, st.st_mtime_ns, st.st_ino
    return None


def _held_open() -> set[tuple[int, int]]:
    """(device, inode) of each file a process of this process group holds open."""
    out = set()
    for pid in (pid for pid, (_, pgid, _) in processes().items() if pgid == os.getpgrp()):
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    st = fd.stat()
                    out.add((st.st_dev, st.st_ino))
    return out

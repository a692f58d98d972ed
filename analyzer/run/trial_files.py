"""The files a `gpuanalyze run --try` trial changed, so that no trial starts from another's state and
no file is replaced trial after trial.

Before the first trial the launcher records the files under the working directory and the paths on
the command line (a directory there is walked too), breadth first: each file's size, modification
time and inode (``os.lstat``: a file replaced by a rename has a new inode). After every trial it
records them again; a file of the previous record that differs or is gone was changed by that
trial. A new file is not counted (Lightning's ``lightning_logs/version_N``, Hydra's ``outputs/``),
but a trial that changes what an earlier trial wrote is. Left out: ``__pycache__``, ``.git``,
virtual environments (a directory with ``pyvenv.cfg``), the trials' own directory, and the files
the launcher's process group holds open (its own log, a ``| tee log``: written by it, not by a
trial). A record is bounded by MAX_FILES files and MAX_CHECK_S seconds; the launcher says so when
the bound left files out.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from analyzer.run.trial_reap import processes

#: The most files one record holds (a working directory may hold a dataset or a virtual environment).
MAX_FILES = 20_000
#: The most seconds one record takes (a network file system may be slow to list).
MAX_CHECK_S = 3.0


@dataclass(slots=True)
class Files:
    """Where the trials' writes are looked for, and the last record of it."""

    roots: list[str]
    skip: set[str]
    ours: set[tuple[int, int]] = field(default_factory=set)
    """(device, inode) of the files the launcher's process group holds open."""
    last: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    complete: bool = True
    """False: the bound stopped the last record (files past it were not checked)."""

    @classmethod
    def watch(cls, command: Sequence[str], skip: Sequence[Path]) -> Files:
        words = [w.partition("=")[2] if w.startswith("-") else w for w in command[1:]]
        named = [os.path.normpath(w) for w in dict.fromkeys(words) if w and os.path.lexists(w)]
        files = cls([os.curdir, *named], {str(p.resolve()) for p in skip}, _held_open())
        files.last = files.record()
        return files

    def record(self) -> dict[str, tuple[int, int, int]]:
        """{path: (size, modification time in ns, inode)} of every file in reach now."""
        out: dict[str, tuple[int, int, int]] = {}
        queue, started = deque(self.roots), time.monotonic()
        self.complete = False
        while len(out) < MAX_FILES and time.monotonic() - started < MAX_CHECK_S:
            if not queue:
                self.complete = True
                break
            path = queue.popleft()
            if os.path.basename(path) in ("__pycache__", ".git") or os.path.abspath(path) in self.skip:  # noqa: PTH100, PTH119
                continue
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                if (st.st_dev, st.st_ino) in self.ours:
                    continue
                if not os.path.isdir(path) or os.path.islink(path):  # noqa: PTH112, PTH114
                    out[path] = (st.st_size, st.st_mtime_ns, st.st_ino)
                    continue
                if not os.path.exists(os.path.join(path, "pyvenv.cfg")):  # noqa: PTH110, PTH118
                    with os.scandir(path) as entries:
                        queue.extend(sorted(os.path.normpath(e.path) for e in entries))
        return out

    def changed(self) -> list[str]:
        """The files of the last record that changed or went since; records anew."""
        now = self.record()
        out = []
        for path, before in self.last.items():
            after = now.get(path)
            if after is None:  # past the bound this time, or gone
                with contextlib.suppress(OSError):
                    st = os.lstat(path)
                    after = (st.st_size, st.st_mtime_ns, st.st_ino)
            if after != before:
                out.append(path)
        self.last = now
        return out


def _held_open() -> set[tuple[int, int]]:
    """(device, inode) of each file a process of this process group holds open."""
    out = set()
    group = os.getpgrp()
    for pid in (pid for pid, (_, pgid, _) in processes().items() if pgid == group):
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    st = fd.stat()
                    out.add((st.st_dev, st.st_ino))
    return out

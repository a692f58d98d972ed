"""The files `gpuanalyze watch` opened, held by descriptor, so a path replaced or removed mid-watch
is still read as the file first opened (and said), never silently as another run."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

_FD_DIR = Path("/proc/self/fd") if Path("/proc/self/fd").is_dir() else Path("/dev/fd")


class HeldFiles:
    """Regular files opened once and kept open; ``resolve`` maps each path to what to read now."""

    def __init__(self) -> None:
        self._fds: dict[Path, int] = {}
        self.replaced: set[Path] = set()
        """Paths that no longer name the file watch opened (replaced, or removed)."""

    @property
    def paths(self) -> list[Path]:
        return list(self._fds)

    def resolve(self, files: list[Path]) -> list[Path]:
        """``files``, then every file held before that is no longer listed (removed), each as the path
        to read: itself while it still names the file first opened, else that file through its descriptor."""
        for f in files:
            if f not in self._fds:
                self._hold(f)
        return [self._readable(f) for f in [*files, *(f for f in self._fds if f not in files)]]

    def _hold(self, path: Path) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return
        try:
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
        except OSError:
            regular = False
        if not regular:  # a FIFO or a device is never held (nor read: the loader refuses it)
            os.close(fd)
            return
        self._fds[path] = fd

    def _readable(self, path: Path) -> Path:
        fd = self._fds.get(path)
        if fd is None:
            return path
        try:
            now = path.stat()
            held = os.fstat(fd)
            same = (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)
        except OSError:
            same = False
        if same:
            return path
        self.replaced.add(path)
        return _FD_DIR / str(fd)

    def close(self) -> None:
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()

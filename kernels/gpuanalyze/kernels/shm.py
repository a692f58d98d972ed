"""Shared-memory segments for the synthetic loader's batch slots, that never outlive a bench run for long.

A segment is a file in /dev/shm named ``gpuanalyze-loader-<owner pid>-<random>``. Its space is
reserved up front (``posix_fallocate``), so a /dev/shm that is too small (Docker's default is
64 MB) gives one clear error before any worker starts, never a SIGBUS in a worker later. The
owner unlinks it on every exit path it survives; after a ``kill -9`` the next bench run finds the
segments whose owner is dead and removes them (``remove_stale_segments``).
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import re
import secrets
import stat
import tempfile
from pathlib import Path

from analyzer.errors import GpuAnalyzeError

PREFIX = "gpuanalyze-loader-"
FREE_BYTES_ENV = "GPUANALYZE_SHM_BYTES"
"""Test hook: pretend the shared-memory directory has this many bytes free."""
_NAME = re.compile(re.escape(PREFIX) + r"(\d+)-[0-9a-f]+")


def shm_dir() -> Path:
    """/dev/shm where it exists (Linux), else the temporary directory (file-backed, still mapped)."""
    dev = Path("/dev/shm")
    return dev if dev.is_dir() else Path(tempfile.gettempdir())


def free_bytes(directory: Path) -> int:
    """Bytes an unprivileged process may still allocate in ``directory`` ($GPUANALYZE_SHM_BYTES overrides)."""
    override = os.environ.get(FREE_BYTES_ENV)
    if override is not None:
        try:
            value = int(override)
        except ValueError:
            value = -1
        if value < 0:
            raise GpuAnalyzeError(f"{FREE_BYTES_ENV}={override!r} must be a byte count (a whole number >= 0)")
        return value
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def too_small_message(directory: Path, free: int, need: int, what: str) -> str:
    return (
        f"{directory} has {mib(free)} free but {what} need {mib(need)}; enlarge it "
        "(docker run --shm-size=1g, or mount -o remount,size=1g /dev/shm) - PyTorch DataLoader workers need it too"
    )


class Segment:
    """A shared-memory file of ``size`` bytes, mapped here; workers map it by ``path``."""

    def __init__(self, size: int, *, what: str) -> None:
        assert size > 0
        directory = shm_dir()
        free = free_bytes(directory)
        if size > free:
            raise GpuAnalyzeError(too_small_message(directory, free, size, what))
        self.path = directory / f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        self.size = size
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, size)  # ENOSPC now rather than SIGBUS in a worker later
            except AttributeError:  # no posix_fallocate (macOS): size the file; pages come on first touch
                os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        except OSError as exc:
            self.unlink()
            if exc.errno == errno.ENOSPC:
                raise GpuAnalyzeError(too_small_message(directory, free_bytes(directory), size, what)) from exc
            raise GpuAnalyzeError(f"cannot create shared memory in {directory} ({exc.strerror})") from exc
        except BaseException:  # Ctrl-C while reserving the space
            self.unlink()
            raise
        finally:
            os.close(fd)

    def unlink(self) -> None:
        """Remove the name (idempotent); mappings stay valid until they are closed."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def close(self) -> None:
        """Unlink, then unmap (an unmap that still has views is left to the garbage collector)."""
        self.unlink()
        with contextlib.suppress(BufferError):
            self.map.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_segments(directory: Path | None = None) -> list[Path]:
    """Unlink this user's loader segments whose owner process is gone (left by a ``kill -9``); returns them.

    A segment whose owner pid is alive is kept, even if the pid was reused by another program:
    it goes at a later run, once that process ends.
    """
    directory = directory or shm_dir()
    removed = []
    try:
        names = [p for p in directory.iterdir() if p.name.startswith(PREFIX)]
    except OSError:
        return []
    for path in names:
        match = _NAME.fullmatch(path.name)
        if match is None or _alive(int(match.group(1))):
            continue
        try:
            st = path.lstat()
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                continue
            path.unlink()
        except OSError:
            continue
        removed.append(path)
    return removed

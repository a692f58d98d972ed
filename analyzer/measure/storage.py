"""Paths every worker can reach: local paths (also NFS mounts) and fsspec URLs (``s3://``, ``gs://``,
``memory://``, ...; the protocol's package, e.g. s3fs, must be installed where the URL is used).

Reading a trace from a URL copies it to a local temporary file first (the Arrow reader and the
import cache work on local files); writing to a URL writes a local temporary file and uploads it,
never over an existing object unless forced.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat as stat_
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from analyzer.errors import GpuAnalyzeError

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def is_url(path: str | Path) -> bool:
    return isinstance(path, str) and bool(_URL.match(path)) and not path.startswith("file://")


def _fs(url: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError as exc:
        raise GpuAnalyzeError(f"{url}: reading URLs needs fsspec (pip install fsspec, and s3fs for s3://)") from exc
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise GpuAnalyzeError(f"{url}: {exc}") from exc
    return fs, path


@dataclass(frozen=True, slots=True)
class Entry:
    """A file in a directory: where it is, its name, size and modification time (ns)."""

    path: str
    name: str
    size: int
    mtime_ns: int
    regular: bool = True


def join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name if is_url(base) else str(Path(base) / name)


def list_dir(path: str) -> list[Entry]:
    """The entries of a directory (local or URL), sorted by name; raises GpuAnalyzeError."""
    if is_url(path):
        fs, p = _fs(path)
        try:
            infos = fs.ls(p, detail=True)
        except (OSError, ValueError) as exc:
            raise GpuAnalyzeError(f"{path}: cannot list ({exc})") from exc
        out = []
        prefix = path.split("://", 1)[0] + "://"
        for info in infos:
            if info.get("type") != "file":
                continue
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            mtime = info.get("mtime") or info.get("LastModified") or info.get("created") or 0
            out.append(Entry(prefix + info["name"], name, int(info.get("size") or 0), _ns(mtime)))
        return sorted(out, key=lambda e: e.name)
    try:
        with os.scandir(path) as it:
            entries = list(it)
    except OSError as exc:
        raise GpuAnalyzeError(f"{path}: cannot list the directory ({exc.strerror})") from exc
    out = []
    for e in entries:
        try:
            st = e.stat()  # follows links: a link to /dev/zero is then not regular
        except OSError:
            out.append(Entry(e.path, e.name, 0, 0, regular=False))
            continue
        if stat_.S_ISDIR(st.st_mode):
            continue
        out.append(Entry(e.path, e.name, st.st_size, st.st_mtime_ns, regular=stat_.S_ISREG(st.st_mode)))
    return sorted(out, key=lambda e: e.name)


def _ns(mtime: Any) -> int:
    if hasattr(mtime, "timestamp"):
        return int(mtime.timestamp() * 1e9)
    try:
        return int(float(mtime) * 1e9)
    except (TypeError, ValueError):
        return 0


def stat(path: str) -> tuple[int, int]:
    """(size, mtime_ns); raises OSError."""
    if is_url(path):
        fs, p = _fs(path)
        info = fs.info(p)
        return int(info.get("size") or 0), _ns(info.get("mtime") or info.get("LastModified") or 0)
    st = Path(path).stat()
    return st.st_size, st.st_mtime_ns


def exists(path: str) -> bool:
    if is_url(path):
        fs, p = _fs(path)
        return bool(fs.exists(p))
    return os.path.lexists(path)


def is_regular(path: str) -> bool:
    """A local regular file (following links)."""
    try:
        return stat_.S_ISREG(Path(path).stat().st_mode)
    except OSError:
        return False


def is_dir(path: str) -> bool:
    if is_url(path):
        fs, p = _fs(path)
        return bool(fs.isdir(p))
    return Path(path).is_dir()


@contextlib.contextmanager
def local_copy(path: str) -> Iterator[Path]:
    """A local file holding ``path``'s bytes (the file itself when it is local)."""
    if not is_url(path):
        yield Path(path)
        return
    fs, p = _fs(path)
    with tempfile.TemporaryDirectory(prefix="gpuanalyze-fetch-") as tmp:
        local = Path(tmp) / p.rstrip("/").rsplit("/", 1)[-1]
        try:
            fs.get(p, str(local))
        except (OSError, ValueError) as exc:
            raise GpuAnalyzeError(f"{path}: cannot read ({exc})") from exc
        yield local


def write(path: str, write_fn: Callable[[BinaryIO], None], *, force: bool, durable: bool = True) -> None:
    """Write ``path`` (local: analyzer.files.write_file's safe write; URL: upload) with what ``write_fn`` writes."""
    if not is_url(path):
        from analyzer.files import write_file

        write_file(Path(path), write_fn, force=force, durable=durable)
        return
    fs, p = _fs(path)
    if fs.exists(p) and not force:
        raise GpuAnalyzeError(f"{path} exists; pass --force to overwrite it")
    with tempfile.TemporaryDirectory(prefix="gpuanalyze-put-") as tmp:
        local = Path(tmp) / "out"
        with open(local, "wb") as fh:
            write_fn(fh)
        try:
            fs.put(str(local), p)
        except (OSError, ValueError) as exc:
            raise GpuAnalyzeError(f"cannot write {path} ({exc})") from exc

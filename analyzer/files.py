"""Writing output files the user names: never over what they have unless asked, never through links
or special files, never creating directories, never leaving half-written files.

Every command that writes a file (``import``, ``export``, ``report``, ``bench --out``) goes through
``write_file``: the data goes to a temporary file created with O_EXCL (a random name, so a
pre-existing ``<out>.tmp`` or a link planted there is never followed) in the target's directory,
and is then renamed into place.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from analyzer.errors import GpuAnalyzeError

#: Names the commands read as traces: an output beneath an input directory with one of them is an input.
_TRACE_SUFFIXES = (".arrow", ".json", ".json.gz", ".sqlite", ".nsys-rep", ".qdrep")
_RANK_PART = re.compile(r"\.rank\d+(?:-\d+)?$")


def check_target(path: Path, *, force: bool, inputs: Sequence[str | Path] = ()) -> None:
    """Raise GpuAnalyzeError unless ``path`` may be written: its directory exists, and it is absent,
    or (with ``force``) a regular file that is none of the command's ``inputs`` (a trace file, a rank
    file beside it, or a trace beneath an input directory), which ``--force`` does not replace."""
    parent = path.parent
    if not parent.is_dir():
        raise GpuAnalyzeError(f"{parent}: no such directory (create it first; gpuanalyze does not create directories)")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise GpuAnalyzeError(f"{path}: cannot check the output path ({exc.strerror})") from exc
    if not stat.S_ISREG(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise GpuAnalyzeError(f"{path} is {kind}; refusing to replace it (choose another output path)")
    held = _input_holding(path, inputs)
    if held is not None:
        raise GpuAnalyzeError(
            f"{path} is {held}; an input is never overwritten, even with --force (choose another path)"
        )
    if not force:
        raise GpuAnalyzeError(f"{path} exists; pass --force to overwrite it")


def _trace_name(name: str) -> tuple[str, str] | None:
    """(``trace``, ``.arrow``) for ``trace.arrow`` or ``trace.rank3.arrow``; None for a name no trace has."""
    lower = name.lower()
    suffix = next((s for s in _TRACE_SUFFIXES if lower.endswith(s)), None)
    return None if suffix is None else (_RANK_PART.sub("", name[: -len(suffix)]), suffix)


def _input_holding(path: Path, inputs: Sequence[str | Path]) -> str | None:
    """How the existing file ``path`` is one of ``inputs`` (local paths; URLs are never written), or None."""
    try:
        out = path.resolve()
        for given in inputs:
            if "://" in str(given):
                continue
            source = Path(given).resolve()
            if source == out or (source.is_file() and source.samefile(out)):  # a hard link too
                return "an input of this command"
            if source.is_dir() and out.is_relative_to(source) and _trace_name(out.name) is not None:
                return f"a trace beneath the input directory {given}"
            named = _trace_name(source.name)
            if out.parent == source.parent and named is not None and _trace_name(out.name) == named:
                return f"a rank file beside the input {given}"  # trace.rank1.arrow beside trace.rank0.arrow
    except (OSError, RuntimeError):  # a loop of links, a vanished directory: the write itself will say
        return None
    return None


def _mode_for(path: Path) -> int:
    """The permissions a plain ``open(path, "w")`` would give (the replaced file's, or 0o666 less the
    umask), not mkstemp's private 0o600: a report is meant to be shared."""
    try:
        return stat.S_IMODE(os.lstat(path).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_file(path: Path, write: Callable[[BinaryIO], None], *, force: bool, durable: bool = True) -> None:
    """Create or (with ``force``) replace the regular file ``path`` with what ``write`` writes, atomically.
    ``durable=False`` skips the fsync (a cache entry that is redone when it is found torn)."""
    check_target(path, force=force)
    parent = path.parent
    try:
        fd, tmp_name = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise GpuAnalyzeError(f"cannot write in {parent} ({exc.strerror})") from exc
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, _mode_for(path))
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        if force:
            tmp.replace(path)
        else:
            path.hardlink_to(tmp)  # fails if something appeared at ``path`` meanwhile: never clobber
    except FileExistsError as exc:
        raise GpuAnalyzeError(f"{path} appeared while it was being written; pass --force to overwrite it") from exc
    except OSError as exc:
        raise GpuAnalyzeError(f"cannot write {path} ({exc.strerror})") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_bytes(path: Path, data: bytes, *, force: bool) -> None:
    def write(fh: BinaryIO) -> None:
        fh.write(data)

    write_file(path, write, force=force)

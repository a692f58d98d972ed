"""The bytes of a trace file, bounded: open only regular files, inflate gzip (single or multi-member)
in bounded chunks with a ratio guard against compression bombs, and the limits every reader of a
Kineto JSON trace obeys (``ReadLimits``, ``--max-bytes``)."""

from __future__ import annotations

import re
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from analyzer.errors import GpuAnalyzeError, TraceError

MiB = 1 << 20
#: Compressed bytes read from the file at a time.
READ_CHUNK = 4 * MiB
#: Decompressed bytes produced per inflate call (a gzip bomb cannot make one call large).
INFLATE_CHUNK = 8 * MiB


@dataclass(kw_only=True, slots=True)
class ReadLimits:
    """How much a trace file may make the importer read and keep."""

    max_bytes: int | None = None
    """Most decompressed JSON bytes to read; None: plain files of any size, and gzip files up to
    ``gzip_ratio`` times their compressed size (at least ``min_allowance``)."""
    gzip_ratio: float = 100.0
    """Refuse gzip data that expands more than this (real profiler traces expand 10-20x)."""
    min_allowance: int = 16 * MiB
    """Decompressed bytes a small gzip file may always expand to."""
    max_event_bytes: int = 64 * MiB
    """Largest single event."""
    max_outside_bytes: int = 64 * MiB
    """Most bytes outside the ``traceEvents`` array (metadata)."""
    max_kept_events: int = 50_000_000
    """Most GPU, runtime and annotation events kept by the importer (about 40 bytes each)."""

    def __post_init__(self) -> None:
        if self.max_bytes is not None and self.max_bytes < 1:
            raise GpuAnalyzeError("--max-bytes must be a positive number of bytes")
        if self.gzip_ratio < 1:
            raise GpuAnalyzeError("gzip_ratio must be at least 1")


def shown_size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.0f} {unit}"
    return f"{n} bytes"


def parse_size(text: str) -> int:
    """'500M', '2G', '1048576' -> bytes (the --max-bytes option)."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if m is None:
        raise GpuAnalyzeError(f"--max-bytes {text!r}: give a size such as 800M or 4G")
    value = int(float(m.group(1)) * units[m.group(2).upper()])
    if value < 1:
        raise GpuAnalyzeError(f"--max-bytes {text!r} must be at least one byte")
    return value


def require_regular(path: Path) -> None:
    """A one-line TraceError unless ``path`` is a regular file (never a FIFO, device or /dev/zero link)."""
    try:
        st = path.stat()
    except FileNotFoundError as exc:
        raise TraceError(f"{path}: no such file") from exc
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror})") from exc
    if stat.S_ISDIR(st.st_mode):
        raise TraceError(f"{path}: is a directory; pass one trace file")
    if not stat.S_ISREG(st.st_mode):
        raise TraceError(f"{path}: not a regular file (a device, FIFO or socket); refusing to read it")


def open_regular(path: Path) -> IO[bytes]:
    """Open ``path`` for reading only if it is a regular file (require_regular)."""
    require_regular(path)
    try:
        return open(path, "rb")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror})") from exc


class ByteChunks:
    """The decompressed bytes of a (possibly gzip, possibly multi-member) file, chunk by chunk."""

    def __init__(self, fh: IO[bytes], name: str, size: int | None, limits: ReadLimits) -> None:
        self.fh, self.name, self.limits = fh, name, limits
        self.size = size
        self.total = 0
        self._head = fh.read(READ_CHUNK)
        self.gzip = self._head[:2] == b"\x1f\x8b"
        self.allowed: int | None = limits.max_bytes
        if self.allowed is None and self.gzip and size is not None:
            self.allowed = max(limits.min_allowance, int(limits.gzip_ratio * size))

    def _count(self, data: bytes) -> bytes:
        self.total += len(data)
        if self.allowed is not None and self.total > self.allowed:
            if self.limits.max_bytes is None:
                raise TraceError(
                    f"{self.name}: gzip data expands more than {self.limits.gzip_ratio:.0f}x its size "
                    f"(over {shown_size(self.allowed)}; a compression bomb?); pass --max-bytes to allow more"
                )
            raise TraceError(
                f"{self.name}: more than {shown_size(self.allowed)} of JSON (the --max-bytes limit); "
                "raise --max-bytes to read it"
            )
        return data

    def __iter__(self) -> Iterator[bytes]:
        if not self.gzip:
            data = self._head
            while data:
                yield self._count(data)
                data = self.fh.read(READ_CHUNK)
            return
        yield from self._inflate()

    def _inflate(self) -> Iterator[bytes]:
        d = zlib.decompressobj(wbits=31)
        data = self._head
        try:
            while True:
                if not data:
                    data = self.fh.read(READ_CHUNK)
                    if not data:
                        break
                out = d.decompress(data, INFLATE_CHUNK)
                data = d.unconsumed_tail
                if out:
                    yield self._count(out)
                if d.eof:
                    # what follows the member (zlib may also leave it in unconsumed_tail: do not count it twice)
                    rest = d.unused_data or self.fh.read(READ_CHUNK)
                    if len(rest) == 1:
                        rest += self.fh.read(READ_CHUNK)
                    if rest[:2] == b"\x1f\x8b":  # another gzip member
                        d, data = zlib.decompressobj(wbits=31), rest
                        continue
                    while rest:  # zero padding after the last member is allowed (tape/block devices write it)
                        if rest.strip(b"\0"):
                            raise TraceError(f"{self.name}: corrupt gzip data (bytes after the end of the stream)")
                        rest = self.fh.read(READ_CHUNK)
                    return
        except zlib.error as exc:
            raise TraceError(f"{self.name}: corrupt or truncated gzip data") from exc
        if not d.eof:
            raise TraceError(f"{self.name}: corrupt or truncated gzip data (the file ends early)")

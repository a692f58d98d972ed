"""Read a trace file's columns from disk without reading the columns nobody uses.

A memory-mapped file is read by page faults, and on each fault the kernel reads ahead around it (8
MiB here, the device's read_ahead_kb): touching a few columns of every record batch reads the whole
file. Of the rank files of a many-rank run most bytes are columns the analysis never reads (the
values of all-null columns, buffers of empty child arrays, the columns of other commands), so reading
them all costs more disk time than the analysis costs CPU time once the files outgrow the page cache.

``map_file`` maps a file with that read-around switched off (MADV_RANDOM); ``read_ahead`` walks the
stream's message headers with small positioned reads and asks the kernel (POSIX_FADV_WILLNEED) for
exactly the buffers decoding will touch and the values of the columns named, in large reads queued
at once. It is a hint and nothing else: what it leaves out is read when touched, a malformed stream
stops it, and it releases the GIL while it waits, so a thread can read the next file ahead while
this one is computed.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
import struct
from collections.abc import Collection
from pathlib import Path

import numpy as np
import pyarrow as pa

from gpuanalyze.ingest.trace.ipc_guard import MAX_METADATA, RECORD_BATCH, Corrupt, Flat, buffers_of, node_types

_CONTINUATION = 0xFFFFFFFF
#: Buffers closer than this are read as one request.
_GAP = 16 << 10


def map_file(path: Path) -> mmap.mmap:
    """The file memory-mapped read-only, without the kernel's read-around on faults (MADV_RANDOM)."""
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    if hasattr(mm, "madvise"):
        mm.madvise(mmap.MADV_RANDOM)
    return mm


def drop_pages(mm: mmap.mmap) -> None:
    """Drop the pages of ``mm`` this process has read from its memory (MADV_DONTNEED): a read-only file mapping
    reads them again from the page cache if they are touched again, and a record batch copied out of the file
    needs none of them (resident, they counted in the peak: ~50 MiB of a 1M-step file)."""
    if hasattr(mmap, "MADV_DONTNEED"):
        mm.madvise(mmap.MADV_DONTNEED)


def read_ahead(path: str | Path, values_of: Collection[str]) -> None:
    """Ask the kernel to read, in the background, what decoding and validating every record batch of
    the trace at ``path`` touches, and the values of the columns ``values_of``: every buffer but the
    values of other fixed-width columns and of all-null ones, and those of empty child arrays. Never
    raises (a hint)."""
    if not hasattr(os, "posix_fadvise"):
        return
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the open
    except OSError:
        return
    try:
        with contextlib.suppress(Corrupt, OSError, ValueError, IndexError, struct.error, pa.ArrowException):
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # this descriptor's own small reads: no read-ahead
            _walk(fd, values_of)
    finally:
        os.close(fd)


def _message(fd: int, pos: int) -> tuple[bytes, bytes, int] | None:
    """(framing, metadata, where the body starts) of the message at ``pos``; None at the end."""
    head = os.pread(fd, 8, pos)
    if len(head) < 8:
        return None
    (word,) = struct.unpack_from("<I", head)
    n = 8 if word == _CONTINUATION else 4
    (length,) = struct.unpack_from("<i", head, n - 4)
    if length <= 0 or length > MAX_METADATA:
        return None
    meta = os.pread(fd, length, pos + n)
    if len(meta) < length:
        return None
    return head[:n], meta, pos + n + length


def _walk(fd: int, values_of: Collection[str]) -> None:
    first = _message(fd, 0)
    if first is None:
        return
    framing, meta, pos = first
    if framing[:4] != b"\xff\xff\xff\xff":
        framing = b"\xff\xff\xff\xff" + framing
    schema = pa.ipc.read_schema(pa.ipc.read_message(pa.py_buffer(framing + meta)))
    plan = _BufferPlan(schema, values_of)
    while (found := _message(fd, pos)) is not None:
        _, meta, body_at = found
        flat = Flat(meta)
        root = flat.root()
        if flat.scalar(root, 1, "<B") != RECORD_BATCH or flat.ref(root, 2) is None:
            return
        _will_need(fd, plan.spans(flat, body_at))
        pos = body_at + flat.scalar(root, 3, "<q")


class _BufferPlan:
    """Which buffers of a record batch of ``schema`` decoding touches, or the caller reads."""

    def __init__(self, schema: pa.Schema, values_of: Collection[str]) -> None:
        node, fixed_values, wanted = [], [], []
        n_nodes = 0
        for f in schema:
            for t in node_types(f.type):
                for k in range(buffers_of(t)):
                    node.append(n_nodes)
                    fixed_values.append(k == 1 and pa.types.is_primitive(t))
                    wanted.append(f.name in values_of)
                n_nodes += 1
        self.nodes = n_nodes
        self.node = np.array(node, dtype=np.int64)
        self.fixed_values = np.array(fixed_values, dtype=bool)
        self.optional = self.fixed_values & ~np.array(wanted, dtype=bool)
        """Values of fixed-width columns nobody reads (validating a batch does not touch them)."""

    def spans(self, flat: Flat, body_at: int) -> np.ndarray:
        """(file offset, length) of every buffer of one record batch to read."""
        batch = flat.ref(flat.root(), 2)
        assert batch is not None
        at, n = flat.vector(batch, 1, 16)
        nodes = np.frombuffer(flat.buf, dtype="<i8", count=2 * n, offset=at).reshape(n, 2)
        at, m = flat.vector(batch, 2, 16)
        bufs = np.frombuffer(flat.buf, dtype="<i8", count=2 * m, offset=at).reshape(m, 2)
        if n != self.nodes or m != self.node.size or flat.ref(batch, 3) is not None:  # compressed: read when decoded
            raise Corrupt
        length, nulls = nodes[self.node, 0], nodes[self.node, 1]
        skip = (length == 0) | (bufs[:, 1] <= 0) | (bufs[:, 0] < 0) | self.optional
        skip |= self.fixed_values & (nulls == length)
        keep = bufs[~skip]
        return np.column_stack([keep[:, 0] + body_at, keep[:, 1]])


def _will_need(fd: int, spans: np.ndarray) -> None:
    """POSIX_FADV_WILLNEED over the spans (offset, length), near ones merged into one request."""
    if spans.size == 0:
        return
    start, end = spans[:, 0], spans[:, 0] + spans[:, 1]
    order = np.argsort(start, kind="stable")
    start, end = start[order], np.maximum.accumulate(end[order])
    cut = np.flatnonzero(start[1:] > end[:-1] + _GAP) + 1
    firsts, lasts = np.concatenate([[0], cut]), np.concatenate([cut - 1, [end.size - 1]])
    for a, b in zip(start[firsts].tolist(), end[lasts].tolist(), strict=True):
        os.posix_fadvise(fd, a, b - a, os.POSIX_FADV_WILLNEED)

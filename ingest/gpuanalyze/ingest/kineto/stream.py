"""Read a Chrome/Kineto trace JSON incrementally, in bounded memory.

The file is decompressed in chunks; the ``traceEvents`` array is cut into batches of whole events
and each batch is decoded by msgspec (typed structs, unknown fields skipped); the rest of the
document is scanned and skipped, except the small metadata values the importer reads
(``distributedInfo``, ``deviceProperties``), which are kept as raw JSON. Peak memory is one
decompressed chunk plus one decoded batch, whatever the size of the file.

How a batch is cut: a candidate cut is a ``}`` followed by ``,`` or ``]``; the batch from the start
of an event to the candidate is decoded as a JSON array. JSON lexing is deterministic, so that
array is valid only if the candidate is a real event boundary (a ``}`` inside a string or a
nested value leaves the array unterminated): a decode that fails at its very end means "not a
boundary" and the batch is cut by an exact structural scan instead. Inputs that are not
objects-in-an-array take that exact (slower) path throughout.

Limits (``ReadLimits``): decompressed bytes (a gzip ratio guard, or ``max_bytes``), the size of one
event, the bytes outside ``traceEvents``, and the nesting depth (msgspec's recursion limit).
Every violation is a TraceError with one line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from analyzer.errors import TraceError
from gpuanalyze.ingest.trace.byte_source import MiB, ReadLimits, shown_size

#: Target size of one decoded batch of events.
BATCH_BYTES = 4 * MiB
#: Metadata values kept for the importer (larger ones are ignored with a note).
MAX_META_VALUE = 1 * MiB

_WS = b" \t\r\n"
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
#: Tokens that matter for structure: complete strings, brackets, and a bare quote (a string cut by the buffer end).
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]|"', re.DOTALL)
_SCALAR = re.compile(rb"[^\s,\]}:\[{\"]+")
_CANDIDATE = re.compile(rb"\}[ \t\r\n]*[,\]]")
_BYTE_AT = re.compile(r"\(byte (\d+)\)")
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])


class _NeedMore(Exception):  # noqa: N818 - internal control flow
    """The buffer ends before the value being read does."""


DecodeBatch = Callable[[memoryview], list[Any]]


class EventStream:
    """The events of a trace JSON in decoded batches, and the raw JSON of the metadata it keeps.

    ``decode`` turns a JSON array (a memoryview) into a list of events; it may raise
    msgspec.ValidationError (the caller's types do not fit: not a profiler trace).
    """

    def __init__(
        self,
        chunks: Iterator[bytes],
        name: str,
        limits: ReadLimits,
        decode: DecodeBatch,
        keep: tuple[str, ...] = ("distributedInfo", "deviceProperties"),
    ) -> None:
        self._chunks = chunks
        self.name, self.limits, self._decode, self._keep = name, limits, decode, keep
        self.buf = bytearray()
        self.pos = 0
        self.eof = False
        self.meta: dict[str, bytes] = {}
        """Raw JSON of the kept top-level keys."""
        self.notes: list[str] = []
        self.events_found = False
        """True once a ``traceEvents`` array (or a top-level array) was seen."""
        self._outside = 0
        self._hold = False
        """While set, the buffer is not compacted (a scan holds indices into it)."""
        self._skipped, self._why = 0, ""

    # ---- buffer -------------------------------------------------------------------------------

    def _fill(self) -> bool:
        """Append the next chunk; False at the end of the input."""
        if self.eof:
            return False
        if not self._hold and self.pos > 1 and self.pos > len(self.buf) // 2:
            # keep one byte before pos: batches overwrite it with '['
            del self.buf[: self.pos - 1]
            self.pos = 1
        try:
            chunk = next(self._chunks)
        except StopIteration:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def _peek(self) -> int | None:
        """The next non-whitespace byte (pos moves past the whitespace); None at the end of input."""
        while True:
            buf, n = self.buf, len(self.buf)
            p = self.pos
            while p < n and buf[p] in _WS:
                p += 1
            self.pos = p
            if p < n:
                return buf[p]
            if not self._fill():
                return None

    def _invalid(self, why: str) -> TraceError:
        return TraceError(f"{self.name}: not valid JSON (truncated or corrupt: {why})")

    def _not_a_trace(self, why: str) -> TraceError:
        return TraceError(f"{self.name}: JSON, but not a PyTorch profiler trace ({why})")

    # ---- values outside traceEvents --------------------------------------------------------

    def _value_end(self, start: int) -> int:
        """Index just past the JSON value starting at ``start`` (raises _NeedMore when it is not all here)."""
        buf = self.buf
        c = buf[start]
        if c == ord('"'):
            m = _STRING.match(buf, start)
            if m is None:
                raise _NeedMore
            return m.end()
        if c not in b"[{":
            m = _SCALAR.match(buf, start)
            if m is None:
                raise self._invalid(f"unexpected {chr(c)!r}")
            if m.end() == len(buf) and not self.eof:
                raise _NeedMore
            return m.end()
        depth = 0
        for m in _TOKEN.finditer(buf, start):
            tok = m.group()
            if tok == b'"':
                raise _NeedMore
            if tok in (b"[", b"{"):
                depth += 1
            elif tok in (b"]", b"}"):
                depth -= 1
                if depth == 0:
                    return m.end()
        raise _NeedMore

    def _read_value(self, cap: int) -> tuple[int, int]:
        """(start, end) of the next value, reading more input as needed; at most ``cap`` bytes."""
        if self._peek() is None:
            raise self._invalid("unexpected end of data")
        while True:
            start = self.pos
            try:
                end = self._value_end(start)
            except _NeedMore:
                if len(self.buf) - start > cap:
                    raise TraceError(
                        f"{self.name}: a JSON value over {shown_size(cap)} where a profiler trace has small "
                        "metadata or single events; not a trace this importer reads"
                    ) from None
                if not self._fill():
                    raise self._invalid("unexpected end of data") from None
                continue
            self.pos = end
            return start, end

    def _outside_value(self, key: str | None) -> None:
        start, end = self._read_value(self.limits.max_outside_bytes)
        self._outside += end - start
        if self._outside > self.limits.max_outside_bytes:
            raise TraceError(
                f"{self.name}: over {shown_size(self.limits.max_outside_bytes)} of data outside traceEvents; "
                "not a profiler trace this importer reads"
            )
        if key in self._keep:
            if end - start > MAX_META_VALUE:
                self.notes.append(f"{key} is over {shown_size(MAX_META_VALUE)}: ignored")
            else:
                self.meta[key] = bytes(self.buf[start:end])

    # ---- the document -----------------------------------------------------------------------

    def batches(self) -> Iterator[list[Any]]:
        """Decoded batches of events, in file order."""
        c = self._peek()
        if c is None:
            raise TraceError(f"{self.name}: file is empty")
        if c == ord("["):
            yield from self._array()
            self._end_of_document()
            return
        if c != ord("{"):
            self._scalar_document()
        self.pos += 1
        seen_events = False
        if self._peek() == ord("}"):
            self.pos += 1
            self._end_of_document()
            return
        while True:
            if self._peek() != ord('"'):
                raise self._invalid("expected a key")
            start, end = self._read_value(self.limits.max_outside_bytes)
            try:
                key = msgspec.json.decode(self.buf[start:end], type=str)
            except msgspec.DecodeError as exc:
                raise self._invalid("bad key") from exc
            if (c := self._peek()) != ord(":"):
                raise self._invalid("unexpected end of data" if c is None else f"unexpected {chr(c)!r}")
            self.pos += 1
            if key == "traceEvents":
                if seen_events:
                    raise self._not_a_trace("traceEvents appears twice")
                seen_events = True
                if self._peek() != ord("["):
                    raise self._not_a_trace("traceEvents is not a list")
                yield from self._array()
            else:
                self._outside_value(key)
            c = self._peek()
            if c == ord(","):
                self.pos += 1
                continue
            if c == ord("}"):
                self.pos += 1
                break
            raise self._invalid("expected ',' or '}'" if c is not None else "unexpected end of data")
        self._end_of_document()

    def _scalar_document(self) -> None:
        if self.buf[self.pos] not in b'"-0123456789tfn':
            raise self._invalid(f"starts with {bytes(self.buf[self.pos : self.pos + 1])!r}")
        start, end = self._read_value(self.limits.max_outside_bytes)
        try:
            msgspec.json.decode(self.buf[start:end])
        except (msgspec.DecodeError, RecursionError) as exc:
            raise self._invalid("not an object or an array") from exc
        self._end_of_document()
        raise self._not_a_trace("the document is not an object or a list of events")

    def _end_of_document(self) -> None:
        if self._peek() is not None:
            raise self._invalid("data after the end of the document")

    # ---- the events array -------------------------------------------------------------------

    def _array(self) -> Iterator[list[Any]]:
        """Batches of the events array at pos (its '['); returns with pos past its ']'."""
        self.pos += 1
        self.events_found = True
        while True:
            c = self._peek()
            if c is None:
                raise self._invalid("unexpected end of data")
            if c == ord("]"):
                self.pos += 1
                break
            while len(self.buf) - self.pos < BATCH_BYTES and self._fill():
                pass
            batch, closed = self._next_batch()
            if batch:
                yield batch
            del batch  # one decoded batch alive at a time, not two while the next one decodes
            if closed:
                break
        if self._skipped:
            self.notes.append(f"skipped {self._skipped:,} event(s) with a field of the wrong type ({self._why})")

    def _each(self, span: memoryview) -> list[Any]:
        """The events of a JSON array; where one does not fit the decoder's types, the events one by one, those
        that do not fit skipped and counted (a batch of nothing else is not a trace: ValidationError)."""
        try:
            return self._decode(span)
        except msgspec.ValidationError as exc:
            first = exc
        events = []
        for raw in _RAWS.decode(bytes(span)):  # a copy: Raw values would hold the buffer
            try:
                events += self._decode(memoryview(b"[" + bytes(raw) + b"]"))
            except msgspec.ValidationError as exc:
                self._skipped += 1
                self._why = self._why or str(exc).replace("$[0]", "event")[:120]
        if not events:
            raise first
        return events

    def _next_batch(self) -> tuple[list[Any], bool]:
        """Decode events from pos up to a boundary; (events, True if the array ended)."""
        start = self.pos
        end = len(self.buf)
        m = _last_candidate(self.buf, start, end)
        if m is not None:
            cut = m.start()
            try:
                events, closed_at = self._decode_span(start, cut + 1)
            except _NotABoundary:
                pass
            else:
                if closed_at is not None:  # the array ended before the candidate (metadata follows it)
                    self.pos = closed_at
                    return events, True
                self.pos = m.end()
                return events, self.buf[m.end() - 1] == ord("]")
        elif len(self.buf) - start < self.limits.max_event_bytes and not self.eof and self._fill():
            return [], False  # no complete object yet: read more (an event may span chunks)
        return self._exact_batch()

    def _exact_batch(self) -> tuple[list[Any], bool]:
        """Cut the batch by scanning value by value (for non-object elements or odd strings)."""
        start = self.pos
        closed = False
        self._hold = True
        try:
            while True:
                _, end = self._read_value(self.limits.max_event_bytes)
                c = self._peek()
                if c == ord("]"):
                    closed = True
                    break
                if c != ord(","):
                    raise self._invalid(
                        "expected ',' or ']' between events" if c is not None else "unexpected end of data"
                    )
                if end - start >= BATCH_BYTES:
                    break
                self.pos += 1
        finally:
            self._hold = False
        sep = self.pos
        events, _ = self._decode_span(start, end, exact=True)
        self.pos = sep + 1
        return events, closed

    def _decode_span(self, start: int, stop: int, *, exact: bool = False) -> tuple[list[Any], int | None]:
        """Decode buf[start:stop] (whole events separated by commas) as one JSON array.

        Returns the events and, when the events array itself ends inside the span (the cut was
        past its ']'), the index just past that ']'."""
        buf = self.buf
        assert start >= 1, "the byte before an event (its '[' or ',') is always kept"
        before, after_pos = buf[start - 1], stop
        appended = after_pos == len(buf)
        after = 0 if appended else buf[after_pos]
        buf[start - 1] = ord("[")
        if appended:
            buf.append(ord("]"))
        else:
            buf[after_pos] = ord("]")
        try:
            with memoryview(buf) as view, view[start - 1 : stop + 1] as span:
                return self._decode_closed(span, start, exact)
        except msgspec.ValidationError as exc:
            raise self._not_a_trace(str(exc)[:160]) from exc
        except RecursionError as exc:
            raise TraceError(f"{self.name}: an event is nested too deeply to be a profiler event") from exc
        except msgspec.DecodeError as exc:
            at = _BYTE_AT.search(str(exc))
            near_end = at is None or int(at.group(1)) >= stop - start
            if near_end and not exact:
                raise _NotABoundary from exc
            raise self._invalid(str(exc)[:80]) from exc
        finally:
            buf[start - 1] = before
            if appended:
                del buf[-1]
            else:
                buf[after_pos] = after

    def _decode_closed(self, span: memoryview, start: int, exact: bool) -> tuple[list[Any], int | None]:
        try:
            return self._each(span), None
        except msgspec.DecodeError as exc:
            at = _BYTE_AT.search(str(exc))
            if at is None or "trailing characters" not in str(exc) or exact:
                raise
            trailing = int(at.group(1))
        # the events array closed before the cut (metadata follows it): decode it up to its own ']'
        close = bytes(span[:trailing]).rfind(b"]") + 1
        if close <= 0:
            raise self._invalid("unbalanced brackets")
        with span[:close] as head:
            return self._each(head), start - 1 + close


class _NotABoundary(Exception):  # noqa: N818 - internal control flow
    pass


def _last_candidate(buf: bytearray, start: int, end: int) -> re.Match[bytes] | None:
    """The last '}' followed by ',' or ']' in buf[start:end], searching back from the end."""
    for window in (1 << 16, 1 << 20, end - start):
        lo = max(start, end - window)
        last = None
        for last in _CANDIDATE.finditer(buf, lo, end):  # noqa: B007 - we want the last match
            pass
        if last is not None or lo == start:
            return last
    return None

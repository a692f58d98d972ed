"""Trace format, writer and readers. Everything that touches the file format lives here."""

from ingest.errors import GpuAnalyzeError, TraceError
from ingest.reader import Trace, load_trace
from ingest.writer import TraceWriter, WriterOptions

__all__ = ["GpuAnalyzeError", "Trace", "TraceError", "TraceWriter", "WriterOptions", "load_trace"]

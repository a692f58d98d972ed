"""The one exception type users see: every user mistake or bad input raises it."""


class GpuAnalyzeError(Exception):
    """A problem the user can fix; the message says what to do. The CLI prints it as one line."""


class TraceError(GpuAnalyzeError):
    """A trace file is missing, unreadable, truncated beyond use, or not a gpuanalyze trace."""

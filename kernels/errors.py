"""Errors of the benchmark layer."""

from ingest.errors import GpuAnalyzeError


class VerificationError(GpuAnalyzeError):
    """A kernel's output did not match its reference, so its timing is not reported."""


class Skip(Exception):
    """A benchmark does not apply to this backend or machine; the message says why."""

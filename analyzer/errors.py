"""Every exception and warning gpuanalyze raises or issues, in one place.

User mistakes and bad input raise ``GpuAnalyzeError`` (or a subclass) whose message says what
to do; the CLI prints it as one line and exits 2. Internal invariants use ``assert``.
"""


class GpuAnalyzeError(Exception):
    """A problem the user can fix; the message says what to do. The CLI prints it as one line."""


class TraceError(GpuAnalyzeError):
    """A trace file is missing, unreadable, truncated beyond use, or not a gpuanalyze trace."""


class MixedRunsError(TraceError):
    """A directory read as one run holds several: the message says how to keep them apart or triage them all."""

    def __init__(self, path: object, detail: str) -> None:
        import shlex

        super().__init__(
            f"{path}: {detail}; the directory mixes runs: keep one run per directory, or rank them all with "
            f"gpuanalyze fleet {shlex.quote(str(path))}"
        )


class VerificationError(GpuAnalyzeError):
    """A benchmark kernel's output did not match its reference, so its timing is not reported."""


class Skip(Exception):  # noqa: N818 - a signal between a benchmark and the suite, not an error
    """A benchmark does not apply to this backend or machine; the message says why."""


class GpuAnalyzeWarning(RuntimeWarning):
    """Issued when profiling had to switch itself off; the training loop is unaffected."""

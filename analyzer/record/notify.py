"""Telling the user something while their training runs, without ever raising into it.

``python -W error`` and pytest's ``filterwarnings = error`` turn warnings into exceptions. A
profiler warning raised from a hook would then stop the training loop it is meant to observe,
so when the warning filter turns ours into an exception, the message goes to stderr instead.
"""

from __future__ import annotations

import sys
import warnings

from analyzer.errors import GpuAnalyzeWarning


def warn(message: str, *, stacklevel: int = 2) -> None:
    """Issue a GpuAnalyzeWarning; if the filters make it an error, print it to stderr instead."""
    try:
        warnings.warn(message, GpuAnalyzeWarning, stacklevel=stacklevel + 1)
    except Warning:
        try:
            sys.stderr.write(f"{message}\n")
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):  # no usable stderr: nothing more to do
            pass

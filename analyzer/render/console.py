"""The Rich console every report is printed on, and the one width rule every command follows."""

from __future__ import annotations

import os
import shutil
import sys

from rich.console import Console

#: Narrowest width a report is laid out for (`--width` below it is refused by the option).
MIN_WIDTH = 40
#: Widest (`--width` above it is refused; a $COLUMNS beyond it is clamped to it).
MAX_WIDTH = 1000
#: Columns when neither --width, $COLUMNS nor a terminal says (a log, a pipe).
DEFAULT_WIDTH = 80


def layout_width(width: int | None = None, *, stderr: bool = False) -> int:
    """The columns output is laid out for: ``width`` (``--width``), else ``$COLUMNS`` when it is a
    number, else the terminal's, else 80; clamped to [MIN_WIDTH, MAX_WIDTH] (``COLUMNS=5`` or a
    huge value never makes a report unreadable)."""
    if width is None:
        columns = os.environ.get("COLUMNS", "").strip()
        if columns.isdigit():
            width = int(columns)
        else:
            stream = sys.stderr if stderr else sys.stdout
            try:
                tty = stream.isatty()
            except (AttributeError, ValueError):
                tty = False
            width = shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns if tty else DEFAULT_WIDTH
    return max(MIN_WIDTH, min(MAX_WIDTH, width))


def report_console(width: int | None = None, *, stderr: bool = False) -> Console:
    """A console of ``layout_width(width)`` columns.

    Markup, emoji codes and highlighting are off: renderers pass Rich objects, and no string from
    a trace is ever interpreted."""
    return Console(width=layout_width(width, stderr=stderr), stderr=stderr, highlight=False, markup=False, emoji=False)

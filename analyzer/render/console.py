"""The Rich console every report is printed on."""

from __future__ import annotations

from rich.console import Console

#: Narrowest width a report is laid out for (`--width` below it is refused by the option).
MIN_WIDTH = 40


def report_console(width: int | None = None) -> Console:
    """A console of ``width`` columns (default: the terminal's, or $COLUMNS, or 80 when not a terminal).

    Markup, emoji codes and highlighting are off: renderers pass Rich objects, and no string from
    a trace is ever interpreted."""
    return Console(width=width, highlight=False, markup=False, emoji=False)

"""Terminal layout that reads at 80 columns: hanging indents, and tables that never cut a value.

``labelled`` and ``bullets`` are two-column grids, so a wrapped line hangs under its text, not
under its label or bullet.

Rich shrinks a table that is too wide by cutting cells with an ellipsis, which turns
``$2,410.00`` into ``$2,410…``. A ``FitTable`` is laid out when it is printed, for the width it
gets: names wrap (folding a long word rather than cutting it), numbers stay whole, and when the
columns still do not fit, optional columns are left out (named under the table) or, for
tables of peers (one column per run), split into several tables that repeat the key column.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

#: Cells of a column that wraps are at least this wide (or their longest value, if shorter).
_FOLD_MIN = 12


@dataclass(kw_only=True, slots=True)
class Column:
    header: str | Text
    """A fixed label, or (for a name from a file) Text made by ``analyzer.render.safe.text``."""
    cells: list[Text] = field(default_factory=list)
    justify: Literal["left", "right"] = "right"
    wrap: bool = False
    """Cells (and the header) may wrap at spaces: "12.5 (+3.1)" may become two lines, never "12." and "5"."""
    fold: bool = False
    """A word longer than the column may be folded over lines (names); never for numbers."""
    drop: int | None = None
    """Order in which the column is left out when the table does not fit (lowest first); None: always shown."""

    @property
    def label(self) -> str:
        return self.header.plain if isinstance(self.header, Text) else self.header

    def min_width(self) -> int:
        widest = max((cell_len(line) for c in self.cells for line in c.plain.splitlines()), default=0)
        if not self.wrap:
            return max(cell_len(self.label), widest)
        header = min(_FOLD_MIN, max((cell_len(w) for w in self.label.split()), default=0))
        if self.fold:
            return max(header, min(_FOLD_MIN, widest))
        return max(header, max((cell_len(w) for c in self.cells for w in c.plain.split()), default=0))


def _needed(columns: Sequence[Column]) -> int:
    return 1 + sum(c.min_width() + 3 for c in columns)  # a border, then per column two spaces and a border


def _table(title: str | None, columns: Sequence[Column], fold_all: bool) -> Table:
    table = Table(title=title, title_justify="left")
    for c in columns:
        table.add_column(
            c.header,
            justify=c.justify,
            no_wrap=not (c.wrap or fold_all),
            overflow="fold",
            min_width=None if fold_all else c.min_width(),
        )
    for i in range(len(columns[0].cells) if columns else 0):
        table.add_row(*[c.cells[i] for c in columns])
    return table


class FitTable:
    """A table laid out for the width it is printed at (see the module docstring)."""

    def __init__(self, title: str | None, columns: Sequence[Column], *, split: bool = False) -> None:
        self.title = title
        self.columns = [c for c in columns if any(cell.plain for cell in c.cells) or c.drop is None]
        self.split = split
        """Split into several tables instead of leaving columns out (the kept columns repeat)."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        if self.split:
            yield from self._split(width)
            return
        cols = list(self.columns)
        dropped: list[str] = []
        while _needed(cols) > width and any(c.drop is not None for c in cols):
            victim = min((c for c in cols if c.drop is not None), key=lambda c: c.drop or 0)
            cols.remove(victim)
            dropped.append(victim.label)
        yield _table(self.title, cols, fold_all=_needed(cols) > width)
        if dropped:
            yield Text(
                f"left out at {width} columns: {', '.join(dropped)} (use a wider --width, or --json for every value)",
                style="dim",
            )

    def _split(self, width: int) -> RenderResult:
        keys = [c for c in self.columns if c.drop is None]
        rest = [c for c in self.columns if c.drop is not None]
        if not rest:
            yield _table(self.title, keys, fold_all=_needed(keys) > width)
            return
        chunk: list[Column] = []
        first = True
        for c in rest:
            if chunk and _needed([*keys, *chunk, c]) > width:
                yield _table(self.title if first else None, [*keys, *chunk], fold_all=False)
                first, chunk = False, []
            chunk.append(c)
        yield _table(self.title if first else None, [*keys, *chunk], fold_all=_needed([*keys, *chunk]) > width)


def labelled(rows: Iterable[tuple[str, RenderableType]], label_width: int = 10) -> Table:
    """Label | text rows; wrapped text hangs under the text, never under the label."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, min_width=label_width, style="bold")
    grid.add_column(ratio=1, overflow="fold")
    for label, value in rows:
        grid.add_row(label, value)
    return grid


def bullets(items: Iterable[RenderableType], mark: str = "-") -> Table:
    """A list whose wrapped lines hang under the item's text."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1, overflow="fold")
    for item in items:
        grid.add_row(mark, item)
    return grid

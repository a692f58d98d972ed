"""A triaged fleet in the terminal: the ranked table, then the skipped runs and the notes.

The table fits the width it is given (80 columns in a pipe or a CI log): numbers are never cut, a column
with no value in any row is left out, and the run's name (its path: the full one is in --json/--csv) is
shortened in the middle to the room that is left, one line per run and one for its ranks, GPU and state.
"""

from __future__ import annotations

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from analyzer.fleet.run_row import RunRow
from analyzer.fleet.triage import RANKINGS, Fleet
from analyzer.render.safe import shorten, text

#: Skipped runs listed one by one before the rest are counted.
MAX_SKIPPED_SHOWN = 20
#: The run column never gets narrower than this (past it the table is wider than asked).
MIN_NAME = 12
#: How each ranking's column is headed, and its numbers' format.
_SAVING = {
    "saved_usd_per_run": ("saved\n$/run", ",.2f", lambda r: r.saved_usd_per_run),
    "saved_gpu_hours_per_run": ("saved\nGPU-h/run", ",.1f", lambda r: r.saved_gpu_hours_per_run),
    "saved_gpu_ms_per_step": ("saved\nGPU-ms/step", ",.1f", lambda r: r.saved_gpu_ms_per_step),
}
#: Run states worth a word beside the run (the others: it ended normally, or was imported).
_STATE = {"live": "still being written", "incomplete": "cut off", "disk_full": "cut off: disk full"}


def _num(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


class _FleetTable:
    """The ranked rows laid out for the width the console gives at render time."""

    def __init__(self, rows: tuple[RunRow, ...], ranked_by: str) -> None:
        header, fmt, saved = _SAVING[ranked_by]
        columns = [
            (header, [_num(saved(r), fmt) for r in rows]),
            ("idle\nGPU-h", [_num(r.idle_gpu_hours_per_run, ",.1f") for r in rows]),
            ("verdict", [r.bottleneck for r in rows]),
            ("conf.", [f"{r.confidence:.2f}" for r in rows]),
            ("step\nms", [f"{r.step_time_mean_ms:,.1f}" for r in rows]),
            ("fixed\nms", [_num(r.projected_step_time_ms, ",.1f") for r in rows]),
        ]
        self.rows = rows
        self.columns = [(h, cells) for h, cells in columns if any(c != "—" for c in cells)]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths = [max(*(len(line) for line in h.split("\n")), *map(len, cells)) for h, cells in self.columns]
        room = max(MIN_NAME, options.max_width - sum(widths) - 2 * len(widths))
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)
        table.add_column("run", width=room, no_wrap=True)
        for (header, _), width in zip(self.columns, widths, strict=True):
            table.add_column(header, justify="left" if header == "verdict" else "right", width=width, no_wrap=True)
        for i, row in enumerate(self.rows):
            what = f"{row.ranks} x {row.gpu}" if row.gpu else f"{row.ranks} rank(s)"
            what += f", {_STATE[row.state]}" if row.state in _STATE else ""
            name = Text(shorten(row.run, room))
            name.append("\n" + shorten(what, room), style="yellow" if row.state == "live" else "dim")
            table.add_row(name, *(cells[i] for _, cells in self.columns))
        yield table


def render_fleet(fleet: Fleet, *, top: int) -> RenderableType:
    """The ``top`` rows of the ranking (every row with ``top`` 0) and what was skipped."""
    title = text(f"{len(fleet.rows):,} run(s) beneath {fleet.root}, ranked by {RANKINGS[fleet.ranked_by]}")
    shown = fleet.rows if top <= 0 else fleet.rows[:top]
    parts: list[RenderableType] = [title, _FleetTable(shown, fleet.ranked_by)] if shown else [title]
    if len(shown) < len(fleet.rows):
        parts.append(text(f"... {len(fleet.rows) - len(shown):,} more run(s): --top 0 for all, or --csv/--parquet"))
    for s in fleet.skipped[:MAX_SKIPPED_SHOWN]:
        parts.append(text(f"skipped {shorten(s.run, 60)}: {shorten(s.reason, 160)}"))
    if len(fleet.skipped) > MAX_SKIPPED_SHOWN:
        parts.append(text(f"... and {len(fleet.skipped) - MAX_SKIPPED_SHOWN:,} more skipped (--json lists them all)"))
    parts += [text(f"note: {n}") for n in fleet.notes]
    return Group(*parts)

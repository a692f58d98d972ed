"""A triaged fleet in the terminal: the ranked table, then the skipped runs and the notes."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table

from analyzer.fleet.run_row import RunRow
from analyzer.fleet.triage import RANKINGS, Fleet
from analyzer.render.safe import shorten, text

#: Skipped runs listed one by one before the rest are counted.
MAX_SKIPPED_SHOWN = 20


def _num(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def _saving(row: RunRow, by: str) -> str:
    if by == "saved_usd_per_run":
        return _num(row.saved_usd_per_run, ",.2f")
    if by == "saved_gpu_hours_per_run":
        return _num(row.saved_gpu_hours_per_run, ",.1f")
    return _num(row.saved_gpu_ms_per_step, ",.1f")


_SAVING_HEADER = {
    "saved_usd_per_run": "saved $/run",
    "saved_gpu_hours_per_run": "saved GPU-h/run",
    "saved_gpu_ms_per_step": "saved GPU-ms/step",
}


def render_fleet(fleet: Fleet, *, top: int) -> RenderableType:
    """The ``top`` rows of the ranking (every row with ``top`` 0) and what was skipped."""
    title = text(f"{len(fleet.rows):,} run(s) beneath {fleet.root}, ranked by {RANKINGS[fleet.ranked_by]}")
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
    )
    table.add_column("run", overflow="fold", min_width=12)
    table.add_column(_SAVING_HEADER[fleet.ranked_by], justify="right", no_wrap=True)
    table.add_column("idle GPU-h", justify="right", no_wrap=True)
    table.add_column("verdict conf.", no_wrap=True)
    table.add_column("step ms", justify="right", no_wrap=True)
    table.add_column("→ ms", justify="right", no_wrap=True)
    shown = fleet.rows if top <= 0 else fleet.rows[:top]
    for row in shown:
        run = text(row.run)
        run.append("\n")
        run.append(text(f"{row.ranks} x {row.gpu}" if row.gpu else f"{row.ranks} rank(s)", style="dim"))
        table.add_row(
            run,
            _saving(row, fleet.ranked_by),
            _num(row.idle_gpu_hours_per_run, ",.1f"),
            text(f"{row.bottleneck} {row.confidence:.2f}"),
            f"{row.step_time_mean_ms:,.1f}",
            _num(row.projected_step_ms, ",.1f"),
        )
    parts: list[RenderableType] = [title, table]
    if len(shown) < len(fleet.rows):
        parts.append(text(f"... {len(fleet.rows) - len(shown):,} more run(s): --top 0 for all, or --csv/--parquet"))
    for s in fleet.skipped[:MAX_SKIPPED_SHOWN]:
        parts.append(text(f"skipped {shorten(s.run, 60)}: {shorten(s.reason, 160)}"))
    if len(fleet.skipped) > MAX_SKIPPED_SHOWN:
        parts.append(text(f"... and {len(fleet.skipped) - MAX_SKIPPED_SHOWN:,} more skipped (--json lists them all)"))
    parts += [text(f"note: {n}") for n in fleet.notes]
    return Group(*parts)

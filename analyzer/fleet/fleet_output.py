"""A triaged fleet as data: the JSON object, and the table as CSV or Parquet (for a dashboard)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, get_args, get_type_hints

from analyzer.fleet.run_row import RunRow
from analyzer.fleet.triage import RANKINGS, Fleet
from analyzer.render.output import built
from analyzer.render.output import commands as C

if TYPE_CHECKING:
    import polars as pl

COLUMNS = RunRow.__struct_fields__
#: A cell starting with one of these is a formula to a spreadsheet (OWASP "CSV injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: str) -> str:
    """A text cell safe to open in a spreadsheet: a formula start gets a leading ``'`` (OWASP), and
    control and invisible characters (ESC, BEL, RLO, TAG...) are shown as escapes (``render.safe``)."""
    from analyzer.render.safe import clean

    return ("'" if value.startswith(FORMULA_START) else "") + clean(value)


def fleet_struct(fleet: Fleet) -> C.Fleet:
    """The fleet's JSON: its runs ranked, those skipped and why (render.output.commands.Fleet)."""
    return built(
        C.Fleet,
        fleet,
        ranking=RANKINGS[fleet.ranked_by],
        runs=[built(C.FleetRun, r, rank=i) for i, r in enumerate(fleet.rows, 1)],
        skipped=[built(C.Skipped, s) for s in fleet.skipped],
    )


def fleet_frame(fleet: Fleet) -> pl.DataFrame:
    """One row per analysed run, ranked (column ``rank`` first), with fixed column types."""
    import polars as pl

    _POLARS = {bool: pl.Boolean, int: pl.Int64, float: pl.Float64}
    schema: dict[str, Any] = {"rank": pl.Int64}
    for name, kind in get_type_hints(RunRow).items():
        kinds = get_args(kind) or (kind,)
        schema[name] = (
            pl.Boolean if bool in kinds else pl.Int64 if int in kinds else pl.Float64 if float in kinds else pl.String
        )
    data = {"rank": list(range(1, len(fleet.rows) + 1))}
    data |= {c: [getattr(r, c) for r in fleet.rows] for c in COLUMNS}
    return pl.DataFrame(data, schema=schema)


def write_table(fleet: Fleet, path: Path, kind: str, *, force: bool) -> None:
    """Write the table as ``kind`` ('csv' or 'parquet') through the safe writer (never over a file without force)."""
    import polars as pl

    from analyzer.files import write_file

    frame = fleet_frame(fleet)

    def write(fh: BinaryIO) -> None:
        if kind == "csv":
            text = [c for c, t in frame.schema.items() if t == pl.String]
            frame.with_columns(pl.col(c).map_elements(csv_cell, return_dtype=pl.String) for c in text).write_csv(fh)
        else:
            frame.write_parquet(fh)

    write_file(path, write, force=force)

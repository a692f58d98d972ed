"""Format a benchmark report: one small table per benchmark, readable at 80 columns.

Values are never cut: the unit goes into the column header, columns with nothing to show are
left out, text columns wrap, and at a narrow width the min..max and % peak columns are dropped
(in that order) before a value would have to be shortened. The JSON (`--json`) has everything.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from analyzer.machine.datasheet import GpuSpec, lookup
from analyzer.render.safe import clean
from gpuanalyze.kernels.result import BenchReport, BenchResult


def datasheet_peak(r: BenchResult, spec: GpuSpec | None) -> float | None:
    """The datasheet number this result should be compared with, in the result's unit."""
    if spec is None or r.backend == "cpu":
        return None
    if r.benchmark == "matmul" and r.dtype:
        return spec.peak_tflops(r.dtype)
    return None


_TITLE = {
    "matmul": "matmul",
    "allreduce": "all-reduce",
}
_UNIT = {"GB/s busbw": "busbw GB/s"}
_DTYPE = {"float32": "fp32", "float64": "fp64", "float16": "fp16", "bfloat16": "bf16", "float8": "fp8"}
_OPTIONAL = ("min..max", "% peak")
"""Columns dropped, in this order, when the table would not fit otherwise."""
_GAP = 3
"""Characters between two columns (padding, divider, padding)."""


def num(v: float) -> str:
    """Four significant digits, never an exponent above 1 (1,234,567 / 771.2 / 3.765 / 0.0299)."""
    if v >= 1000:
        return f"{v:,.0f}"
    if v == 0:
        return "0"
    return f"{v:.4g}" if v >= 1 else f"{v:.3g}"


def short(v: float) -> str:
    """Three significant digits with k/M/G for large values (12.1k), for the compact min..max."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= scale:
            return f"{v / scale:.3g}{suffix}"
    return f"{v:.3g}"


@dataclass(frozen=True, slots=True)
class _Column:
    name: str
    cell: Callable[[BenchResult], str]
    numeric: bool = False
    key: str = ""
    """Its name in the one-line-per-result layout ('' for the variant and the value, which lead the line)."""


def _size(n: int | None) -> str:
    if not n:
        return ""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


class _BenchTable:
    """One benchmark's rows as a table that fits the width it is given (see the module docstring)."""

    def __init__(self, benchmark: str, rows: list[BenchResult], spec: GpuSpec | None) -> None:
        self.title = _TITLE.get(benchmark, benchmark)
        unit = rows[0].unit
        peaks = {id(r): datasheet_peak(r, spec) for r in rows}
        self.unit = _UNIT.get(unit, unit)
        candidates = [
            _Column("variant", lambda r: r.variant),
            _Column("dtype", lambda r: _DTYPE.get(r.dtype or "", r.dtype or ""), key="dtype"),
            _Column("size", lambda r: _size(r.size_bytes), numeric=True, key="size"),
            _Column("ranks", lambda r: str(r.world_size or ""), numeric=True, key="ranks"),
            _Column(self.unit, lambda r: num(r.value), numeric=True),
            _Column(
                "min..max",
                lambda r: f"{short(r.min)}..{short(r.max)}" if r.min != r.max else "",
                numeric=True,
                key="range",
            ),
            _Column(
                "% peak", lambda r: f"{100 * r.value / p:.0f}%" if (p := peaks[id(r)]) else "", numeric=True, key="peak"
            ),
        ]
        self.rows = rows
        self.columns = [c for c in candidates if any(c.cell(r) for r in rows)]

    def _min_width(self, c: _Column) -> int:
        """Numeric columns never narrower than their widest value; text ones not below their longest word."""
        cells = [c.cell(r) for r in self.rows]
        if c.numeric:
            return max(len(c.name), *map(len, cells))
        return max(len(c.name), *(len(w) for x in cells for w in x.split()))

    def _fits(self, columns: list[_Column], width: int) -> bool:
        return sum(self._min_width(c) for c in columns) + _GAP * (len(columns) - 1) <= width

    def _table(self, columns: list[_Column]) -> Table:
        table = Table(
            title=self.title,
            title_justify="left",
            title_style="bold",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            show_edge=False,
            expand=False,
        )
        for c in columns:
            table.add_column(
                c.name,
                justify="right" if c.numeric else "left",
                no_wrap=c.numeric,
                min_width=self._min_width(c),
                overflow="fold",
            )
        for r in self.rows:
            table.add_row(*(Text(c.cell(r)) for c in columns))
        return table

    def _lines(self) -> Group:
        """Too narrow for any table: one wrapped line per result, every value whole."""
        lines: list[RenderableType] = [Text(self.title, style="bold")]
        for r in self.rows:
            fields = [f"{c.key}={v.replace(' ', '')}" for c in self.columns if c.key and (v := c.cell(r))]
            lines.append(Text(f"  {r.variant}: {num(r.value)} {self.unit}  " + " ".join(fields)))
        return Group(*lines)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        columns = list(self.columns)
        for name in (None, *_OPTIONAL):
            columns = [c for c in columns if c.name != name]
            if self._fits(columns, options.max_width):
                yield self._table(columns)
                return
        yield self._lines()


def render_bench(report: BenchReport) -> RenderableType:
    spec = lookup(report.device)
    parts: list[RenderableType] = [Text(clean(f"gpuanalyze bench: {report.backend} on {report.device}"), style="bold")]
    groups: dict[str, list[BenchResult]] = {}
    for r in report.results:
        groups.setdefault(r.benchmark, []).append(r)
    for name, rows in groups.items():
        parts += [Text(), _BenchTable(name, rows, spec)]
    parts.append(Text())
    if spec and any(datasheet_peak(r, spec) for r in report.results):
        parts.append(Text(clean(f"% peak: against the {spec.name} datasheet ({spec.source})"), style="dim"))
    for s in report.skipped:
        parts.append(Text(clean(f"skipped  {s}"), style="yellow"))
    for f in report.failed:
        parts.append(Text(clean(f"FAILED   {f}"), style="red"))
    for note in report.notes:
        parts.append(Text(clean(note), style="dim"))
    parts.append(Text(f"{len(report.results)} results in {report.seconds:.1f} s", style="dim"))
    return Group(*parts)


def render_bench_json(report: BenchReport) -> str:
    return json.dumps(report.to_dict(), indent=2)

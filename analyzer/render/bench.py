"""Format a benchmark report: measured values, spread, and % of the datasheet peak where known."""

from __future__ import annotations

import json

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from analyzer.machine.datasheet import PCIE_X16_GBPS, GpuSpec, lookup
from gpuanalyze.kernels.result import BenchResult
from gpuanalyze.kernels.suite import BenchReport


def datasheet_peak(r: BenchResult, spec: GpuSpec | None) -> float | None:
    """The datasheet number this result should be compared with, in the result's unit."""
    if spec is None or r.backend == "cpu":
        return None
    if r.benchmark == "memory_bandwidth":
        return spec.memory_bw_gbps
    if r.benchmark == "matmul" and r.dtype:
        return spec.peak_tflops(r.dtype)
    if r.benchmark in ("h2d", "d2h"):
        return PCIE_X16_GBPS.get(spec.pcie_gen)
    return None


_SHORT = {"memory_bandwidth": "memory", "launch_overhead": "launch", "dataloader": "loader"}
_UNIT = {"GB/s busbw": "GB/s bus", "us/launch": "us", "samples/s": "samples/s"}


def render_bench(report: BenchReport) -> RenderableType:
    spec = lookup(report.device)
    table = Table(title=f"gpuanalyze bench: {report.backend} on {report.device}", title_justify="left")
    for col in ("bench", "variant", "dtype", "size", "n", "median", "unit", "min..max", "% peak"):
        table.add_column(col, justify="left" if col in ("bench", "variant", "dtype", "unit") else "right", no_wrap=True)
    for r in report.results:
        peak = datasheet_peak(r, spec)
        table.add_row(
            _SHORT.get(r.benchmark, r.benchmark),
            r.variant,
            r.dtype or "",
            _size(r.size_bytes),
            str(r.world_size or ""),
            f"{r.value:,.4g}",
            _UNIT.get(r.unit, r.unit),
            f"{r.min:.3g}..{r.max:.3g}",
            f"{100 * r.value / peak:.0f}%" if peak else "",
        )
    parts: list[RenderableType] = [table]
    if spec:
        parts.append(Text(f"% peak: against the {spec.name} datasheet ({spec.source})", style="dim"))
    for s in report.skipped:
        parts.append(Text(f"skipped  {s}", style="yellow"))
    for f in report.failed:
        parts.append(Text(f"FAILED   {f}", style="red"))
    loader = [r for r in report.results if r.benchmark == "dataloader"]
    if loader:
        parts.append(Text(f"data loader: capped by the {loader[0].params['capped_by']} stage"))
    parts.append(Text(f"{len(report.results)} results in {report.seconds:.1f} s", style="dim"))
    return Group(*parts)


def render_bench_json(report: BenchReport) -> str:
    return json.dumps(report.to_dict(), indent=2)


def _size(n: int | None) -> str:
    if not n:
        return ""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"

"""`gpuanalyze report TRACE -o report.html`: the verdict, its evidence and the money, drawn in one HTML file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from analyzer.cli import options
from analyzer.cli.base import app, fail
from analyzer.errors import GpuAnalyzeError

if TYPE_CHECKING:
    pass


@app.command("report", cls=options.takes(options.cost, options.read))
def report_cmd(
    ctx: typer.Context,
    trace: Annotated[
        str,
        typer.Argument(
            help="A trace: .arrow, a PyTorch profiler .json[.gz], or a directory (or URL of one) of per-rank traces."
        ),
    ],
    out: Annotated[Path, typer.Option("-o", "--out", help="The HTML file to write.")] = Path("report.html"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite OUT if it exists.")] = False,
) -> None:
    """Write a self-contained HTML report (charts included; opens offline). Needs the `report` extra.

    A directory of ranks is analysed and drawn out of core, as `gpuanalyze DIR` (--engine, --workers).
    """
    from analyzer.files import check_target, write_bytes
    from analyzer.render.html_report import render_html, require_plotly
    from analyzer.render.safe import clean

    try:
        require_plotly()
        read = options.read_options(ctx.meta[options.GIVEN])
        # before the analysis: refuse early, not after a long run
        check_target(out, force=force, inputs=[trace])
        from analyzer.api import report_parts

        report, data = report_parts(trace, read)
        page = render_html(report, data).encode()
        write_bytes(out, page, force=force)
    except GpuAnalyzeError as exc:
        fail(str(exc))
    typer.echo(clean(f"{out}: {len(page) / 1e6:.1f} MB, verdict {report.bottleneck} (open it in a browser)"))

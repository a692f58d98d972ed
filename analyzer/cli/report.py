"""`gpuanalyze report TRACE -o report.html`: the verdict, its evidence and the money, drawn in one HTML file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from analyzer.cli import options
from analyzer.cli.base import app, fail
from analyzer.cli.trace import ENGINE_HELP, MAX_BYTES_HELP, WORKERS_HELP, max_bytes_option
from analyzer.errors import GpuAnalyzeError

if TYPE_CHECKING:
    from analyzer.planning.compare import Comparison
    from analyzer.planning.cost import CostInputs
    from analyzer.planning.outcome import Report


@app.command("report")
@options.with_cost_options
def report_cmd(
    trace: Annotated[
        str,
        typer.Argument(
            help="A trace: .arrow, a PyTorch profiler .json[.gz], or a directory (or URL of one) of per-rank traces."
        ),
    ],
    out: Annotated[Path, typer.Option("-o", "--out", help="The HTML file to write.")] = Path("report.html"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite OUT if it exists.")] = False,
    ceilings: options.Ceilings = None,
    cost: CostInputs | None = None,
    flops_per_step: options.FlopsPerStep = None,
    compare: Annotated[
        list[Path] | None,
        typer.Option(
            "--compare",
            help="Another run or server to compare cost per completed run with (a trace or a TOML option file, "
            "as `gpuanalyze compare` takes); repeat for several.",
        ),
    ] = None,
    engine: Annotated[str, typer.Option("--engine", help=ENGINE_HELP)] = "local",
    workers: Annotated[int | None, typer.Option("--workers", help=WORKERS_HELP)] = None,
    max_bytes: Annotated[str | None, typer.Option("--max-bytes", help=MAX_BYTES_HELP)] = None,
) -> None:
    """Write a self-contained HTML report (charts included; opens offline). Needs the `report` extra.

    A directory of ranks is analysed and drawn out of core, as `gpuanalyze DIR` (--engine, --workers).
    """
    from analyzer.files import check_target, write_bytes
    from analyzer.render.html_report import render_html, require_plotly
    from analyzer.render.safe import clean

    try:
        require_plotly()
        check_target(out, force=force)  # before the analysis: refuse early, not after a long run
        from analyzer.api import report_parts

        report, data = report_parts(
            trace,
            machine_ceilings=ceilings or True,
            cost=cost,
            flops_per_step=flops_per_step,
            engine=engine,
            workers=workers,
            max_bytes=max_bytes_option(max_bytes),
        )
        comparison = _comparison(report, Path(trace), compare or [], cost) if compare else None
        page = render_html(report, data, comparison=comparison).encode()
        write_bytes(out, page, force=force)
    except GpuAnalyzeError as exc:
        fail(str(exc))
    typer.echo(clean(f"{out}: {len(page) / 1e6:.1f} MB, verdict {report.bottleneck} (open it in a browser)"))


def _comparison(report: Report, trace: Path, others: list[Path], cost: CostInputs | None) -> Comparison:
    """This run (from its report: not analysed twice) against the other runs or servers given."""
    from analyzer.api import load_compared
    from analyzer.planning.compare import Loaded, RunOption, compare
    from analyzer.planning.cost import CostInputs
    from analyzer.planning.run_label import run_label
    from gpuanalyze.ingest import schema as S

    c = report.cost
    if c is None or cost is None:
        raise GpuAnalyzeError("--compare needs this run's length (--steps-per-run or --samples-per-run)")
    m = report.metrics
    this = RunOption(
        run_label(trace),
        c.hours_per_run,
        c.gpus,
        cost.price_per_gpu_hour,
        c.per_run_usd,
        m.step_mean_ms,
        m.samples_per_s,
        {k: v for k, v in m.mean_ms.items() if k in S.PARTS},
        report.bottleneck,
    )
    defaults = cost or CostInputs()
    return compare([Loaded(this, report, path=trace), *[load_compared(Path(p), defaults, None) for p in others]])

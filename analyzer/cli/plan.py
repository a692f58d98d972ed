"""`gpuanalyze compare`: cost per completed run, projections checked, the regression gate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from analyzer.cli import options
from analyzer.cli.base import app, emit, fail
from analyzer.errors import GpuAnalyzeError


@app.command("compare", cls=options.takes(options.cost))
def compare_cmd(
    ctx: typer.Context,
    runs: Annotated[
        list[Path],
        typer.Argument(
            help="Traces, or TOML files naming price and run length (hours_per_run, or trace + steps_per_run)."
        ),
    ],
    fail_if_slower: Annotated[
        float | None,
        typer.Option(
            metavar="PCT",
            help="Exit 1 when AFTER's median step time is more than PCT % above BEFORE's, beyond the runs' noise "
            "(95% block-bootstrap interval; spikes reported apart). Exit 2 for two different jobs or world sizes.",
        ),
    ] = None,
    fail_if_throughput_drops: Annotated[
        float | None,
        typer.Option(
            metavar="PCT", help="Exit 1 when AFTER's samples/s are more than PCT % below BEFORE's, beyond noise."
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    width: options.Width = None,
) -> None:
    """Which run or server is cheaper per completed run (not per hour); for BEFORE AFTER, checks
    BEFORE's projections and, with a tolerance, gates on a slowdown (exit 1)."""
    from analyzer.api import load_compared
    from analyzer.planning.compare import compare
    from analyzer.planning.cost import CostInputs
    from analyzer.planning.gate import GateOptions
    from analyzer.render.planning import compare_struct, render_compare

    try:
        cost = options.cost_inputs(ctx.meta[options.GIVEN])
        gate = GateOptions(fail_if_slower_pct=fail_if_slower, fail_if_throughput_drops_pct=fail_if_throughput_drops)
        defaults = cost or CostInputs()  # the price and run length of traces given directly
        # runs from other machines are compared here, so no measured ceilings (they belong to one machine)
        if gate.active and len(runs) != 2:
            raise GpuAnalyzeError(
                "--fail-if-slower / --fail-if-throughput-drops compare exactly two traces: BEFORE AFTER"
            )
        result = compare([load_compared(Path(p), defaults, None) for p in runs], gate)
    except GpuAnalyzeError as exc:
        fail(str(exc))
    emit(render_compare(result), compare_struct(result), json_out, width)
    if result.gate is not None and result.gate.failed:
        raise typer.Exit(1)

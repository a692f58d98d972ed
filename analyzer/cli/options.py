"""Options several commands share, declared once as Annotated types (Typer reads the option from the type).

A command takes one by naming its type: ``width: options.Width = None``. Groups of them are declared once
as the parameters of a function (``cost``: the seven cost options; ``read``: how a trace is read and judged)
and a command takes a group with ``@app.command(..., cls=options.takes(options.cost, ...))``: typer builds the
options from the group's parameters as it does a command's, and their values reach the command in
``ctx.meta``, where ``cost_inputs`` and ``read_options`` turn them into one ``CostInputs`` and one ``ReadOptions``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand

from analyzer.render.console import MAX_WIDTH, MIN_WIDTH

if TYPE_CHECKING:
    from analyzer.api import ReadOptions
    from analyzer.planning.cost import CostInputs

Width = Annotated[
    int | None,
    typer.Option(
        "--width",
        min=MIN_WIDTH,
        max=MAX_WIDTH,
        metavar="<int>",
        help="Lay the report out for this many columns (default: $COLUMNS, else the terminal's, else 80).",
    ),
]
StepRange = Annotated[
    str | None,
    typer.Option(
        "--step-range",
        metavar="NAME",
        help="Nsight Systems: the NVTX range that is one training step (NAME, or NAME plus a number).",
    ),
]
Engine = Annotated[
    str,
    typer.Option(
        "--engine",
        help="Where per-rank work runs: local (a process pool) or ray (Ray tasks; pip install 'gpuanalyze[ray]').",
    ),
]
Workers = Annotated[
    int | None,
    typer.Option("--workers", help="Worker processes (local engine; default: the CPU cores, one for small inputs)."),
]
MaxBytes = Annotated[
    str | None,
    typer.Option(
        "--max-bytes",
        help="Most decompressed JSON to read from one Kineto trace, e.g. 8G (default: gzip may expand 100x its size).",
    ),
]

Ceilings = Annotated[
    Path | None,
    typer.Option(
        help="Measured ceilings from `gpuanalyze bench` (default: the file bench saves, if present); "
        "only those measured on the trace's machine are used, else a note says why."
    ),
]
PricePerGpuHour = Annotated[float | None, typer.Option(help="USD per GPU-hour (yours; none is shipped).")]
StepsPerRun = Annotated[float | None, typer.Option(help="Optimizer steps in a completed run.")]
SamplesPerRun = Annotated[float | None, typer.Option(help="Samples in a completed run.")]
Gpus = Annotated[int | None, typer.Option(help="GPUs of the run (default: the trace's world size).")]
CostConfig = Annotated[Path | None, typer.Option(help="TOML file with the same cost keys (options override it).")]
FlopsPerStep = Annotated[float | None, typer.Option(help="Model FLOPs per step (all GPUs), for MFU.")]


def cost(
    price_per_gpu_hour: PricePerGpuHour = None,
    steps_per_run: StepsPerRun = None,
    samples_per_run: SamplesPerRun = None,
    gpus: Gpus = None,
    cost_config: CostConfig = None,
) -> None:
    """The cost options, which every command that prices a run takes (read by ``cost_inputs``)."""


def read(
    ceilings: Ceilings = None,
    flops_per_step: FlopsPerStep = None,
    engine: Engine = "local",
    workers: Workers = None,
    max_bytes: MaxBytes = None,
) -> None:
    """How `analyze` and `report` read and judge a trace, besides its cost (read by ``read_options``)."""


#: Where a command's group options are kept in its context.
GIVEN = "gpuanalyze.options"


def takes(*groups: Callable[..., None]) -> type[TyperCommand]:
    """A command class that adds the options of ``groups`` to the command, each group in a help panel of its own
    ("Cost options"), and hands their values to it in ``ctx.meta[GIVEN]`` (converted as typer converts a
    parameter's), not as parameters."""
    from typer.main import get_click_param
    from typer.utils import get_params_from_function

    def declare() -> list[tuple[Any, Any]]:
        """Fresh click parameters for one command object: the group's help escapes each one's help in place,
        so parameters shared between command objects would be escaped again at every build."""
        out = []
        for g in groups:
            for p in get_params_from_function(g).values():
                param, convert = get_click_param(p)
                param.rich_help_panel = f"{g.__name__.capitalize()} options"
                out.append((param, convert))
        return out

    class Taking(TyperCommand):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.declared = declare()
            self.params += [param for param, _ in self.declared]

        def invoke(self, ctx: Any) -> Any:
            given = ctx.meta[GIVEN] = {}
            for param, convert in self.declared:
                value = ctx.params.pop(param.name)
                given[param.name] = convert(value) if convert else value
            return super().invoke(ctx)

    return Taking


def max_bytes(text: str | None) -> int | None:
    """``--max-bytes``'s value in bytes (``8G``); None when not given."""
    from gpuanalyze.ingest.trace.byte_source import parse_size

    return None if text is None else parse_size(text)


def cost_inputs(given: Mapping[str, Any]) -> CostInputs | None:
    """CostInputs from the cost options' values (``ctx.meta[GIVEN]``): a TOML file and/or values (values win);
    None when neither gives anything. A bad value raises GpuAnalyzeError (the command's one-line error)."""
    from analyzer.planning.cost import CostInputs, load_cost_config

    values: dict[str, Any] = {
        name: given.get(name) for name in inspect.signature(cost).parameters if name != "cost_config"
    }
    if given.get("cost_config") is not None:
        return load_cost_config(given["cost_config"], **values)
    if all(v is None for v in values.values()):
        return None
    return CostInputs(**values)


def read_options(given: Mapping[str, Any]) -> ReadOptions:
    """ReadOptions from the cost and read options' values: the machine's measured ceilings unless a file is given."""
    from analyzer.api import ReadOptions

    return ReadOptions(
        machine_ceilings=given["ceilings"] or True,
        cost=cost_inputs(given),
        flops_per_step=given["flops_per_step"],
        engine=given["engine"],
        workers=given["workers"],
        max_bytes=max_bytes(given["max_bytes"]),
    )

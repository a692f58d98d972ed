"""Options several commands share, declared once as Annotated types (Typer reads the option from the type).

A command takes one by naming its type: ``width: options.Width = None``. The cost options are seven
such parameters; ``cost_inputs`` turns their values into one ``CostInputs``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from analyzer.render.console import MAX_WIDTH, MIN_WIDTH

if TYPE_CHECKING:
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
TokensPerRun = Annotated[float | None, typer.Option(help="Tokens in a completed run (with --tokens-per-sample).")]
TokensPerSample = Annotated[float | None, typer.Option(help="Tokens per sample (sequence length).")]
Gpus = Annotated[int | None, typer.Option(help="GPUs of the run (default: the trace's world size).")]
CostConfig = Annotated[Path | None, typer.Option(help="TOML file with the same cost keys (options override it).")]
FlopsPerStep = Annotated[float | None, typer.Option(help="Model FLOPs per step (all GPUs), for MFU.")]


def max_bytes(text: str | None) -> int | None:
    """``--max-bytes``'s value in bytes (``8G``); None when not given."""
    from gpuanalyze.ingest.stream import parse_size

    return None if text is None else parse_size(text)


def cost_inputs(
    cost_config: Path | None,
    price_per_gpu_hour: float | None = None,
    steps_per_run: float | None = None,
    samples_per_run: float | None = None,
    tokens_per_run: float | None = None,
    tokens_per_sample: float | None = None,
    gpus: int | None = None,
) -> CostInputs | None:
    """CostInputs from the cost options: a TOML file and/or values (values win); None when neither gives anything.
    A bad value raises GpuAnalyzeError (the command's one-line error)."""
    from analyzer.planning.cost import CostInputs, load_cost_config

    values: dict[str, float | int | None] = {
        "price_per_gpu_hour": price_per_gpu_hour,
        "steps_per_run": steps_per_run,
        "samples_per_run": samples_per_run,
        "tokens_per_run": tokens_per_run,
        "tokens_per_sample": tokens_per_sample,
        "gpus": gpus,
    }
    if cost_config is not None:
        return load_cost_config(cost_config, **values)
    if all(v is None for v in values.values()):
        return None
    return CostInputs(
        price_per_gpu_hour=price_per_gpu_hour,
        steps_per_run=steps_per_run,
        samples_per_run=samples_per_run,
        tokens_per_run=tokens_per_run,
        tokens_per_sample=tokens_per_sample,
        gpus=gpus,
    )

"""Options several commands share, declared once (Typer reads them from the Annotated types)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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

"""Options several commands share, declared once (Typer reads them from the Annotated types)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from analyzer.planning.cost import CostInputs

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

#: The cost options, each one field of ``planning.cost.CostInputs`` (``cost_config`` the TOML file of them).
COST_OPTIONS: dict[str, Any] = {
    "price_per_gpu_hour": PricePerGpuHour,
    "steps_per_run": StepsPerRun,
    "samples_per_run": SamplesPerRun,
    "tokens_per_run": TokensPerRun,
    "tokens_per_sample": TokensPerSample,
    "gpus": Gpus,
    "cost_config": CostConfig,
}


def with_cost_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give a command the cost options, declared once here: its ``cost`` parameter is replaced by
    the options, and it receives them as one ``CostInputs`` (None when none was given). A bad
    value is the command's one-line error."""
    signature = inspect.signature(command)
    assert "cost" in signature.parameters, f"{command.__name__} takes no `cost` parameter"
    # Typer reads real annotations: evaluate the others as inspect would (`cost`'s type is only for mypy).
    kept = [
        p.replace(annotation=eval(p.annotation, command.__globals__) if isinstance(p.annotation, str) else p.annotation)
        for name, p in signature.parameters.items()
        if name != "cost"
    ]
    added = [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=a)
        for n, a in COST_OPTIONS.items()
    ]

    @functools.wraps(command)
    def with_cost(**kwargs: Any) -> None:
        from analyzer.cli.base import fail
        from analyzer.errors import GpuAnalyzeError

        given = {name: kwargs.pop(name) for name in COST_OPTIONS}
        try:
            kwargs["cost"] = cost_inputs(given.pop("cost_config"), **given)
        except GpuAnalyzeError as exc:
            fail(str(exc))
        command(**kwargs)

    parameters = [*kept, *added]
    with_cost.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    with_cost.__annotations__ = {p.name: p.annotation for p in parameters}
    return with_cost


def cost_inputs(
    config: Path | None,
    *,
    price_per_gpu_hour: float | None = None,
    steps_per_run: float | None = None,
    samples_per_run: float | None = None,
    tokens_per_run: float | None = None,
    tokens_per_sample: float | None = None,
    gpus: int | None = None,
) -> CostInputs | None:
    """CostInputs from a TOML file and/or options (options win); None when neither gives anything."""
    from analyzer.planning.cost import CostInputs, load_cost_config

    values: dict[str, float | int | None] = {
        "price_per_gpu_hour": price_per_gpu_hour,
        "steps_per_run": steps_per_run,
        "samples_per_run": samples_per_run,
        "tokens_per_run": tokens_per_run,
        "tokens_per_sample": tokens_per_sample,
        "gpus": gpus,
    }
    if config is not None:
        return load_cost_config(config, **values)
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

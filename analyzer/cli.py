"""The `gpuanalyze` command: thin wrappers that call the library and render its results."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from typer.core import TyperGroup

from analyzer import __version__
from analyzer.analyze import analyze
from analyzer.compare import compare, load_option
from analyzer.cost import CostInputs, load_cost_config
from analyzer.memory_fit import MemoryInputs, ModelShape, estimate, shape_from_hf_config
from analyzer.mfu import palm_flops_per_token
from analyzer.render.planning import compare_dict, memory_dict, render_compare, render_memory, render_whatif, whatif_dict
from analyzer.whatif import what_if
from kernels.hardware import GPUS
from analyzer.ceilings import default_path as default_ceilings_path
from analyzer.ceilings import find_ceilings
from analyzer.envcheck import check_env
from analyzer.render.bench import render_bench, render_bench_json
from analyzer.render.env import render_env
from analyzer.render.json_report import render_json
from analyzer.render.terminal import render_terminal
from ingest.errors import GpuAnalyzeError
from ingest.kineto_import import load_kineto, write_trace_file
from kernels.suite import run_bench, save

_GROUP_OPTIONS = {"--help", "-h", "--version", "--install-completion", "--show-completion"}


class _DefaultToAnalyze(TyperGroup):
    """`gpuanalyze TRACE ...` means `gpuanalyze analyze TRACE ...`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in _GROUP_OPTIONS:
            args = ["analyze", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(cls=_DefaultToAnalyze, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Find why a GPU training run is slow: data loading, batch size, kernels or sync.")


def fail(message: str) -> None:
    """One line on stderr, exit code 2: how every user error ends."""
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"gpuanalyze: error: {message}", markup=False)
    raise typer.Exit(2)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpuanalyze {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    """Find why a GPU training run is slow: data loading, batch size, kernels or sync."""


@app.command("analyze")
def analyze_cmd(
    trace: Annotated[Path, typer.Argument(help="A trace: .arrow (analyzer.profile), a PyTorch profiler .json[.gz], "
                                               "or a directory of per-rank traces.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the report.")] = False,
    ceilings: Annotated[Optional[Path], typer.Option(help="Measured ceilings from `gpuanalyze bench` "
                        "(default: the file bench saves, if present).")] = None,
    price_per_gpu_hour: Annotated[Optional[float], typer.Option(help="USD per GPU-hour (yours; none is shipped).")] = None,
    steps_per_run: Annotated[Optional[float], typer.Option(help="Optimizer steps in a completed run.")] = None,
    samples_per_run: Annotated[Optional[float], typer.Option(help="Samples in a completed run.")] = None,
    tokens_per_run: Annotated[Optional[float], typer.Option(help="Tokens in a completed run (with --tokens-per-sample).")] = None,
    tokens_per_sample: Annotated[Optional[float], typer.Option(help="Tokens per sample (sequence length).")] = None,
    gpus: Annotated[Optional[int], typer.Option(help="GPUs of the run (default: the trace's world size).")] = None,
    cost_config: Annotated[Optional[Path], typer.Option(help="TOML file with the same cost keys (options override it).")] = None,
    flops_per_step: Annotated[Optional[float], typer.Option(help="Model FLOPs per step (all GPUs), for MFU.")] = None,
    model_config: Annotated[Optional[Path], typer.Option(help="HF config.json: FLOPs per step by the PaLM formula "
                            "(with --tokens-per-step and --tokens-per-sample).")] = None,
    tokens_per_step: Annotated[Optional[float], typer.Option(help="Tokens per optimizer step over all GPUs.")] = None,
) -> None:
    """Classify the bottleneck of a recorded run, with evidence, recommendations and (with a run length) cost."""
    try:
        cost = _cost_inputs(cost_config, price_per_gpu_hour=price_per_gpu_hour, steps_per_run=steps_per_run,
                            samples_per_run=samples_per_run, tokens_per_run=tokens_per_run,
                            tokens_per_sample=tokens_per_sample, gpus=gpus)
        if model_config is not None:
            flops_per_step = _palm_flops(model_config, tokens_per_step, tokens_per_sample)
        report = analyze(trace, ceilings=find_ceilings(ceilings), cost=cost, flops_per_step=flops_per_step)
    except GpuAnalyzeError as exc:
        fail(str(exc))
    if json_out:
        typer.echo(render_json(report))
    else:
        Console(highlight=False).print(render_terminal(report))


def _palm_flops(config: Path, tokens_per_step: float | None, seq_len: float | None) -> float:
    if not tokens_per_step or not seq_len:
        raise GpuAnalyzeError("--model-config needs --tokens-per-step and --tokens-per-sample (the sequence length)")
    shape = shape_from_hf_config(config)
    per_token = palm_flops_per_token(shape.params, shape.layers, shape.heads, shape.hidden // shape.heads, int(seq_len))
    return per_token * tokens_per_step


def _cost_inputs(config: Path | None, **values: Any) -> CostInputs | None:
    if config is not None:
        return load_cost_config(config, **values)
    if all(v is None for v in values.values()):
        return None
    return CostInputs(**{k: v for k, v in values.items() if v is not None})


def _print(renderable: Any, data: Any, json_out: bool) -> None:
    if json_out:
        typer.echo(json.dumps(data, indent=2, default=str))
    else:
        Console(highlight=False).print(renderable)


@app.command("compare")
def compare_cmd(
    runs: Annotated[list[Path], typer.Argument(help="Traces, or TOML files naming price and run length (hours_per_run, "
                                                    "or trace + steps_per_run).")],
    price_per_gpu_hour: Annotated[Optional[float], typer.Option(help="Price for traces given directly.")] = None,
    steps_per_run: Annotated[Optional[float], typer.Option(help="Run length for traces given directly.")] = None,
    samples_per_run: Annotated[Optional[float], typer.Option(help="Run length in samples, for traces.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Which run or server is cheaper per completed run (not per hour)."""
    try:
        defaults = _cost_inputs(None, price_per_gpu_hour=price_per_gpu_hour, steps_per_run=steps_per_run,
                                samples_per_run=samples_per_run) or CostInputs()
        result = compare([load_option(p, defaults, find_ceilings(None)) for p in runs])
    except GpuAnalyzeError as exc:
        fail(str(exc))
    _print(render_compare(result), compare_dict(result), json_out)


@app.command("whatif")
def whatif_cmd(
    trace: Annotated[Path, typer.Argument(help="A trace recorded on a GPU of the datasheet table.")],
    prices: Annotated[Optional[Path], typer.Option(help="TOML: GPU name = USD per GPU-hour (your prices).")] = None,
    steps_per_run: Annotated[Optional[float], typer.Option(help="Run length, for cost per run.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Estimate this run's step time, memory fit and cost on the other GPUs of the table."""
    try:
        price_map = _prices(prices) if prices else None
        report = analyze(trace)
        result = what_if(report.metrics, report.run, prices=price_map, steps_per_run=steps_per_run)
    except GpuAnalyzeError as exc:
        fail(str(exc))
    _print(render_whatif(result), whatif_dict(result), json_out)


def _prices(path: Path) -> dict[str, float]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise GpuAnalyzeError(f"{path}: cannot read prices ({exc})") from exc
    known = {g.name for g in GPUS}
    unknown = sorted(set(data) - known)
    if unknown:
        raise GpuAnalyzeError(f"{path}: unknown GPU name(s) {', '.join(unknown)}; use: {', '.join(sorted(known))}")
    return {k: float(v) for k, v in data.items()}


@app.command("memory")
def memory_cmd(
    params: Annotated[Optional[float], typer.Option(help="Parameter count, e.g. 7e9.")] = None,
    config: Annotated[Optional[Path], typer.Option(help="A Hugging Face style config.json.")] = None,
    precision: Annotated[str, typer.Option(help="fp32, bf16-mixed, fp16-mixed, bf16, fp8-mixed.")] = "bf16-mixed",
    optimizer: Annotated[str, typer.Option(help="sgd, sgd-momentum, adam, adamw, adam-8bit.")] = "adamw",
    batch: Annotated[Optional[int], typer.Option(help="Micro-batch per GPU.")] = None,
    seq_len: Annotated[Optional[int], typer.Option(help="Tokens per sample.")] = None,
    checkpointing: Annotated[bool, typer.Option("--checkpointing", help="Full activation checkpointing.")] = False,
    sharding: Annotated[str, typer.Option(help="none, zero1, zero2, zero3, fsdp.")] = "none",
    gpus: Annotated[int, typer.Option(help="GPUs to shard over.")] = 1,
    lora_rank: Annotated[Optional[int], typer.Option(help="LoRA rank (needs --config).")] = None,
    qlora: Annotated[bool, typer.Option("--qlora", help="4-bit base weights (with --lora-rank).")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Estimate training memory and which GPUs of the table it fits."""
    try:
        if (params is None) == (config is None):
            raise GpuAnalyzeError("give exactly one of --params or --config")
        model = shape_from_hf_config(config) if config else ModelShape(params)
        result = estimate(MemoryInputs(model=model, precision=precision, optimizer=optimizer, batch=batch, seq_len=seq_len,
                                       checkpointing=checkpointing, sharding=sharding, gpus=gpus, lora_rank=lora_rank,
                                       qlora=qlora))
    except GpuAnalyzeError as exc:
        fail(str(exc))
    _print(render_memory(result), memory_dict(result), json_out)


@app.command("import")
def import_cmd(
    trace: Annotated[Path, typer.Argument(help="A PyTorch profiler (Kineto) trace: .json or .json.gz.")],
    out: Annotated[Path, typer.Option("-o", "--out", help="The gpuanalyze trace to write (.arrow).")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite OUT if it exists.")] = False,
) -> None:
    """Convert a PyTorch profiler trace to a gpuanalyze trace (never writes over its input)."""
    try:
        loaded = load_kineto(trace)
        write_trace_file(loaded, out, force=force)
    except GpuAnalyzeError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror}")
    typer.echo(f"{out}: {loaded.frame.height} step(s) from {trace}")


@app.command("env")
def env_cmd() -> None:
    """Check torch, CUDA, the driver and the GPUs; never fails on a machine without a GPU."""
    Console(highlight=False).print(render_env(check_env()))


@app.command("bench")
def bench_cmd(
    which: Annotated[str, typer.Argument(help="memory, copy, matmul, launch, allreduce, dataloader or all.")] = "all",
    backend: Annotated[str, typer.Option(help="auto, cupy, numba or cpu.")] = "auto",
    quick: Annotated[bool, typer.Option("--quick", help="Smaller sizes and fewer repeats.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    out: Annotated[Optional[Path], typer.Option("--out", help="Also write the JSON results here.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out if it exists.")] = False,
) -> None:
    """Measure this machine's ceilings; results are saved where `gpuanalyze TRACE` finds them."""
    if out is not None and out.exists() and not force:
        fail(f"{out} exists; pass --force to overwrite it")
    try:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                      console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("starting", total=None)
            report = run_bench(which, backend, quick=quick,
                               progress=lambda name: progress.update(task, description=f"benchmark: {name}"))
    except GpuAnalyzeError as exc:
        fail(str(exc))
    for path in (default_ceilings_path(), out):
        if path is not None:
            try:
                save(report, path)
            except OSError as exc:
                fail(f"cannot write {path}: {exc.strerror}")
    if json_out:
        typer.echo(render_bench_json(report))
    else:
        Console(highlight=False).print(render_bench(report))
    if report.failed:
        raise typer.Exit(1)


def main(argv: list[str] | None = None) -> Any:
    """Console-script entry point."""
    return app(args=argv if argv is not None else sys.argv[1:], prog_name="gpuanalyze")

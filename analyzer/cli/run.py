"""`gpuanalyze run [OPTIONS] -- COMMAND ...`: profile a command without changing it."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from analyzer.cli.base import app, fail
from analyzer.cli.log_option import LogTo, log_reports, log_targets
from analyzer.errors import GpuAnalyzeError

if TYPE_CHECKING:
    from analyzer.planning.outcome import Report
    from analyzer.run.launch import Finished


@app.command(
    "run",
    context_settings={"allow_interspersed_args": False},
)
def run_cmd(
    command: Annotated[
        list[str] | None,
        typer.Argument(help="The command to run, after `--`: `python train.py ARGS`, `torchrun ... train.py`."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Directory for the traces (default: a new gpuanalyze-<date>-<time>/)."),
    ] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="key=value stored in the traces (repeatable).")] = None,
    device: Annotated[str, typer.Option(help="auto, cuda or cpu: how phases are timed.")] = "auto",
    kernel_windows: Annotated[
        bool | None,
        typer.Option(
            "--kernel-windows/--no-kernel-windows",
            help="Sample torch.profiler windows (default: only on an accelerator).",
            show_default=False,
        ),
    ] = None,
    window_first: Annotated[int, typer.Option(help="Step of the first kernel window.")] = 50,
    window_every: Annotated[int, typer.Option(help="Steps between kernel windows.")] = 2000,
    window_steps: Annotated[int, typer.Option(help="Steps per kernel window.")] = 3,
    json_out: Annotated[bool, typer.Option("--json", help="Print the analysis as JSON.")] = False,
    print_env: Annotated[
        bool,
        typer.Option("--print-env", help="Print the variables that do the same for a command you cannot change."),
    ] = False,
    log: LogTo = None,
) -> None:
    """Run COMMAND unchanged with profiling in every Python process it starts (each rank writes
    trace.rank<N>.arrow), then print the analysis. The command's exit status is passed through."""
    from analyzer.record.profile_options import ProfileOptions
    from analyzer.run import env_vars, launch

    try:
        trackers = log_targets(log)
        tags = dict(_tag(t) for t in tag or [])
        options = ProfileOptions(
            tags=tags,
            device=device,
            kernel_windows=kernel_windows,
            window_first=window_first,
            window_every=window_every,
            window_steps=window_steps,
        )
        if print_env:
            directory = (out or Path(env_vars.DEFAULT_OUT)).absolute()
            env = env_vars.env_for(options, directory, "<one id per run, e.g. $SLURM_JOB_ID>")
            env.pop(env_vars.RUN_ID)
            for key, value in env.items():
                typer.echo(f"export {key}={shlex.quote(value)}")
            typer.echo(f"export PYTHONPATH={shlex.quote(str(env_vars.bootstrap_dir()))}${{PYTHONPATH:+:$PYTHONPATH}}")
            return
        if not command:
            raise GpuAnalyzeError("give the command to run after `--`, e.g. gpuanalyze run -- python train.py")
        finished = launch.run_command(command, options, out or launch.default_out_dir())
    except GpuAnalyzeError as exc:
        fail(str(exc))
    reports = _report(finished, json_out)
    try:
        log_reports(reports, trackers)
    except GpuAnalyzeError as exc:
        from analyzer.render.safe import clean

        typer.echo(clean(f"gpuanalyze: error: {exc}"), err=True)  # the command's exit status still follows
    launch.die_like(finished.returncode)


def _tag(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise GpuAnalyzeError(f"--tag {text!r}: expected key=value")
    return key, value


def _report(finished: Finished, json_out: bool) -> list[Report]:
    """What the command left: one line on stderr, then the analysis of each of its traces."""
    from analyzer.run.summary import analyze_quietly, json_text, print_terminal

    status = (
        f"was killed by signal {-finished.returncode}"
        if finished.returncode < 0
        else f"exited with status {finished.returncode}"
    )
    err = typer.echo
    if not finished.traces:
        err(
            f"gpuanalyze: the command {status}; no trace in {finished.out_dir} "
            "(no Python process of it ran an optimizer step)",
            err=True,
        )
        return []
    err(f"gpuanalyze: the command {status}; traces in {finished.out_dir}", err=True)
    reports = []
    for path in finished.traces:
        report, problem = analyze_quietly(path)
        if report is None:
            err(f"gpuanalyze: cannot analyse {path}: {problem}", err=True)
        else:
            reports.append(report)
    if json_out and reports:
        typer.echo(json_text(reports))
    else:
        for report in reports:
            print_terminal(report)
    return reports

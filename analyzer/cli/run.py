"""`gpuanalyze run [OPTIONS] -- COMMAND ...`: profile a command without changing it."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from analyzer.cli.base import app, fail
from analyzer.cli.log_option import LogTo, log_reports, log_targets
from analyzer.cli.options import Width
from analyzer.errors import GpuAnalyzeError

if TYPE_CHECKING:
    from analyzer.planning.outcome import Report
    from analyzer.record.profile_options import ProfileOptions
    from analyzer.run.launch import Finished
    from analyzer.run.try_options import TryOptions


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
    window_first: Annotated[int | None, typer.Option(help="Step of the first kernel window.")] = None,
    window_every: Annotated[int | None, typer.Option(help="Steps between kernel windows.")] = None,
    window_steps: Annotated[int | None, typer.Option(help="Steps per kernel window.")] = None,
    nvtx: Annotated[
        bool, typer.Option("--nvtx", help="Emit NVTX ranges per step and phase (for nsys profile; CUDA only).")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the analysis as JSON.")] = False,
    print_env: Annotated[
        bool,
        typer.Option("--print-env", help="Print the variables that do the same for a command you cannot change."),
    ] = False,
    log: LogTo = None,
    try_: Annotated[
        bool,
        typer.Option(
            "--try",
            help="Measure instead of guessing: run short trials of the command (baseline, then one per "
            "candidate setting applied without editing the code) and recommend the measured best. "
            "Trials re-run the script with GPUANALYZE_TRIAL set to 1, so it can skip checkpoints.",
        ),
    ] = False,
    try_steps: Annotated[
        int | None, typer.Option("--try-steps", help="Steps measured per trial, after the warm-up (--try).")
    ] = None,
    try_warmup: Annotated[
        int | None, typer.Option("--try-warmup", help="Warm-up steps per trial, not measured (--try).")
    ] = None,
    try_time_limit: Annotated[
        float | None,
        typer.Option("--try-time-limit", help="Seconds for all trials together; a trial past it is killed (--try)."),
    ] = None,
    try_baselines: Annotated[
        int | None,
        typer.Option(
            "--try-baselines", help="Baseline trials; their spread is the noise a candidate must beat (--try)."
        ),
    ] = None,
    width: Width = None,
    candidates: Annotated[
        list[str] | None,
        typer.Option(
            "--candidates",
            help="Only try these settings (repeatable), e.g. num_workers=4 or batch_size=2 (--try; the keys "
            "are in the recording docs).",
        ),
    ] = None,
) -> None:
    """Run COMMAND unchanged with profiling in every Python process it starts (each rank writes
    trace.rank<N>.arrow), then print the analysis. The command's exit status is passed through."""
    from analyzer.record.profile_options import ProfileOptions
    from analyzer.run import env_vars, launch

    try:
        trackers = log_targets(log)
        tags = dict(_tag(t) for t in tag or [])
        windows = _given(window_first=window_first, window_every=window_every, window_steps=window_steps)
        options = ProfileOptions(tags=tags, device=device, kernel_windows=kernel_windows, nvtx=nvtx, **windows)
        if print_env:
            directory = (out or Path(env_vars.DEFAULT_OUT)).absolute()
            env = env_vars.env_for(options, directory, "<one id per run, e.g. $SLURM_JOB_ID>")
            env.pop(env_vars.RUN_ID)
            for key, value in env.items():
                typer.echo(f"export {key}={shlex.quote(value)}")
            typer.echo(f"export PYTHONPATH={shlex.quote(str(env_vars.bootstrap_dir()))}${{PYTHONPATH:+:$PYTHONPATH}}")
            return
        trial = _given(steps=try_steps, warmup=try_warmup, time_limit_s=try_time_limit, baselines=try_baselines)
        if not try_ and (candidates or trial):
            raise GpuAnalyzeError(
                "--try-steps, --try-warmup, --try-time-limit, --try-baselines and --candidates need --try"
            )
        if try_:
            from analyzer.run.trial_env import parse_setting
            from analyzer.run.try_options import TryOptions

            try_options = TryOptions(candidates=tuple(parse_setting(c) for c in candidates or []), **trial)
        if not command:
            raise GpuAnalyzeError("give the command to run after `--`, e.g. gpuanalyze run -- python train.py")
        if try_:
            _try(command, options, try_options, out or launch.default_out_dir(), json_out, width)
            return
        finished = launch.run_command(command, options, out or launch.default_out_dir())
    except GpuAnalyzeError as exc:
        fail(str(exc))
    reports = _report(finished, json_out, width)
    try:
        log_reports(reports, trackers)
    except GpuAnalyzeError as exc:
        from analyzer.render.safe import clean

        typer.echo(clean(f"gpuanalyze: error: {exc}"), err=True)  # the command's exit status still follows
    launch.die_like(finished.returncode)


def _given(**values: float | None) -> dict[str, Any]:
    """The options given on the command line (the dataclasses hold the defaults)."""
    return {k: v for k, v in values.items() if v is not None}


def _try(
    command: list[str], options: ProfileOptions, try_options: TryOptions, out: Path, json_out: bool, width: int | None
) -> None:
    """`--try`: the trials, their table (or JSON), then the baseline's exit status if it failed, else 0."""
    import textwrap

    from analyzer.render.console import layout_width
    from analyzer.render.safe import clean
    from analyzer.run import launch, trial_output, trials

    def say(line: str) -> None:  # on stderr, within the width, like the table under it
        columns = layout_width(width, stderr=True)
        wrapped = textwrap.wrap(
            clean(line), columns, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
        )
        typer.echo("\n".join(wrapped), err=True)

    result = trials.try_command(command, options, try_options, out, stdout_to_stderr=json_out, say=say)
    if json_out:
        import msgspec

        from analyzer.render.output import dumps
        from analyzer.render.output.commands import Trials

        typer.echo(dumps(msgspec.convert(trial_output.as_dict(result), Trials)))  # the declared keys, none other
    else:
        trial_output.print_table(result, width)
    code = result.baseline.returncode
    if result.baseline.outcome == "failed" and code is not None:
        launch.die_like(code)
    if result.interrupted_by is not None:
        raise typer.Exit(128 + result.interrupted_by)
    if result.baseline.outcome == "time_limit" or result.files_changed:
        raise typer.Exit(1)


def _tag(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise GpuAnalyzeError(f"--tag {text!r}: expected key=value")
    return key, value


def _report(finished: Finished, json_out: bool, width: int | None = None) -> list[Report]:
    """What the command left: one line on stderr, then the analysis of each of its traces."""
    from analyzer.render.safe import clean
    from analyzer.run.summary import analyze_quietly, json_text, print_terminal

    status = (
        f"was killed by signal {-finished.returncode}"
        if finished.returncode < 0
        else f"exited with status {finished.returncode}"
    )

    def err(message: str, *, err: bool) -> None:
        typer.echo(clean(message), err=err)  # paths (--out, trace names) reach the terminal escaped

    if not finished.traces:
        err(
            f"gpuanalyze: the command {status}; no trace written to {finished.out_dir} (no Python process of it "
            "ran an optimizer step)" + ("" if finished.out_dir.exists() else "; nothing left behind"),
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
            print_terminal(report, width=width)
    return reports

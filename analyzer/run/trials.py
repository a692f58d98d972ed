"""`gpuanalyze run --try`: measure fixes instead of guessing them.

The command runs once as the baseline trial (profiled as `gpuanalyze run` does, but stopped
after warm-up + N steps), the baseline is analysed, candidates are derived from its findings
(analyzer.run.candidates), and the command runs once more per candidate with that setting applied
in its processes through environment variables (analyzer.run.trial_env, trial_child). Each trial
writes its traces into a new subdirectory of the output directory, runs in its own session, is
killed with everything it started after it ends or at the total time limit (analyzer.run.trial_reap),
and has
``GPUANALYZE_TRIAL=1`` set so that scripts can skip checkpoints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from analyzer.errors import GpuAnalyzeError
from analyzer.record.profile_options import ProfileOptions
from analyzer.run import trial_env, trial_reap
from analyzer.run.candidates import Candidate, derive, given, on_accelerator
from analyzer.run.launch import child_env, create_dir, prepare_out_dir, signals_handled, traces_of
from analyzer.run.trial_env import TrialSetting
from analyzer.run.trial_measure import Baselines, Measured, beyond_noise, comparable_ms, measure
from analyzer.run.try_options import TryOptions

if TYPE_CHECKING:
    from analyzer.planning.outcome import Report

#: Seconds a trial killed at the time limit gets between SIGTERM and SIGKILL.
KILL_GRACE_S = 5.0
#: Name of the per-trial log the child processes append to (loaders changed, the stop).
LOG_NAME = "trial-log.jsonl"


@dataclass(frozen=True, slots=True)
class TrialRun:
    """One run of the command with one setting."""

    name: str
    """'baseline' or 'candidate N'."""
    setting: TrialSetting
    directory: Path | None
    """Where its traces and log are (None: not run)."""
    outcome: str
    """stopped (after its bounded steps), ended (on its own, before them), failed (exit status not 0),
    time_limit (killed at the total limit), interrupted (a signal reached the launcher), not_run."""
    returncode: int | None = None
    traces: tuple[Path, ...] = ()
    measured: Measured | None = None
    loaders: tuple[str, ...] = ()
    """One line per DataLoader whose arguments the trial changed."""
    batch_sizes: tuple[int, ...] = ()
    """The batch size of each DataLoader the trial's processes created, in order."""
    seconds: float = 0.0
    left_running: int = 0
    """Processes the trial left running after its root exited (killed and reaped by the launcher)."""


@dataclass(slots=True)
class TryResult:
    """Everything `gpuanalyze run --try` found."""

    out_dir: Path
    baseline: TrialRun
    """The first baseline trial (the one analysed)."""
    repeats: list[TrialRun] = field(default_factory=list)
    """The further baseline trials (their spread is the run-to-run noise)."""
    report: Report | None = None
    """The baseline's analysis (None when it failed or could not be analysed)."""
    problem: str | None = None
    """Why the baseline has no analysis."""
    trials: list[tuple[Candidate, TrialRun]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    interrupted_by: int | None = None
    """The signal that reached the launcher and stopped the trials (None: none did)."""

    @property
    def noise(self) -> Baselines | None:
        """The measured baselines (None: the first one was not measured)."""
        runs = [self.baseline, *self.repeats]
        measured = [t.measured for t in runs if t.measured is not None and t.outcome in ("stopped", "ended")]
        return Baselines(tuple(measured)) if self.baseline.measured is not None and measured else None

    @property
    def best(self) -> tuple[Candidate, TrialRun] | None:
        """The measured best candidate, only when it beats the baselines beyond noise (their
        spread and the steps' variation); never with a single measured baseline."""
        base = self.noise
        ran = [(c, t) for c, t in self.trials if t.measured is not None and t.outcome in ("stopped", "ended")]
        if base is None or len(base.runs) < 2 or not ran:
            return None
        candidate, trial = min(ran, key=lambda ct: comparable_ms(base.samples, ct[1].measured))  # type: ignore[arg-type]
        assert trial.measured is not None
        return (candidate, trial) if beyond_noise(base.runs, trial.measured) else None

    @property
    def baseline_failed(self) -> bool:
        return self.baseline.outcome in ("failed", "time_limit", "interrupted") or self.baseline.measured is None


def try_command(
    command: list[str], profile: ProfileOptions, options: TryOptions, out_dir: Path, *, stdout_to_stderr: bool = False
) -> TryResult:
    """Run the baseline and the candidates; raises GpuAnalyzeError if the command cannot start.
    ``stdout_to_stderr``: the trials' standard output goes to stderr (``--json`` keeps stdout for the result)."""
    out_dir, _ = prepare_out_dir(out_dir)
    deadline = time.monotonic() + options.time_limit_s
    stop = _Stop(stdout_to_stderr)
    result = _run_all(command, profile, options, out_dir, deadline, stop)
    result.interrupted_by = stop.signum
    return result


def _run_all(
    command: list[str], profile: ProfileOptions, options: TryOptions, out_dir: Path, deadline: float, stop: _Stop
) -> TryResult:
    with _forwarding_signals(stop), trial_reap.subreaper():
        first = _new_dir(out_dir, 0, "baseline")
        baseline = run_trial("baseline", command, profile, TrialSetting(), first, options, deadline, stop)
        result = TryResult(out_dir=out_dir, baseline=baseline)
        if result.baseline_failed or not baseline.traces:
            result.problem = _why_no_baseline(baseline)
            return result
        result.report, result.problem = analyze_baseline(baseline.traces[0], options.warmup)
        for n in range(2, options.baselines + 1):
            if not _time_for(f"baseline {n}", baseline, deadline, stop, result):
                break
            again = run_trial(
                f"baseline {n}",
                command,
                profile,
                TrialSetting(),
                _new_dir(out_dir, 0, f"baseline{n}"),
                options,
                deadline,
                stop,
            )
            result.repeats.append(again)
        accelerator = on_accelerator(result.report)
        if options.candidates:
            candidates, notes = given(
                options.candidates, result.report, accelerator=accelerator, current_batch=batch_size_of(baseline)
            )
        else:
            workers = None if baseline.measured is None else baseline.measured.loader_workers
            candidates, notes = derive(
                result.report,
                cores=_cores(),
                accelerator=accelerator,
                current_workers=workers,
                current_batch=batch_size_of(baseline),
            )
        result.notes += notes
        if any(c.setting.changes_batch for c in candidates):
            result.notes.append(
                "batch size and accumulation trials measure speed per sample only: the learning rate "
                "(and its schedule) for another batch is your call"
            )
        for index, candidate in enumerate(candidates, start=1):
            name = f"candidate {index}"
            if not _time_for(f"{name} ({candidate.setting.label()})", baseline, deadline, stop, result):
                result.trials.append((candidate, TrialRun(name, candidate.setting, None, "not_run")))
                continue
            directory = _new_dir(out_dir, index, candidate.setting.slug())
            trial = run_trial(name, command, profile, candidate.setting, directory, options, deadline, stop)
            result.trials.append((candidate, trial))
    return result


def _time_for(what: str, baseline: TrialRun, deadline: float, stop: _Stop, result: TryResult) -> bool:
    """Whether another trial may start (no signal came, and the time left holds one more baseline's
    worth); when not, a note says why."""
    left = deadline - time.monotonic()
    if stop.signum is None and left >= baseline.seconds:
        return True
    why = (
        "interrupted"
        if stop.signum is not None
        else f"{max(0.0, left):.0f} s left of --try-time-limit, "
        f"less than the baseline trial took ({baseline.seconds:.0f} s)"
    )
    result.notes.append(f"{what} not run: {why}")
    return False


def batch_size_of(trial: TrialRun) -> int | None:
    """The trial's batch size: the DataLoader batch size matching its samples per step (else the
    first loader's), None when no DataLoader with a batch size was created."""
    sizes = [b for b in trial.batch_sizes if b > 0]
    if not sizes:
        return None
    samples = None if trial.measured is None else trial.measured.samples
    return next((b for b in sizes if samples is not None and b == round(samples)), sizes[0])


def analyze_baseline(path: Path, warmup: int) -> tuple[Report | None, str | None]:
    """The baseline's analysis without the trial's warm-up steps (a trial is short: its first step,
    which finds the model and creates the trace, would otherwise weigh on every mean)."""
    import polars as pl

    from analyzer.api import analyze
    from gpuanalyze.ingest import schema as S
    from gpuanalyze.ingest.sources import load_any

    try:
        trace = load_any(path)
        steady = trace.frame.filter(pl.col(S.STEP) >= pl.col(S.STEP).min().over(S.RANK) + warmup)
        return analyze(dataclasses.replace(trace, frame=steady)), None
    except GpuAnalyzeError as exc:
        return None, str(exc)


def run_trial(
    name: str,
    command: list[str],
    profile: ProfileOptions,
    setting: TrialSetting,
    directory: Path,
    options: TryOptions,
    deadline: float,
    stop: _Stop,
) -> TrialRun:
    """Run the command once with ``setting`` applied, until it stops after its steps, ends, or the deadline."""
    run_id = uuid.uuid4().hex
    log = directory / LOG_NAME
    tagged = dataclasses.replace(profile, tags={**profile.tags, "gpuanalyze_trial": setting.slug()})
    env = child_env(tagged, directory, run_id)
    env.update(trial_env.env_for(setting, stop_after=options.stop_after, log=str(log)))
    started = time.monotonic()
    try:
        child = subprocess.Popen(command, env=env, start_new_session=True, stdout=2 if stop.stdout_to_stderr else None)
    except OSError as exc:
        with contextlib.suppress(OSError):
            directory.rmdir()
        raise GpuAnalyzeError(f"cannot run {command[0]!r}: {exc.strerror or exc}") from exc
    stop.child = child
    tree = trial_reap.Tree(child.pid)
    outcome = None
    try:
        returncode = _wait(child, tree, deadline)
        if returncode is None:
            outcome = "time_limit"
            returncode = _kill_group(child)
    finally:
        stop.child = None
        left = tree.kill()  # after every trial: what it started and left behind (setsid children too)
    entries = _read_log(log)
    stopped = any(e.get("event") == "stop" for e in entries)
    if outcome is None:
        if stop.signum is not None:
            outcome = "interrupted"
        elif returncode != 0:
            outcome = "failed"
        else:
            outcome = "stopped" if stopped else "ended"
    traces = tuple(traces_of(directory, run_id))
    measured = measure(traces[0], options.warmup) if traces else None
    return TrialRun(
        name=name,
        setting=setting,
        directory=directory,
        outcome=outcome,
        returncode=returncode,
        traces=traces,
        measured=measured,
        loaders=tuple(_loader_line(e) for e in entries if e.get("event") == "loader" and e.get("changed")),
        batch_sizes=tuple(
            e["batch_size"] for e in entries if e.get("event") == "loader" and type(e.get("batch_size")) is int
        ),
        seconds=time.monotonic() - started,
        left_running=left,
    )


def _wait(child: subprocess.Popen[bytes], tree: trial_reap.Tree, deadline: float) -> int | None:
    """The trial's exit status, or None at the deadline; records its descendants meanwhile."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return child.poll()
        try:
            return child.wait(timeout=min(left, trial_reap.SCAN_EVERY_S))
        except subprocess.TimeoutExpired:
            tree.scan()


class _Stop:
    """A signal reached the launcher: it is passed to the running trial, and no further trial starts."""

    def __init__(self, stdout_to_stderr: bool = False) -> None:
        self.stdout_to_stderr = stdout_to_stderr
        self.signum: int | None = None
        self.child: subprocess.Popen[bytes] | None = None


@contextlib.contextmanager
def _forwarding_signals(stop: _Stop) -> Iterator[None]:
    def forward(signum: int, frame: FrameType | None) -> None:
        stop.signum = signum
        child = stop.child
        if child is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signum)

    with signals_handled((signal.SIGINT, signal.SIGTERM, signal.SIGHUP), forward):
        yield


def _kill_group(child: subprocess.Popen[bytes]) -> int:
    """SIGTERM the trial's process group, SIGKILL it after KILL_GRACE_S; returns the exit status."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signum)
        try:
            return child.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            continue
    return child.wait()


def _new_dir(out_dir: Path, index: int, slug: str) -> Path:
    """A new subdirectory ``trial-<index>-<slug>`` (``-1``, ``-2`` ... when taken): nothing existing is reused."""
    base = f"trial-{index}-{slug}"
    for n in range(1000):
        path = out_dir / (base if n == 0 else f"{base}-{n}")
        if create_dir(path):
            return path
    raise GpuAnalyzeError(f"{out_dir}: too many {base}-N directories; choose another --out")


def _read_log(path: Path) -> list[dict[str, Any]]:
    entries = []
    with contextlib.suppress(OSError):
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict):
                    entries.append(entry)
    return entries


def _loader_line(entry: dict[str, Any]) -> str:
    changed = entry.get("changed")
    parts = []
    if isinstance(changed, dict):
        for key, values in changed.items():
            if isinstance(values, list) and len(values) == 2:
                parts.append(f"{key} {values[0]} -> {values[1]}")
    return f"DataLoader({entry.get('dataset', '?')}) in pid {entry.get('pid', '?')}: {', '.join(parts)}"


def _cores() -> int:
    """Cores this job may use (its affinity mask)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _why_no_baseline(baseline: TrialRun) -> str:
    if baseline.outcome == "time_limit":
        return "the baseline trial was still running at the time limit (raise --try-time-limit)"
    if baseline.outcome == "interrupted":
        return "the baseline trial was interrupted"
    if baseline.outcome == "failed":
        return f"the baseline trial failed ({_status(baseline.returncode)})"
    if not baseline.traces:
        return "the baseline trial left no trace (no Python process of the command ran an optimizer step)"
    return (
        "the baseline trial recorded too few steps after the warm-up to measure "
        "(the script ends sooner: lower --try-warmup/--try-steps)"
    )


def _status(returncode: int | None) -> str:
    if returncode is None:
        return "not run"
    return f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"

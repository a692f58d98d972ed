"""`gpuanalyze run --try`: measure fixes instead of guessing them.

The command runs once as the baseline trial (profiled as `gpuanalyze run` does, but stopped
after warm-up + N steps), the baseline is analysed, candidates are derived from its findings
(analyzer.run.candidates), and the command runs once more per candidate with that setting applied
in its processes through environment variables (analyzer.run.trial_env, trial_child). Each trial
writes its traces into a new subdirectory of the output directory and runs in its own process
group, not its own session: a new session would also be a new scheduling autogroup (Linux
``sched_autogroup``, one per session, at default weight whatever the caller's), and trials must
be scheduled like the run they measure. Its whole tree is killed after it ends or at the total
time limit (analyzer.run.trial_reap). A trial that changed the user's files stops the trials
(analyzer.run.trial_files); ``GPUANALYZE_TRIAL=1`` is set so that scripts can skip checkpoints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from analyzer.errors import GpuAnalyzeError
from analyzer.record.profile_options import ProfileOptions
from analyzer.run import trial_env, trial_files, trial_reap
from analyzer.run.candidates import Candidate, derive, given, on_accelerator
from analyzer.run.launch import child_env, create_dir, prepare_out_dir, signals_handled, traces_of
from analyzer.run.summary import verdict_line
from analyzer.run.trial_env import TrialSetting
from analyzer.run.trial_measure import Baselines, Measured, beats, comparable_ms, measure
from analyzer.run.try_options import TryOptions

if TYPE_CHECKING:
    from analyzer.planning.outcome import Report

#: Name of the per-trial log the child processes append to (loaders, warnings, the stop).
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
    log: tuple[dict[str, Any], ...] = ()
    """The entries its processes wrote to its log (analyzer.run.trial_child)."""
    seconds: float = 0.0

    def entries(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.log if e.get("event") == event]

    @property
    def loaders(self) -> tuple[str, ...]:
        """One line per DataLoader whose arguments the trial changed."""
        return tuple(_loader_line(e) for e in self.entries("loader") if e.get("changed"))

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """The batch size of each DataLoader the trial's processes created, in order."""
        return tuple(e["batch_size"] for e in self.entries("loader") if type(e.get("batch_size")) is int)


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
    files_changed: str | None = None
    """Which trial changed which of the user's files (None: none did); no trial ran after it."""

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
        return (candidate, trial) if beats(base.runs, trial.measured) else None

    @property
    def baseline_failed(self) -> bool:
        return self.baseline.outcome in ("failed", "time_limit", "interrupted") or self.baseline.measured is None


def try_command(
    command: list[str],
    profile: ProfileOptions,
    options: TryOptions,
    out_dir: Path,
    *,
    stdout_to_stderr: bool = False,
    say: Callable[[str], None] = lambda line: None,
) -> TryResult:
    """Run the baseline and the candidates; raises GpuAnalyzeError if the command cannot start.
    ``stdout_to_stderr``: the trials' standard output goes to stderr (``--json`` keeps stdout for the
    result); ``say``: where the lines the user must read before the trials go."""
    out_dir, _ = prepare_out_dir(out_dir)
    with tempfile.TemporaryDirectory(prefix="gpuanalyze-try-") as private:
        token, files = trial_env.new_token(Path(private)), trial_files.Files(command, [out_dir, Path(private)])
        deadline = time.monotonic() + options.time_limit_s
        trials = _Trials(command, profile, options, out_dir, deadline, say, stdout_to_stderr, token, files)
        result = trials.run_all()
    result.interrupted_by = trials.signum
    return result


@dataclass(slots=True)
class _Trials:
    command: list[str]
    profile: ProfileOptions
    options: TryOptions
    out_dir: Path
    deadline: float
    say: Callable[[str], None]
    stdout_to_stderr: bool
    token: str
    """The value of trial_env.TOKEN that makes the trial variables count (trial_env.genuine)."""
    files: trial_files.Files
    signum: int | None = None
    """A signal that reached the launcher: it is passed to the running trial, and no further trial starts."""
    child: subprocess.Popen[bytes] | None = None

    def run_all(self) -> TryResult:
        options = self.options
        n, k = options.baselines, len(options.candidates)
        runs = f"{n + k} times ({n} baselines, {k} candidates)" if k else f"{n} times, then once per candidate"
        self.say(
            f"gpuanalyze: --try will run your command {runs}, each for {options.stop_after} optimizer steps, "
            "then end it without its exit handlers; GPUANALYZE_TRIAL=1 is set so that it can skip its "
            f"checkpoints. A trial that changes a file under {Path.cwd()} or on the command line stops the trials."
            + ("" if self.files.complete else f" Only the first {len(self.files.last):,} files are checked.")
        )
        with _forwarding_signals(self), trial_reap.subreaper():
            baseline = self.run("baseline", TrialSetting(), 0)
            result = TryResult(out_dir=self.out_dir, baseline=baseline)
            if result.baseline_failed or not baseline.traces:
                result.problem = _why_no_baseline(baseline)
                return self.checked(result, baseline)
            result.report, result.problem = analyze_baseline(baseline.traces[0], options.warmup)
            if result.report is not None:
                self.say(verdict_line(result.report).replace("gpuanalyze:", "gpuanalyze: baseline:", 1))
            if not self.checked(result, baseline).files_changed:
                self.candidates(result)
        return result

    def candidates(self, result: TryResult) -> None:
        baseline = result.baseline
        for n in range(2, self.options.baselines + 1):
            if not self.time_for(f"baseline {n}", result):
                break
            again = self.run(f"baseline {n}", TrialSetting(), 0, f"baseline{n}")
            result.repeats.append(again)
            if self.checked(result, again).files_changed:
                return
        accelerator = on_accelerator(result.report)
        batch = batch_size_of(baseline)
        if self.options.candidates:
            candidates, notes = given(
                self.options.candidates, result.report, accelerator=accelerator, current_batch=batch
            )
        else:
            workers = None if baseline.measured is None else baseline.measured.loader_workers
            candidates, notes = derive(
                result.report, cores=_cores(), accelerator=accelerator, current_workers=workers, current_batch=batch
            )
        result.notes += notes + _batch_notes(baseline, candidates)
        self.say(f"gpuanalyze: {len(candidates)} candidate(s): your command runs {len(candidates)} more time(s)")
        for index, candidate in enumerate(candidates, start=1):
            name = f"candidate {index}"
            if result.files_changed or not self.time_for(f"{name} ({candidate.setting.label()})", result):
                result.trials.append((candidate, TrialRun(name, candidate.setting, None, "not_run")))
                continue
            trial = self.run(name, candidate.setting, index)
            result.trials.append((candidate, trial))
            self.checked(result, trial)

    def checked(self, result: TryResult, trial: TrialRun) -> TryResult:
        """``result``, with ``files_changed`` set when ``trial`` changed the user's files."""
        changed = self.files.changed()
        if changed:
            shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
            result.files_changed = (
                f"{trial.name} changed {shown}; no trial ran after it, since each would start from what the one "
                "before left. To try the fixes, make the script skip its writes when GPUANALYZE_TRIAL is 1 "
                '(if os.environ.get("GPUANALYZE_TRIAL") != "1": ...), or run the trials on a copy.'
            )
        return result

    def time_for(self, what: str, result: TryResult) -> bool:
        """Whether another trial may start (no signal came, and the time left holds one more baseline's
        worth); when not, a note says why."""
        left = self.deadline - time.monotonic()
        if self.signum is None and left >= result.baseline.seconds:
            return True
        why = (
            "interrupted"
            if self.signum is not None
            else f"{max(0.0, left):.0f} s left of --try-time-limit, "
            f"less than the baseline trial took ({result.baseline.seconds:.0f} s)"
        )
        result.notes.append(f"{what} not run: {why}")
        return False

    def run(self, name: str, setting: TrialSetting, index: int, slug: str | None = None) -> TrialRun:
        return run_trial(name, setting, _new_dir(self.out_dir, index, slug or setting.slug()), self)


def batch_size_of(trial: TrialRun) -> int | None:
    """The trial's batch size: the DataLoader batch size matching its samples per step (else the
    first loader's), None when no DataLoader with a batch size was created."""
    sizes = [b for b in trial.batch_sizes if b > 0]
    if not sizes:
        return None
    samples = None if trial.measured is None else trial.measured.samples
    return next((b for b in sizes if samples is not None and b == round(samples)), sizes[0])


def _batch_notes(baseline: TrialRun, candidates: list[Candidate]) -> list[str]:
    """What the batch-size trials mean, or why there is none (a loader with its own batch sampler)."""
    if any(c.setting.changes_batch for c in candidates):
        return [
            "batch size and accumulation trials measure speed per sample only: the learning rate "
            "(and its schedule) for another batch is your call"
        ]
    loaders = baseline.entries("loader")
    own = sorted({str(e["batch_sampler"]) for e in loaders if e.get("batch_size") is None and e.get("batch_sampler")})
    return [f"batch_size not tried: the DataLoader batches with its own {', '.join(own)}"] if own else []


def analyze_baseline(path: Path, warmup: int) -> tuple[Report | None, str | None]:
    """The baseline's analysis without the trial's warm-up steps (a trial is short: its first step,
    which finds the model and creates the trace, would otherwise weigh on every mean)."""
    import polars as pl

    from analyzer.api import analyze
    from gpuanalyze.ingest.sources import load_any
    from gpuanalyze.ingest.trace import schema as S

    try:
        trace = load_any(path)
        steady = trace.frame.filter(pl.col(S.STEP) >= pl.col(S.STEP).min().over(S.RANK) + warmup)
        return analyze(dataclasses.replace(trace, frame=steady)), None
    except GpuAnalyzeError as exc:
        return None, str(exc)


def run_trial(name: str, setting: TrialSetting, directory: Path, trials: _Trials) -> TrialRun:
    """Run the command once with ``setting`` applied, until it stops after its steps, ends, or the deadline."""
    run_id = uuid.uuid4().hex
    log = directory / LOG_NAME
    tagged = dataclasses.replace(trials.profile, tags={**trials.profile.tags, "gpuanalyze_trial": setting.slug()})
    env = {k: v for k, v in child_env(tagged, directory, run_id).items() if not trial_env.is_trial_variable(k)}
    env.update(trial_env.env_for(setting, stop_after=trials.options.stop_after, log=str(log), token=trials.token))
    started = time.monotonic()
    try:  # its own process group, in this session (see the module docstring)
        child = subprocess.Popen(
            trials.command, env=env, process_group=0, stdout=2 if trials.stdout_to_stderr else None
        )
    except OSError as exc:
        with contextlib.suppress(OSError):
            directory.rmdir()
        raise GpuAnalyzeError(f"cannot run {trials.command[0]!r}: {exc.strerror or exc}") from exc
    trials.child = child
    tree = trial_reap.Tree(child.pid)
    try:
        returncode = _wait(child, tree, trials.deadline)
    finally:
        trials.child = None
        tree.kill()  # after every trial: what it started and left behind (setsid children too)
    entries = _read_log(log)
    if returncode is None:
        outcome, returncode = "time_limit", child.wait()
    elif trials.signum is not None:
        outcome = "interrupted"
    elif returncode != 0:
        outcome = "failed"
    else:
        outcome = "stopped" if any(e.get("event") == "stop" for e in entries) else "ended"
    traces = tuple(traces_of(directory, run_id))
    return TrialRun(
        name=name,
        setting=setting,
        directory=directory,
        outcome=outcome,
        returncode=returncode,
        traces=traces,
        measured=measure(traces[0], trials.options.warmup) if traces else None,
        log=tuple(entries),
        seconds=time.monotonic() - started,
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


@contextlib.contextmanager
def _forwarding_signals(trials: _Trials) -> Iterator[None]:
    def forward(signum: int, frame: FrameType | None) -> None:
        trials.signum = signum
        child = trials.child
        if child is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signum)

    with signals_handled((signal.SIGINT, signal.SIGTERM, signal.SIGHUP), forward):
        yield


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
    changed = entry["changed"] if isinstance(entry.get("changed"), dict) else {}
    parts = [f"{k} {v[0]} -> {v[1]}" for k, v in changed.items() if isinstance(v, list) and len(v) == 2]
    return f"DataLoader({entry.get('dataset', '?')}) in pid {entry.get('pid', '?')}: {', '.join(parts)}"


def _cores() -> int:
    """Cores this job may use (its affinity mask)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _why_no_baseline(baseline: TrialRun) -> str:
    code = baseline.returncode or 0
    why = {
        "time_limit": "was still running at the time limit (raise --try-time-limit)",
        "interrupted": "was interrupted",
        "failed": f"failed ({f'killed by signal {-code}' if code < 0 else f'exit status {code}'})",
    }.get(baseline.outcome)
    if why is None:
        why = (
            "recorded too few steps after the warm-up to measure (it ends sooner: lower --try-warmup/--try-steps)"
            if baseline.traces
            else "left no trace (no Python process of the command ran an optimizer step)"
        )
    return f"the baseline trial {why}"

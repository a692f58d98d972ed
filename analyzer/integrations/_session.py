"""What the Lightning and Hugging Face callbacks share: one profile driven by a framework's hooks.

The framework says where steps end (one trace row per optimizer step, so gradient accumulation
gives one row per accumulated step) and when validation runs (not counted). Nothing here raises
into the training loop: the profiler's hooks are guarded, and the end-of-run analysis reports a
failure as one warning.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from analyzer.errors import GpuAnalyzeError
from analyzer.record.notify import warn
from analyzer.record.profile_options import ProfileOptions

if TYPE_CHECKING:
    from analyzer.planning.outcome import Report
    from analyzer.record.profiler import Profiler
    from analyzer.track.log_options import LogOptions


def make_options(out: str | Path, options: dict[str, Any]) -> ProfileOptions:
    """Options for a callback; a bad one raises GpuAnalyzeError when the callback is created."""
    if "manual_steps" in options:
        raise GpuAnalyzeError("manual_steps is set by the callback (the framework marks the steps)")
    try:
        return ProfileOptions(out=Path(out), manual_steps=True, **options)
    except TypeError as exc:
        raise GpuAnalyzeError(f"GpuAnalyzeCallback: {exc}") from exc


def make_log_to(log_to: str | Iterable[str] | LogOptions | None) -> LogOptions | None:
    """A callback's ``log_to=`` ('mlflow', 'wandb', both, or LogOptions); checked when the callback is created."""
    from analyzer.track.log_options import log_options

    options = log_options(log_to)
    if options is not None:
        options.check_installed()
    return options


def fresh_line() -> None:
    """End the line a progress bar (tqdm) left the cursor on, so the report starts at column 0.

    A progress bar redraws its line with a carriage return and leaves the cursor after it; a newline
    first costs one blank line when the cursor already was at a line's start."""
    try:
        sys.stdout.write("\n")
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):  # no usable stdout: the report will fail quietly too
        pass


class Session:
    """One profiled fit/train call."""

    def __init__(
        self,
        options: ProfileOptions,
        *,
        recorder: str,
        logger: logging.Logger,
        report: bool,
        log_to: LogOptions | None = None,
    ) -> None:
        self.options = options
        self.log_to = log_to
        self.recorder = recorder
        self.logger = logger
        self.print_report = report
        self.profiler: Profiler | None = None
        self.report: Report | None = None

    def start(self, model: Any, *, forward_hooks: bool, samples_from_loader: bool = True) -> None:
        from analyzer.record.profiler import Profiler

        self.abandon("exception")  # a previous fit that raised without telling us
        self.report = None
        try:
            self.profiler = Profiler(
                model,
                options=self.options,
                recorder=self.recorder,
                forward_hooks=forward_hooks,
                samples_from_loader=samples_from_loader,
            ).__enter__()
        except Exception as exc:  # noqa: BLE001 - e.g. a model the profiler cannot hook: train unprofiled
            warn(f"gpuanalyze: not profiling this run ({type(exc).__name__}: {exc})")
            self.profiler = None

    def _on(self, hook: Callable[[Profiler], object]) -> None:
        """``hook`` on the profiler while one records (after a failed start every hook does nothing)."""
        if self.profiler is not None:
            hook(self.profiler)

    def step(self) -> None:
        self._on(lambda p: p.step())

    def forward_begin(self) -> None:
        self._on(lambda p: p._forward_begin())

    def forward_end(self) -> None:
        self._on(lambda p: p._forward_end())

    def skip(self) -> None:
        """Drop what ran since the last step boundary (validation) from the next step."""
        self._on(lambda p: p._skip_since_boundary())

    def end(self, exc: BaseException | None = None) -> Path | None:
        """Close the trace; returns its path (None when nothing was recorded)."""
        prof, self.profiler = self.profiler, None
        if prof is None:
            return None
        prof.finish(exc)
        return prof.path

    def abandon(self, status: str) -> None:
        """Close a profile the framework never ended (its run raised)."""
        if self.profiler is not None and self.profiler.enabled:
            self.end(RuntimeError(f"the {self.recorder} run ended without reaching its end of training ({status})"))
        self.profiler = None

    def analyse(self, path: Path | None) -> Report | None:
        """Analyse the finished trace, log the verdict and print the report; never raises."""
        if path is None:
            return None
        try:
            from analyzer.run.summary import analyze_quietly, print_terminal, verdict_line

            report, problem = analyze_quietly(path)
            if report is None:
                self.logger.warning("gpuanalyze: no analysis of %s (%s)", path, problem)
                return None
            self.report = report
            self.logger.info("%s (trace: %s)", verdict_line(report), path)
            if self.print_report:
                fresh_line()
                print_terminal(report)
            if self.log_to is not None:
                from analyzer.track.log_report import log_quietly

                for line in log_quietly(report, self.log_to):
                    self.logger.info("gpuanalyze: %s", line)
            return report
        except Exception as exc:  # noqa: BLE001 - the run is over; say it once
            warn(f"gpuanalyze: could not analyse {path} ({type(exc).__name__}: {exc})")
            return None


class SessionCallback:
    """What both callbacks are made of: their options, checked when the callback is made, the ``Session``
    the framework's hooks drive, ``report`` and ``path``. A callback names its ``RECORDER`` and ``LOGGER``."""

    RECORDER: ClassVar[str]
    LOGGER: ClassVar[logging.Logger]

    def __init__(
        self,
        out: str | Path = "trace.arrow",
        *,
        report: bool = True,
        log_to: str | Iterable[str] | None = None,
        **profile_options: Any,
    ) -> None:
        super().__init__()
        self._session = Session(
            make_options(out, profile_options),
            recorder=self.RECORDER,
            logger=self.LOGGER,
            report=report,
            log_to=make_log_to(log_to),
        )
        self.path: Path | None = None
        """The trace file of the last training run on this process (set when it ends)."""

    @property
    def report(self) -> Report | None:
        """The analysis of the last training run (None before it ends, or when nothing was recorded)."""
        return self._session.report

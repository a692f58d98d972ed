"""Which trackers to log a report to, checked before any work starts."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass

from analyzer.errors import GpuAnalyzeError

#: Tracker -> (the module it needs, the gpuanalyze extra that installs it).
TRACKERS: dict[str, tuple[str, str]] = {"mlflow": ("mlflow", "mlflow"), "wandb": ("wandb", "wandb")}


@dataclass(kw_only=True, slots=True)
class LogOptions:
    """Where a report is logged, and as what."""

    to: tuple[str, ...]
    """Trackers, in order: 'mlflow' (the active run, else a new one in MLFLOW_TRACKING_URI's store)
    and/or 'wandb' (the active run, else a new one; WANDB_MODE=offline works)."""
    run_name: str | None = None
    """Name of the run created when none is active (default: gpuanalyze-<trace name>)."""
    html: bool = True
    """Also log the HTML report as an artifact (needs the report extra, plotly; skipped with a note without it)."""

    def __post_init__(self) -> None:
        if isinstance(self.to, str):
            self.to = (self.to,)
        self.to = tuple(dict.fromkeys(self.to))
        for name in self.to:
            if name not in TRACKERS:
                raise GpuAnalyzeError(f"--log {name!r}: choose one of {', '.join(TRACKERS)} (repeat --log for both)")
        if not self.to:
            raise GpuAnalyzeError("log_to: name a tracker, 'mlflow' or 'wandb'")

    def check_installed(self) -> None:
        """Raise GpuAnalyzeError naming the extra for a tracker whose package is not installed."""
        for name in self.to:
            module, extra = TRACKERS[name]
            if importlib.util.find_spec(module) is None:
                raise GpuAnalyzeError(f"--log {name} needs {module}: pip install 'gpuanalyze[{extra}]'")


def log_options(to: str | Iterable[str] | LogOptions | None) -> LogOptions | None:
    """A callback's or command's ``log_to`` as LogOptions (None: log nowhere)."""
    if to is None or isinstance(to, LogOptions):
        return to
    names = (to,) if isinstance(to, str) else tuple(to)
    return LogOptions(to=names) if names else None

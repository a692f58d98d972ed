"""gpuanalyze: profiling-driven bottleneck analysis for GPU training.

``with analyzer.profile(model):`` records a training loop; ``analyzer.analyze(path)`` says what
limits it (``analyzer.ReadOptions``: cost, ceilings, engine). Analysing needs neither torch nor a GPU.
Names are imported on first use, so ``import analyzer`` (and ``gpuanalyze --version``) stays cheap.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analyzer.errors import GpuAnalyzeError, GpuAnalyzeWarning, TraceError
from analyzer.version import __version__

if TYPE_CHECKING:
    from analyzer.analysis.findings import Evidence, Finding
    from analyzer.api import ReadOptions, analyze, report
    from analyzer.planning.outcome import Report
    from analyzer.record.profile_options import ProfileOptions
    from analyzer.record.profiler import Profiler
    from gpuanalyze.ingest.trace.reader import Trace, load_trace

__all__ = [
    "Evidence",
    "Finding",
    "GpuAnalyzeError",
    "GpuAnalyzeWarning",
    "ProfileOptions",
    "ReadOptions",
    "Report",
    "Trace",
    "TraceError",
    "__version__",
    "analyze",
    "load_trace",
    "profile",
    "report",
]

_LAZY = {
    "Evidence": "analyzer.analysis.findings",
    "Finding": "analyzer.analysis.findings",
    "Report": "analyzer.api",
    "analyze": "analyzer.api",
    "ProfileOptions": "analyzer.record.profile_options",
    "ReadOptions": "analyzer.api",
    "Trace": "gpuanalyze.ingest.trace.reader",
    "load_trace": "gpuanalyze.ingest.trace.reader",
    "report": "analyzer.api",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'analyzer' has no attribute {name!r}")


def profile(
    model: Any = None,
    *,
    out: str | Path = "trace.arrow",
    optimizer: Any = None,
    dataloader: Any = None,
    overwrite: bool = False,
    tags: dict[str, str] | None = None,
    **options: Any,
) -> Profiler:
    """Profile a training loop: ``with analyzer.profile(model, out="trace.arrow") as prof:``.

    ``model`` is a module, several (``[G, D]``, ``{"G": G, "D": D}``, an ``nn.ModuleDict``: each
    forward is timed under its own name), or None to find the models at the first optimizer step.
    ``optimizer`` fixes which optimizer's step ends a training step (default: the first one
    seen); ``dataloader`` limits data-wait timing to that loader (default: every DataLoader;
    ``with prof.data():`` times a custom loader). Further keyword arguments are ProfileOptions
    fields (device, manual_steps, kernel_windows, window_first, window_every, window_steps,
    flush_interval_s, flush_every_steps, system_interval_s, nvtx). Needs torch (without it: one line and
    SystemExit(1)). Raises TypeError for a model it cannot time.
    """
    if importlib.util.find_spec("torch") is None:  # one line and exit status 1, not an ImportError's traceback
        raise SystemExit("gpuanalyze: analyzer.profile needs torch (not installed): pip install 'gpuanalyze[torch]'")
    from analyzer.record.profile_options import ProfileOptions
    from analyzer.record.profiler import Profiler

    try:
        opts = ProfileOptions(out=Path(out), overwrite=overwrite, tags=dict(tags or {}), **options)
    except TypeError as exc:
        raise GpuAnalyzeError(f"analyzer.profile: {exc}") from exc
    return Profiler(model, optimizer=optimizer, dataloader=dataloader, options=opts)

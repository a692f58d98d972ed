"""gpuanalyze: profiling-driven bottleneck analysis for GPU training.

Analysing a trace needs neither torch nor a GPU; ``profile`` imports torch when it starts.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

from analyzer.analyze import analyze  # noqa: E402
from analyzer.collect.options import ProfileOptions  # noqa: E402
from analyzer.findings import Evidence, Finding, Report  # noqa: E402
from ingest.errors import GpuAnalyzeError, TraceError  # noqa: E402
from ingest.reader import Trace, load_trace  # noqa: E402

__all__ = [
    "Evidence",
    "Finding",
    "GpuAnalyzeError",
    "ProfileOptions",
    "Report",
    "Trace",
    "TraceError",
    "analyze",
    "load_trace",
    "profile",
]


def profile(model: Any, *, out: str = "trace.arrow", optimizer: Any = None, dataloader: Any = None,
            overwrite: bool = False, tags: dict[str, str] | None = None, **options: Any) -> Any:
    """Profile a training loop: ``with analyzer.profile(model, out="trace.arrow"):``.

    ``optimizer`` fixes which optimizer's step ends a training step (default: the first one
    seen); ``dataloader`` limits data-wait timing to that loader (default: every DataLoader).
    Further keyword arguments are ProfileOptions fields (device, manual_steps, kernel_windows,
    window_first, window_every, window_steps, flush_interval_s, flush_every_steps). Needs torch.
    """
    from analyzer.collect.profiler import Profiler

    try:
        opts = ProfileOptions(out=out, overwrite=overwrite, tags=dict(tags or {}), **options)
    except TypeError as exc:
        raise GpuAnalyzeError(f"analyzer.profile: {exc}") from exc
    return Profiler(model, optimizer=optimizer, dataloader=dataloader, options=opts)

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
            overwrite: bool = False, tags: dict[str, str] | None = None, manual_steps: bool = False, device: str = "auto",
            flush_interval_s: float = 1.0, flush_every_steps: int = 50) -> Any:
    """Profile a training loop: ``with analyzer.profile(model, out="trace.arrow"):``.

    ``optimizer`` fixes which optimizer's step ends a training step (default: the first one
    seen); ``dataloader`` limits data-wait timing to that loader (default: every DataLoader).
    See ProfileOptions for the other arguments. Needs torch.
    """
    from analyzer.collect.profiler import Profiler

    options = ProfileOptions(out=out, overwrite=overwrite, tags=dict(tags or {}), manual_steps=manual_steps, device=device,
                             flush_interval_s=flush_interval_s, flush_every_steps=flush_every_steps)
    return Profiler(model, optimizer=optimizer, dataloader=dataloader, options=options)

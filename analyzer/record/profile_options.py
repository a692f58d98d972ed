"""Options of ``analyzer.profile``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from analyzer.errors import GpuAnalyzeError
from gpuanalyze.ingest.trace.writer import WriterOptions


@dataclass(kw_only=True, slots=True)
class ProfileOptions:
    """Where the trace goes and how the collector behaves."""

    out: Path = Path("trace.arrow")
    """Trace file. In a multi-rank run each rank writes ``<stem>.rank<N><suffix>`` beside it."""
    overwrite: bool = False
    """Replace an existing file. Without it an existing file is kept and a new unique name is used."""
    tags: dict[str, str] = field(default_factory=dict)
    """Free-form labels stored in the trace metadata (experiment name, commit, ...)."""
    manual_steps: bool = False
    """Only ``prof.step()`` ends a step (otherwise its first call switches automatic boundaries off)."""
    device: str = "auto"
    """'cuda' times phases with CUDA events, 'cpu' with the host clock; 'auto': cuda when the model is on a GPU."""
    kernel_windows: bool | None = None
    """Sample torch.profiler windows for kernel-level evidence (sparse). None: only when the model runs on
    an accelerator. On a CPU run (True) the windows record ATen op times: the matmul share and the per-call
    bound its projections then measure (docs/projections.md)."""
    window_first: int = 50
    """Step at which the first kernel window starts (after warm-up)."""
    window_every: int = 2000
    """Steps from the start of one window to the start of the next."""
    window_steps: int = 3
    """Steps profiled in each window."""
    flush_interval_s: float = 1.0
    """Longest time a finished step waits in memory before it reaches the file."""
    flush_every_steps: int = 1000
    """Write as soon as this many steps are pending (the time bound, ``flush_interval_s``, is what a
    crash loses at most; this only bounds the rows held, and a larger value keeps fast loops cheaper:
    each write converts and fsyncs a batch while the training thread runs)."""
    system_interval_s: float | None = 1.0
    """Seconds between system-sampler readings (host CPU, memory, GPU; off the training thread);
    None switches the sampler off."""
    nvtx: bool = False
    """Emit NVTX ranges for each step and timed phase (``gpuanalyze:step#N``, ``gpuanalyze:forward``, ...) so an
    Nsight Systems capture shows them and ``gpuanalyze`` reads them back from its export; CUDA runs only."""

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        if self.device not in ("auto", "cuda", "cpu"):
            raise GpuAnalyzeError(f"device must be 'auto', 'cuda' or 'cpu', not {self.device!r}")
        if self.out.suffix == "":
            raise GpuAnalyzeError(f"out={str(self.out)!r} needs a file suffix such as .arrow")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.tags.items()):
            raise GpuAnalyzeError("tags must map strings to strings")
        if self.window_first < 0 or self.window_steps < 1 or self.window_every < self.window_steps:
            raise GpuAnalyzeError(
                "kernel windows need window_first >= 0, window_steps >= 1 and window_every >= window_steps"
            )
        if self.system_interval_s is not None and not 0.01 <= self.system_interval_s <= 3600:
            raise GpuAnalyzeError("system_interval_s must be between 0.01 and 3600 seconds, or None for no sampler")
        self.writer_options()

    def writer_options(self) -> WriterOptions:
        """The trace writer's options (validated there)."""
        return WriterOptions(flush_interval_s=self.flush_interval_s, flush_every_steps=self.flush_every_steps)

"""Start-up work in a Kineto trace: what a run does in its first steps and (almost) never again.

A step made mostly of this is warm-up, not the steady state, whatever its number. Recognised by name:

- compilation: torch.compile's phases, which PyTorch wraps in ``record_function("<phase> (dynamo_timed)")``
  (since 2.1; seen in torch 2.13's CPU-op events as ``_compile.compile_inner (dynamo_timed)``,
  ``OutputGraph.call_user_compiler (dynamo_timed)``, ``PyCodeCache.load_by_key_path (dynamo_timed)``, ...),
  CUPTI's "Driver Compiler" overhead (PTX JIT), and NVTX ranges that name NVRTC (runtime compilation by a
  JIT such as nvFuser, read from Nsight Systems captures). Not "Torch-Compiled Region", "TorchDynamo Cache
  Lookup" or "CompiledFunction": every step of a compiled model runs those;
- device memory: ``cudaMalloc``/``cudaFree``/``cudaHostAlloc`` and their driver and HIP kin (the caching
  allocators keep what they got: a steady step calls none of them); the stream-ordered ``*Async``
  variants are pooled, routine, and left out;
- module loading: ``cuModuleLoad*``, ``cuLibraryLoad*``, ``hipModuleLoad*``, and CUPTI's "Runtime
  Triggered Module Loading" / "Lazy Function Loading" overhead events (a kernel's first launch);
- device set-up: ``cudaGetDeviceProperties``, stream creation, ``cudaDeviceGetStreamPriorityRange`` (the
  first CUDA call made creates the context inside it); and, where the trace holds the process's CUDA
  initialisation (``cuInit``, the runtime's ``cuModuleGetLoadingMode`` query, ``cudaGetDeviceProperties``,
  primary context creation: calls a process makes once, before its first device work), the time from the
  first of them to the trace's first device activity: nothing has run on the GPU yet, so whatever the host
  does there (context creation inside other calls, building the model, loading libraries) is the process
  starting, not a step (``INIT_TO_FIRST_WORK``; an Nsight Systems capture starts with the process).

cudnn autotuning (``torch.backends.cudnn.benchmark``) leaves no event of its own in Kineto (cuDNN's API
is not traced): only its workspace allocations show, under allocation.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np

from gpuanalyze.ingest.timeline.intervals import subtract
from gpuanalyze.ingest.timeline.name_table import HostIntervals, NameTable

COMPILATION, ALLOCATION, MODULE_LOADING, DEVICE_SETUP = "compilation", "allocation", "module loading", "device set-up"
#: torch._dynamo.utils.dynamo_timed's record_function suffix.
COMPILE_SUFFIX = " (dynamo_timed)"
#: In the (lower-case) name of an NVTX range of runtime compilation (nvFuser: ``executor_utils::NVRTC``).
JIT_COMPILER = "nvrtc"
_CALL_PREFIXES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        ALLOCATION,
        (
            "cudaMalloc",
            "cudaFree",
            "cudaHostAlloc",
            "cudaHostRegister",
            "cudaHostUnregister",
            "cuMemAlloc",
            "cuMemFree",
            "cuMemHostAlloc",
            "cuMemCreate",
            "cuMemMap",
            "cuMemUnmap",
            "cuMemRelease",
            "cuMemAddressReserve",
            "cuMemSetAccess",
            "hipMalloc",
            "hipFree",
            "hipHostMalloc",
            "hipHostFree",
            "hipHostRegister",
            "hipExtMallocWithFlags",
        ),
    ),
    (MODULE_LOADING, ("cuModuleLoad", "cuLibraryLoad", "hipModuleLoad")),
    (
        DEVICE_SETUP,
        (
            "cudaGetDeviceProperties",
            "hipGetDeviceProperties",
            "cudaStreamCreate",
            "hipStreamCreate",
            "cudaDeviceGetStreamPriorityRange",
            "hipDeviceGetStreamPriorityRange",
            "cuCtxCreate",
            "cuDevicePrimaryCtxRetain",
            "cuInit",
            "cuModuleGetLoadingMode",
        ),
    ),
)
#: Calls a process makes once while it initialises CUDA (before its first device work): where one is recorded
#: before the trace's first device activity, the time from it to that activity is the process starting.
INIT_CALLS = (
    "cuInit",
    "cuModuleGetLoadingMode",
    "cudaGetDeviceProperties",
    "hipGetDeviceProperties",
    "cuCtxCreate",
    "cuDevicePrimaryCtxRetain",
)
INIT_TO_FIRST_WORK = "CUDA initialisation to the first GPU work"
#: CUPTI overhead activities (Kineto category ``overhead``) that are start-up work.
OVERHEAD_KINDS: dict[str, str] = {
    "Runtime Triggered Module Loading": MODULE_LOADING,
    "Lazy Function Loading": MODULE_LOADING,
    "Driver Compiler": COMPILATION,
}
#: Distinct names kept (hostile traces: every compile phase named differently); the rest share OTHER_NAME.
MAX_NAMES = 1 << 12
OTHER_NAME = "(other start-up work)"


def call_kind(name: str) -> str | None:
    """What start-up work a runtime/driver call is, or None for a call a steady step makes too."""
    if name.endswith("Async"):
        return None  # cudaMallocAsync, cudaFreeAsync: stream-ordered pools, routine in a steady step
    for kind, prefixes in _CALL_PREFIXES:
        if name.startswith(prefixes):
            return kind
    return None


def kind_of(name: str) -> str:
    """The kind of start-up work a name recorded by ``StartupSink`` is, in words."""
    if name.endswith(COMPILE_SUFFIX) or JIT_COMPILER in name.lower():
        return COMPILATION
    if name == INIT_TO_FIRST_WORK:
        return DEVICE_SETUP
    return OVERHEAD_KINDS.get(name) or call_kind(name) or "start-up"


@dataclass(frozen=True, slots=True)
class StartupWork(HostIntervals):
    """Start-up events (host intervals, microseconds), sorted by start, with the index of their name and
    whether they are outermost (inside no earlier-starting start-up event: what a step's list names)."""

    DTYPES = (np.float64, np.float64, np.int32, np.bool_)
    name: np.ndarray
    outermost: np.ndarray
    names: tuple[str, ...]


class StartupSink:
    """Collects start-up events while a trace is parsed; ``len`` counts them."""

    def __init__(self) -> None:
        self.ts, self.end, self.name = array("d"), array("d"), array("i")
        self._names = NameTable(MAX_NAMES, OTHER_NAME)
        self.first_init: float | None = None
        """Start of the earliest CUDA initialisation call (INIT_CALLS) seen."""

    def __len__(self) -> int:
        return len(self.ts)

    def call(self, name: str, ts: float, dur: float) -> None:
        """A runtime/driver call that is start-up work (``call_kind``: runtime_calls.call_facts says so once a name)."""
        self.add(name, ts, dur)
        if (self.first_init is None or ts < self.first_init) and name.startswith(INIT_CALLS):
            self.first_init = ts

    def add(self, name: str, ts: float, dur: float) -> None:
        self.ts.append(ts)
        self.end.append(ts + dur)
        self.name.append(self._names.id(name))

    def _init_to(self, lo: float, hi: float) -> None:
        """INIT_TO_FIRST_WORK over [lo, hi) outside the start-up calls already recorded there (those keep their
        own names: a first cudaMalloc that creates the context is still named)."""
        ts = np.array(self.ts, dtype=np.float64)  # copies: the arrays grow below
        end = np.array(self.end, dtype=np.float64)
        inside = (ts < hi) & (end > lo)
        gaps = subtract(np.array([lo]), np.array([hi]), ts[inside], end[inside])
        del ts, end
        for a, b in zip(gaps[0].tolist(), gaps[1].tolist(), strict=True):
            self.add(INIT_TO_FIRST_WORK, a, b - a)

    def finish(self, first_work: float | None = None) -> StartupWork:
        """The start-up work, with the process's start (INIT_TO_FIRST_WORK) where CUDA initialisation is recorded
        before ``first_work``, the trace's first device activity (us; None without any)."""
        if first_work is not None and self.first_init is not None and self.first_init < first_work:
            self._init_to(self.first_init, first_work)
        if not self.ts:
            return StartupWork.empty()
        start = np.frombuffer(self.ts, dtype=np.float64)
        end = np.frombuffer(self.end, dtype=np.float64)
        order = np.lexsort((-end, start))  # by start, the longer of two starting together first
        start, end = start[order], end[order]
        before = np.maximum.accumulate(end)
        outermost = np.ones(start.size, dtype=bool)
        outermost[1:] = end[1:] > before[:-1]
        return StartupWork(
            start, end, np.frombuffer(self.name, dtype=np.int32)[order], outermost, tuple(self._names.names)
        )

"""The timeline both importers fill: Chrome-trace events (a Kineto file's, decoded in batches by kineto/parse.py,
or an Nsight Systems export's rows, nsys/rows.py) go through ``TimelineSink``, which keeps only what the pass uses:
device activity (kernels, memcpy, memset on CUDA, ROCm, MTIA, HPU, XPU and other Kineto
backends), runtime/driver calls, the CPU annotations that mark step phases, ProfilerStep
windows, start-up work (compile phases, allocation and module-loading calls: startup_work.py) and the
allocator's ``[memory]`` instant events (step_memory.py).
Names are interned (one string per distinct kernel), so memory is about 40 bytes per kept event,
whatever the JSON spends on it, and events the importer does not use (most CPU ops, flows, other
instant events) cost nothing.

Handles old capitalised categories (``Kernel``, ``Runtime``, ``Memcpy``), ``gpu_memcpy``/
``gpu_memset``, CPU-only traces, traces without ``ProfilerStep``, exporters that write numbers as
strings, and metadata stored as Python-literal strings (parsed by a small, bounded literal
parser, never ``eval``). Values outside physical bounds (timestamps that do not fit in
nanoseconds since 1970 as int64, negative durations, correlation ids beyond int64, step numbers
beyond 2**53) are skipped with a note; wrong types in the run metadata are one TraceError.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from analyzer.errors import TraceError
from gpuanalyze.ingest.timeline.blocking_calls import BlockingCalls, CallSites, HostOps, role_of
from gpuanalyze.ingest.timeline.capture_meta import device_props, dist_info
from gpuanalyze.ingest.timeline.device_props import compute_capabilities, decoded_props, rocm_device
from gpuanalyze.ingest.timeline.kernel_names import MAX_NAME_CHARS, hta_kernel_type, kernel_category, memcpy_kind
from gpuanalyze.ingest.timeline.runtime_calls import BLOCKING, call_facts
from gpuanalyze.ingest.timeline.startup_work import COMPILE_SUFFIX, OVERHEAD_KINDS, StartupSink, StartupWork
from gpuanalyze.ingest.timeline.step_memory import MemorySink, StepMemory
from gpuanalyze.ingest.timeline.step_windows import resolve_windows
from gpuanalyze.ingest.timeline.trace_events import (
    CPU_CATS,
    DEVICE_OF_CAT,
    GPU_CATS,
    INT64,
    MARK_LOADER,
    MAX_DUR_US,
    MAX_STEP,
    MAX_TS_US,
    MULTI_PROCESS_ITER,
    OVERHEAD_CATS,
    RUNTIME_CATS,
    SINGLE_PROCESS_ITER,
    phase_mark,
)
from gpuanalyze.ingest.trace.byte_source import ReadLimits


@dataclass(frozen=True, slots=True)
class Intervals:
    """Events of one kind: start and end in microseconds."""

    start: np.ndarray
    end: np.ndarray

    @classmethod
    def from_arrays(cls, ts: array, dur: array) -> Intervals:
        """Of a sink's starts and durations, the durations made the ends where they are (a sink is finished once:
        no array of ends beside them)."""
        if not len(ts):
            return cls(np.empty(0), np.empty(0))
        start, end = np.frombuffer(ts, dtype=np.float64), np.frombuffer(dur, dtype=np.float64)
        end += start
        return cls(start, end)


@dataclass(frozen=True, slots=True)
class GpuKind:
    """One distinct device activity: its name and what is derived from it once."""

    name: str
    category: str
    """kernel_names.kernel_category: gemm_tensor_core, memcpy, communication, ..."""
    memcpy: str
    """kernel_names.memcpy_kind for memcpy names ('h2d', 'd2h', 'd2d', 'other'); '' for kernels."""
    pageable: bool
    hta_computation: bool
    """HTA counts it as computation (not communication, not memory)."""


@dataclass(frozen=True, slots=True)
class Timeline:
    """What the importer needs from a Kineto trace, in microseconds."""

    path: str
    gpu: Intervals
    gpu_kind: np.ndarray
    """Index into ``kinds`` of every device event."""
    kinds: tuple[GpuKind, ...]
    gpu_correlation: np.ndarray
    """-1 where the event has none (or an id beyond int64); int32 where every id fits (``_ids``)."""
    runtime: Intervals
    """Runtime/driver API calls."""
    runtime_sync: np.ndarray
    """True for blocking calls by API family (runtime_calls.py: every ``*Synchronize``, every memcpy without
    ``Async``)."""
    runtime_correlation: np.ndarray
    cpu: Intervals
    """CPU annotations that mark step phases (``cpu_mark`` says which)."""
    cpu_mark: np.ndarray
    steps: list[tuple[int, float, float]]
    """(step number, start, end) from ProfilerStep#N annotations, sorted."""
    rank: int | None
    world_size: int | None
    backend: str | None
    device_name: str | None
    device_memory: int | None
    device: str
    """'cuda' (also ROCm), 'mtia', 'hpu', 'xpu', ... when the trace has device activity; 'cpu' otherwise."""
    notes: list[str] = field(default_factory=list)
    loader_workers: int | None = None
    """From the DataLoader iterator class: 1 (at least one worker process; how many is not in the
    trace) for the multi-process iterator, 0 for the single-process one, None without either."""
    compute_capabilities: tuple[str, ...] | None = None
    """'major.minor' per deviceProperties entry (device_props.py)."""
    blocking: BlockingCalls = field(default_factory=BlockingCalls.empty)
    """Runtime calls that may block the host, with the CPU op and caller around each (blocking_calls.py)."""
    startup: StartupWork = field(default_factory=StartupWork.empty)
    """Compilation, allocation, module loading and device set-up events (startup_work.py)."""
    runtime_class: np.ndarray = field(default_factory=lambda: np.empty(0, np.int8))
    """runtime_calls.call_class of every runtime call (empty: all OTHER)."""
    runtime_tid: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    """The host thread of every runtime call (blocking_calls.CallSites' ids, as ``host_ops.tid`` and ``frames.tid``:
    offsets from the lowest where they fit in int32, ``_thread_codes``; empty: unknown)."""
    host_ops: HostOps = field(default_factory=HostOps.empty)
    """CPU ops (``cpu_op`` events) with their threads and names: what the host did while the GPU idled."""
    enqueue_calls: int = 0
    """Runtime calls that put device work on a stream (runtime_calls.enqueues): launches, copies, memsets."""
    frames: HostOps = field(default_factory=HostOps.empty)
    """The user's Python frames (``with_stack``), or record_function ranges without them (blocking_calls.py)."""
    span: tuple[float, float] | None = None
    """The capture's own start and end where the capture says (an Nsight Systems session), else None: its first
    and last event."""
    memory: StepMemory | None = None
    """The device's allocator totals over time, where the capture recorded them (step_memory.py)."""


#: Distinct (name, category) pairs of CPU events whose roles are cached (ops repeat: a few thousand names).
_ROLE_CACHE = 1 << 16


def cpu_role(name: str, cat: str) -> tuple[int | None, int, bool]:
    """(phase mark, call-site role, start-up work) of a CPU event, from its name and category alone."""
    return phase_mark(name, cat), role_of(name, cat), name.endswith(COMPILE_SUFFIX) or name in OVERHEAD_KINDS


class TimelineSink:
    """Keeps what the importer needs from batches of decoded events, as flat arrays."""

    def __init__(self, path: str, limits: ReadLimits) -> None:
        self.path, self.limits = path, limits
        self.g_ts, self.g_dur, self.g_kind = array("d"), array("d"), array("i")
        self.g_corr = array("q")
        self.r_ts, self.r_dur, self.r_sync, self.r_corr = array("d"), array("d"), array("b"), array("q")
        self.r_class, self.r_tid = array("b"), array("q")
        self.c_ts, self.c_dur, self.c_mark = array("d"), array("d"), array("b")
        self.steps: list[tuple[int, float, float, int]] = []
        """(step, start, end, thread) of each ProfilerStep annotation (step_windows.py resolves them)."""
        self._threads: dict[int | str | None, int] = {}
        self.kinds: list[GpuKind] = []
        self._kind_index: dict[tuple[str, str], int] = {}
        self._cats: dict[str, tuple[int, str]] = {}
        self.devices: set[str] = set()
        self.events = 0
        self.complete_events = 0
        self.bad_times = 0
        self.bad_ids = 0
        self.bad_steps = 0
        self.loader_iters: set[str] = set()
        self.long_names = 0
        self.enqueue_calls = 0
        self._roles: dict[tuple[str, str], tuple[int | None, int, bool]] = {}
        self.sites = CallSites()
        self.startup = StartupSink()
        self.memory = MemorySink()

    def _cat(self, raw: str) -> tuple[int, str]:
        """(0 skip, 1 device, 2 runtime, 3 cpu or profiler overhead), normalised category; cached per distinct
        string."""
        got = self._cats.get(raw)
        if got is None:
            lower = raw.lower()
            if lower in GPU_CATS:
                got = (1, GPU_CATS[lower])
            elif lower in RUNTIME_CATS:
                got = (2, lower)
            elif lower in CPU_CATS or lower in OVERHEAD_CATS:
                got = (3, lower)
            else:
                got = (0, lower)
            if got[0] in (1, 2) and lower in DEVICE_OF_CAT:
                self.devices.add(DEVICE_OF_CAT[lower])
            if len(self._cats) < 4096:
                self._cats[raw] = got
        return got

    def _times(self, e: Any) -> tuple[float, float] | None:
        ts, dur = e.ts, e.dur
        if type(ts) is not float or type(dur) is not float:
            try:
                ts, dur = float(ts), float(dur)
            except (TypeError, ValueError) as exc:
                raise TraceError(f"{self.path}: malformed event fields ({exc})") from exc
        if -MAX_TS_US <= ts <= MAX_TS_US and 0.0 <= dur <= MAX_DUR_US:
            return ts, dur
        self.bad_times += 1
        return None

    def _id(self, value: int | str | None) -> int:
        if type(value) is int:
            if -INT64 <= value < INT64:
                return value
            self.bad_ids += 1
        return -1

    def _kind(self, name: str, cat: str) -> int:
        if len(name) > MAX_NAME_CHARS:  # bounded names: linear matching, bounded memory and display
            self.long_names += 1
            name = name[:MAX_NAME_CHARS]
        key = (name, cat)
        kid = self._kind_index.get(key)
        if kid is None:
            category = kernel_category(name, cat)
            kid = len(self.kinds)
            self.kinds.append(
                GpuKind(
                    name=name,
                    category=category,
                    memcpy=memcpy_kind(name) if category == "memcpy" else "",
                    pageable="Pageable" in name,
                    hta_computation=hta_kernel_type(name) == "computation",
                )
            )
            self._kind_index[key] = kid
        return kid

    def consume(self, events: list[Any]) -> None:
        cat_of = self._cat
        times = self._times
        ident = self._id
        sites = self.sites
        roles = self._roles
        self.events += len(events)
        for e in events:
            if e.ph != "X" or e.cat is None:
                if e.name == "[memory]":  # the allocator's instant events (profile_memory=True)
                    self.memory.kineto(e, MAX_TS_US)
                continue
            self.complete_events += 1
            kind, cat = cat_of(e.cat)
            if kind == 0:
                continue
            if kind == 3:
                name = e.name if type(e.name) is str else str(e.name)
                got = roles.get((name, cat))
                if got is None:
                    got = cpu_role(name, cat)
                    if len(roles) < _ROLE_CACHE:
                        roles[(name, cat)] = got
                mark, site, startup_work = got
                if site >= 0 and sites.dropped:
                    site = -1
                if mark is not None or site >= 0 or startup_work:  # most CPU events are none: skipped without a call
                    self._cpu_kept(e, name, mark, site, startup_work)
                continue
            t = times(e)
            if t is None:
                continue
            name = e.name if type(e.name) is str else str(e.name)
            args = e.args
            if kind == 1:
                self.g_ts.append(t[0])
                self.g_dur.append(t[1])
                self.g_kind.append(self._kind(name, cat))
                self.g_corr.append(ident(args.correlation) if args else -1)
            else:
                self._runtime(e, name, t)
        self._bounded()

    def _runtime(self, e: Any, name: str, t: tuple[float, float]) -> None:
        """A runtime/driver API call: its class by API family, its thread, whether it enqueues device work."""
        klass, enqueue, named, startup = call_facts(name)
        self.enqueue_calls += enqueue
        if named:
            self.sites.add_call(len(self.r_ts), name, e.tid)
        if startup:
            self.startup.call(name, t[0], t[1])
        self.r_ts.append(t[0])
        self.r_dur.append(t[1])
        self.r_sync.append(klass == BLOCKING)
        self.r_class.append(klass)
        self.r_tid.append(self.sites.thread_id(e.tid))
        self.r_corr.append(self._id(e.args.correlation) if e.args else -1)

    def _bounded(self) -> None:
        """Fail a trace with more kept events than ReadLimits.max_kept_events; past it with the CPU ops kept to name
        blocking calls, stop keeping those."""
        sites = self.sites
        kept = len(self.g_ts) + len(self.r_ts) + len(self.c_ts) + len(self.steps) + len(self.startup) + len(self.memory)
        if kept > self.limits.max_kept_events:
            raise TraceError(
                f"{self.path}: more than {self.limits.max_kept_events:,} device, runtime and phase events; "
                "profile a shorter window (torch.profiler schedule) or split the trace"
            )
        if kept + len(sites) > self.limits.max_kept_events:
            sites.drop()  # the CPU ops that name blocking calls count too, but never make a trace fail

    def _cpu_kept(self, e: Any, name: str, mark: int | None, site: int, startup_work: bool) -> None:
        """A CPU event the importer keeps: a phase mark (step, loader, optimizer, backward, export), an op
        that may enclose a blocking runtime call, a caller or user frame, and/or start-up work (a compile phase,
        module loading)."""
        t = self._times(e)
        if t is None:
            return
        if startup_work:
            self.startup.add(name, t[0], t[1])
        if site >= 0:
            self.sites.add_cpu(name, site, t[0], t[1], e.tid)
        if mark is None:
            return
        if mark == -1:
            self._step(name, t, self._threads.setdefault(e.tid, len(self._threads)))
            return
        if mark == MARK_LOADER:
            self._loader_iter(name)
        self.c_ts.append(t[0])
        self.c_dur.append(t[1])
        self.c_mark.append(mark)

    def _loader_iter(self, name: str) -> None:
        for cls in (MULTI_PROCESS_ITER, SINGLE_PROCESS_ITER):
            if cls in name:
                self.loader_iters.add(cls)

    def _step(self, name: str, t: tuple[float, float], thread: int) -> None:
        digits = name[len("ProfilerStep#") :]
        if not digits.isdigit() or not digits.isascii():
            return
        if len(digits) > 16 or int(digits) >= MAX_STEP:
            self.bad_steps += 1
            return
        self.steps.append((int(digits), t[0], t[0] + t[1], thread))

    def _notes(self, notes: list[str]) -> list[str]:
        """The stream's notes and what the sink skipped or cut."""
        notes = list(notes)
        if self.bad_times + self.memory.bad:
            notes.append(f"skipped {self.bad_times + self.memory.bad} event(s) with impossible timestamps or values")
        if self.bad_ids:
            notes.append(f"ignored {self.bad_ids} stream/correlation id(s) beyond 64 bits")
        if self.long_names:
            notes.append(
                f"cut {self.long_names} device event name(s) longer than {MAX_NAME_CHARS:,} characters "
                f"to their first {MAX_NAME_CHARS:,}"
            )
        if self.sites.dropped:
            notes.append(
                f"more than {self.limits.max_kept_events:,} events with the CPU ops: blocking calls are not "
                "attributed to ops and callers"
            )
        if self.bad_steps:
            notes.append(f"ignored {self.bad_steps} ProfilerStep annotation(s) with step numbers beyond 2**53")
        return notes

    def finish(self, meta: dict[str, bytes], notes: list[str]) -> Timeline:
        if self.events == 0:
            raise TraceError(f"{self.path}: the trace has no events")
        if not self.g_ts and not self.r_ts and not self.c_ts and not self.steps and not self.complete_events:
            raise TraceError(f"{self.path}: no profiler events (no kernels, runtime calls or CPU ops)")
        notes = self._notes(notes)
        dist = dist_info(self.path, meta.get("distributedInfo"), notes)
        name, memory = device_props(self.path, meta.get("deviceProperties"), notes)
        device = "cpu"
        if self.g_ts:
            device = sorted(self.devices)[0] if self.devices else "cuda"
        steps, step_notes = resolve_windows(self.steps)
        notes += step_notes
        runtime = Intervals.from_arrays(self.r_ts, self.r_dur)
        props = decoded_props(meta.get("deviceProperties"))
        capabilities = compute_capabilities(props)
        if capabilities is not None and rocm_device(meta, props):
            notes.append(
                f"AMD (ROCm) device: computeMajor/Minor {capabilities[0]} is a GFX version, not a CUDA compute "
                "capability; no precision advice by GPU generation"
            )
            capabilities = None
        blocking = self.sites.attribute(runtime.start, runtime.end)  # its sweep first, before the ops are made
        runtime_tid, host_ops, frames = _thread_codes(
            _ints(self.r_tid), self.sites.ops(nested=not self.g_ts), self.sites.frames()
        )
        return Timeline(
            path=self.path,
            gpu=Intervals.from_arrays(self.g_ts, self.g_dur),
            gpu_kind=np.frombuffer(self.g_kind, dtype=np.int32) if self.g_kind else np.empty(0, np.int32),
            kinds=tuple(self.kinds),
            gpu_correlation=_ids(self.g_corr),
            runtime=runtime,
            runtime_sync=np.frombuffer(self.r_sync, dtype=np.int8).astype(bool) if self.r_sync else np.empty(0, bool),
            runtime_correlation=_ids(self.r_corr),
            cpu=Intervals.from_arrays(self.c_ts, self.c_dur),
            cpu_mark=np.frombuffer(self.c_mark, dtype=np.int8) if self.c_mark else np.empty(0, np.int8),
            steps=steps,
            rank=dist[0],
            world_size=dist[1],
            backend=dist[2],
            device_name=name,
            device_memory=memory,
            device=device,
            notes=notes,
            loader_workers=1 if MULTI_PROCESS_ITER in self.loader_iters else 0 if self.loader_iters else None,
            compute_capabilities=capabilities,
            blocking=blocking,
            startup=self.startup.finish(min(self.g_ts) if self.g_ts else None),
            runtime_class=np.frombuffer(self.r_class, dtype=np.int8) if self.r_class else np.empty(0, np.int8),
            runtime_tid=runtime_tid,
            host_ops=host_ops,
            enqueue_calls=self.enqueue_calls,
            frames=frames,
            memory=self.memory.finish(),
        )


def _ints(a: array) -> np.ndarray:
    return np.frombuffer(a, dtype=np.int64) if len(a) else np.empty(0, np.int64)


def _thread_codes(runtime_tid: np.ndarray, ops: HostOps, frames: HostOps) -> tuple[np.ndarray, HostOps, HostOps]:
    """The threads of runtime calls, ops and frames as int32 offsets from the lowest id where all fit (one process's
    Nsight Systems globalTids differ only in their low 24 bits): the same order and equalities in half the bytes."""
    arrays = [a for a in (runtime_tid, ops.tid, frames.tid) if a.size]
    if not arrays:
        return runtime_tid, ops, frames
    lo = min(int(a.min()) for a in arrays)
    if max(int(a.max()) for a in arrays) - lo >= 2**31:
        return runtime_tid, ops, frames

    def code(a: np.ndarray) -> np.ndarray:
        return (a - lo).astype(np.int32) if a.size else a

    return code(runtime_tid), replace(ops, tid=code(ops.tid)), replace(frames, tid=code(frames.tid))


def _ids(a: array) -> np.ndarray:
    """Correlation ids as int32 where every one fits (CUPTI's are 32-bit): half the bytes of the run's longest
    arrays, the same values; int64 otherwise."""
    ids = _ints(a)
    if ids.size and int(ids.min()) >= -(2**31) and int(ids.max()) < 2**31:
        return ids.astype(np.int32)
    return ids

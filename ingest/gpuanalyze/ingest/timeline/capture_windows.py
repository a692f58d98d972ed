"""A capture cut by evidence into set-up, the steps that are judged, and teardown (docs/idle-owners.md, "Windows").

- Steps: ProfilerStep#N (or NVTX step ranges) where the capture has them; else the iterations of its loop
  (iterations.py), found in its top-level CPU ops or, in a capture without any (a runtime-only capture: Kineto
  with only CUDA activity, an Nsight Systems capture of CUDA calls), in its runtime calls named by the device
  work they enqueue; else one window from the first device work (the start of its launch call) to the end of the
  last. A capture without device activity (a CPU run) is one window from its first event to its last.
- Set-up: from the capture's start to the first step; teardown: from the last step's end to the capture's end.
  The capture's start and end are its session's where it records them (Nsight Systems: the process ran from the
  session's start), else its first and last events. Neither is judged: each is reported with what the host did
  in it (RunInfo.setup / teardown: start-up work by name, CUDA API calls, CPU ops by name, and "untraced", the
  host time no recorded event covers: imports, building the dataset, a compiler that records nothing).
"""

from __future__ import annotations

import numpy as np

from analyzer.errors import TraceError
from gpuanalyze.ingest.timeline.blocking_calls import HostOps
from gpuanalyze.ingest.timeline.idle_owners import call_kinds
from gpuanalyze.ingest.timeline.intervals import Seg, intersect, minus, outermost_by_thread, segments
from gpuanalyze.ingest.timeline.iterations import detect_iterations
from gpuanalyze.ingest.timeline.kernel_stats import launch_times
from gpuanalyze.ingest.timeline.model import Timeline
from gpuanalyze.ingest.timeline.runtime_calls import BLOCKING, SCALAR_READ_OPS
from gpuanalyze.ingest.timeline.startup_work import INIT_TO_FIRST_WORK
from gpuanalyze.ingest.timeline.trace_events import MARK_BACKWARD, MARK_LOADER, MARK_OPTIMIZER
from gpuanalyze.ingest.trace.runinfo import OutsideSteps, TimeSpent

Windows = list[tuple[int, float, float]]
NO_STEPS_NOTE = (
    "no ProfilerStep#N annotations and no iterations found in its top-level ops: the window from its first device "
    "work to its last is analysed as one step"
)
UNTRACED = "untraced"
"""Host time in set-up or teardown that no recorded event covers."""
API_CALLS = "CUDA/HIP API calls"
#: Parts of set-up or teardown named (RunInfo allows 16), and names of one kind among them.
MAX_PARTS = 16
MAX_NAMES = 10
_CALL_NAMES = ("(other call)", "(blocking call)", "(capture begin)", "(capture end)")


def windows_of(
    k: Timeline, no_steps: str = NO_STEPS_NOTE, launch: np.ndarray | None = None, kinds: np.ndarray | None = None
) -> tuple[Windows, list[str]]:
    """(step, start, end) of every step the capture is cut into, and a note on how (module docstring);
    ``launch``: each device event's launch-call start (-1 without one; kernel_stats.launch_times); ``kinds``: each
    runtime call's device work (idle_owners.call_kinds), where already known."""
    if k.steps:
        return k.steps, []
    times = [a for a in (k.gpu.start, k.runtime.start, k.cpu.start) if a.size]
    ends = [a for a in (k.gpu.end, k.runtime.end, k.cpu.end) if a.size]
    if not times:
        raise TraceError(f"{k.path}: no ProfilerStep annotations, kernels or runtime calls to analyse")
    if k.gpu.start.size:
        launch = launch_times(k)[0] if launch is None else launch
        first = np.where(launch >= 0, launch, k.gpu.start)
        lo, hi = float(first.min()), float(k.gpu.end.max())
        kinds = call_kinds(k) if kinds is None else kinds
        ops = k.host_ops if k.host_ops.start.size else _runtime_ops(k, lo, hi, kinds)
        before: float | None = hi  # the ops after the last device work are teardown
    else:
        lo, hi = min(float(a.min()) for a in times), max(float(a.max()) for a in ends)
        ops, before = k.host_ops, None
    found = detect_iterations(ops, _exchanges(k, kinds), hi, before) if ops.start.size else None
    if found is not None:
        return found.windows, [found.note()]
    return [(0, lo, hi)], [no_steps]


def _runtime_ops(k: Timeline, lo: float, hi: float, kinds: np.ndarray) -> HostOps:
    """The runtime calls that start in the device's life [lo, hi) as ops for iterations.py, named by the device work
    they enqueue (its name) or by their class: the sequence a loop repeats when the capture has no CPU ops."""
    rt = k.runtime
    sel = np.flatnonzero((rt.start >= lo) & (rt.start < hi))
    if sel.size == 0:
        return HostOps.empty()
    kind = kinds[sel]
    cls = k.runtime_class[sel] if k.runtime_class.size else np.zeros(sel.size, np.int8)
    name = np.where(kind >= 0, kind, len(k.kinds) + cls.astype(np.int64)).astype(np.int32)
    tid = k.runtime_tid[sel] if k.runtime_tid.size == rt.start.size else np.zeros(sel.size, np.int64)
    return HostOps(rt.start[sel], rt.end[sel], tid, name, tuple(x.name for x in k.kinds) + _CALL_NAMES)


def _exchanges(k: Timeline, kinds: np.ndarray | None) -> np.ndarray:
    """Sorted host times that show an iteration of a loop (iterations.py): where the host hands the device input or
    takes a result back (DataLoader fetches, the launch of a host-to-device or device-to-host copy, blocking calls,
    scalar reads), or a training step's backward or optimizer step (a layer inside one forward pass has neither)."""
    parts = [k.cpu.start[np.isin(k.cpu_mark, (MARK_LOADER, MARK_BACKWARD, MARK_OPTIMIZER))]]
    if k.runtime_class.size:
        parts.append(k.runtime.start[k.runtime_class == BLOCKING])
    if kinds is not None and k.kinds:  # ``kinds``: each runtime call's device work, where the capture has any
        host_copy = np.array([x.memcpy in ("h2d", "d2h") for x in k.kinds], dtype=bool)
        parts.append(k.runtime.start[(kinds >= 0) & host_copy[np.maximum(kinds, 0)]])
    parts.append(k.host_ops.start[k.host_ops.named(SCALAR_READ_OPS)])
    return np.sort(np.concatenate(parts))


def capture_span(k: Timeline, windows: Windows) -> tuple[float, float]:
    """The capture's start and end: its session's where recorded, else its first and last events."""
    if k.span is not None:
        return k.span
    arrays = [a for a in (k.gpu, k.runtime, k.cpu, k.host_ops, k.startup, k.frames) if a.start.size]
    lo = min([float(a.start.min()) for a in arrays] + [w[1] for w in windows])
    hi = max([float(a.end.max()) for a in arrays] + [w[2] for w in windows])
    return lo, hi


def outside_steps(k: Timeline, windows: Windows) -> tuple[OutsideSteps | None, OutsideSteps | None]:
    """The capture's set-up and teardown (None where there is none) with what the host did in each: each instant
    to the first that covers it of start-up work by name, other runtime calls, outermost CPU ops by name; the rest
    is untraced."""
    lo, hi = capture_span(k, windows)
    w, rt, ops = k.startup, k.runtime, k.host_ops
    work = np.array([n != INIT_TO_FIRST_WORK for n in w.names] + [False])[w.name]  # what the process did is below
    top = np.lexsort((-ops.end, ops.start, ops.tid))
    top = top[outermost_by_thread(ops.start[top], ops.end[top], ops.tid[top])]
    calls = np.zeros(rt.start.size, np.int32)
    out: list[OutsideSteps | None] = []
    for a, b in ((lo, min(x[1] for x in windows)), (max(x[2] for x in windows), hi)):
        if b <= a:
            out.append(None)
            continue
        remaining: Seg = (np.array([a]), np.array([b]))
        parts: list[TimeSpent] = []
        for name, segs, count in (
            *_named(w.start[work], w.end[work], w.name[work], w.names, a, b, "other start-up work"),
            *_named(rt.start, rt.end, calls, (API_CALLS,), a, b, API_CALLS),
            *_named(ops.start[top], ops.end[top], ops.name[top], ops.names, a, b, "other CPU ops"),
        ):
            got = intersect(remaining, segs)
            if (ms := float((got[1] - got[0]).sum()) / 1e3) > 0:
                parts.append(TimeSpent(name=name[:256], ms=ms, count=count))
                remaining = minus(remaining, segs)
        if (untraced := float((remaining[1] - remaining[0]).sum()) / 1e3) > 0:
            parts.append(TimeSpent(name=UNTRACED, ms=untraced))
        parts.sort(key=lambda p: -p.ms)
        out.append(OutsideSteps(ms=(b - a) / 1e3, parts=tuple(parts[:MAX_PARTS])))
    return out[0], out[1]


def _named(
    start: np.ndarray, end: np.ndarray, name: np.ndarray, names: tuple[str, ...], lo: float, hi: float, other: str
) -> list[tuple[str, Seg, int]]:
    """The intervals in [lo, hi) by name, the MAX_NAMES with the most time in it first, then the others as one."""
    sel = (start < hi) & (end > lo)
    s, e = start[sel], end[sel]
    ids, inverse = np.unique(name[sel], return_inverse=True)
    total = np.bincount(inverse.reshape(-1), weights=np.minimum(e, hi) - np.maximum(s, lo))
    rest, out = np.ones(s.size, bool), []
    for g in np.argsort(-total, kind="stable")[:MAX_NAMES].tolist():
        mine = inverse.reshape(-1) == g
        rest &= ~mine
        out.append((names[int(ids[g])], segments(s[mine], e[mine]), int(mine.sum())))
    return out + ([(other, segments(s[rest], e[rest]), int(rest.sum()))] if rest.any() else [])

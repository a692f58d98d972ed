"""Convert a timeline (a Kineto trace or an Nsight Systems export) into gpuanalyze trace rows: one per step window.

Per step (times in the step's host window [start, end) of its ProfilerStep annotation):

- data_wait: DataLoader ``__next__`` time during which neither a device activity nor a runtime
  call runs (the PyTorch profiler TensorBoard plugin's definition: its step breakdown gives each
  instant to the first of kernel, memcpy, memset, runtime, DataLoader, CPU op), clipped to the step;
- backward: union of autograd work (``autograd::engine::evaluate_function`` and ``XxxBackward``
  CPU ops) that starts in the step; unknown (null) when the trace has no backward annotation at all;
- forward (not marked by Kineto): from the step's start, or the end of its last DataLoader fetch, to its
  first backward op, less the blocking syncs in between; unknown (null) for a step without backward;
- host_before_gpu (kernel statistics): host time from the step's start to its first device launch, less
  data wait and syncs: input preprocessing in the training process;
- optimizer: ``Optimizer.step#`` time; sync: blocking sync calls; h2d from the kernels launched in
  the step (kernel_stats.py);
- gpu_busy: the union of device activity (kernels, memcpy, memset) inside the step's window, whoever
  launched it, so utilisation's numerator and denominator cover the same time; device work after the
  last step's window (a final synchronize draining the queue) is reported apart, in a note;
- gpuanalyze's own export convention wins where present: ``user_annotation`` slices named
  ``gpuanalyze:<part>`` (schema.EXPORT_PHASE_NAMES) inside a step give that part's time;
- other: what the known host parts leave of the step.

The end marker ('imported') carries loader_workers from the DataLoader iterator class in those
annotations: 0 for ``_SingleProcessDataLoaderIter``, 1 (at least one worker) for
``_MultiProcessingDataLoaderIter`` (how many workers is not in the trace).

Work is attributed by when it starts; where a step's window overlaps the next one (the recorder's
timer stops a few microseconds after the next step began), what starts in the overlap is the next
step's.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import numpy as np
import pyarrow as pa

from analyzer.errors import TraceError
from gpuanalyze.ingest.timeline.capture_windows import NO_STEPS_NOTE, outside_steps, windows_of
from gpuanalyze.ingest.timeline.free_memory import return_freed_memory
from gpuanalyze.ingest.timeline.idle_owners import call_kinds
from gpuanalyze.ingest.timeline.intervals import Clipper, subtract, union_length
from gpuanalyze.ingest.timeline.kernel_stats import StepKernels, hta_summary, launch_times
from gpuanalyze.ingest.timeline.model import Timeline
from gpuanalyze.ingest.timeline.step_windows import OVERLAP_US
from gpuanalyze.ingest.timeline.trace_events import EXPORT_PART_OF_MARK, MARK_BACKWARD, MARK_LOADER, MARK_OPTIMIZER
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import Trace, frame_of
from gpuanalyze.ingest.trace.row_rules import clean_rows, normalise_frame
from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo

IMPORTED = EndInfo(status="imported")
#: Bumped whenever the same Kineto file would import to different rows or notes: an import made by an older
#: importer is then redone rather than reused (sources.py, the import cache).
IMPORTER_VERSION = "13"


def hta_gpu_mask(k: Timeline, launch: np.ndarray | None = None) -> np.ndarray:
    """HTA keeps kernels launched before the last ProfilerStep starts (the last step is partial); ``launch``: each
    device event's launch-call start (kernel_stats.launch_times)."""
    mask = np.ones(k.gpu.start.size, dtype=bool)
    if k.steps and k.gpu.start.size:
        launch = launch_times(k)[0] if launch is None else launch
        hta = (launch >= 0) & (launch < max(s for _, s, _ in k.steps))
        mask = hta if hta.any() else mask
    return mask


class _Marks:
    """CPU annotations of one kind, sorted by start, for per-window sums."""

    def __init__(self, k: Timeline, mark: int) -> None:
        sel = np.flatnonzero(k.cpu_mark == mark)
        order = sel[np.argsort(k.cpu.start[sel], kind="stable")]
        self.start, self.end = k.cpu.start[order], k.cpu.end[order]
        self.present = bool(sel.size)

    def _slice(self, lo: float, hi: float) -> slice:
        i, j = np.searchsorted(self.start, (lo, hi), side="left")
        return slice(int(i), int(j))

    def total(self, lo: float, hi: float) -> float:
        """Summed duration (ms) of the annotations that start in [lo, hi)."""
        s = self._slice(lo, hi)
        return float((self.end[s] - self.start[s]).sum()) / 1e3

    def first_start(self, lo: float, hi: float) -> float | None:
        """Start of the first annotation that starts in [lo, hi), if any."""
        s = self._slice(lo, hi)
        return float(self.start[s.start]) if s.stop > s.start else None

    def last_end(self, lo: float, hi: float) -> float | None:
        """Latest end of the annotations that start in [lo, hi), if any."""
        s = self._slice(lo, hi)
        return float(self.end[s].max()) if s.stop > s.start else None

    def union(self, lo: float, hi: float) -> float:
        """Union (ms) of the annotations that start in [lo, hi) (nested autograd nodes count once)."""
        s = self._slice(lo, hi)
        return union_length(self.start[s], self.end[s]) / 1e3


def _forward_ms(lo: float, hi: float, loader: _Marks, backward: _Marks, kernels: StepKernels) -> float | None:
    """Forward of a step that Kineto does not mark: from the step's start, or the end of its last DataLoader
    fetch before backward, to its first backward op, less the blocking syncs in between (the sync part's);
    None for a step without backward (forward and the rest cannot be told apart)."""
    first_bwd = backward.first_start(lo, hi)
    if first_bwd is None:
        return None
    begin = max(lo, loader.last_end(lo, first_bwd) or lo)
    if begin >= first_bwd:
        return 0.0
    return max(0.0, first_bwd - begin - kernels.sync_us(begin, first_bwd)) / 1e3


def _before_gpu_ms(lo: float, hi: float, kernels: StepKernels, loader_idle: Clipper) -> float:
    """Host time from the step's start to its first device launch, less the data wait and blocking syncs in it."""
    first = kernels.first_launch(lo, hi)
    if first is None:
        return 0.0
    return max(0.0, first - lo - loader_idle.length(lo, first) - kernels.sync_us(lo, first)) / 1e3


def _loader_idle(k: Timeline) -> Clipper:
    """DataLoader time outside device activity and runtime calls (only the activity that overlaps the
    loader's span is merged: a trace without DataLoader annotations costs nothing here)."""
    sel = k.cpu_mark == MARK_LOADER
    if not sel.any():
        return Clipper(np.empty(0), np.empty(0))
    ls, le = k.cpu.start[sel], k.cpu.end[sel]
    lo, hi = float(ls.min()), float(le.max())
    parts = [(a.start, a.end) for a in (k.gpu, k.runtime)]
    near = [(s[(e > lo) & (s < hi)], e[(e > lo) & (s < hi)]) for s, e in parts]
    busy_s = np.concatenate([s for s, _ in near])
    busy_e = np.concatenate([e for _, e in near])
    return Clipper(*subtract(ls, le, busy_s, busy_e))


@dataclass(frozen=True, slots=True)
class _Sources:
    """What each step's row is measured from: the trace's intervals and marks, built once."""

    k: Timeline
    kernels: StepKernels
    device_busy: Clipper
    loader_idle: Clipper
    backward: _Marks
    optimizer: _Marks
    loader: _Marks
    exported: dict[str, _Marks]
    starts: np.ndarray
    has_gpu: bool

    def row(self, step: int, lo: float, end: float) -> dict[str, Any]:
        wall = (end - lo) / 1e3
        hi = self.step_end(lo, end)
        stats = self.kernels.stats(lo, hi) if self.has_gpu else None
        if stats is not None:
            host_before = _before_gpu_ms(lo, hi, self.kernels, self.loader_idle)
            stats = msgspec.structs.replace(stats, host_before_gpu_ms=host_before)
        row = S.empty_row()
        row.update(
            {
                S.STEP: step,
                S.RANK: self.k.rank or 0,
                S.START_UNIX_NS: int(lo * 1e3),
                S.WALL_MS: wall,
                S.DATA_WAIT_MS: self.loader_idle.length(lo, hi) / 1e3,
                S.H2D_MS: stats.memcpy_h2d_ms if stats else None,
                S.BACKWARD_MS: self.backward.union(lo, hi) if self.backward.present else None,
                S.OPTIMIZER_MS: self.optimizer.total(lo, hi),
                S.SYNC_MS: self.kernels.sync_us(lo, hi) / 1e3,
                S.GPU_BUSY_MS: min(wall, self.device_busy.length(lo, hi) / 1e3) if stats else None,
                S.KERNEL_STATS: S.encode_kernel_stats(stats),
            }
        )
        if self.backward.present:
            row[S.FORWARD_MS] = _forward_ms(lo, hi, self.loader, self.backward, self.kernels)
        for part, marks in self.exported.items():
            row[part] = marks.total(lo, hi)
        if self.k.memory is not None:
            row.update(self.k.memory.step(lo, hi))
        if S.OTHER_MS not in self.exported:
            host = (S.DATA_WAIT_MS, S.FORWARD_MS, S.BACKWARD_MS, S.OPTIMIZER_MS, S.SYNC_MS)
            row[S.OTHER_MS] = max(0.0, wall - sum(row[c] or 0.0 for c in host))
        return row

    def step_end(self, lo: float, end: float) -> float:
        """A step's timer can stop a few us after the next step began: what starts then is the next
        step's. Only a next step starting in this one's last moments is that; one starting earlier is
        another stream of steps (another thread or process) and cuts nothing."""
        following = int(np.searchsorted(self.starts, lo, side="right"))
        if following < self.starts.size and end - OVERLAP_US <= self.starts[following] < end:
            return float(self.starts[following])
        return end


def _device_notes(k: Timeline, no_device: str | None) -> tuple[list[str], dict[str, Any]]:
    """What the report says of a trace without device activity, and the run information that records it: lost
    (``no_device``: the importer knows the capture did not record the GPU; or launch calls recorded without their
    device records) or a CPU-only run."""
    if k.gpu.start.size > 0:
        return [], {}
    if no_device:
        return [no_device], {"unrecorded_device": no_device}
    if k.enqueue_calls:
        note = (
            f"{k.enqueue_calls} kernel launch/copy/memset call(s) but no kernel, copy or memset records: the device "
            "activity was not recorded (profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]); "
            "no GPU verdict"
        )
        return [note], {"unrecorded_launches": k.enqueue_calls}
    return ["no GPU kernels in this trace (CPU-only): GPU rules are not evaluated"], {}


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic collector off for a bulk import (on again after, if it was): it would walk every object held,
    dozens of times, for ~10% of the CPU time; an import's objects are rows and arrays, not reference cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def import_kineto(
    k: Timeline,
    *,
    tags: dict[str, str] | None = None,
    source: str = "kineto",
    no_steps: str = NO_STEPS_NOTE,
    no_device: str | None = None,
) -> Trace:
    """The Trace (in memory) of a Kineto trace (or of another profiler's capture read into one: ``source``
    names it in the run information, ``no_steps`` is the note for a trace without step annotations or
    iterations, ``no_device`` why a capture without device activity did not record the GPU: RunInfo's
    unrecorded_device); the kernel-level stats go into KERNEL_STATS."""
    return_freed_memory()
    launch = launch_times(k)
    kinds = call_kinds(k)  # once, for the windows and the kernels
    windows, notes = windows_of(k, no_steps, launch[0], kinds)
    notes = k.notes + notes
    has_gpu = k.gpu.start.size > 0
    device_notes, unrecorded = _device_notes(k, no_device)
    notes += device_notes
    exported = {part: m for mark, part in EXPORT_PART_OF_MARK.items() if (m := _Marks(k, mark)).present}
    if exported:
        notes.append(
            f"phase times from gpuanalyze export annotations: {', '.join(p.removesuffix('_ms') for p in exported)}"
        )
    # what needs only the windows comes before the kernels' state is built, so its temporaries never sit on it
    setup, teardown = outside_steps(k, windows)
    mask = hta_gpu_mask(k, launch[0])
    computation = np.array([x.hta_computation for x in k.kinds], dtype=bool)[k.gpu_kind] if k.kinds else mask
    summary = hta_summary(k.gpu.start[mask], k.gpu.end[mask], computation[mask])
    del mask, computation
    kernels = StepKernels(k, windows, launch, kinds)
    del kinds
    src = _Sources(
        k=k,
        kernels=kernels,
        device_busy=kernels.device_busy,
        loader_idle=_loader_idle(k),
        backward=_Marks(k, MARK_BACKWARD),
        optimizer=_Marks(k, MARK_OPTIMIZER),
        loader=_Marks(k, MARK_LOADER),
        exported=exported,
        starts=np.sort(np.array([lo for _, lo, _ in windows], dtype=np.float64)),
        has_gpu=has_gpu,
    )
    rank = k.rank or 0
    rows = [src.row(step, lo, end) for step, lo, end in windows]
    if has_gpu:
        notes += _after_last_step(k, src.device_busy, max(end for _, _, end in windows))
    del src, kernels, launch  # the rows are made: what made them goes before the frame
    return_freed_memory()
    try:
        run = msgspec.convert(
            {
                "source": f"{source}:{Path(k.path).name}"[:4096],
                "rank": rank,
                "world_size": k.world_size or 1,
                "backend": k.backend,
                "gpu_name": k.device_name,
                "gpu_memory_bytes": k.device_memory,
                "compute_capabilities": k.compute_capabilities,
                "device": k.device,
                "gpu_summary": summary,
                "profiler_steps": len(k.steps),
                "setup": setup,
                "teardown": teardown,
                **unrecorded,
            },
            RunInfo,
        )
    except msgspec.ValidationError as exc:
        raise TraceError(f"{k.path}: implausible run information ({exc})") from exc
    try:
        table = pa.Table.from_pylist(rows, schema=S.arrow_schema(run, tags))
    except (pa.ArrowException, OverflowError) as exc:
        raise TraceError(f"{k.path}: step values out of range ({str(exc)[:120]})") from exc
    frame, repair = (frame_of(table), []) if clean_rows(rows) else normalise_frame(frame_of(table))
    return Trace(
        path=Path(k.path),
        frame=frame,
        run=run,
        tags=dict(tags or {}),
        version=S.FORMAT_VERSION,
        complete=True,
        end=IMPORTED if k.loader_workers is None else EndInfo(status="imported", loader_workers=k.loader_workers),
        notes=tuple(notes + repair),
    )


def _after_last_step(k: Timeline, busy: Clipper, last_end: float) -> list[str]:
    """A note on device work that runs after the last step's window (not in any step's utilisation); none where it
    would read 0.00 ms (a few us of a last kernel's end)."""
    tail = round(busy.length(last_end, float(k.gpu.end.max())) / 1e3, 2) if k.gpu.end.size else 0.0
    if tail <= 0:
        return []
    return [
        f"{tail:.2f} ms of device work ran after the last step's window (work queued by the steps, drained after "
        "them): reported apart, not in GPU utilisation"
    ]


def trace_writer(trace: Trace) -> Callable[[BinaryIO], None]:
    """Writes ``trace`` as a gpuanalyze .arrow stream (with the 'imported' end marker) to a binary file."""
    schema = S.arrow_schema(trace.run, trace.tags, trace.notes)
    table = trace.frame.to_arrow().select(list(S.COLUMNS)).cast(schema)

    def write(fh: BinaryIO) -> None:
        with pa.ipc.new_stream(fh, schema) as writer:
            writer.write_table(table)
            S.write_end_marker(writer, schema, trace.end or IMPORTED)

    return write


def write_trace_file(trace: Trace, out: Path, *, force: bool) -> None:
    """Write an in-memory Trace as a gpuanalyze .arrow file through analyzer.files.write_file (never
    over an existing file unless forced, never through links or special files, never its own input)."""
    from analyzer.files import write_file

    if out.exists() and Path(trace.path).exists() and out.resolve() == Path(trace.path).resolve():
        raise TraceError(f"{out} is the input file; choose another output path")
    write_file(out, trace_writer(trace), force=force)

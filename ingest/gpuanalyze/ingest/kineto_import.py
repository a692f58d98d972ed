"""Convert a parsed Kineto trace into gpuanalyze trace rows: one per ProfilerStep window."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np
import pyarrow as pa

from analyzer.errors import TraceError
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.intervals import union_length
from gpuanalyze.ingest.kernel_stats import StepKernels, hta_summary
from gpuanalyze.ingest.kineto import KinetoTrace, parse_kineto
from gpuanalyze.ingest.reader import Trace, frame_of, normalise_frame
from gpuanalyze.ingest.runinfo import EndInfo, RunInfo

IMPORTED = EndInfo(status="imported")

DATALOADER_PREFIX = "enumerate(DataLoader)"
OPTIMIZER_PREFIX = "Optimizer.step#"
BACKWARD_PREFIX = "autograd::engine::evaluate_function"


def hta_gpu_mask(k: KinetoTrace) -> np.ndarray:
    """HTA keeps kernels launched before the last ProfilerStep starts (the last step is partial)."""
    mask = np.ones(k.gpu.start.size, dtype=bool)
    if k.steps and k.gpu.start.size:
        last = max(s for _, s, _ in k.steps)
        valid = k.runtime_correlation[k.runtime.start < last]
        hta = np.isin(k.gpu_correlation, valid)
        if hta.any():
            mask = hta
    return mask


def _windows(k: KinetoTrace) -> tuple[list[tuple[int, float, float]], list[str]]:
    if k.steps:
        return k.steps, []
    times = [a for a in (k.gpu.start, k.runtime.start, k.cpu.start) if a.size]
    ends = [a for a in (k.gpu.end, k.runtime.end, k.cpu.end) if a.size]
    if not times:
        raise TraceError(f"{k.path}: no ProfilerStep annotations, kernels or runtime calls to analyse")
    lo, hi = min(float(a.min()) for a in times), max(float(a.max()) for a in ends)
    return [(0, lo, hi)], ["no ProfilerStep#N annotations: the whole trace is analysed as one step"]


def _sum_in(starts: np.ndarray, ends: np.ndarray, mask: np.ndarray, lo: float, hi: float) -> float:
    sel = mask & (starts >= lo) & (starts < hi)
    return float((ends[sel] - starts[sel]).sum())


def import_kineto(k: KinetoTrace) -> Trace:
    """The Trace (in memory) of a Kineto trace; the kernel-level stats go into KERNEL_STATS."""
    windows, notes = _windows(k)
    notes = k.notes + notes
    has_gpu = k.gpu.start.size > 0
    if not has_gpu:
        notes.append("no GPU kernels in this trace (CPU-only): GPU rules are not evaluated")
    kernels = StepKernels(k)
    cpu_names = k.cpu.names
    loader = np.array([n.startswith(DATALOADER_PREFIX) for n in cpu_names], dtype=bool)
    optim = np.array([n.startswith(OPTIMIZER_PREFIX) for n in cpu_names], dtype=bool)
    backward = np.array([n.startswith(BACKWARD_PREFIX) for n in cpu_names], dtype=bool)
    rank = k.rank or 0
    rows = []
    for step, lo, hi in windows:
        wall = (hi - lo) / 1e3
        sync_us = kernels.sync_us(lo, hi)
        stats = kernels.stats(lo, hi) if has_gpu else None
        sel = backward & (k.cpu.start >= lo) & (k.cpu.start < hi)
        row = S.empty_row()
        row.update(
            {
                S.STEP: step,
                S.RANK: rank,
                S.START_UNIX_NS: int(lo * 1e3),
                S.WALL_MS: wall,
                S.DATA_WAIT_MS: _sum_in(k.cpu.start, k.cpu.end, loader, lo, hi) / 1e3,
                S.H2D_MS: stats.memcpy_h2d_ms if stats else None,
                S.BACKWARD_MS: union_length(k.cpu.start[sel], k.cpu.end[sel]) / 1e3,
                S.OPTIMIZER_MS: _sum_in(k.cpu.start, k.cpu.end, optim, lo, hi) / 1e3,
                S.SYNC_MS: sync_us / 1e3,
                S.GPU_BUSY_MS: min(wall, stats.gpu_busy_ms) if stats else None,
                S.KERNEL_STATS: S.encode_kernel_stats(stats),
            }
        )
        known = sum(row[c] or 0.0 for c in (S.DATA_WAIT_MS, S.BACKWARD_MS, S.OPTIMIZER_MS, S.SYNC_MS))
        row[S.OTHER_MS] = max(0.0, wall - known)
        rows.append(row)
    mask = hta_gpu_mask(k)
    summary = hta_summary(k.gpu.start[mask], k.gpu.end[mask], [n for n, m in zip(k.gpu.names, mask, strict=False) if m])
    try:
        run = msgspec.convert(
            {
                "source": f"kineto:{Path(k.path).name}",
                "rank": rank,
                "world_size": k.world_size or 1,
                "backend": k.backend,
                "gpu_name": k.device_name,
                "gpu_memory_bytes": k.device_memory,
                "device": "cuda" if has_gpu else "cpu",
                "gpu_summary": summary,
            },
            RunInfo,
        )
    except msgspec.ValidationError as exc:
        raise TraceError(f"{k.path}: implausible run information ({exc})") from exc
    table = pa.Table.from_pylist(rows, schema=S.arrow_schema(run))
    frame, repair = normalise_frame(frame_of(table))
    return Trace(
        path=Path(k.path),
        frame=frame,
        run=run,
        tags={},
        version=S.FORMAT_VERSION,
        complete=True,
        end=IMPORTED,
        notes=tuple(notes + repair),
    )


def load_kineto(path: str | Path) -> Trace:
    return import_kineto(parse_kineto(path))


def write_trace_file(trace: Trace, out: Path, *, force: bool) -> None:
    """Write an in-memory Trace as a gpuanalyze .arrow file; never over an existing file unless forced."""
    if out.exists() and not force:
        raise TraceError(f"{out} exists; pass --force to overwrite it")
    if out.resolve() == Path(trace.path).resolve():
        raise TraceError(f"{out} is the input file; choose another output path")
    schema = S.arrow_schema(trace.run, trace.tags)
    table = trace.frame.to_arrow().select(list(S.COLUMNS)).cast(schema)
    tmp = out.with_name(out.name + ".tmp")
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(table)
        S.write_end_marker(writer, schema, IMPORTED)
    tmp.replace(out)

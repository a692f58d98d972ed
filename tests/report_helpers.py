"""Synthetic runs for the report and export tests: many ranks in memory, hostile strings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import Trace, frame_of
from gpuanalyze.ingest.trace.row_rules import normalise_frame
from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo

#: Terminal attacks: OSC 52 (write the clipboard), OSC 0 (window title), CSI 2J (clear), a C1 CSI,
#: a bidi override, Rich markup (a closing tag that crashes, a link, a style) and HTML.
HOSTILE = (
    "\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e"
    "x[/bad]y [link=file:///etc/passwd]click[/link] [red]r.arrow</script><script>alert(1)</script>"
)
#: Characters that must never reach the terminal raw (everything in C0 but newline, DEL, C1, bidi).
RAW_CONTROLS = {chr(c) for c in [*range(0x00, 0x0A), *range(0x0B, 0x20), *range(0x7F, 0xA0)]} | {"\u202e"}


def raw_controls(output: str) -> set[str]:
    return {ch for ch in output if ch in RAW_CONTROLS}


def synthetic_table(
    rank: np.ndarray,
    step: np.ndarray,
    rng: np.random.Generator,
    *,
    straggler: int | None,
    gpu: bool = True,
    schema: pa.Schema,
) -> pa.Table:
    """Rows of a DDP-like run at 20 ms a step: rank ``straggler`` is 4 ms slower in forward, the
    others wait for it in sync (the report tests and `benchmarks/report_speed.py`)."""
    n = len(rank)
    fwd = rng.normal(5.0, 0.2, n) + np.where(rank == straggler, 4.0, 0.0)
    bwd, data, opt = rng.normal(8.0, 0.3, n), rng.normal(1.0, 0.1, n), np.full(n, 1.0)
    work = fwd + bwd + data + opt
    wall = np.full(n, 20.0) + rng.normal(0.0, 0.05, n)
    sync = np.maximum(wall - work, 0.0)
    cols = {
        S.STEP: step,
        S.RANK: rank,
        S.START_UNIX_NS: 1_700_000_000_000_000_000 + step * 20_000_000,
        S.WALL_MS: wall,
        S.DATA_WAIT_MS: data,
        S.FORWARD_MS: fwd,
        S.BACKWARD_MS: bwd,
        S.OPTIMIZER_MS: opt,
        S.SYNC_MS: sync,
        S.OTHER_MS: np.maximum(wall - work - sync, 0.0),
        S.BATCH_SAMPLES: np.full(n, 32),
    }
    if gpu:
        cols[S.GPU_BUSY_MS] = 0.8 * wall
        cols[S.PEAK_MEM_BYTES] = np.full(n, 40 * 2**30)
    arrays = [pa.array(cols[f.name], type=f.type) if f.name in cols else pa.nulls(n, f.type) for f in S.FIELDS]
    return pa.Table.from_arrays(arrays, schema=schema)


def synthetic_trace(
    *,
    ranks: int = 4,
    steps: int = 50,
    straggler: int | None = 1,
    gpu: bool = True,
    end: EndInfo | None = None,
    gpu_name: str = "NVIDIA H100 80GB HBM3",
    seed: int = 0,
    path: Path = Path("synthetic.arrow"),
) -> Trace:
    """``ranks`` x ``steps`` rows like a DDP run: one straggler slow in forward, the others wait in sync."""
    rng = np.random.default_rng(seed)
    rank = np.repeat(np.arange(ranks, dtype=np.int32), steps)
    step = np.tile(np.arange(steps, dtype=np.int64), ranks)
    table = synthetic_table(rank, step, rng, straggler=straggler, gpu=gpu, schema=pa.schema(list(S.FIELDS)))
    frame, _ = normalise_frame(frame_of(table))
    run = RunInfo(world_size=ranks, rank=0, gpu_name=gpu_name if gpu else None, gpu_memory_bytes=80 * 2**30)
    return Trace(
        path=path,
        frame=frame,
        run=run,
        tags={},
        version=S.FORMAT_VERSION,
        complete=True,
        end=end or EndInfo(status="ok", steps=steps),
        notes=(),
    )


def kernel_stats(top_name: str, *, busy: float = 12.0, wall: float = 20.0) -> str:
    """One step's KERNEL_STATS JSON whose top kernel is named ``top_name``."""
    stats = S.KernelStats(
        gpu_span_ms=wall,
        gpu_busy_ms=busy,
        idle_host_wait_ms=3.0,
        idle_launch_ms=4.0,
        idle_other_ms=wall - busy - 7.0,
        compute_ms=busy * 0.9,
        non_compute_ms=busy * 0.1,
        gemm_simt_fp32_ms=busy * 0.6,
        elementwise_ms=busy * 0.4,
        kernel_count=120,
        kernel_median_us=14.0,
        top_kernels=(S.TopKernel(name=top_name, total_ms=busy * 0.6, count=40),),
    )
    text = S.encode_kernel_stats(stats)
    assert text is not None
    return text

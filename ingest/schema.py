"""The gpuanalyze trace format: the single source of column names, types, units and version.

A trace is an Arrow IPC *stream* with one row per (rank, step). Units live in the column
names. Schema-level metadata carries the format version and run information; the final
empty record batch carries the end marker (see ``END_KEY``). A stream without it was not
closed cleanly: the run crashed or was killed, and the trace is analysed as incomplete.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

FORMAT_NAME = "gpuanalyze-trace"
FORMAT_VERSION = "1.1"  # 1.1 added the optional kernel_stats column
FORMAT_MAJOR = 1

STEP = "step"
RANK = "rank"
START_UNIX_NS = "start_unix_ns"
WALL_MS = "wall_ms"
DATA_WAIT_MS = "data_wait_ms"
H2D_MS = "h2d_ms"
FORWARD_MS = "forward_ms"
BACKWARD_MS = "backward_ms"
OPTIMIZER_MS = "optimizer_ms"
SYNC_MS = "sync_ms"
OTHER_MS = "other_ms"
GPU_BUSY_MS = "gpu_busy_ms"
BATCH_SAMPLES = "batch_samples"
PEAK_MEM_BYTES = "peak_mem_bytes"

KERNEL_STATS = "kernel_stats"

#: Kernel categories, in the order of their ``<category>_ms`` fields in KERNEL_STATS.
KERNEL_CATEGORIES: tuple[str, ...] = (
    "gemm_tensor_core", "gemm_simt_fp32", "conv", "attention", "elementwise", "reduction",
    "communication", "memcpy", "memset", "other",
)
#: Scalar fields of KERNEL_STATS: GPU time in ms unless the name says otherwise.
KERNEL_STAT_FIELDS: tuple[str, ...] = (
    "gpu_span_ms", "gpu_busy_ms", "idle_host_wait_ms", "idle_launch_ms", "idle_other_ms",
    "compute_ms", "non_compute_ms", "comm_exposed_ms", *(f"{c}_ms" for c in KERNEL_CATEGORIES),
    "memcpy_h2d_ms", "memcpy_d2h_ms", "memcpy_d2d_ms", "memcpy_pageable_ms", "sync_api_ms",
    "kernel_median_us",
)
#: KERNEL_STATS holds a JSON object per sampled step (null otherwise): the KERNEL_STAT_FIELDS, plus
#: "kernel_count" (int) and "top_kernels" (list of {"name", "total_ms", "count"}). JSON text, not a
#: struct column, because most rows have none and a null struct still costs every child's buffers.
KERNEL_STATS_TYPE = pa.string()


def encode_kernel_stats(stats: dict[str, Any] | None) -> str | None:
    return None if stats is None else json.dumps(stats, separators=(",", ":"))


def decode_kernel_stats(text: str | None) -> dict[str, Any] | None:
    return None if text is None else json.loads(text)

#: The parts of a step; together with OTHER_MS they add up to WALL_MS.
PHASES: tuple[str, ...] = (DATA_WAIT_MS, H2D_MS, FORWARD_MS, BACKWARD_MS, OPTIMIZER_MS, SYNC_MS)
PARTS: tuple[str, ...] = (*PHASES, OTHER_MS)

FIELDS: tuple[pa.Field, ...] = (
    pa.field(STEP, pa.int64(), nullable=False),
    pa.field(RANK, pa.int32(), nullable=False),
    pa.field(START_UNIX_NS, pa.int64(), nullable=False),
    pa.field(WALL_MS, pa.float64(), nullable=False),
    pa.field(DATA_WAIT_MS, pa.float64()),
    pa.field(H2D_MS, pa.float64()),
    pa.field(FORWARD_MS, pa.float64()),
    pa.field(BACKWARD_MS, pa.float64()),
    pa.field(OPTIMIZER_MS, pa.float64()),
    pa.field(SYNC_MS, pa.float64()),
    pa.field(OTHER_MS, pa.float64()),
    pa.field(GPU_BUSY_MS, pa.float64()),
    pa.field(BATCH_SAMPLES, pa.int64()),
    pa.field(PEAK_MEM_BYTES, pa.int64()),
    pa.field(KERNEL_STATS, KERNEL_STATS_TYPE),
)
COLUMNS: tuple[str, ...] = tuple(f.name for f in FIELDS)
#: Columns added by a minor version: older traces simply lack them (no note).
ADDED_IN_MINOR: tuple[str, ...] = (KERNEL_STATS,)
REQUIRED: tuple[str, ...] = (STEP, RANK, START_UNIX_NS, WALL_MS)

# Schema metadata keys (bytes, as Arrow stores them).
META_FORMAT = b"gpuanalyze.format"
META_VERSION = b"gpuanalyze.version"
META_RUN = b"gpuanalyze.run"
META_TAGS = b"gpuanalyze.tags"
#: Custom metadata key of the final, empty record batch written on a clean close.
END_KEY = b"gpuanalyze.end"

#: Keys of the run-information dictionary (all optional; unknown values are None).
RUN_KEYS: tuple[str, ...] = (
    "host", "gpu_name", "gpu_count", "gpu_memory_bytes", "driver", "cuda", "torch",
    "world_size", "rank", "backend", "device", "start_unix_ns", "model_params",
    "param_dtype", "pid", "argv", "source", "gpu_summary", "local_rank", "cpu_count",
)


def arrow_schema(run: dict[str, Any], tags: dict[str, str] | None = None) -> pa.Schema:
    """The Arrow schema of a trace, with version, run info and user tags as metadata."""
    meta = {
        META_FORMAT: FORMAT_NAME.encode(),
        META_VERSION: FORMAT_VERSION.encode(),
        META_RUN: json.dumps(run, default=str).encode(),
        META_TAGS: json.dumps(tags or {}).encode(),
    }
    return pa.schema(list(FIELDS), metadata=meta)


def empty_row() -> dict[str, Any]:
    """A row with every column present and unknown values as None."""
    return dict.fromkeys(COLUMNS)

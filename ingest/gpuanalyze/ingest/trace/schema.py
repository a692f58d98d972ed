"""The gpuanalyze trace format: the single source of column names, types, units and version.

A trace is an Arrow IPC *stream* with one row per (rank, step). Units live in the column
names. Schema-level metadata carries the format version and run information; the final
empty record batch carries the end marker (see ``END_KEY``). A stream without it was not
closed cleanly: the run crashed or was killed, and the trace is analysed as incomplete.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import pyarrow as pa

from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo, encode

FORMAT_NAME = "gpuanalyze-trace"
#: 1.1 added the optional kernel_stats column, 1.2 data_cpu_ms and model_forward_ms, 1.3 lead_ms and system,
#: 1.4 mem_start_bytes and mem_reserved_bytes
FORMAT_VERSION = "1.4"
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
DATA_CPU_MS = "data_cpu_ms"
"""CPU time the training thread spent inside data fetches (within data_wait_ms): near data_wait_ms
when loading in the training process is CPU work, near 0 when it sleeps on I/O or on workers."""
PEAK_MEM_BYTES = "peak_mem_bytes"
MEM_START_BYTES = "mem_start_bytes"
"""1.4: memory in use at the step's start (docs/memory.md): what persists across steps."""
MEM_RESERVED_BYTES = "mem_reserved_bytes"
"""1.4: the most memory the allocator held from the device during the step (PyTorch's reserved)."""
MEMORY_COLUMNS = (PEAK_MEM_BYTES, MEM_START_BYTES, MEM_RESERVED_BYTES)
LEAD_MS = "lead_ms"
"""Host time from the step's start to its first recorded phase (a data fetch or the forward), part
of other_ms: in a DataLoader loop, work done after the previous optimizer step (logging, metrics)."""

KERNEL_STATS = "kernel_stats"
SYSTEM = "system"
"""1.3: a system-sampler reading (ingest.host_sample.HostSample as JSON) on the first row written
after it, null on the others."""
SYSTEM_TYPE = pa.string()
MODEL_FORWARD_MS = "model_forward_ms"
"""Forward time of each profiled model by name (profile([G, D]), nn.ModuleDict); null with one model."""
MODEL_FORWARD_TYPE = pa.map_(pa.string(), pa.float64())

#: Kernel categories, in the order of their ``<category>_ms`` fields in KERNEL_STATS.
KERNEL_CATEGORIES: tuple[str, ...] = (
    "gemm_tensor_core",
    "gemm_simt_fp32",
    "conv_tensor_core",
    "conv",
    "attention",
    "elementwise",
    "reduction",
    "communication",
    "memcpy",
    "memset",
    "other",
)
_Ms = Annotated[float, msgspec.Meta(ge=0.0, le=1e12)]

#: Who owned the GPU's idle time, in the order of precedence an idle instant is given by
#: (ingest/idle_owners.py; docs/idle-owners.md). Each is a KernelStats field ``idle_owner_<name>_ms``.
IDLE_OWNERS: tuple[str, ...] = (
    "graph_capture",
    "compilation",
    "module_loading",
    "device_setup",
    "allocator",
    "data_loader",
    "sync",
    "collective",
    "launch",
    "cpu_ops",
    "host_idle",
    "queued",
)
#: Owners that are start-up work (one-off allocations are device_setup; ``allocator`` is allocation that repeats:
#: churn): a step whose idle they own is warm-up, whatever its number.
STARTUP_OWNERS: tuple[str, ...] = ("compilation", "module_loading", "device_setup")


def owner_field(owner: str) -> str:
    """The KernelStats field of an idle owner's milliseconds."""
    return f"idle_owner_{owner}_ms"


class TopKernel(msgspec.Struct, frozen=True, kw_only=True):
    name: Annotated[str, msgspec.Meta(max_length=1024)]
    total_ms: _Ms
    count: Annotated[int, msgspec.Meta(ge=0, le=1 << 53)]


class BlockingOp(msgspec.Struct, frozen=True, kw_only=True):
    """Host time blocked in one runtime call made from one CPU op under one caller ('' where the trace
    does not say: no CPU ops, or none around the call)."""

    op: Annotated[str, msgspec.Meta(max_length=1024)]
    caller: Annotated[str, msgspec.Meta(max_length=1024)]
    call: Annotated[str, msgspec.Meta(max_length=1024)]
    total_ms: _Ms
    count: Annotated[int, msgspec.Meta(ge=0, le=1 << 53)]
    idle_ms: _Ms = 0.0
    """GPU idle owned by ``sync`` while the host sat in these calls or drained the queue through them (the
    idle-owner pass); 0 where the trace has no GPU timeline."""


class StartupOp(msgspec.Struct, frozen=True, kw_only=True):
    """Host time in one kind of start-up work (a compile phase, cudaMalloc, module loading: ingest/startup_work.py)
    that started in a step, outside any other start-up work."""

    name: Annotated[str, msgspec.Meta(max_length=1024)]
    total_ms: _Ms
    count: Annotated[int, msgspec.Meta(ge=0, le=1 << 53)]


class OwnerFrame(msgspec.Struct, frozen=True, kw_only=True):
    """The user's code that held the GPU idle: the innermost user frame (``file:line function``, from the
    capture's Python stack events or record_function ranges) active on the host while ``owner`` owned idle time."""

    owner: Annotated[str, msgspec.Meta(max_length=64)]
    frame: Annotated[str, msgspec.Meta(max_length=1024)]
    ms: _Ms


class KernelStats(msgspec.Struct, frozen=True, kw_only=True):
    """Kernel-level statistics of one sampled step (ingest/kernel_stats.py says how each is measured).

    Stored per row in KERNEL_STATS as JSON (null for steps without a sampled window): JSON text,
    not a struct column, because most rows have none and a null struct still costs every child's
    buffers. GPU time in ms unless the name says otherwise.
    """

    gpu_span_ms: _Ms = 0.0
    gpu_busy_ms: _Ms = 0.0
    idle_host_wait_ms: _Ms = 0.0
    idle_launch_ms: _Ms = 0.0
    idle_other_ms: _Ms = 0.0
    compute_ms: _Ms = 0.0
    non_compute_ms: _Ms = 0.0
    comm_exposed_ms: _Ms = 0.0
    copy_busy_ms: _Ms = 0.0
    """GPU busy time that only copies and memsets fill (no compute or communication kernel running at the instant):
    the busy split is compute (compute_ms), communication (non_compute_ms - copy_busy_ms), copies (this)."""
    gemm_tensor_core_ms: _Ms = 0.0
    gemm_simt_fp32_ms: _Ms = 0.0
    """fp32 GEMMs on SIMT cores (plus rocBLAS fp32 GEMMs)."""
    conv_tensor_core_ms: _Ms = 0.0
    conv_ms: _Ms = 0.0
    """Convolutions with no tensor-core or 16-bit marker: fp32 on SIMT cores (traces before
    gpuanalyze 0.2 counted every convolution here)."""
    attention_ms: _Ms = 0.0
    elementwise_ms: _Ms = 0.0
    reduction_ms: _Ms = 0.0
    communication_ms: _Ms = 0.0
    memcpy_ms: _Ms = 0.0
    memset_ms: _Ms = 0.0
    other_ms: _Ms = 0.0
    memcpy_h2d_ms: _Ms = 0.0
    memcpy_d2h_ms: _Ms = 0.0
    memcpy_d2d_ms: _Ms = 0.0
    memcpy_pageable_ms: _Ms = 0.0
    sync_api_ms: _Ms = 0.0
    """Host time in blocking synchronisation calls (cudaDeviceSynchronize, ...)."""
    host_before_gpu_ms: _Ms = 0.0
    """Host time from the step's start to the launch of its first device work, outside DataLoader waits and
    blocking syncs: input preprocessing in the training process (imported traces)."""
    kernel_count: Annotated[int, msgspec.Meta(ge=0, le=1 << 53)] = 0
    kernel_median_us: _Ms | None = None
    top_kernels: tuple[TopKernel, ...] = ()
    blocking_ops: Annotated[tuple[BlockingOp, ...], msgspec.Meta(max_length=64)] = ()
    """The (op, caller, call) groups with the most blocked host time in sync_api_ms, most first (imported
    Kineto traces with CPU ops; older traces lack it)."""
    startup_ms: _Ms = 0.0
    """Host time in start-up work that started in the step (the union of its intervals, up to the step's end):
    compilation, device memory allocation, module loading, device set-up (ingest/startup_work.py). A step
    made mostly of it is warm-up, whatever its number (imported traces and sampled windows; older ones lack it)."""
    startup_ops: Annotated[tuple[StartupOp, ...], msgspec.Meta(max_length=64)] = ()
    """The start-up work with the most host time in startup_ms, by name, most first."""
    window_idle_ms: _Ms = 0.0
    """GPU idle time inside the step's window (its length less the union of device activity in it): what the
    idle owners add up to."""
    idle_owner_graph_capture_ms: _Ms = 0.0
    idle_owner_compilation_ms: _Ms = 0.0
    idle_owner_module_loading_ms: _Ms = 0.0
    idle_owner_device_setup_ms: _Ms = 0.0
    idle_owner_allocator_ms: _Ms = 0.0
    idle_owner_data_loader_ms: _Ms = 0.0
    idle_owner_sync_ms: _Ms = 0.0
    idle_owner_collective_ms: _Ms = 0.0
    idle_owner_launch_ms: _Ms = 0.0
    idle_owner_cpu_ops_ms: _Ms = 0.0
    idle_owner_host_idle_ms: _Ms = 0.0
    idle_owner_queued_ms: _Ms = 0.0
    cpu_matmul_ms: _Ms = 0.0
    """CPU runs (ingest/cpu_ops.py): host time in matmul and convolution ops (aten::mm, addmm, bmm, convolution)."""
    cpu_bmm_ms: _Ms = 0.0
    """CPU runs: host time in batched matmuls (aten::bmm, baddbmm)."""
    cpu_softmax_ms: _Ms = 0.0
    """CPU runs: host time in softmax (aten::softmax and its backward; not log_softmax)."""
    cpu_sdpa_ms: _Ms = 0.0
    """CPU runs: host time in fused attention (aten::scaled_dot_product_attention)."""
    cpu_op_ms: _Ms = 0.0
    """CPU runs: host time inside ATen ops outside the optimizer's step (the rest is Python between the ops)."""
    cpu_dispatch_ms: _Ms = 0.0
    """Written by older recorders (a per-call part of cpu_op_ms); no longer written or read, kept so they read."""
    owner_frames: Annotated[tuple[OwnerFrame, ...], msgspec.Meta(max_length=64)] = ()
    """The user frames that held the GPU idle in the step, by owner, most idle first (captures with Python stacks
    or record_function ranges; empty otherwise)."""
    owners: bool = False
    """The idle owners were measured (imported traces and sampled windows since importer 7); older rows lack them."""


#: The summable time fields of KernelStats (everything but the count, the median and the top list).
KERNEL_STAT_FIELDS: tuple[str, ...] = tuple(f for f in KernelStats.__struct_fields__ if f.endswith("_ms"))
KERNEL_STATS_TYPE = pa.string()
_KERNEL_STATS_DECODER = msgspec.json.Decoder(KernelStats)


def encode_kernel_stats(stats: KernelStats | None) -> str | None:
    return None if stats is None else msgspec.json.encode(stats).decode()


def decode_kernel_stats(text: str) -> KernelStats:
    """Raises msgspec.ValidationError / DecodeError (or RecursionError) on a malformed value."""
    return _KERNEL_STATS_DECODER.decode(text)


#: The parts of a step; together with OTHER_MS they add up to WALL_MS.
PHASES: tuple[str, ...] = (DATA_WAIT_MS, H2D_MS, FORWARD_MS, BACKWARD_MS, OPTIMIZER_MS, SYNC_MS)
PARTS: tuple[str, ...] = (*PHASES, OTHER_MS)

#: Chrome/Kineto trace events that carry gpuanalyze's own phases (``gpuanalyze export`` writes them as
#: ``user_annotation`` slices named ``gpuanalyze:<part>`` inside a ``ProfilerStep#<step>`` slice;
#: the Kineto importer reads them back, so an export imports to the same per-step phase times).
EXPORT_PHASE_PREFIX = "gpuanalyze:"
EXPORT_PHASE_NAMES: dict[str, str] = {p: EXPORT_PHASE_PREFIX + p.removesuffix("_ms") for p in (*PHASES, OTHER_MS)}

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
    pa.field(DATA_CPU_MS, pa.float64()),
    pa.field(MODEL_FORWARD_MS, MODEL_FORWARD_TYPE),
    pa.field(LEAD_MS, pa.float64()),
    pa.field(SYSTEM, SYSTEM_TYPE),
    pa.field(MEM_START_BYTES, pa.int64()),
    pa.field(MEM_RESERVED_BYTES, pa.int64()),
)
COLUMNS: tuple[str, ...] = tuple(f.name for f in FIELDS)
#: Columns added by a minor version: older traces simply lack them (no note).
ADDED_IN_MINOR: tuple[str, ...] = (KERNEL_STATS, DATA_CPU_MS, MODEL_FORWARD_MS, LEAD_MS, SYSTEM, *MEMORY_COLUMNS[1:])
REQUIRED: tuple[str, ...] = (STEP, RANK, START_UNIX_NS, WALL_MS)

# Schema metadata keys (bytes, as Arrow stores them).
META_FORMAT = b"gpuanalyze.format"
META_VERSION = b"gpuanalyze.version"
META_RUN = b"gpuanalyze.run"
"""JSON of a ``runinfo.RunInfo``."""
META_TAGS = b"gpuanalyze.tags"
META_NOTES = b"gpuanalyze.notes"
"""What an importer said of its input (a list of strings): read back with the rows, so an import reused from a
cache or a file says what the import said."""
"""JSON object of user tags (strings to strings)."""
#: Custom metadata key of the final, empty record batch written on a clean close (JSON of ``runinfo.EndInfo``).
END_KEY = b"gpuanalyze.end"


def arrow_schema(run: RunInfo, tags: dict[str, str] | None = None, notes: tuple[str, ...] = ()) -> pa.Schema:
    """The Arrow schema of a trace, with version, run info, user tags and (an import's) notes as metadata."""
    meta = {
        META_FORMAT: FORMAT_NAME.encode(),
        META_VERSION: FORMAT_VERSION.encode(),
        META_RUN: encode(run),
        META_TAGS: encode(tags or {}),
        **({META_NOTES: encode(list(notes))} if notes else {}),
    }
    return pa.schema(list(FIELDS), metadata=meta)


def write_end_marker(stream: pa.ipc.RecordBatchStreamWriter, schema: pa.Schema, end: EndInfo) -> None:
    """The empty final batch whose metadata marks a cleanly closed trace."""
    empty = pa.RecordBatch.from_pylist([], schema=schema)
    stream.write_batch(empty, custom_metadata={END_KEY: encode(end)})


def empty_row() -> dict[str, Any]:
    """A row with every column present and unknown values as None."""
    return dict.fromkeys(COLUMNS)

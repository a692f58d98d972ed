"""CPU op statistics of a window of host activity (a step of a CPU run profiled by torch.profiler).

On a CPU run the "kernels" are the ATen ops themselves, timed on the host (``cpu_op`` events). Per step:
- ``cpu_matmul_ms``: the union of the matmul and convolution ops (MATMUL_OPS: what bf16 autocast runs on
  oneDNN's bf16 path), the part of the step a faster matmul speeds up;
- ``cpu_bmm_ms`` / ``cpu_softmax_ms`` / ``cpu_sdpa_ms``: batched matmuls, softmax and fused attention, the
  pattern of attention written by hand (matmul, softmax, matmul) against scaled_dot_product_attention;
- ``cpu_op_ms``: the union of every op outside the optimizer's step (time inside ATen: the work itself plus
  each op's dispatch); the rest of the step is Python and framework code between the ops.
KernelStats ``cpu_dispatch_ms`` is no longer written (older traces still read).
"""

from __future__ import annotations

import numpy as np

from gpuanalyze.ingest.timeline.blocking_calls import HostOps
from gpuanalyze.ingest.timeline.intervals import outermost_by_thread, union_length

MATMUL_OPS = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::addbmm",
    "aten::mv",
    "aten::addmv",
    "aten::dot",
    "aten::_convolution",
    "aten::mkldnn_convolution",
    "aten::convolution_backward",
)
BMM_OPS = ("aten::bmm", "aten::baddbmm")
SOFTMAX_OPS = ("aten::softmax", "aten::_softmax", "aten::_softmax_backward_data")
SDPA_OPS = ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product")
OPTIMIZER_PREFIX = ("Optimizer.",)
FIELDS = ("cpu_matmul_ms", "cpu_bmm_ms", "cpu_softmax_ms", "cpu_sdpa_ms", "cpu_op_ms")


def _exact(ops: HostOps, names: tuple[str, ...]) -> np.ndarray:
    """Which ops are named exactly one of ``names`` (aten::mm, not aten::mm_backward)."""
    wanted = set(names)
    return np.array([n in wanted for n in ops.names], dtype=bool)[ops.name]


def cpu_op_fields(ops: HostOps, lo: float, hi: float) -> dict[str, float]:
    """The FIELDS (ms) of the ops that started in [lo, hi) (us, the trace's clock), clipped to ``hi``;
    {} when none did."""
    if ops.start.size == 0:
        return {}
    inside = (ops.start >= lo) & (ops.start < hi)
    if not inside.any():
        return {}
    idx = np.flatnonzero(inside)
    start, end, tid = ops.start[idx], np.minimum(ops.end[idx], hi), ops.tid[idx]
    sub = HostOps(start, end, tid, ops.name[idx], ops.names)
    order = np.lexsort((-end, start, tid))
    outer = np.zeros(idx.size, dtype=bool)
    outer[order] = outermost_by_thread(start[order], end[order], tid[order])
    optim = sub.named(OPTIMIZER_PREFIX)
    in_optimizer = np.zeros(idx.size, dtype=bool)
    for o in np.flatnonzero(optim & outer):
        in_optimizer |= (tid == tid[o]) & (start >= start[o]) & (end <= end[o])
    work = ~in_optimizer

    def union(mask: np.ndarray) -> float:
        return union_length(start[mask], end[mask]) / 1e3

    return {
        "cpu_matmul_ms": union(_exact(sub, MATMUL_OPS) & work),
        "cpu_bmm_ms": union(_exact(sub, BMM_OPS) & work),
        "cpu_softmax_ms": union(_exact(sub, SOFTMAX_OPS) & work),
        "cpu_sdpa_ms": union(sub.named(SDPA_OPS) & work),
        "cpu_op_ms": union(work),
    }

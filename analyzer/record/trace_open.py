"""Creating a profile's trace file at its first step boundary, when the rank, the run id and the models are
known (split from profiler.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from analyzer.record.models import Named
from analyzer.record.run_facts import collect_run_info, gpu_uuid, placement, run_id
from analyzer.record.system_sampler import SystemSampler
from analyzer.record.trace_output import TraceOutput


def open_trace(
    output: TraceOutput,
    models: Named | None,
    *,
    cuda: Any,
    recorder: str,
    interval_s: float | None,
    on_last_grad: Callable[[Any], None],
) -> Any:
    """Open ``output`` with the run's facts (``cuda``: torch.cuda on a CUDA run, else None); on a multi-rank run
    with trainable parameters, the handle of the hook that times the gradient all-reduce (else None)."""
    where = placement()
    models = models or []
    run = collect_run_info(
        [m for _, m in models],
        "cuda" if cuda is not None else "cpu",
        where=where,
        run=run_id(where),
        model_names=[name for name, _ in models],
        recorder=recorder,
    )
    sampler = None
    if interval_s is not None:
        sampler = SystemSampler(interval_s=interval_s, gpu_uuid=gpu_uuid(cuda) if cuda is not None else None)
    output.open(run, rank=where.rank, world_size=where.world_size, sampler=sampler)
    trainable = [p for _, m in models for p in m.parameters() if p.requires_grad]
    if where.world_size > 1 and trainable:
        # The first parameter is normally the last to receive its gradient in backward: time after
        # it until backward returns is the rank waiting for gradient all-reduce (exposed comm).
        return trainable[0].register_post_accumulate_grad_hook(on_last_grad)
    return None

"""Where the host blocks: the (op, caller, call) with the most blocked time, in words, and what to change there.

Used by the sync rule's summary and advice (kernel statistics' blocking groups).
"""

from __future__ import annotations

from analyzer.analysis.kernel_metrics import BlockingGroup
from analyzer.analysis.rules.rule import Context

#: Runtime calls that copy: the others the rule names are synchronize calls (runtime_calls.py).
BLOCKING_COPY_PREFIXES = ("cudaMemcpy", "hipMemcpy")
#: CPU ops that read a tensor back to the host: a synchronize under them waits for that copy.
_READ_OPS = frozenset(
    {
        "aten::to",
        "aten::_to_copy",
        "aten::copy_",
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::cpu",
        "aten::tolist",
    }
)


def _top_blocking(ctx: Context) -> BlockingGroup | None:
    """The (op, caller, call) that left the GPU idle longest (then the most blocked host time: kernel statistics
    rank them so), when the trace names its op or caller."""
    km = ctx.m.kernels
    if km is None or not km.blocking_ops or km.steps <= 0:
        return None
    b = km.blocking_ops[0]
    return b if b.op or b.caller else None


def _caller(name: str) -> str:
    if name.startswith("nn.Module: "):
        return f"module `{name.removeprefix('nn.Module: ')}`"
    return f"record_function('{name}')"


def blocking_site(ctx: Context) -> str | None:
    """'the host waits 146.0 ms per step in `aten::to` -> cudaMemcpyAsync called from record_function('metrics')
    (the GPU idle 120.3 ms per step through it)'."""
    b = _top_blocking(ctx)
    if b is None:
        return None
    assert ctx.m.kernels is not None
    steps = ctx.m.kernels.steps
    where = f"`{b.op}` -> {b.call}" if b.op else b.call
    if b.call.startswith(BLOCKING_COPY_PREFIXES):
        where += " (a copy the host blocks in)"
    caller = f" called from {_caller(b.caller)}" if b.caller else ""
    idle = f" (the GPU idle {b.idle_ms / steps:.1f} ms per step through it)" if b.idle_ms > 0 else ""
    return f"the host waits {b.total_ms / steps:.1f} ms per step in {where}{caller}{idle}"


def blocking_site_advice(ctx: Context) -> list[str]:
    """What to change where the trace says the host waits most (its op and caller)."""
    b = _top_blocking(ctx)
    site = blocking_site(ctx)
    if b is None or site is None:
        return []
    fix = "drop the synchronize from the loop or run it every N steps (time with CUDA events instead)"
    if b.call.startswith(BLOCKING_COPY_PREFIXES) or b.op in _READ_OPS:
        t = ctx.m.kernels.totals_ms if ctx.m.kernels is not None else {}
        pageable = t.get("memcpy_pageable_ms", 0) > 0 and t.get("memcpy_d2h_ms", 0) > 0
        fix = "a device-to-host copy into pageable memory returns once all queued work ran: " if pageable else ""
        fix += "read the value every N steps (keep it on the device until then), or copy it into a pinned buffer "
        fix += "with non_blocking=True and wait on an event only where it is used"
    return [f"{site[0].upper()}{site[1:]}: {fix}."]

"""What bf16 autocast would make of a CPU run's matmuls: their shapes replayed on this machine.

On a CPU with native bf16 (AVX512_BF16, AMX_BF16) the speed-up of a matmul under
``torch.autocast('cpu', dtype=torch.bfloat16)`` depends on its shape, the library path (oneDNN for bf16,
MKL or oneDNN for fp32), the thread count and the cast of fp32 inputs, not on the flag alone: on a
Xeon with AMX_BF16 (torch 2.13, one thread, `python benchmarks/bf16_replay.py`, load 0.9) a 2 x 64 x 128
matmul ran 14x slower in bf16, 256-cubed 4.5x faster, 128 x 1024 x 2048 5.4x faster from bf16 inputs and
3.3x from fp32 inputs cast first, 1024-cubed 7.5x and 5.5x. So the first sampled profiler window of a CPU run on such a
CPU records its ops' shapes, and each float32 matmul shape it ran (REPLAYED) is replayed here, between
steps, at the run's thread count: in float32, in bf16 from bf16 inputs, and in bf16 from float32 inputs
cast first, alternating the three so a loaded host slows them alike, the fastest of a few rounds each
(record.replay_timing).

Autocast casts a forward matmul's float32 inputs (the activation and the weight); backward matmuls get
bf16 inputs (the saved casts and bf16 gradients). An op is scaled from its time in the run by the replay's
ratio (bf16 time / float32 time of its shape), and the window's matmul time (the union of
cpu_ops.MATMUL_OPS, as ``cpu_matmul_ms``) becomes, per KernelStats field:
- ``cpu_matmul_bf16_ms``: forward ops (outside autograd's backward functions) with their casts, backward
  ops from bf16 inputs: the point;
- ``cpu_matmul_bf16_fast_ms``: every op from bf16 inputs: the fast end;
- ``cpu_matmul_bf16_slow_ms``: every op with its casts: the slow end.
Shapes left when REPLAY_BUDGET_S is spent, and convolutions, keep their float32 time. The first window's
ratios (matmul time under bf16 over matmul time) apply to every window's steps; none is stored when no
shape was replayed (a model already in bf16, a run without matmuls), and the projection then says so.
"""

from __future__ import annotations

import json
import math
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.record.replay_timing import fastest
from gpuanalyze.ingest.cpu_ops import MATMUL_OPS
from gpuanalyze.ingest.intervals import union_length

#: The matmul ops replayed, and where their two matrices are among the op's inputs.
REPLAYED: dict[str, tuple[int, int]] = {
    "aten::mm": (0, 1),
    "aten::bmm": (0, 1),
    "aten::addmm": (1, 2),
    "aten::baddbmm": (1, 2),
}
#: Autograd's backward functions: an op inside one runs in backward (its inputs already bf16 under autocast).
BACKWARD_PREFIX = "autograd::engine::evaluate_function"
#: Wall time the replays may take in all (shapes by their time in the run, largest first): the replay runs
#: once per run, between steps, outside every step's timing.
REPLAY_BUDGET_S = 1.0
#: Largest replayed shape, in input elements: the replay allocates its inputs again (and their bf16 copies) in the
#: user's process, so a shape whose float32 inputs pass 64 MiB is not replayed (its time stays float32): it must
#: neither take the memory the run needs nor one call spend the budget.
REPLAY_MAX_ELEMENTS = 1 << 24
#: Each timing runs the op enough times to last about this long (a few-microsecond op timed once is noise).
TIMING_S = 0.002
FIELDS = ("cpu_matmul_bf16_ms", "cpu_matmul_bf16_fast_ms", "cpu_matmul_bf16_slow_ms")


@dataclass(frozen=True, slots=True)
class MatmulCall:
    """One float32 matmul op of the window."""

    name: str
    dims: tuple[tuple[int, ...], ...]
    """Every input's dims, as the profiler recorded them."""
    strides: tuple[tuple[int, ...], ...]
    dur_us: float
    backward: bool


@dataclass(frozen=True, slots=True)
class Speedup:
    """A shape's replayed times, seconds per call."""

    fp32: float
    bf16: float
    cast: float


def window_calls(path: str | Path) -> tuple[list[MatmulCall], float, bool]:
    """The float32 REPLAYED ops of a torch.profiler chrome trace recorded with shapes, the union of every
    MATMUL_OPS op's time in it (us): what ``cpu_matmul_ms`` sums over the window's steps, and whether it ran
    REPLAYED ops in a reduced precision (bf16, fp16: autocast already on)."""
    events = json.loads(Path(path).read_text()).get("traceEvents", [])
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    backward: dict[Any, list[tuple[float, float]]] = {}
    for e in ops:
        if str(e.get("name", "")).startswith(BACKWARD_PREFIX):
            backward.setdefault(e.get("tid"), []).append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
    spans = {tid: sorted(v) for tid, v in backward.items()}
    calls, starts, ends = [], [], []
    reduced = False
    wanted = set(MATMUL_OPS)
    for e in ops:
        name = e.get("name")
        if name not in wanted:
            continue
        ts, dur = float(e["ts"]), float(e.get("dur", 0))
        starts.append(ts)
        ends.append(ts + dur)
        call = _call(e, name, ts, dur, spans.get(e.get("tid"), []))
        if call is not None:
            calls.append(call)
        reduced = reduced or _reduced(e, name)
    return calls, union_length(np.array(starts), np.array(ends)) if starts else 0.0, reduced


def _reduced(e: dict[str, Any], name: str) -> bool:
    """The op is a REPLAYED one whose matrices are bf16 or fp16."""
    if name not in REPLAYED:
        return False
    types = (e.get("args") or {}).get("Input type")
    a, b = REPLAYED[name]
    return isinstance(types, list) and len(types) > b and {types[a], types[b]} <= {"c10::BFloat16", "c10::Half"}


def _call(e: dict[str, Any], name: str, ts: float, dur: float, spans: list[tuple[float, float]]) -> MatmulCall | None:
    """The op as a MatmulCall when it is REPLAYED with float32 matrices and recorded shapes."""
    if name not in REPLAYED:
        return None
    args = e.get("args") or {}
    dims, types, strides = args.get("Input Dims"), args.get("Input type"), args.get("Input Strides")
    a, b = REPLAYED[name]
    if not isinstance(dims, list) or not isinstance(types, list) or len(dims) <= b or len(types) <= b:
        return None
    if types[a] != "float" or types[b] != "float":
        return None
    i = bisect_right(spans, (ts, math.inf)) - 1  # the last backward function starting at or before the op
    inside = i >= 0 and spans[i][0] <= ts < spans[i][1]
    return MatmulCall(
        name=name,
        dims=tuple(tuple(int(x) for x in d) for d in dims),
        strides=tuple(tuple(int(x) for x in s) for s in strides) if isinstance(strides, list) else (),
        dur_us=dur,
        backward=inside,
    )


def _shape(c: MatmulCall) -> tuple[str, tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    return c.name, c.dims, c.strides


def replay(calls: Iterable[MatmulCall], budget_s: float = REPLAY_BUDGET_S) -> dict[tuple[Any, ...], Speedup]:
    """Each shape's replayed times, largest in-run time first, until ``budget_s`` is spent."""
    total: dict[tuple[Any, ...], float] = {}
    for c in calls:
        total[_shape(c)] = total.get(_shape(c), 0.0) + c.dur_us
    deadline = time.perf_counter() + budget_s
    out = {}
    import torch

    # The inputs are random: on a generator of the replay's own, so the run's random stream (dropout masks,
    # shuffling) goes on exactly as it would have without profiling.
    rng = torch.Generator().manual_seed(0)
    for shape in sorted(total, key=lambda s: -total[s]):
        if time.perf_counter() >= deadline:
            break
        if sum(math.prod(d) for d in shape[1]) > REPLAY_MAX_ELEMENTS:
            continue
        got = _time_shape(*shape, rng=rng)
        if got is not None:
            out[shape] = got
    return out


def ratios(
    calls: list[MatmulCall], union_us: float, speed: dict[tuple[Any, ...], Speedup], *, reduced: bool = False
) -> dict[str, float]:
    """Per FIELDS entry, the window's matmul time under bf16 as a share of its float32 matmul time ({} when no
    shape was replayed). ``reduced`` with no float32 matmul at all: the matmuls already run in bf16 or fp16
    (autocast is on, whatever the parameters' dtype), so bf16 autocast saves nothing: 1 for every entry."""
    if union_us > 0 and reduced and not calls:
        return dict.fromkeys(FIELDS, 1.0)
    if union_us <= 0 or not speed:
        return {}
    saved = dict.fromkeys(FIELDS, 0.0)
    for c in calls:
        s = speed.get(_shape(c))
        if s is None:
            continue
        fast, slow = c.dur_us * (1 - s.bf16 / s.fp32), c.dur_us * (1 - s.cast / s.fp32)
        saved["cpu_matmul_bf16_fast_ms"] += fast
        saved["cpu_matmul_bf16_slow_ms"] += slow
        saved["cpu_matmul_bf16_ms"] += fast if c.backward else slow
    return {f: max(0.0, 1.0 - saved[f] / union_us) for f in FIELDS}


def _tensor(torch: Any, dims: tuple[int, ...], strides: tuple[int, ...], rng: Any) -> Any:
    """A float32 tensor of ``dims`` laid out as the run's was: contiguous, the last two dims transposed, or
    broadcast (all strides 0); drawn from ``rng``, never the global generator."""
    if strides and len(strides) == len(dims) and dims and all(s == 0 for s in strides):
        return torch.randn(1, generator=rng).expand(*dims)
    if len(dims) >= 2 and len(strides) == len(dims) and strides[-2] == 1 and strides[-1] == dims[-2] != 1:
        return torch.randn(*dims[:-2], dims[-1], dims[-2], generator=rng).transpose(-1, -2)
    return torch.randn(*dims, generator=rng)


def _time_shape(
    name: str, dims: tuple[tuple[int, ...], ...], strides: tuple[tuple[int, ...], ...], *, rng: Any = None
) -> Speedup | None:
    """Seconds per call of the op in float32, bf16 and bf16 from float32 inputs cast first; None when the shape
    does not replay (a dims list the op rejects)."""
    import torch

    op = getattr(torch, name.removeprefix("aten::"))
    b = REPLAYED[name][1]
    rng = torch.Generator().manual_seed(0) if rng is None else rng
    try:
        with torch.no_grad():
            x = [_tensor(torch, d, strides[i] if i < len(strides) else (), rng) for i, d in enumerate(dims[: b + 1])]
            low = [t.to(torch.bfloat16) for t in x]

            def cast() -> Any:
                return op(*[t.to(torch.bfloat16) for t in x])

            runs: tuple[Callable[[], Any], ...] = (lambda: op(*x), lambda: op(*low), cast)
            best = fastest(runs, TIMING_S)
    except (RuntimeError, TypeError, ValueError, MemoryError):
        return None
    return Speedup(*best) if all(0 < t < math.inf for t in best) else None

"""How a CPU run's op time grows with its samples: the first window's ops replayed at k times the batch.

A larger batch or larger micro-batches spread the per-call part of each forward + backward over more
samples; how much of the op time is per call cannot be read off one batch size (a 2 x 64 x 128 matmul
costs what a 16 x 64 x 128 one does, a 8 x 512 x 1024 one reads its weight whatever the batch). So the
first sampled profiler window records its ops' shapes, and when it ends each leaf ATen op (one that calls
no other op) that touched the batch (an input tensor, not a parameter's shape, with a dimension of the
batch's samples) is replayed here, between steps, at its shapes and at the batch dimension scaled by each
of MULTIPLIERS, alternating the variants so a loaded host slows them alike, the fastest of
replay_timing.REPEATS rounds each; largest own time in the run first, within REPLAY_BUDGET_S.

An op's own time in the run grows by what its replay gains (time at k x less time at 1 x, in microseconds: the
run's own cache misses and allocations stay as they were), times its own share of its duration (a composite op's
replay replays its children, who count their own). Ops that never saw
the batch (the weights' transposes, the gradients' zeroing, allocations) and each op's own time above its
children (dispatch, argument checks) do not grow. The window's op time at k x becomes, per KernelStats
field, ``cpu_op_x{k}_ms`` (the replayed ops grown, the others as they ran), and ``cpu_op_unreplayed_ms`` is
the own time of ops that touched the batch but did not replay (an op with a list of tensors, an argument
the replay cannot rebuild, the budget spent): how they grow stays unknown (rules/measured.py spans it).
The replay draws its inputs from a generator of its own and runs inside ``torch.random.fork_rng``: the
run's random stream is untouched; it skips ops whose inputs pass REPLAY_MAX_ELEMENTS at 8 x.
"""

from __future__ import annotations

import ast
import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.record.replay_timing import fastest, timed
from gpuanalyze.ingest.cpu_ops import self_times
from gpuanalyze.ingest.schema import CPU_OP_GROWN, CPU_OP_UNREPLAYED

#: The batch multipliers replayed (rules/measured.py interpolates between them).
MULTIPLIERS = tuple(CPU_OP_GROWN)
FIELDS = tuple(CPU_OP_GROWN.values())
UNREPLAYED = CPU_OP_UNREPLAYED
#: Wall time the replays may take in all (ops by their own time in the run, largest first).
REPLAY_BUDGET_S = 1.0
#: Largest replay, in input elements at the largest multiplier (the replay allocates its inputs in the user's
#: process: 64 MiB of float32).
REPLAY_MAX_ELEMENTS = 1 << 24
#: Each timing runs the op enough times to last about this long.
TIMING_S = 0.001
#: A scaled call expected to take longer than this (its 1 x time times the multiplier) is not replayed: it would
#: spend the budget on one shape (a shape without 4 x and 8 x grows linearly from its 2 x).
CALL_MAX_S = 0.05
#: Events whose span holds the optimizer's step (its ops are per step, not per sample).
OPTIMIZER_PREFIX = "Optimizer."
_DTYPES = {
    "float": "float32",
    "double": "float64",
    "c10::BFloat16": "bfloat16",
    "c10::Half": "float16",
    "long int": "int64",
    "int": "int32",
    "short int": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
}


@dataclass(frozen=True, slots=True)
class OpCall:
    """One leaf op of the window that touched the batch."""

    name: str
    dims: tuple[Any, ...]
    """Every input's dims as recorded ([] for a non-tensor)."""
    types: tuple[str, ...]
    concrete: tuple[str, ...]
    """Every input's value as recorded ('' for a tensor or an unrecorded value)."""
    own_us: float
    own_share: float
    """Its own time over its duration: the part of a replay's gain that is its own, not its children's (who are
    replayed themselves)."""


@dataclass(frozen=True, slots=True)
class Window:
    """The window's ops, as the replay needs them."""

    calls: list[OpCall]
    own_us: float
    """Own time of every op outside the optimizer's step (what grows or not)."""


def window_ops(path: str | Path, samples: int, params: frozenset[tuple[int, ...]]) -> Window:
    """The leaf ATen ops outside the optimizer's step of a torch.profiler chrome trace recorded with shapes
    whose inputs hold a tensor with a dimension of ``samples`` that is not a parameter's shape."""
    events = json.loads(Path(path).read_text()).get("traceEvents", [])
    optim = [
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        for e in events
        if e.get("ph") == "X" and str(e.get("name", "")).startswith(OPTIMIZER_PREFIX)
    ]
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op" and not _inside(e, optim)]
    ops.sort(key=lambda e: (e.get("tid"), float(e["ts"])))
    if not ops:
        return Window([], 0.0)
    start = np.array([float(e["ts"]) for e in ops])
    end = start + np.array([float(e.get("dur", 0)) for e in ops])
    tid = np.array([hash(e.get("tid")) for e in ops])
    own = self_times(start, end, tid)
    calls = []
    for i, e in enumerate(ops):
        call = _call(e, float(own[i]), float(end[i] - start[i]), samples, params)
        if call is not None:
            calls.append(call)
    return Window(calls, float(own.sum()))


def _inside(e: dict[str, Any], spans: list[tuple[float, float]]) -> bool:
    ts = float(e.get("ts", 0))
    return any(lo <= ts < hi for lo, hi in spans)


def _call(e: dict[str, Any], own: float, dur: float, samples: int, params: frozenset[tuple[int, ...]]) -> OpCall | None:
    name = str(e.get("name", ""))
    args = e.get("args") or {}
    dims, types, concrete = args.get("Input Dims"), args.get("Input type"), args.get("Concrete Inputs")
    if not name.startswith("aten::") or not isinstance(dims, list) or not isinstance(types, list):
        return None
    if not isinstance(concrete, list) or len(concrete) != len(dims):
        concrete = [""] * len(dims)
    if not any(_batch_dim(d, t, samples, params) is not None for d, t in zip(dims, types, strict=False)):
        return None  # never saw the batch: its time does not grow with it
    return OpCall(
        name=name,
        dims=tuple(_frozen(d) if isinstance(d, list) else () for d in dims),
        types=tuple(str(t) for t in types),
        concrete=tuple(str(c) for c in concrete),
        own_us=own,
        own_share=min(1.0, own / dur) if dur > 0 else 1.0,
    )


def _frozen(value: Any) -> Any:
    """Nested lists as nested tuples (a list of tensors' dims is a list of lists): a hashable shape key."""
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


def _batch_dim(dims: Any, dtype: Any, samples: int, params: frozenset[tuple[int, ...]]) -> int | None:
    """The first dimension of a tensor input equal to ``samples``, None when it has none or is shaped as a
    parameter (a weight or its gradient)."""
    if dtype not in _DTYPES or not isinstance(dims, list) or not all(isinstance(x, int) for x in dims):
        return None
    if tuple(dims) in params:
        return None
    return dims.index(samples) if samples in dims else None


def replay(
    calls: Iterable[OpCall], samples: int, params: frozenset[tuple[int, ...]], budget_s: float = REPLAY_BUDGET_S
) -> dict[tuple[Any, ...], tuple[float, ...]]:
    """Per op shape, what one call gains (us) at each of MULTIPLIERS over its replayed time at 1 x; largest own
    time in the run first, until ``budget_s`` is spent. A first pass replays 1 x and 2 x of every shape, a second
    4 x and 8 x while the budget lasts; a shape without them grows as its 2 x measured, linearly. Shapes that do
    not replay are left out."""
    import torch

    total: dict[tuple[Any, ...], float] = {}
    for c in calls:
        total[_key(c)] = total.get(_key(c), 0.0) + c.own_us
    by_key = {_key(c): c for c in calls}
    order = sorted(total, key=lambda k: -total[k])
    deadline = time.perf_counter() + budget_s
    gains: dict[tuple[Any, ...], tuple[float, ...]] = {}
    rng = torch.Generator().manual_seed(0)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        for wanted in ((2,), (4, 8)):  # every shape at 2 x first, then 4 x and 8 x while the budget lasts
            for key in order:
                if time.perf_counter() >= deadline:
                    break
                if wanted != (2,) and key not in gains:
                    continue
                got = _time_call(torch, by_key[key], wanted, samples, params, rng)
                if got is not None:
                    gains[key] = (*gains.get(key, ()), *got)
    # a shape with 2 x only grows linearly from it
    return {
        key: g if len(g) == len(MULTIPLIERS) else tuple(g[0] * (m - 1) for m in MULTIPLIERS) for key, g in gains.items()
    }


def fields(window: Window, gains: dict[tuple[Any, ...], tuple[float, ...]]) -> dict[str, float]:
    """Per FIELDS entry, the window's op time at that multiplier as a share of its op time (each replayed call's
    own time plus its replayed gain), and UNREPLAYED's share ({} when the window has no op time)."""
    if window.own_us <= 0:
        return {}
    grown = [0.0] * len(MULTIPLIERS)
    unknown = 0.0
    for c in window.calls:
        g = gains.get(_key(c))
        if g is None:
            unknown += c.own_us
            continue
        for i, gain in enumerate(g):
            grown[i] += gain * c.own_share
    out = {f: max(0.0, 1.0 + g / window.own_us) for f, g in zip(FIELDS, grown, strict=True)}
    out[UNREPLAYED] = min(1.0, unknown / window.own_us)
    return out


def _key(c: OpCall) -> tuple[Any, ...]:
    return c.name, c.dims, c.types, c.concrete


def _time_call(
    torch: Any, c: OpCall, multipliers: tuple[int, ...], samples: int, params: frozenset[tuple[int, ...]], rng: Any
) -> tuple[float, ...] | None:
    """What one call gains (us) at each of ``multipliers`` over 1 x, None when it does not replay (an argument
    the replay cannot rebuild, inputs over REPLAY_MAX_ELEMENTS, a call over CALL_MAX_S)."""
    try:
        op, names = _overload(torch, c)
        variants = [_arguments(torch, c, names, samples * k, samples, params, rng) for k in (1, *multipliers)]
        if any(v is None for v in variants):
            return None
        runs: list[Callable[[], Any]] = [_bound(op, *v) for v in variants if v is not None]
        runs[0]()  # warm-up
        if timed(runs[0], 1) * max(multipliers) > CALL_MAX_S:
            return None  # its largest variant would spend the budget on one shape
        best = fastest(runs, TIMING_S)
    except Exception:  # noqa: BLE001 - an op the replay cannot rebuild is left unmeasured, never the run's failure
        return None
    if not all(0 < t < math.inf for t in best):
        return None
    return tuple(max(0.0, t - best[0]) * 1e6 for t in best[1:])


def _bound(op: Any, args: list[Any], kwargs: dict[str, Any]) -> Callable[[], Any]:
    return lambda: op(*args, **kwargs)


def _overload(torch: Any, c: OpCall) -> tuple[Any, list[tuple[str, bool]]]:
    """The op's overload whose arguments match the recorded inputs in number (no ``out`` variant), and its
    arguments as (name, keyword-only)."""
    packet = getattr(torch.ops.aten, c.name.removeprefix("aten::"))
    for overload in packet.overloads():
        schema = getattr(packet, overload)._schema
        arguments = list(schema.arguments)
        if len(arguments) != len(c.dims) or any(a.name == "out" or a.is_out for a in arguments):
            continue
        kinds = [str(a.type) for a in arguments]
        if all(_fits(k, t) for k, t in zip(kinds, c.types, strict=True)):
            return getattr(packet, overload), [(a.name, a.kwarg_only) for a in arguments]
    raise ValueError(f"no overload of {c.name} takes its recorded inputs")


def _fits(kind: str, recorded: str) -> bool:
    """A schema argument type takes the recorded input (a tensor for a tensor, a value for a value)."""
    tensor = recorded in _DTYPES
    return ("Tensor" in kind and "[]" not in kind) == tensor


def _arguments(
    torch: Any,
    c: OpCall,
    names: list[tuple[str, bool]],
    target: int,
    samples: int,
    params: frozenset[tuple[int, ...]],
    rng: Any,
) -> tuple[list[Any], dict[str, Any]] | None:
    """The op's inputs with the batch dimension at ``target`` samples (None when they pass the size limit)."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    elements = 0
    for (name, keyword), dims, dtype, value in zip(names, c.dims, c.types, c.concrete, strict=True):
        if dtype in _DTYPES:
            shape = list(dims)
            at = _batch_dim(list(dims), dtype, samples, params)
            if at is not None:
                shape[at] = target
            elements += math.prod(shape) * (target // samples if at is None else 1)
            v: Any = _tensor(torch, shape, _DTYPES[dtype], rng)
        else:
            v = _value(value, samples, target)
        if keyword:
            kwargs[name] = v
        else:
            args.append(v)
    return None if elements > REPLAY_MAX_ELEMENTS else (args, kwargs)


def _tensor(torch: Any, shape: list[int], dtype: str, rng: Any) -> Any:
    """Random floats (from ``rng``); zeros for integer and bool tensors (indices that stay in range)."""
    kind = getattr(torch, dtype)
    if kind.is_floating_point:
        return torch.randn(tuple(shape), generator=rng).to(kind)
    return torch.zeros(tuple(shape), dtype=kind)


def _value(text: str, samples: int, target: int) -> Any:
    """A recorded non-tensor input: a number, a bool, a list of ints (a size: its batch entry scaled), or None
    when the profiler recorded no value."""
    if text == "":
        return None
    v = ast.literal_eval(text)
    if isinstance(v, list) and samples in v:
        v = list(v)
        v[v.index(samples)] = target
    return v


def collate_growth(samples: list[Any]) -> tuple[float, ...] | None:
    """torch's default_collate on ``samples`` (one fetch's, kept by record.patches) repeated 2, 4 and 8 times: its
    time at each over its time on them, the fastest of a few rounds each (None when it fails: the samples were
    not what it collated)."""
    from torch.utils.data import default_collate

    try:
        best = fastest([_bound(default_collate, [samples * k], {}) for k in (1, *MULTIPLIERS)], TIMING_S)
    except Exception:  # noqa: BLE001 - not measured, never the run's failure
        return None
    return tuple(t / best[0] for t in best[1:]) if all(0 < t < math.inf for t in best) else None

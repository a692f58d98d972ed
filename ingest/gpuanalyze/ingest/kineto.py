"""Parse PyTorch profiler (Kineto / Chrome trace) JSON into compact numpy arrays.

msgspec decodes only the fields we use into typed structs (unknown fields are skipped without
building Python objects), which keeps parsing fast and memory small. Handles old capitalised
categories (``Kernel``, ``Runtime``, ``Memcpy``), ``gpu_memcpy``/``gpu_memset``,
``cuda_runtime``/``cuda_driver``, CPU-only and ROCm traces, and traces without ``ProfilerStep``.
"""

from __future__ import annotations

import ast
import contextlib
import gzip
import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from analyzer.errors import TraceError
from gpuanalyze.ingest.kernel_names import kernel_category

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
SYNC_APIS = (
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "hipDeviceSynchronize",
    "hipStreamSynchronize",
    "hipEventSynchronize",
)
BLOCKING_COPIES = ("cudaMemcpy", "hipMemcpy")
#: CPU annotations the importer turns into step phases (others are not kept).
PHASE_PREFIXES = ("enumerate(DataLoader)", "Optimizer.step#", "autograd::engine::evaluate_function")


# gc=False: millions of small structs need no cycle tracking, which makes decoding much faster.
class _Args(msgspec.Struct, gc=False):
    stream: int | None = None
    correlation: int | None = None


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str = ""
    ts: float = 0.0
    dur: float = 0.0
    args: _Args | None = None


class _Doc(msgspec.Struct, gc=False):
    traceEvents: list[_Event] = []  # noqa: N815 - the JSON key
    deviceProperties: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815


class _LooseArgs(msgspec.Struct, gc=False):
    stream: int | str | None = None
    correlation: int | str | None = None


class _LooseEvent(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str | int | None = ""
    ts: float | str = 0.0
    dur: float | str = 0.0
    args: _LooseArgs | None = None


class _LooseDoc(msgspec.Struct, gc=False):
    traceEvents: list[_LooseEvent] = []  # noqa: N815
    deviceProperties: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815


_DECODER = msgspec.json.Decoder(_Doc | list[_Event])
#: Fallback for exporters that write numbers as strings or names as numbers.
_LOOSE_DECODER = msgspec.json.Decoder(_LooseDoc | list[_LooseEvent])


@dataclass(frozen=True, slots=True)
class Intervals:
    """Events of one kind: start and end in microseconds, plus names."""

    start: np.ndarray
    end: np.ndarray
    names: list[str]

    @classmethod
    def from_arrays(cls, ts: array, dur: array, names: list[str]) -> Intervals:
        start = np.frombuffer(ts, dtype=np.float64) if len(ts) else np.empty(0)
        return cls(start, start + (np.frombuffer(dur, dtype=np.float64) if len(dur) else np.empty(0)), names)

    @classmethod
    def of(cls, rows: list[tuple[float, float, str]]) -> Intervals:
        if not rows:
            return cls(np.empty(0), np.empty(0), [])
        arr = np.array([(s, s + d) for s, d, _ in rows], dtype=np.float64)
        return cls(arr[:, 0], arr[:, 1], [n for _, _, n in rows])


@dataclass(frozen=True, slots=True)
class KinetoTrace:
    """What the importer needs from a Kineto trace, in microseconds."""

    path: str
    gpu: Intervals
    gpu_category: list[str]
    gpu_stream: np.ndarray
    gpu_correlation: np.ndarray
    runtime: Intervals
    """Runtime/driver API calls; names kept only for blocking syncs ('' otherwise)."""
    runtime_correlation: np.ndarray
    cpu: Intervals
    """CPU annotations that mark step phases (PHASE_PREFIXES)."""
    steps: list[tuple[int, float, float]]
    """(step number, start, end) from ProfilerStep#N annotations."""
    rank: int | None
    world_size: int | None
    backend: str | None
    device_name: str | None
    device_memory: int | None
    notes: list[str] = field(default_factory=list)


def read_bytes(path: Path) -> bytes:
    """The JSON bytes; gzip is inflated into one buffer of the size its trailer states (low peak memory)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror})") from exc
    if raw[:2] != b"\x1f\x8b":
        return raw
    size = int.from_bytes(raw[-4:], "little") if len(raw) >= 18 else 0
    try:
        out = zlib.decompress(raw, wbits=31, bufsize=max(size, 1 << 16))
        if len(out) != size:  # several gzip members, or over 4 GiB: let gzip handle it
            out = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceError(f"{path}: corrupt or truncated gzip data") from exc
    return out


def _meta(value: Any) -> Any:
    """Kineto stores some metadata as Python-literal strings; accept both forms."""
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return None
    return value


def _num(x: float | str) -> float:
    return float(x)


def _int(x: int | str | None) -> int:
    return x if isinstance(x, int) else -1


def parse_kineto(path: str | Path) -> KinetoTrace:
    """Parse a .json or .json.gz profiler trace; raises TraceError with a one-line reason."""
    path = Path(path)
    raw = read_bytes(path)
    if not raw.strip():
        raise TraceError(f"{path}: file is empty")
    doc: _Doc | list[_Event] | _LooseDoc | list[_LooseEvent]
    try:
        try:
            doc = _DECODER.decode(raw)
        except msgspec.ValidationError:
            doc = _LOOSE_DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        raise TraceError(f"{path}: JSON, but not a PyTorch profiler trace ({str(exc)[:120]})") from exc
    except msgspec.DecodeError as exc:
        raise TraceError(f"{path}: not valid JSON (truncated or corrupt: {str(exc)[:80]})") from exc
    del raw
    events = doc if isinstance(doc, list) else doc.traceEvents
    if not events:
        raise TraceError(f"{path}: the trace has no events")
    # Flat arrays, not per-event tuples: memory stays a fraction of the JSON size.
    g_ts, g_dur, g_names, gpu_cat, gpu_stream, gpu_corr = array("d"), array("d"), [], [], array("q"), array("q")
    r_ts, r_dur, r_names, rt_corr = array("d"), array("d"), [], array("q")
    cpu: list[tuple[float, float, str]] = []
    steps: list[tuple[int, float, float]] = []
    try:
        for e in events:
            if e.ph != "X" or e.cat is None:
                continue
            cat = e.cat.lower()
            if cat in GPU_CATS:
                name = str(e.name)
                g_ts.append(_num(e.ts))
                g_dur.append(_num(e.dur))
                g_names.append(name)
                gpu_cat.append(kernel_category(name, cat))
                args = e.args
                gpu_stream.append(_int(args.stream) if args else -1)
                gpu_corr.append(_int(args.correlation) if args else -1)
            elif cat in RUNTIME_CATS:
                r_ts.append(_num(e.ts))
                r_dur.append(_num(e.dur))
                name = str(e.name)
                r_names.append(name if name.startswith(SYNC_APIS) or name in BLOCKING_COPIES else "")
                rt_corr.append(_int(e.args.correlation) if e.args else -1)
            elif cat in ("cpu_op", "user_annotation", "python_function", "operator"):
                name = str(e.name)
                if name.startswith("ProfilerStep#"):
                    with contextlib.suppress(ValueError):
                        steps.append((int(name.split("#", 1)[1]), _num(e.ts), _num(e.ts) + _num(e.dur)))
                elif name.startswith(PHASE_PREFIXES):
                    cpu.append((_num(e.ts), _num(e.dur), name))
    except (TypeError, ValueError) as exc:
        raise TraceError(f"{path}: malformed event fields ({exc})") from exc
    if not g_ts and not r_ts and not cpu and not steps and not any(e.ph == "X" for e in events):
        raise TraceError(f"{path}: no profiler events (no kernels, runtime calls or CPU ops)")
    del events
    dist = _meta(doc.distributedInfo) if not isinstance(doc, list) else None
    props = _meta(doc.deviceProperties) if not isinstance(doc, list) else None
    notes = []
    rank = world = backend = None
    if isinstance(dist, dict) and "rank" in dist:
        rank, world, backend = int(dist["rank"]), dist.get("world_size"), dist.get("backend")
    else:
        notes.append("no distributedInfo in the trace: assumed rank 0 of 1")
    device_name = device_memory = None
    if isinstance(props, list) and props and isinstance(props[0], dict):
        device_name, device_memory = props[0].get("name"), props[0].get("totalGlobalMem")
    steps.sort()
    return KinetoTrace(
        path=str(path),
        gpu=Intervals.from_arrays(g_ts, g_dur, g_names),
        gpu_category=gpu_cat,
        gpu_stream=np.frombuffer(gpu_stream, dtype=np.int64),
        gpu_correlation=np.frombuffer(gpu_corr, dtype=np.int64),
        runtime=Intervals.from_arrays(r_ts, r_dur, r_names),
        runtime_correlation=np.frombuffer(rt_corr, dtype=np.int64),
        cpu=Intervals.of(cpu),
        steps=steps,
        rank=rank,
        world_size=int(world) if world is not None else None,
        backend=backend,
        device_name=device_name,
        device_memory=int(device_memory) if device_memory else None,
        notes=notes,
    )

"""Parse PyTorch profiler (Kineto / Chrome trace) JSON into compact numpy arrays.

msgspec decodes only the fields we use into typed structs (unknown fields are skipped without
building Python objects), which keeps parsing fast and memory small. Handles old capitalised
categories (``Kernel``, ``Runtime``, ``Memcpy``), ``gpu_memcpy``/``gpu_memset``,
``cuda_runtime``/``cuda_driver``, CPU-only and ROCm traces, and traces without ``ProfilerStep``.
"""

from __future__ import annotations

import ast
import gzip
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ingest.errors import TraceError
from ingest.kernel_names import kernel_category

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
SYNC_APIS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "hipDeviceSynchronize",
             "hipStreamSynchronize", "hipEventSynchronize")
BLOCKING_COPIES = ("cudaMemcpy", "hipMemcpy")


class _Args(msgspec.Struct):
    stream: int | str | None = None
    correlation: int | str | None = None


class _Event(msgspec.Struct):
    ph: str = ""
    cat: str | None = None
    name: str | int | None = ""
    ts: float | str = 0.0
    dur: float | str = 0.0
    args: _Args | None = None


class _Doc(msgspec.Struct):
    traceEvents: list[_Event] = []  # noqa: N815 - the JSON key
    deviceProperties: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815


_DECODER = msgspec.json.Decoder(_Doc | list[_Event])


@dataclass(frozen=True, slots=True)
class Intervals:
    """Events of one kind: start and end in microseconds, plus names."""

    start: np.ndarray
    end: np.ndarray
    names: list[str]

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
    runtime_correlation: np.ndarray
    cpu: Intervals
    """cpu_op, user_annotation and python_function events (names used for phase detection)."""
    steps: list[tuple[int, float, float]]
    """(step number, start, end) from ProfilerStep#N annotations."""
    rank: int | None
    world_size: int | None
    backend: str | None
    device_name: str | None
    device_memory: int | None
    notes: list[str] = field(default_factory=list)


def read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror})") from exc
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(f"{path}: corrupt or truncated gzip data") from exc
    return raw


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


def parse_kineto(path: str | Path) -> KinetoTrace:
    """Parse a .json or .json.gz profiler trace; raises TraceError with a one-line reason."""
    path = Path(path)
    raw = read_bytes(path)
    if not raw.strip():
        raise TraceError(f"{path}: file is empty")
    try:
        doc = _DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        raise TraceError(f"{path}: JSON, but not a PyTorch profiler trace ({str(exc)[:120]})") from exc
    except msgspec.DecodeError as exc:
        raise TraceError(f"{path}: not valid JSON (truncated or corrupt: {str(exc)[:80]})") from exc
    events = doc if isinstance(doc, list) else doc.traceEvents
    if not events:
        raise TraceError(f"{path}: the trace has no events")
    gpu, gpu_cat, gpu_stream, gpu_corr, runtime, rt_corr, cpu, steps = [], [], [], [], [], [], [], []
    try:
        for e in events:
            if e.ph != "X" or e.cat is None:
                continue
            cat = e.cat.lower()
            name = str(e.name)
            ts, dur = _num(e.ts), _num(e.dur)
            if cat in GPU_CATS:
                gpu.append((ts, dur, name))
                gpu_cat.append(kernel_category(name, cat))
                args = e.args
                gpu_stream.append(int(args.stream) if args and isinstance(args.stream, int) else -1)
                gpu_corr.append(int(args.correlation) if args and isinstance(args.correlation, int) else -1)
            elif cat in RUNTIME_CATS:
                runtime.append((ts, dur, name))
                args = e.args
                rt_corr.append(int(args.correlation) if args and isinstance(args.correlation, int) else -1)
            elif cat in ("cpu_op", "user_annotation", "python_function", "operator"):
                if name.startswith("ProfilerStep#"):
                    try:
                        steps.append((int(name.split("#", 1)[1]), ts, ts + dur))
                    except ValueError:
                        pass
                else:
                    cpu.append((ts, dur, name))
    except (TypeError, ValueError) as exc:
        raise TraceError(f"{path}: malformed event fields ({exc})") from exc
    if not gpu and not runtime and not cpu and not steps:
        raise TraceError(f"{path}: no profiler events (no kernels, runtime calls or CPU ops)")
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
        path=str(path), gpu=Intervals.of(gpu), gpu_category=gpu_cat, gpu_stream=np.array(gpu_stream, dtype=np.int64),
        gpu_correlation=np.array(gpu_corr, dtype=np.int64), runtime=Intervals.of(runtime),
        runtime_correlation=np.array(rt_corr, dtype=np.int64), cpu=Intervals.of(cpu), steps=steps,
        rank=rank, world_size=int(world) if world is not None else None, backend=backend,
        device_name=device_name, device_memory=int(device_memory) if device_memory else None, notes=notes,
    )

"""Parse PyTorch profiler (Kineto / Chrome trace) JSON into compact numpy arrays, streaming.

The file is read by ``stream.EventStream`` (chunked decompression, events decoded in batches); each
batch goes through ``KinetoSink``, which keeps only what the importer uses, as flat arrays:
device activity (kernels, memcpy, memset on CUDA, ROCm, MTIA, HPU, XPU and other Kineto
backends), runtime/driver calls, the CPU annotations that mark step phases, and ProfilerStep
windows. Names are interned (one string per distinct kernel), so memory is about 40 bytes per
kept event, whatever the JSON spends on it, and events the importer does not use (most CPU ops,
flows, instant events) cost nothing.

Handles old capitalised categories (``Kernel``, ``Runtime``, ``Memcpy``), ``gpu_memcpy``/
``gpu_memset``, CPU-only traces, traces without ``ProfilerStep``, exporters that write numbers as
strings, and metadata stored as Python-literal strings (parsed by a small, bounded literal
parser, never ``eval``). Values outside physical bounds (timestamps that do not fit in
nanoseconds since 1970 as int64, negative durations, correlation ids beyond int64, step numbers
beyond 2**53) are skipped with a note; wrong types in the run metadata are one TraceError.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np

from analyzer.errors import TraceError
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.device_props import compute_capabilities
from gpuanalyze.ingest.kernel_names import hta_kernel_type, kernel_category, memcpy_kind
from gpuanalyze.ingest.runinfo import MAX_WORLD_SIZE
from gpuanalyze.ingest.stream import ByteChunks, EventStream, ReadLimits, open_regular

#: Device-side activity, by (lower-case) Kineto category, with the category kernel_category reads.
GPU_CATS: dict[str, str] = {
    "kernel": "kernel",
    "gpu_memcpy": "gpu_memcpy",
    "gpu_memset": "gpu_memset",
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "mtia_ccp_events": "kernel",
    "hpu_op": "kernel",
    "mlu_memcpy": "gpu_memcpy",
    "mlu_memset": "gpu_memset",
    "gcu_memcpy": "gpu_memcpy",
    "gcu_memset": "gpu_memset",
}
RUNTIME_CATS = frozenset(
    {
        "cuda_runtime",
        "cuda_driver",
        "runtime",
        "driver",
        "mtia_runtime",
        "xpu_runtime",
        "xpu_driver",
        "privateuse1_runtime",
        "privateuse1_driver",
        "mlu_runtime",
        "gcu_runtime",
        "gcu_driver",
    }
)
#: The accelerator a category names (RunInfo.device); anything else with device activity is 'cuda'.
DEVICE_OF_CAT: dict[str, str] = {
    "mtia_ccp_events": "mtia",
    "mtia_runtime": "mtia",
    "hpu_op": "hpu",
    "xpu_runtime": "xpu",
    "xpu_driver": "xpu",
    "privateuse1_runtime": "privateuse1",
    "privateuse1_driver": "privateuse1",
    "mlu_runtime": "mlu",
    "mlu_memcpy": "mlu",
    "mlu_memset": "mlu",
    "gcu_runtime": "gcu",
    "gcu_driver": "gcu",
    "gcu_memcpy": "gcu",
    "gcu_memset": "gcu",
}
CPU_CATS = frozenset({"cpu_op", "user_annotation", "python_function", "operator"})
SYNC_APIS = (
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "hipDeviceSynchronize",
    "hipStreamSynchronize",
    "hipEventSynchronize",
)
BLOCKING_COPIES = ("cudaMemcpy", "hipMemcpy")

#: The TensorBoard plugin's DataLoader annotations (``enumerate(DataLoader)#...__next__``, DataPipe).
DATALOADER_PREFIX = "enumerate(DataLoader)#"
DATALOADER_SUFFIX = ".__next__"
DATAPIPE_PREFIX = "enumerate(DataPipe)#"
OPTIMIZER_PREFIX = "Optimizer.step#"
BACKWARD_PREFIX = "autograd::engine::evaluate_function"
_BACKWARD_OP = re.compile(r"Backward\d*$")
"""Autograd nodes as CPU ops (``ConvolutionBackward0``): backward work without the engine wrapper."""

MARK_LOADER, MARK_OPTIMIZER, MARK_BACKWARD = 0, 1, 2
#: Marks of gpuanalyze's own phase annotations (``gpuanalyze:<part>``), one per trace part.
MARK_EXPORT: dict[str, int] = {name: 3 + i for i, name in enumerate(S.EXPORT_PHASE_NAMES.values())}
EXPORT_PART_OF_MARK: dict[int, str] = {3 + i: part for i, part in enumerate(S.EXPORT_PHASE_NAMES)}

#: Kineto timestamps are microseconds (since 1970 in recent PyTorch): beyond this, nanoseconds overflow int64.
MAX_TS_US = 9.2e15
MAX_DUR_US = 1e12
MAX_STEP = 1 << 53
_INT64 = 1 << 63


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


_STRICT = msgspec.json.Decoder(list[_Event])
#: Fallback for exporters that write numbers as strings or names as numbers.
_LOOSE = msgspec.json.Decoder(list[_LooseEvent])


def decode_events(data: memoryview | bytes) -> list[Any]:
    """A JSON array of events as structs (raises msgspec errors)."""
    try:
        return _STRICT.decode(data)
    except msgspec.ValidationError:
        return _LOOSE.decode(data)


@dataclass(frozen=True, slots=True)
class Intervals:
    """Events of one kind: start and end in microseconds."""

    start: np.ndarray
    end: np.ndarray

    @classmethod
    def from_arrays(cls, ts: array, dur: array) -> Intervals:
        start = np.frombuffer(ts, dtype=np.float64) if len(ts) else np.empty(0)
        return cls(start, start + (np.frombuffer(dur, dtype=np.float64) if len(dur) else np.empty(0)))

    @property
    def size(self) -> int:
        return int(self.start.size)


@dataclass(frozen=True, slots=True)
class GpuKind:
    """One distinct device activity: its name and what is derived from it once."""

    name: str
    category: str
    """kernel_names.kernel_category: gemm_tensor_core, memcpy, communication, ..."""
    memcpy: str
    """kernel_names.memcpy_kind for memcpy names ('h2d', 'd2h', 'd2d', 'other'); '' for kernels."""
    pageable: bool
    hta_computation: bool
    """HTA counts it as computation (not communication, not memory)."""


@dataclass(frozen=True, slots=True)
class KinetoTrace:
    """What the importer needs from a Kineto trace, in microseconds."""

    path: str
    gpu: Intervals
    gpu_kind: np.ndarray
    """Index into ``kinds`` of every device event."""
    kinds: tuple[GpuKind, ...]
    gpu_stream: np.ndarray
    gpu_correlation: np.ndarray
    """-1 where the event has none (or an id beyond int64)."""
    runtime: Intervals
    """Runtime/driver API calls."""
    runtime_sync: np.ndarray
    """True for blocking synchronisation calls (cudaDeviceSynchronize, blocking cudaMemcpy, ...)."""
    runtime_correlation: np.ndarray
    cpu: Intervals
    """CPU annotations that mark step phases (``cpu_mark`` says which)."""
    cpu_mark: np.ndarray
    steps: list[tuple[int, float, float]]
    """(step number, start, end) from ProfilerStep#N annotations, sorted."""
    rank: int | None
    world_size: int | None
    backend: str | None
    device_name: str | None
    device_memory: int | None
    device: str
    """'cuda' (also ROCm), 'mtia', 'hpu', 'xpu', ... when the trace has device activity; 'cpu' otherwise."""
    notes: list[str] = field(default_factory=list)
    compute_capabilities: tuple[str, ...] | None = None
    """'major.minor' per deviceProperties entry (device_props.py)."""

    @property
    def gpu_category(self) -> list[str]:
        return [self.kinds[i].category for i in self.gpu_kind.tolist()]

    def gpu_names(self, idx: np.ndarray | None = None) -> list[str]:
        kinds = self.gpu_kind if idx is None else self.gpu_kind[idx]
        return [self.kinds[i].name for i in kinds.tolist()]


class KinetoSink:
    """Keeps what the importer needs from batches of decoded events, as flat arrays."""

    def __init__(self, path: str, limits: ReadLimits) -> None:
        self.path, self.limits = path, limits
        self.g_ts, self.g_dur, self.g_kind = array("d"), array("d"), array("i")
        self.g_stream, self.g_corr = array("q"), array("q")
        self.r_ts, self.r_dur, self.r_sync, self.r_corr = array("d"), array("d"), array("b"), array("q")
        self.c_ts, self.c_dur, self.c_mark = array("d"), array("d"), array("b")
        self.steps: list[tuple[int, float, float]] = []
        self.kinds: list[GpuKind] = []
        self._kind_index: dict[tuple[str, str], int] = {}
        self._cats: dict[str, tuple[int, str]] = {}
        self.devices: set[str] = set()
        self.events = 0
        self.complete_events = 0
        self.bad_times = 0
        self.bad_ids = 0
        self.bad_steps = 0

    def _cat(self, raw: str) -> tuple[int, str]:
        """(0 skip, 1 device, 2 runtime, 3 cpu), normalised category; cached per distinct string."""
        got = self._cats.get(raw)
        if got is None:
            lower = raw.lower()
            if lower in GPU_CATS:
                got = (1, GPU_CATS[lower])
            elif lower in RUNTIME_CATS:
                got = (2, lower)
            elif lower in CPU_CATS:
                got = (3, lower)
            else:
                got = (0, lower)
            if got[0] in (1, 2) and lower in DEVICE_OF_CAT:
                self.devices.add(DEVICE_OF_CAT[lower])
            if len(self._cats) < 4096:
                self._cats[raw] = got
        return got

    def _times(self, e: Any) -> tuple[float, float] | None:
        ts, dur = e.ts, e.dur
        if type(ts) is not float or type(dur) is not float:
            try:
                ts, dur = float(ts), float(dur)
            except (TypeError, ValueError) as exc:
                raise TraceError(f"{self.path}: malformed event fields ({exc})") from exc
        if -MAX_TS_US <= ts <= MAX_TS_US and 0.0 <= dur <= MAX_DUR_US:
            return ts, dur
        self.bad_times += 1
        return None

    def _id(self, value: int | str | None) -> int:
        if type(value) is int:
            if -_INT64 <= value < _INT64:
                return value
            self.bad_ids += 1
        return -1

    def _kind(self, name: str, cat: str) -> int:
        key = (name, cat)
        kid = self._kind_index.get(key)
        if kid is None:
            category = kernel_category(name, cat)
            kid = len(self.kinds)
            self.kinds.append(
                GpuKind(
                    name=name,
                    category=category,
                    memcpy=memcpy_kind(name) if category == "memcpy" else "",
                    pageable="Pageable" in name,
                    hta_computation=hta_kernel_type(name) == "computation",
                )
            )
            self._kind_index[key] = kid
        return kid

    def consume(self, events: list[Any]) -> None:
        cat_of = self._cat
        times = self._times
        ident = self._id
        self.events += len(events)
        for e in events:
            if e.ph != "X" or e.cat is None:
                continue
            self.complete_events += 1
            kind, cat = cat_of(e.cat)
            if kind == 0:
                continue
            if kind == 3:
                name = e.name if type(e.name) is str else str(e.name)
                mark = _mark(name, cat)
                if mark is None:
                    continue
                t = times(e)
                if t is None:
                    continue
                if mark == -1:
                    self._step(name, t)
                else:
                    self.c_ts.append(t[0])
                    self.c_dur.append(t[1])
                    self.c_mark.append(mark)
                continue
            t = times(e)
            if t is None:
                continue
            name = e.name if type(e.name) is str else str(e.name)
            args = e.args
            if kind == 1:
                self.g_ts.append(t[0])
                self.g_dur.append(t[1])
                self.g_kind.append(self._kind(name, cat))
                self.g_stream.append(ident(args.stream) if args else -1)
                self.g_corr.append(ident(args.correlation) if args else -1)
            else:
                self.r_ts.append(t[0])
                self.r_dur.append(t[1])
                self.r_sync.append(name.startswith(SYNC_APIS) or name in BLOCKING_COPIES)
                self.r_corr.append(ident(args.correlation) if args else -1)
        kept = len(self.g_ts) + len(self.r_ts) + len(self.c_ts) + len(self.steps)
        if kept > self.limits.max_kept_events:
            raise TraceError(
                f"{self.path}: more than {self.limits.max_kept_events:,} device, runtime and phase events; "
                "profile a shorter window (torch.profiler schedule) or split the trace"
            )

    def _step(self, name: str, t: tuple[float, float]) -> None:
        digits = name[len("ProfilerStep#") :]
        if not digits.isdigit() or not digits.isascii():
            return
        if len(digits) > 16 or int(digits) >= MAX_STEP:
            self.bad_steps += 1
            return
        self.steps.append((int(digits), t[0], t[0] + t[1]))

    def finish(self, meta: dict[str, bytes], notes: list[str]) -> KinetoTrace:
        if self.events == 0:
            raise TraceError(f"{self.path}: the trace has no events")
        if not self.g_ts and not self.r_ts and not self.c_ts and not self.steps and not self.complete_events:
            raise TraceError(f"{self.path}: no profiler events (no kernels, runtime calls or CPU ops)")
        notes = list(notes)
        if self.bad_times:
            notes.append(f"skipped {self.bad_times} event(s) with impossible timestamps or durations")
        if self.bad_ids:
            notes.append(f"ignored {self.bad_ids} stream/correlation id(s) beyond 64 bits")
        if self.bad_steps:
            notes.append(f"ignored {self.bad_steps} ProfilerStep annotation(s) with step numbers beyond 2**53")
        dist = _dist_info(self.path, meta.get("distributedInfo"), notes)
        name, memory = _device_props(self.path, meta.get("deviceProperties"), notes)
        device = "cpu"
        if self.g_ts:
            device = sorted(self.devices)[0] if self.devices else "cuda"
        steps = sorted(self.steps)
        return KinetoTrace(
            path=self.path,
            gpu=Intervals.from_arrays(self.g_ts, self.g_dur),
            gpu_kind=np.frombuffer(self.g_kind, dtype=np.int32) if self.g_kind else np.empty(0, np.int32),
            kinds=tuple(self.kinds),
            gpu_stream=_ints(self.g_stream),
            gpu_correlation=_ints(self.g_corr),
            runtime=Intervals.from_arrays(self.r_ts, self.r_dur),
            runtime_sync=np.frombuffer(self.r_sync, dtype=np.int8).astype(bool) if self.r_sync else np.empty(0, bool),
            runtime_correlation=_ints(self.r_corr),
            cpu=Intervals.from_arrays(self.c_ts, self.c_dur),
            cpu_mark=np.frombuffer(self.c_mark, dtype=np.int8) if self.c_mark else np.empty(0, np.int8),
            steps=steps,
            rank=dist[0],
            world_size=dist[1],
            backend=dist[2],
            device_name=name,
            device_memory=memory,
            device=device,
            notes=notes,
            compute_capabilities=compute_capabilities(_meta_value(self.path, "", meta.get("deviceProperties"), [])),
        )


def _ints(a: array) -> np.ndarray:
    return np.frombuffer(a, dtype=np.int64) if len(a) else np.empty(0, np.int64)


def _mark(name: str, cat: str) -> int | None:
    """-1 for a ProfilerStep, a MARK_* for a phase annotation, None for any other CPU event."""
    if name.startswith("ProfilerStep#"):
        return -1
    if name.startswith("enumerate(Data"):
        if (name.startswith(DATALOADER_PREFIX) and name.endswith(DATALOADER_SUFFIX)) or name.startswith(
            DATAPIPE_PREFIX
        ):
            return MARK_LOADER
        return None
    if name.startswith(OPTIMIZER_PREFIX):
        return MARK_OPTIMIZER
    if name.startswith(BACKWARD_PREFIX):
        return MARK_BACKWARD
    if "Backward" in name and cat == "cpu_op" and _BACKWARD_OP.search(name):
        return MARK_BACKWARD
    if name.startswith(S.EXPORT_PHASE_PREFIX):
        return MARK_EXPORT.get(name)
    return None


def parse_kineto(path: str | Path, limits: ReadLimits | None = None) -> KinetoTrace:
    """Parse a .json or .json.gz profiler trace; raises TraceError with a one-line reason."""
    path = Path(path)
    with open_regular(path) as fh:
        size = path.stat().st_size
        return parse_kineto_stream(fh, str(path), size, limits)


def parse_kineto_stream(fh: IO[bytes], name: str, size: int | None, limits: ReadLimits | None = None) -> KinetoTrace:
    """Parse a trace from an open binary stream (a local file, or an fsspec file for a URL)."""
    limits = limits or ReadLimits()
    chunks = iter(ByteChunks(fh, name, size, limits))
    stream = EventStream(chunks, name, limits, decode_events)
    sink = KinetoSink(name, limits)
    try:
        for batch in stream.batches():
            sink.consume(batch)
            del batch  # not alive while the next batch decodes
    except OSError as exc:
        raise TraceError(f"{name}: cannot read ({exc.strerror or exc})") from exc
    if not stream.events_found:
        raise TraceError(f"{name}: the trace has no events")
    return sink.finish(stream.meta, stream.notes)


# ---- run metadata -------------------------------------------------------------------------------

_META_DECODER = msgspec.json.Decoder()
_LITERAL_MAX = 64 * 1024
_LITERAL_DEPTH = 32


def _meta_value(path: str, key: str, raw: bytes | None, notes: list[str]) -> Any:
    """A metadata value: JSON, or a JSON string holding a Python literal (older Kineto)."""
    if raw is None:
        return None
    try:
        value = _META_DECODER.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        notes.append(f"{key} is not readable JSON: ignored")
        return None
    if isinstance(value, str):
        try:
            return parse_literal(value)
        except ValueError as exc:
            notes.append(f"{key} is a string that is not a Python literal ({exc}): ignored")
            return None
    return value


def _dist_info(path: str, raw: bytes | None, notes: list[str]) -> tuple[int | None, int | None, str | None]:
    info = _meta_value(path, "distributedInfo", raw, notes)
    if not isinstance(info, dict) or info.get("rank") is None:
        if isinstance(info, dict):
            notes.append("distributedInfo has no rank: assumed rank 0 of 1")
        else:
            notes.append("no distributedInfo in the trace: assumed rank 0 of 1")
        return None, None, None
    rank = _count(info["rank"])
    if rank is None or rank >= MAX_WORLD_SIZE:
        raise TraceError(f"{path}: distributedInfo.rank is {_show(info['rank'])}, not a rank number")
    world = _count(info.get("world_size"))
    if info.get("world_size") is not None and (world is None or not 1 <= world <= MAX_WORLD_SIZE):
        notes.append(f"distributedInfo.world_size is {_show(info.get('world_size'))}: ignored")
        world = None
    if world is not None and rank >= world:
        raise TraceError(f"{path}: distributedInfo says rank {rank} of a world of {world}")
    backend = info.get("backend")
    if backend is not None and (not isinstance(backend, str) or len(backend) > 64):
        notes.append("distributedInfo.backend is not a short string: ignored")
        backend = None
    return rank, world, backend


def _device_props(path: str, raw: bytes | None, notes: list[str]) -> tuple[str | None, int | None]:
    props = _meta_value(path, "deviceProperties", raw, notes)
    if not isinstance(props, list) or not props or not isinstance(props[0], dict):
        return None, None
    first = props[0]
    name = first.get("name")
    if name is not None and (not isinstance(name, str) or len(name) > 256):
        notes.append("deviceProperties name is not a short string: GPU name unknown")
        name = None
    memory = first.get("totalGlobalMem")
    mem = _count(memory)
    if memory is not None and (mem is None or mem > 1 << 50):
        notes.append(f"deviceProperties totalGlobalMem is {_show(memory)}: GPU memory unknown")
        mem = None
    return name, mem or None


def _count(value: Any) -> int | None:
    """A non-negative integer from an int, an integral float or a digit string; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and 0 <= value < 2**53:
        return int(value)
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 16:
        return int(value)
    return None


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_LIT_TOKEN = re.compile(
    r"""\s*(?:(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(?P<num>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+))"""
    r"""|(?P<word>True|False|None)|(?P<punct>[\[\]{}(),:]))""",
    re.DOTALL,
)


def parse_literal(text: str) -> Any:
    """A Python literal (dicts, lists, tuples, strings, numbers, True/False/None) from ``text``.

    Replaces ``ast.literal_eval`` for metadata in untrusted traces: at most 64 KiB and 32 levels
    deep, no arithmetic, no sets, no bytes; raises ValueError on anything else.
    """
    if len(text) > _LITERAL_MAX:
        raise ValueError("over 64 KiB")
    tokens = []
    pos = 0
    while pos < len(text):
        m = _LIT_TOKEN.match(text, pos)
        if m is None:
            if text[pos:].strip():
                raise ValueError(f"unexpected {text[pos : pos + 10]!r}")
            break
        tokens.append((m.lastgroup, m.group(m.lastgroup or 0)))
        pos = m.end()
    value, i = _literal(tokens, 0, 0)
    if i != len(tokens):
        raise ValueError("data after the literal")
    return value


def _literal(tokens: list[tuple[str | None, str]], i: int, depth: int) -> tuple[Any, int]:
    if depth > _LITERAL_DEPTH:
        raise ValueError("nested too deeply")
    if i >= len(tokens):
        raise ValueError("unexpected end")
    kind, text = tokens[i]
    if kind == "str":
        try:
            return _unquote(text), i + 1
        except (UnicodeDecodeError, ValueError) as exc:
            raise ValueError("bad string escape") from exc
    if kind == "num":
        if len(text) > 40:
            raise ValueError("number too long")
        return (float(text) if any(c in text for c in ".eE") else int(text)), i + 1
    if kind == "word":
        return {"True": True, "False": False, "None": None}[text], i + 1
    close = {"[": "]", "(": ")", "{": "}"}.get(text)
    if close is None:
        raise ValueError(f"unexpected {text!r}")
    i += 1
    items: list[Any] = []
    pairs: dict[Any, Any] = {}
    while True:
        if i < len(tokens) and tokens[i][1] == close:
            i += 1
            break
        item, i = _literal(tokens, i, depth + 1)
        if close == "}":
            if i >= len(tokens) or tokens[i][1] != ":":
                raise ValueError("expected ':'")
            value, i = _literal(tokens, i + 1, depth + 1)
            if not isinstance(item, str | int | float | bool | type(None)):
                raise ValueError("unhashable key")
            pairs[item] = value
        else:
            items.append(item)
        if i < len(tokens) and tokens[i][1] == ",":
            i += 1
        elif not (i < len(tokens) and tokens[i][1] == close):
            raise ValueError(f"expected ',' or {close!r}")
    if close == "}":
        return pairs, i
    return (tuple(items) if close == ")" else items), i


def _unquote(text: str) -> str:
    body = text[1:-1]
    if "\\" not in body:
        return body
    return body.encode("latin-1", "backslashreplace").decode("unicode_escape")

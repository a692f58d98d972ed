"""What a trace says about its run: typed records, validated where they are read.

The run information (schema metadata) and the end marker (the final batch's metadata) are JSON
in the file. They are decoded into these structs with type and range checks, so a value that is
the wrong type, non-finite or out of physical bounds is a one-line error at the boundary and the
analysis can rely on what it gets. Unknown keys are ignored (newer writers may add some).
A field of the wrong type or out of range is dropped (it becomes unknown) with a note naming it,
so one hostile value costs that value, not the trace; metadata that is not JSON is an error.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import msgspec

from gpuanalyze.ingest.trace.redact import redact_command

_S = TypeVar("_S", bound=msgspec.Struct)

#: Largest world size a trace may declare (the largest jobs today are ~10^5 GPUs).
MAX_WORLD_SIZE = 1 << 20
_Int = Annotated[int, msgspec.Meta(ge=0, le=1 << 62)]
_Rank = Annotated[int, msgspec.Meta(ge=0, lt=MAX_WORLD_SIZE)]
_World = Annotated[int, msgspec.Meta(ge=1, le=MAX_WORLD_SIZE)]
_Ms = Annotated[float, msgspec.Meta(ge=0.0, le=1e15)]
_Pct = Annotated[float, msgspec.Meta(ge=0.0, le=100.0)]
_Text = Annotated[str, msgspec.Meta(max_length=4096)]
_Name = Annotated[str, msgspec.Meta(max_length=256)]


class GpuSummary(msgspec.Struct, frozen=True, kw_only=True):
    """HTA's temporal breakdown of a whole imported trace, in percent of the GPU span."""

    busy_pct: _Pct
    idle_pct: _Pct
    compute_pct: _Pct
    non_compute_pct: _Pct


class TimeSpent(msgspec.Struct, frozen=True, kw_only=True):
    """Host time in one kind of work (its name: an API call, a phase, 'untraced'), summed over its calls."""

    name: _Name
    ms: _Ms
    count: _Int = 0


class CallSite(msgspec.Struct, frozen=True, kw_only=True):
    """One call site of the user's code (``file:line function``) and the calls made from it, with their time."""

    frame: Annotated[str, msgspec.Meta(max_length=1024)]
    count: _Int
    ms: _Ms


class OutsideSteps(msgspec.Struct, frozen=True, kw_only=True):
    """A part of a capture outside its judged steps: set-up (the process before its first device work) or teardown
    (after its last), reported with what the host did in it, never judged as step work."""

    ms: _Ms
    parts: Annotated[tuple[TimeSpent, ...], msgspec.Meta(max_length=16)] = ()
    """What the host did in it, most time first (imports and dataset building show as untraced host time)."""


class RunInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One process's run: host, devices, versions, distributed setup. Unknown values are None."""

    host: _Name | None = None
    gpu_name: _Name | None = None
    gpu_count: _Int | None = None
    gpu_memory_bytes: _Int | None = None
    compute_capabilities: Annotated[tuple[_Name, ...], msgspec.Meta(max_length=256)] | None = None
    """CUDA compute capability ('major.minor') of each device the trace lists (Kineto deviceProperties;
    ROCm traces put the GFX version there); None when not recorded."""
    driver: _Name | None = None
    cuda: _Name | None = None
    torch: _Name | None = None
    world_size: _World | None = None
    rank: _Rank | None = None
    local_rank: _Rank | None = None
    backend: _Name | None = None
    device: _Name | None = None
    """'cuda', 'cpu', or another accelerator kind ('mtia', 'xpu', ...)."""
    start_unix_ns: _Int | None = None
    model_params: _Int | None = None
    param_dtype: _Name | None = None
    pid: _Int | None = None
    argv: _Text | None = None
    source: _Text | None = None
    """Where the trace came from when it was imported ('kineto:<file name>')."""
    gpu_summary: GpuSummary | None = None
    profiler_steps: _Int | None = None
    """ProfilerStep#N annotations in an imported trace (0: none, the whole trace is one window); None otherwise."""
    cpu_count: _Int | None = None
    run_id: _Name | None = None
    """Shared by every rank of one run and by no other run: rank-file discovery groups files by it."""
    models: Annotated[tuple[_Name, ...], msgspec.Meta(max_length=256)] | None = None
    """Names of the models whose forward was timed (per-model times are in model_forward_ms)."""
    recorder: _Name | None = None
    """How the trace was recorded: 'profile', 'run' (gpuanalyze run), 'lightning', 'transformers'."""
    cpu_quota_cores: Annotated[float, msgspec.Meta(gt=0.0, le=1 << 20)] | None = None
    """1.3: the cgroup CPU quota in cores (cpu.max, or cfs_quota_us / cfs_period_us); None when
    unlimited or unknown. ``cpu_count`` is the CPUs in the affinity mask."""
    host_cpus: _Int | None = None
    """1.3: the CPUs the host has online (``os.cpu_count()``), beyond this process's affinity mask."""
    unrecorded_launches: _Int | None = None
    """An imported trace with launch, copy or memset calls but no device activity at all: how many calls. The GPU
    ran work the trace did not record (CUPTI activity off or lost), so it is not a CPU-only run."""
    unrecorded_device: _Text | None = None
    """An imported capture whose device activity was not recorded at all (an Nsight Systems export without kernel,
    copy or memset rows): what it lacks and how to record it. Not a CPU-only run: no verdict is read from it."""
    setup: OutsideSteps | None = None
    """An imported capture's set-up: from its first event to its first device work (or first step), not judged."""
    teardown: OutsideSteps | None = None
    """An imported capture's teardown: from its last device work (or last step's end) to its last event."""
    cpu_bf16: _Name | None = None
    """The CPU's native bf16 flags from /proc/cpuinfo (``avx512_bf16``, ``amx_bf16``, comma-joined; '' none);
    None when not read."""

    def __post_init__(self) -> None:
        """The command line redacted however the struct was made (recorded, read from any trace, imported)."""
        if self.argv:
            msgspec.structs.force_setattr(self, "argv", redact_command(self.argv))

    @property
    def world(self) -> int:
        """The world size, 1 when the trace does not say (the one fallback everyone uses)."""
        return self.world_size or 1

    @property
    def rank_or_zero(self) -> int:
        return self.rank or 0


class EndInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The end marker: how the recorded loop ended."""

    status: _Name = "unknown"
    """ok, exception (the loop raised), interrupted (Ctrl-C), profiler_error, imported; others from newer writers."""
    exception: _Text | None = None
    """'Type: message' when the user's loop raised."""
    error: _Text | None = None
    """The internal error that switched profiling off (status 'profiler_error')."""
    steps: _Int | None = None
    loader_workers: _Int | None = None
    """Largest DataLoader num_workers seen (0: loading ran in the training process)."""
    batch_bytes: _Int | None = None
    """Bytes of the tensors in the first batch fetched (what a worker process would pass per batch)."""
    fetches: _Int | None = None
    """Batches the training loop fetched over the recorded steps (more than the steps: gradient accumulation,
    one micro-batch per fetch)."""
    fetch_samples: _Int | None = None
    """Samples in the first batch fetched (under gradient accumulation: one micro-batch)."""
    loader_epochs: _Int | None = None
    """Epochs the training loader started (its ``iter()`` calls) over the recorded steps."""
    fetch_ms: _Ms | None = None
    """Wall time of the training loader's fetches that ran its Dataset in the training process (no worker), summed."""
    fetch_dataset_ms: _Ms | None = None
    """Of fetch_ms, the time in torch's dataset fetcher outside the collate (the Dataset's ``__getitem__`` calls,
    one per sample): the part of a fetch that grows with its samples; the rest (the iterator, the sampler's
    call, the hand-back) is per fetch."""
    fetch_collate_ms: _Ms | None = None
    """Of fetch_ms, the time in the collate: per call (stacking a few small samples) to growing with the samples
    (copying large ones)."""
    sync_sites: Annotated[tuple[CallSite, ...], msgspec.Meta(max_length=64)] | None = None
    """Where the host-device syncs the recorder timed (``sync_ms``: ``torch.cuda.synchronize``, ``Tensor.item``,
    ``tolist``, ``cpu``) were called from: the user's innermost frame outside torch, most blocked time first
    (analyzer/record/sync_sites.py; CUDA runs recorded by gpuanalyze; older traces lack it)."""
    autocast: _Name | None = None
    """The autocast a profiled forward ran under, ``device:dtype`` ('cpu:bfloat16'); None: none seen (recordings
    since gpuanalyze 0.3; analyzer/record/autocast_watch.py)."""
    end_unix_ns: _Int | None = None


_RUN_DECODER = msgspec.json.Decoder(RunInfo)
_END_DECODER = msgspec.json.Decoder(EndInfo)
_TAGS_DECODER = msgspec.json.Decoder(dict[_Name, _Text])


def encode(value: RunInfo | EndInfo | dict[str, str] | list[str]) -> bytes:
    return msgspec.json.encode(value)


def read_run(raw: bytes) -> tuple[RunInfo, list[str]]:
    """The run information, its ill-typed fields dropped (one note each); DecodeError when not JSON."""
    return _lenient(raw, _RUN_DECODER, RunInfo, "run")


def read_end(raw: bytes) -> tuple[EndInfo, list[str]]:
    """The end marker, its ill-typed fields dropped (one note each); DecodeError when not JSON."""
    return _lenient(raw, _END_DECODER, EndInfo, "end marker")


def read_tags(raw: bytes) -> tuple[dict[str, str], list[str]]:
    """The user tags, those that are not short text dropped (one note); DecodeError when not JSON."""
    try:
        return _TAGS_DECODER.decode(raw), []
    except msgspec.ValidationError:
        pass
    value = msgspec.json.decode(raw)
    if not isinstance(value, dict):
        return {}, [f"tags metadata is {_kind(value)}, not an object of names to values; ignored"]
    kept = {k: v for k, v in value.items() if _fits(k, 256) and _fits(v, 4096)}
    return kept, [f"dropped {len(value) - len(kept)} tag(s) whose name or value is not short text"]


#: Most notes, and characters a note, read back from a trace's metadata.
MAX_NOTES, MAX_NOTE_CHARS = 256, 4096


def read_notes(raw: bytes) -> tuple[tuple[str, ...], list[str]]:
    """An import's notes (schema.META_NOTES), those that are not short text dropped (one note); DecodeError when
    not JSON."""
    value = msgspec.json.decode(raw)
    if not isinstance(value, list):
        return (), [f"notes metadata is {_kind(value)}, not a list of notes; ignored"]
    kept = tuple(v for v in value[:MAX_NOTES] if _fits(v, MAX_NOTE_CHARS))
    dropped = len(value) - len(kept)
    return kept, [f"dropped {dropped} stored note(s) that are not short text"] if dropped else []


def _lenient(raw: bytes, decoder: msgspec.json.Decoder[_S], cls: type[_S], what: str) -> tuple[_S, list[str]]:
    try:
        return decoder.decode(raw), []
    except msgspec.ValidationError:
        pass  # find the bad fields: each alone against the struct's types
    value = msgspec.json.decode(raw)
    if not isinstance(value, dict):
        return cls(), [f"{what} metadata is {_kind(value)}, not an object; ignored"]
    kept: dict[str, Any] = {}
    notes: list[str] = []
    for field in msgspec.structs.fields(cls):
        if field.encode_name not in value:
            continue
        item = {field.encode_name: value[field.encode_name]}
        try:
            msgspec.convert(item, cls)
        except msgspec.ValidationError as exc:
            notes.append(
                f"{what} metadata field {field.encode_name!r} is invalid ({str(exc)[:100]}); treated as unknown"
            )
            continue
        kept.update(item)
    return msgspec.convert(kept, cls), notes


def _fits(value: object, limit: int) -> bool:
    return isinstance(value, str) and len(value) <= limit


def _kind(value: object) -> str:
    return (
        "null" if value is None else f"a JSON {type(value).__name__}".replace("dict", "object").replace("list", "array")
    )

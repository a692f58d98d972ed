"""The Kineto event vocabulary: which categories are device activity, runtime calls or CPU
annotations, which annotation names mark a step phase, the physical bounds on event times, and the
msgspec types one batch of events decodes into (timeline/model.py keeps what it needs of them)."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from gpuanalyze.ingest.trace import schema as S

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
#: CUPTI overhead activities (module loading on a kernel's first launch, profiler buffers): startup_work.py.
OVERHEAD_CATS = frozenset({"overhead"})

#: The TensorBoard plugin's DataLoader annotations (``enumerate(DataLoader)#...__next__``, DataPipe).
DATALOADER_PREFIX = "enumerate(DataLoader)#"
DATALOADER_SUFFIX = ".__next__"
DATAPIPE_PREFIX = "enumerate(DataPipe)#"
#: DataLoader iterator classes in those annotations: loading in worker processes, or in the training process.
MULTI_PROCESS_ITER = "_MultiProcessingDataLoaderIter"
SINGLE_PROCESS_ITER = "_SingleProcessDataLoaderIter"
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
INT64 = 1 << 63


# gc=False: millions of small structs need no cycle tracking, which makes decoding much faster.
class Args(msgspec.Struct, gc=False):
    correlation: int | None = None
    # [memory] events (profile_memory=True): step_memory.py
    allocated: int | None = msgspec.field(default=None, name="Total Allocated")
    reserved: int | None = msgspec.field(default=None, name="Total Reserved")
    bytes: int | None = msgspec.field(default=None, name="Bytes")
    device_type: int | None = msgspec.field(default=None, name="Device Type")
    device_id: int | None = msgspec.field(default=None, name="Device Id")


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str = ""
    ts: float = 0.0
    dur: float = 0.0
    tid: int | str | None = None
    args: Args | None = None


class LooseArgs(msgspec.Struct, gc=False):
    correlation: int | str | None = None
    allocated: int | float | str | None = msgspec.field(default=None, name="Total Allocated")
    reserved: int | float | str | None = msgspec.field(default=None, name="Total Reserved")
    bytes: int | float | str | None = msgspec.field(default=None, name="Bytes")
    device_type: int | str | None = msgspec.field(default=None, name="Device Type")
    device_id: int | str | None = msgspec.field(default=None, name="Device Id")


class LooseEvent(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str | int | None = ""
    ts: float | str = 0.0
    dur: float | str = 0.0
    tid: int | str | None = None
    args: LooseArgs | None = None


_STRICT = msgspec.json.Decoder(list[Event])
#: Fallback for exporters that write numbers as strings or names as numbers.
_LOOSE = msgspec.json.Decoder(list[LooseEvent])


def decode_events(data: memoryview | bytes) -> list[Any]:
    """A JSON array of events as structs (raises msgspec errors)."""
    try:
        return _STRICT.decode(data)
    except msgspec.ValidationError:
        return _LOOSE.decode(data)


def phase_mark(name: str, cat: str) -> int | None:
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

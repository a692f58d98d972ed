"""Run information stored in the trace metadata: host, devices, versions, distributed setup.

The command line is stored redacted (gpuanalyze.ingest.trace.redact: ``--hf-token ***``).
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import msgspec

from analyzer.machine.driver import driver_version
from analyzer.record.host_readers import bf16_flags
from analyzer.record.system_sampler import cpu_quota_cores
from gpuanalyze.ingest.trace.redact import redact_argv
from gpuanalyze.ingest.trace.runinfo import RunInfo

#: Environment variable that gives every process of one run the same run id (`gpuanalyze run` sets it).
RUN_ID_ENV = "GPUANALYZE_RUN_ID"
#: How long a rank other than 0 waits for rank 0 to publish the run id in the process group's store.
RUN_ID_WAIT_S = 20.0
_sessions = itertools.count()


@dataclass(frozen=True, slots=True)
class Placement:
    """Where this process sits in a distributed job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int | None = None
    backend: str | None = None
    initialized: bool = False
    """torch.distributed is initialised (else rank/world come from launcher variables, or are 0 of 1)."""


def placement() -> Placement:
    """torch.distributed's rank and world size; before ``init_process_group``, what torchrun's
    RANK/WORLD_SIZE variables say; else rank 0 of 1."""
    import torch

    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return Placement(
            rank=dist.get_rank(),
            world_size=dist.get_world_size(),
            local_rank=_env_int("LOCAL_RANK", dist.get_rank()),
            backend=str(dist.get_backend()),
            initialized=True,
        )
    rank, world = _env_int("RANK", None), _env_int("WORLD_SIZE", None)
    if rank is not None and world is not None and 0 <= rank < world:
        return Placement(rank=rank, world_size=world, local_rank=_env_int("LOCAL_RANK", rank))
    return Placement()


def run_id(where: Placement) -> str:
    """An id shared by every rank of this run and no other run: GPUANALYZE_RUN_ID when set; under
    torch.distributed, one that rank 0 publishes in the process group's store; else torchelastic's
    run id; else a fresh one."""
    given = os.environ.get(RUN_ID_ENV, "").strip()
    if given:
        return given[:128]
    session = next(_sessions)
    if where.initialized and where.world_size > 1:
        agreed = _agree_in_store(where.rank, session)
        if agreed is not None:
            return agreed
    elastic = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if elastic and elastic != "none" and where.world_size > 1:
        return f"{elastic}.{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}.{session}"[:128]
    return uuid.uuid4().hex


def _agree_in_store(rank: int, session: int) -> str | None:
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        store = _get_default_store()
        key = f"gpuanalyze/run_id/{session}"
        if rank == 0:
            value = uuid.uuid4().hex
            store.set(key, value)
            return value
        store.wait([key], timedelta(seconds=RUN_ID_WAIT_S))
        return bytes(store.get(key)).decode()
    except Exception:  # noqa: BLE001 - no store, or rank 0 does not profile: fall back
        return None


def collect_run_info(
    models: Sequence[Any],
    device: str,
    *,
    where: Placement,
    run: str | None = None,
    model_names: Sequence[str] = (),
    recorder: str | None = None,
) -> RunInfo:
    """Describe this process's run; every lookup is best-effort and falls back to None."""
    import torch

    params = _unique_params(models)
    info: dict[str, Any] = dict(
        host=socket.gethostname(),
        pid=os.getpid(),
        cpu_count=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        argv=" ".join(redact_argv(sys.argv))[:500],
        torch=str(torch.__version__),
        cuda=None if torch.version.cuda is None else str(torch.version.cuda),
        device=device,
        start_unix_ns=time.time_ns(),
        model_params=sum(p.numel() for p in params) if params or models else None,
        param_dtype=str(params[0].dtype).removeprefix("torch.") if params else None,
        world_size=where.world_size,
        rank=where.rank,
        run_id=run,
        models=tuple(model_names) or None,
        recorder=recorder,
        cpu_quota_cores=_quota(),
        host_cpus=os.cpu_count(),
        cpu_bf16=cpu_bf16(),
    )
    if where.local_rank is not None:
        info["local_rank"] = where.local_rank
    if where.backend is not None:
        info["backend"] = where.backend
    if device == "cuda":
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        info.update(
            gpu_name=props.name,
            gpu_count=torch.cuda.device_count(),
            gpu_memory_bytes=int(props.total_memory),
            driver=driver_version(),
        )
    return msgspec.convert(info, RunInfo)


def _quota() -> float | None:
    """The cgroup CPU quota in cores, None when unlimited or unreadable (never raises)."""
    try:
        return cpu_quota_cores()
    except Exception:  # noqa: BLE001 - a fact we could not read is unknown
        return None


def cpu_bf16() -> str | None:
    """The CPU's native bf16 flags (host_readers.bf16_flags), None off Linux or unreadable (never raises)."""
    try:
        with open("/proc/cpuinfo") as f:
            head = f.read(1 << 16)  # the first CPU's block holds its flags
    except OSError:
        return None
    return bf16_flags(head)


def _unique_params(models: Sequence[Any]) -> list[Any]:
    seen: set[int] = set()
    params = []
    for model in models:
        for p in model.parameters() if hasattr(model, "parameters") else ():
            if id(p) not in seen:
                seen.add(id(p))
                params.append(p)
    return params


def _env_int(name: str, default: int | None) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return default


def gpu_uuid(cuda: Any) -> str | None:
    """The current GPU as NVML names it (its UUID), for the system sampler; ``cuda`` is ``torch.cuda``."""
    try:
        name = str(cuda.get_device_properties(cuda.current_device()).uuid)
    except Exception:  # noqa: BLE001 - the GPU is then not sampled
        return None
    return name if name.startswith(("GPU-", "MIG-")) else f"GPU-{name}"

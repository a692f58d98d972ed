"""Run information stored in the trace metadata: host, devices, versions, distributed setup."""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any

import msgspec

from gpuanalyze.ingest.runinfo import RunInfo


def collect_run_info(model: Any, device: str) -> RunInfo:
    """Describe this process's run; every lookup is best-effort and falls back to None."""
    import torch

    params = list(model.parameters()) if hasattr(model, "parameters") else []
    info: dict[str, Any] = dict(
        host=socket.gethostname(),
        pid=os.getpid(),
        cpu_count=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        argv=" ".join(sys.argv)[:500],
        torch=str(torch.__version__),
        cuda=None if torch.version.cuda is None else str(torch.version.cuda),
        device=device,
        start_unix_ns=time.time_ns(),
        model_params=sum(p.numel() for p in params),
        param_dtype=str(params[0].dtype).removeprefix("torch.") if params else None,
        world_size=1,
        rank=0,
    )
    if device == "cuda":
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        info.update(
            gpu_name=props.name,
            gpu_count=torch.cuda.device_count(),
            gpu_memory_bytes=int(props.total_memory),
            driver=_driver_version(),
        )
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        info.update(
            world_size=dist.get_world_size(),
            rank=dist.get_rank(),
            backend=str(dist.get_backend()),
            local_rank=int(os.environ.get("LOCAL_RANK", dist.get_rank())),
        )
    return msgspec.convert(info, RunInfo)


def _driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001 - NVML is optional
        return None

"""All-reduce bandwidth: the library collective (NCCL on GPUs, gloo on CPU), the one the busbw ceiling is of.

Runs one process per rank (torch.distributed over 127.0.0.1) for each world size from 1 to
the local device count (CPU: 1 and 2). For each message size: out-of-place and in-place,
time = slowest rank's median, algbw and busbw exactly as nccl-tests defines them
(busbw = algbw x 2(n-1)/n). Results are verified (sum of rank+1 over ranks) first.
torch.distributed all_reduce is in place; out-of-place copies into a separate output first,
as a framework does, and that copy is part of the time.
"""

from __future__ import annotations

import json
import socket
import statistics
import tempfile
from pathlib import Path
from typing import Any

from analyzer.errors import Skip, VerificationError
from analyzer.machine.bandwidth import allreduce_bandwidths
from gpuanalyze.kernels.backend import Backend, EventClock, HostClock, repeat
from gpuanalyze.kernels.result import BenchResult

KIB, MIB = 2**10, 2**20
SIZES = (64 * KIB, 1 * MIB, 16 * MIB, 64 * MIB, 256 * MIB)
QUICK_SIZES = (64 * KIB, 1 * MIB, 16 * MIB)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, device: str, sizes: list[int], reps: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    dev = torch.device(device, rank) if device == "cuda" else torch.device("cpu")
    rows = []
    for size in sizes:
        n = size // 4
        check = torch.full((n,), float(rank + 1), device=dev)
        dist.all_reduce(check)
        ok = bool((check == world * (world + 1) / 2).all())
        for mode in ("out_of_place", "in_place"):
            op = _operation(mode, torch.ones(n, device=dev), torch.empty(n, device=dev))
            times = _time(op, reps, dev, dist)
            tt = torch.tensor(times, dtype=torch.float64, device=dev)
            dist.all_reduce(tt, op=dist.ReduceOp.MAX)
            rows.append({"size": size, "impl": backend, "mode": mode, "seconds": tt.cpu().tolist(), "ok": ok})
    if rank == 0:
        Path(out).write_text(json.dumps(rows))
    dist.destroy_process_group()


def _operation(mode: str, src: Any, dst: Any) -> Any:
    """The timed call: the library all-reduce, in place on ``src`` or out of place into ``dst``."""
    import torch.distributed as dist

    target = src if mode == "in_place" else dst

    def op() -> None:
        if mode == "out_of_place":
            dst.copy_(src)
        dist.all_reduce(target)

    return op


def _time(op: Any, reps: int, dev: Any, dist: Any) -> list[float]:
    """Each repeat starts after a barrier; CUDA events on GPUs, the host clock on CPU (gloo is synchronous)."""
    clock = EventClock("torch") if dev.type == "cuda" else HostClock()
    return repeat(op, 3, reps, clock, before=dist.barrier)


def world_sizes(backend: Backend) -> list[int]:
    if backend.name == "cpu":
        return [1, 2]
    import torch

    return list(range(1, torch.cuda.device_count() + 1))


def run_allreduce(backend: Backend, *, quick: bool) -> list[BenchResult]:
    try:
        import torch.distributed as dist
        import torch.multiprocessing as mp
    except ImportError as exc:
        raise Skip("needs torch (torch.distributed runs the ranks)") from exc
    if not dist.is_available():
        raise Skip("this torch build has no torch.distributed")
    device = "cpu" if backend.name == "cpu" else "cuda"
    sizes = list(QUICK_SIZES if quick else SIZES)
    reps = 5 if quick else 20
    results = []
    for world in world_sizes(backend):
        with tempfile.TemporaryDirectory() as tmp:
            out = str(Path(tmp) / "rows.json")
            mp.spawn(_worker, args=(world, _free_port(), device, sizes, reps, out), nprocs=world, join=True)
            rows = json.loads(Path(out).read_text())
        for row in rows:
            if not row["ok"]:
                raise VerificationError(f"all-reduce over {world} ranks gave a wrong sum")
            med = statistics.median(row["seconds"])
            algbw, busbw = allreduce_bandwidths(row["size"], med, world)
            # min/median/max in the unit of the value (busbw), like every other result
            rates = sorted(allreduce_bandwidths(row["size"], s, world)[1] for s in row["seconds"])
            results.append(
                BenchResult(
                    benchmark="allreduce",
                    backend=backend.name,
                    device=backend.device,
                    variant=f"{row['impl']} {row['mode'].replace('_', '-')}",
                    value=busbw,
                    unit="GB/s busbw",
                    repeats=len(row["seconds"]),
                    min=rates[0],
                    median=statistics.median(rates),
                    max=rates[-1],
                    dtype="float32",
                    size_bytes=row["size"],
                    world_size=world,
                    params={
                        "algbw_gbps": algbw,
                        "busbw_gbps": busbw,
                        "time_us": med * 1e6,
                        "impl": row["impl"],
                        "in_place": row["mode"] == "in_place",
                    },
                )
            )
    return results

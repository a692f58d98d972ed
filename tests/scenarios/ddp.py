"""A real multi-process DDP training loop on CPU (gloo over 127.0.0.1), wrapped only in
``analyzer.profile``; one rank can be made slow in its forward pass. Used by the tests, the
sample recorder and the docs. Needs torch with torch.distributed."""

from __future__ import annotations

import socket
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(
    rank: int, world: int, port: int, out: str, slow_rank: int, slow_s: float, steps: int, late_init: bool
) -> None:
    import torch
    import torch.distributed as dist

    import analyzer

    torch.set_num_threads(1)
    if late_init:  # analyzer.profile entered before init_process_group
        with analyzer.profile(out=out, tags={"slow_rank": str(slow_rank)}):
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
            _train(rank, world, slow_rank, slow_s, steps, profiled=False)
    else:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        _train(rank, world, slow_rank, slow_s, steps, profiled=True, out=out)
    dist.destroy_process_group()


def _train(rank: int, world: int, slow_rank: int, slow_s: float, steps: int, *, profiled: bool, out: str = "") -> None:
    import torch
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset

    import analyzer

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))

        def forward(self, x: Any) -> Any:
            if rank == slow_rank:
                time.sleep(slow_s)
            return self.body(x)

    torch.manual_seed(0)
    model = DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    data = TensorDataset(torch.randn(steps * 16, 64, generator=g), torch.randn(steps * 16, 1, generator=g))
    loader = DataLoader(data, batch_size=16)
    with analyzer.profile(model, out=out, tags={"slow_rank": str(slow_rank)}) if profiled else nullcontext():
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()


def run_ddp(
    out: Path, *, world: int = 2, slow_rank: int = -1, slow_s: float = 0.02, steps: int = 30, late_init: bool = False
) -> None:
    """Spawn ``world`` ranks; each writes ``<out stem>.rank<N><suffix>`` beside ``out``. With ``late_init``
    the profile is entered before ``init_process_group`` (and finds the model itself)."""
    import torch.multiprocessing as mp

    args = (world, free_port(), str(out), slow_rank, slow_s, steps, late_init)
    mp.spawn(_worker, args=args, nprocs=world, join=True)

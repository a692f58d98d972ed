"""A real multi-process DDP training loop on CPU (gloo over 127.0.0.1), wrapped only in
``analyzer.profile``; one rank can be made slow in its forward pass. Used by the tests, the
sample recorder and the docs; ``batches`` gives each rank its own shard size (a rank with a larger
shard is a straggler) and ``width`` the model's (input, hidden) widths. Needs torch with
torch.distributed."""

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


Shape = tuple[tuple[int, ...] | None, tuple[int, int]]
"""(per-rank batch sizes or None for 16 each, (input width, hidden width))."""


def _worker(
    rank: int,
    world: int,
    port: int,
    out: str,
    slow_rank: int,
    slow_s: float,
    steps: int,
    late_init: bool,
    shape: Shape = (None, (64, 256)),
) -> None:
    import torch
    import torch.distributed as dist

    import analyzer

    torch.set_num_threads(1)
    if late_init:  # analyzer.profile entered before init_process_group
        with analyzer.profile(out=out, tags={"slow_rank": str(slow_rank)}):
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
            _train(rank, world, slow_rank, slow_s, steps, shape, profiled=False)
    else:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        _train(rank, world, slow_rank, slow_s, steps, shape, profiled=True, out=out)
    dist.destroy_process_group()


def _train(
    rank: int, world: int, slow_rank: int, slow_s: float, steps: int, shape: Shape, *, profiled: bool, out: str = ""
) -> None:
    import torch
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset

    import analyzer

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Sequential(
                torch.nn.Linear(features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
            )

        def forward(self, x: Any) -> Any:
            if rank == slow_rank:
                time.sleep(slow_s)
            return self.body(x)

    batches, (features, hidden) = shape
    batch = batches[rank] if batches else 16
    torch.manual_seed(0)
    model = DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    data = TensorDataset(torch.randn(steps * batch, features, generator=g), torch.randn(steps * batch, 1, generator=g))
    loader = DataLoader(data, batch_size=batch)
    with analyzer.profile(model, out=out, tags={"slow_rank": str(slow_rank)}) if profiled else nullcontext():
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()


def run_ddp(
    out: Path,
    *,
    world: int = 2,
    slow_rank: int = -1,
    slow_s: float = 0.02,
    steps: int = 30,
    late_init: bool = False,
    batches: tuple[int, ...] | None = None,
    width: tuple[int, int] = (64, 256),
) -> None:
    """Spawn ``world`` ranks; each writes ``<out stem>.rank<N><suffix>`` beside ``out``. With ``late_init``
    the profile is entered before ``init_process_group`` (and finds the model itself). ``batches``: each
    rank's batch size (default 16 each); every rank runs ``steps`` steps."""
    if batches is not None and len(batches) != world:
        raise ValueError("batches needs one batch size per rank")
    import torch.multiprocessing as mp

    args = (world, free_port(), str(out), slow_rank, slow_s, steps, late_init, (batches, width))
    mp.spawn(_worker, args=args, nprocs=world, join=True)

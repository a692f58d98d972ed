"""Small real training loops: the sample-trace recorder, the tests and the benchmarks share them.

Each scenario is a plain DataLoader + model + optimizer loop, so what gpuanalyze sees is what
it would see in a user's script. Needs torch.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

SCENARIOS = ("data_loading", "healthy")
GPU_SCENARIOS = ("data_loading", "healthy", "sync", "small_batch", "fp32_compute")


@dataclass(kw_only=True, slots=True)
class LoopConfig:
    """One synthetic training run."""

    steps: int = 40
    """Optimizer steps to run."""
    batch: int = 32
    """Samples per batch."""
    features: int = 256
    """Input width; the MLP's hidden width is twice this."""
    sample_cost_s: float = 0.0
    """Host time each Dataset.__getitem__ sleeps: a stand-in for decode/augment work."""
    num_workers: int = 0
    """DataLoader worker processes."""
    seed: int = 0
    """Seed for the model, the data and the shuffling."""
    device: str = "cpu"
    """Where the model runs."""
    item_every_step: bool = False
    """Read the loss with .item() every step (a host-device sync on GPUs)."""
    batched_fetch: bool = False
    """Fetch each batch with one indexing call (a BatchSampler as the sampler) instead of one
    __getitem__ per sample and a collate: the fix for per-sample loading overhead."""

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch < 1 or self.features < 1:
            raise ValueError("steps, batch and features must be positive")
        if self.sample_cost_s < 0 or self.num_workers < 0:
            raise ValueError("sample_cost_s and num_workers must not be negative")


def scenario(name: str, **overrides: Any) -> LoopConfig:
    """The configuration for a named scenario (see SCENARIOS)."""
    base = {
        "data_loading": {"sample_cost_s": 0.0015, "features": 256},
        "healthy": {"sample_cost_s": 0.0, "features": 1024, "batch": 256},
        "sync": {"features": 2048, "batch": 512, "item_every_step": True, "num_workers": 4},
        "small_batch": {"features": 64, "batch": 2},
        "fp32_compute": {"features": 4096, "batch": 256, "num_workers": 8},
    }
    if name not in base:
        raise ValueError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}")
    return LoopConfig(**{**base[name], **overrides})


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch's intra-op work on one thread for the block (the thread count restored after). With one thread
    per core, each op's threads meet at a barrier and wait for any of them a busy host has descheduled: beside
    two busy loops on 2 cores (load 8-15) the `data_loading` scenario's step took 270-530 ms on two threads
    and 69-115 ms on one, its compute grew to 70% of the step and the verdict followed it (2026-12-06). A
    verdict test's loop keeps its cause the largest part of the step on a loaded host this way."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def make_loop(cfg: LoopConfig) -> tuple[Any, Any, Any]:
    """(model, optimizer, dataloader) for the configuration, seeded."""
    import torch
    from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

    class SyntheticDataset(Dataset):
        def __init__(self, n: int) -> None:
            g = torch.Generator().manual_seed(cfg.seed)
            self.x = torch.randn(n, cfg.features, generator=g)
            self.y = torch.randn(n, 1, generator=g)

        def __len__(self) -> int:
            return self.x.shape[0]

        def __getitem__(self, i: int | list[int]) -> tuple[Any, Any]:
            if cfg.sample_cost_s:
                time.sleep(cfg.sample_cost_s * (len(i) if isinstance(i, list) else 1))
            return self.x[i], self.y[i]

    torch.manual_seed(cfg.seed)
    hidden = 2 * cfg.features
    model = torch.nn.Sequential(
        torch.nn.Linear(cfg.features, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 1),
    ).to(cfg.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    data = SyntheticDataset(cfg.steps * cfg.batch)
    generator = torch.Generator().manual_seed(cfg.seed)
    if cfg.batched_fetch:
        sampler = BatchSampler(RandomSampler(data, generator=generator), cfg.batch, drop_last=False)
        loader = DataLoader(
            data, sampler=sampler, batch_size=None, num_workers=cfg.num_workers, pin_memory=cfg.device == "cuda"
        )
    else:
        loader = DataLoader(
            data,
            batch_size=cfg.batch,
            shuffle=True,
            num_workers=cfg.num_workers,
            generator=generator,
            pin_memory=cfg.device == "cuda",
        )
    return model, optimizer, loader


def train(
    model: Any, optimizer: Any, loader: Any, device: str = "cpu", *, item_every_step: bool = False
) -> list[float]:
    """One epoch of a plain loop; returns the losses (to compare runs bit for bit)."""
    import torch

    losses: list[Any] = []
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item() if item_every_step else loss.detach())
    return [float(v) for v in losses]

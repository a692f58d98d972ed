"""The CPU scenario matrix of the verdict truth table: real loops, each with the verdict a
performance engineer would give it and why. `python -m tests.scenarios.matrix --out DIR` records
them (tests/data/matrix holds the recordings the truth table reads).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.scenarios.loops import LoopConfig, make_loop, scenario, train


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    verdict: str
    cause: str | None
    reason: str
    record: Callable[[Path], None]


def _loop(cfg: LoopConfig, *, item: bool = False) -> Callable[[Path], None]:
    def record(out: Path) -> None:
        import analyzer

        model, optimizer, loader = make_loop(cfg)
        with analyzer.profile(model, out=str(out), kernel_windows=False):
            train(model, optimizer, loader, item_every_step=item)

    return record


def _plain_function_loader(out: Path, *, wrapped: bool) -> None:
    """nanoGPT-style: batches from a function that sleeps 30 ms (no DataLoader)."""
    import torch

    import analyzer

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.randn(4096, 64)

    def get_batch(i: int) -> tuple[Any, Any]:
        time.sleep(0.03)
        x = data[(i * 16) % 4000 : (i * 16) % 4000 + 16]
        return x, x.sum(dim=1, keepdim=True)

    with analyzer.profile(model, out=str(out), kernel_windows=False) as prof:
        for i in range(40):
            if wrapped:
                with prof.data():
                    x, y = get_batch(i)
            else:
                x, y = get_batch(i)
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def _ddp_straggler(out: Path) -> None:
    from tests.scenarios.ddp import run_ddp

    run_ddp(out, world=2, slow_rank=1, slow_s=0.02, steps=40)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "slow_dataset",
        "data_loading",
        "input_pipeline",
        "each of 32 samples sleeps 1.5 ms in __getitem__ with num_workers=0: the step waits for its batch",
        _loop(scenario("data_loading", steps=60)),
    ),
    Scenario(
        "in_memory_batch1",
        "batch_size",
        "per_step_overhead",
        "batch 1 of a tiny MLP from memory: optimizer and loop overhead dominate and workers would cost more "
        "per batch than loading",
        _loop(LoopConfig(batch=1, features=16, steps=300)),
    ),
    Scenario(
        "in_memory_batch256",
        "data_loading",
        "cpu_bound_loading",
        "batch 256 of a tiny MLP from memory: one __getitem__ per sample and a collate take half the step; "
        "workers would only move that CPU work (and add a hand-over), a larger batch grows it: build batches cheaper",
        _loop(LoopConfig(batch=256, features=16, steps=200)),
    ),
    Scenario(
        "plain_function_loader",
        "host",
        "unattributed_host",
        "a get_batch() that sleeps 30 ms, not a DataLoader and not wrapped: 30 ms per step no phase accounts for",
        lambda out: _plain_function_loader(out, wrapped=False),
    ),
    Scenario(
        "plain_function_loader_wrapped",
        "data_loading",
        "input_pipeline",
        "the same get_batch() inside `with prof.data():` is data wait",
        lambda out: _plain_function_loader(out, wrapped=True),
    ),
    Scenario(
        "item_every_step",
        "none",
        None,
        "loss.item() every step on a CPU waits for no device: nothing to fix, the loop is compute-bound",
        _loop(scenario("healthy", steps=40), item=True),
    ),
    Scenario(
        "healthy",
        "none",
        None,
        "batch 256 through a 1024-wide MLP: forward and backward take the step",
        _loop(scenario("healthy", steps=40)),
    ),
    Scenario(
        "ddp_straggler",
        "sync",
        "straggler",
        "rank 1 sleeps 20 ms in every forward; rank 0 waits for it in the gradient all-reduce",
        _ddp_straggler,
    ),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*", help="scenario names (default: all)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for s in SCENARIOS:
        if args.only and s.name not in args.only:
            continue
        out = args.out / f"{s.name}.arrow"
        for old in (out, *out.parent.glob(f"{s.name}.rank*.arrow")):
            old.unlink(missing_ok=True)
        s.record(out)
        print(f"recorded {s.name}")


if __name__ == "__main__":
    main()

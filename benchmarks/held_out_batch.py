"""Two loops the batch and micro-batch models were not written from, nor validated on (benchmarks/validation_cases.py
has MLPs only): a sequence-first GRU with gradient accumulation, micro-batch 2 x 8 against 16 x 1, and a small CNN
at batch 4 against 8. Each is recorded with profiled windows; the projection from the BEFORE trace is printed
against the AFTER run's mean step (per current batch worth of samples for the batch).

    python benchmarks/held_out_batch.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

import analyzer

torch.set_num_threads(1)


class GRUNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = torch.nn.GRU(32, 64)
        self.head = torch.nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [T, B, 32]
        out, _ = self.gru(x)
        return self.head(out[-1])


class CNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc = torch.nn.Linear(32 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.max_pool2d(torch.relu(self.c1(x)), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.c2(x)), 2)
        return self.fc(x.flatten(1))


def _seq_first(batch: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples [T, F] stacked along dimension 1: [T, B, F] inputs, [B, 1] targets."""
    return torch.stack([s[0] for s in batch], 1), torch.stack([s[1] for s in batch])


def run(kind: str, micro: int, acc: int, steps: int, out: Path) -> None:
    """Record ``steps`` optimizer steps of ``acc`` micro-batches of ``micro`` samples."""
    torch.manual_seed(0)
    n = steps * micro * acc
    model: torch.nn.Module
    if kind == "gru":
        model = GRUNet()
        data = torch.utils.data.TensorDataset(torch.randn(n, 20, 32), torch.randn(n, 1))
        loader = torch.utils.data.DataLoader(data, batch_size=micro, shuffle=True, collate_fn=_seq_first)
        loss_fn: Any = torch.nn.functional.mse_loss
    else:
        model = CNN()
        data = torch.utils.data.TensorDataset(torch.randn(n, 3, 32, 32), torch.randint(0, 10, (n,)))
        loader = torch.utils.data.DataLoader(data, batch_size=micro, shuffle=True)
        loss_fn = torch.nn.functional.cross_entropy
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    windows = {"window_first": max(4, steps // 3), "window_every": max(3, steps // 3), "window_steps": 3}
    with analyzer.profile(model, out=str(out), kernel_windows=True, **windows):
        it = iter(loader)
        for _ in range(steps):
            for _ in range(acc):
                x, y = next(it)
                loss_fn(model(x), y).backward()
            opt.step()
            opt.zero_grad()


def main() -> None:
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="gpuanalyze-held-out-"))
    for kind, before, after, steps in (("gru", (2, 8), (16, 1), 120), ("cnn", (4, 1), (8, 1), 300)):
        b, a = tmp / f"{kind}_before.arrow", tmp / f"{kind}_after.arrow"
        run(kind, *before, steps, b)
        run(kind, *after, steps if after[0] == before[0] * before[1] else steps // 2, a)
        found = analyzer.analyze(str(b)).findings
        f = next((f for f in found if f.cause in ("micro_batch_overhead", "per_step_overhead")), None)
        if f is None or f.projection is None or f.projection.low_ms is None or f.projection.high_ms is None:
            print(kind, "no batch finding:", [x.cause for x in found])
            continue
        p = f.projection
        per_batch = before[0] / after[0] if f.cause == "per_step_overhead" else 1.0
        measured = analyzer.analyze(str(a)).metrics.step_mean_ms * per_batch
        print(
            f"{kind}: {f.cause} current {p.current_ms:.2f} projected {p.step_ms:.2f} [{p.low_ms:.2f}, {p.high_ms:.2f}]"
            f" measured {measured:.2f} error {(p.step_ms - measured) / measured:+.1%}"
        )
        print("   ", p.rule)


if __name__ == "__main__":
    main()

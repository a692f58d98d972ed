"""Loops no projection model was written from or checked on (benchmarks/validation_cases.py has MLPs fed by
one Dataset): a sequence-first GRU with gradient accumulation, a small CNN at batch 4, a DataLoader whose
sampler does the Python work, a text Dataset that tokenises in Python, a CNN in float32, and a loop that logs
every gradient's statistics each step. Each is recorded with profiled windows; the top finding's fix is applied
as it recommends (validation_cases.fixes_of) and the loop recorded again; per pair the projection from the
BEFORE trace against the AFTER run's mean step (per current batch worth of samples for a batch change). Then
the projection figures with and without each correction (benchmarks/corrections.py), side by side.

    python benchmarks/held_out_batch.py [--only KIND ...] [--no-corrections]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

import analyzer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.corrections import Measured, table
from benchmarks.validation_cases import Fix, fixes_of


@dataclass(frozen=True, slots=True)
class Loop:
    kind: str
    batch: int
    steps: int
    accumulate: int = 1
    workers: int = 0
    persistent: bool = False
    autocast: bool = False
    log_every: int = 1
    """logging: read every gradient's statistics every N steps."""


LOOPS = (
    Loop("gru", batch=2, accumulate=8, steps=120),
    Loop("cnn", batch=4, steps=300),
    Loop("sampler", batch=16, steps=150),
    Loop("text", batch=32, steps=150),
    Loop("cnn32", batch=64, steps=40),
    Loop("logging", batch=32, steps=200),
)


class GRUNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = torch.nn.GRU(32, 64)
        self.head = torch.nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [T, B, 32]
        out, _ = self.gru(x)
        return self.head(out[-1])


class CNN(torch.nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, width, 3, padding=1)
        self.c2 = torch.nn.Conv2d(width, 2 * width, 3, padding=1)
        self.fc = torch.nn.Linear(2 * width * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.max_pool2d(torch.relu(self.c1(x)), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.c2(x)), 2)
        return self.fc(x.flatten(1))


class Bag(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.EmbeddingBag(5000, 64)
        self.fc = torch.nn.Linear(64, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.fc(self.emb(ids))


class Sentences(torch.utils.data.Dataset):
    """Synthetic sentences tokenised in Python at each ``__getitem__`` (word ids from the characters, padded)."""

    def __init__(self, n: int) -> None:
        rng = random.Random(0)
        words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 9))) for _ in range(300)]
        self.text = [" ".join(rng.choice(words) for _ in range(rng.randint(20, 60))) for _ in range(n)]

    def __len__(self) -> int:
        return len(self.text)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        ids = [sum(ord(c) * 31**k for k, c in enumerate(w)) % 5000 for w in self.text[i].lower().split()][:64]
        return torch.tensor(ids + [0] * (64 - len(ids))), i % 2


class Curriculum(torch.utils.data.Sampler[int]):
    """Indices in a seeded order, each scored in Python before it is handed out: the sampler is most of a fetch
    (it runs in the training process whatever the workers)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Any:
        order = list(range(self.n))
        random.Random(1).shuffle(order)
        for i in order:
            s = i
            for j in range(1500):
                s = (s * 31 + j) % 1000003
            yield i


def _parts(loop: Loop) -> tuple[torch.nn.Module, Any, Any]:
    """(model, loader, loss) of the loop, seeded."""
    torch.manual_seed(0)
    n = loop.steps * loop.batch * loop.accumulate
    common: dict[str, Any] = {"batch_size": loop.batch, "num_workers": loop.workers}
    if loop.workers:
        common["persistent_workers"] = loop.persistent
    ce = torch.nn.functional.cross_entropy
    if loop.kind == "gru":
        data = torch.utils.data.TensorDataset(torch.randn(n, 20, 32), torch.randn(n, 1))
        collate = _seq_first
        return GRUNet(), torch.utils.data.DataLoader(data, shuffle=True, collate_fn=collate, **common), _mse
    if loop.kind in ("cnn", "cnn32"):
        data = torch.utils.data.TensorDataset(torch.randn(n, 3, 32, 32), torch.randint(0, 10, (n,)))
        model = CNN(16 if loop.kind == "cnn" else 32)
        return model, torch.utils.data.DataLoader(data, shuffle=True, **common), ce
    if loop.kind == "sampler":
        data = torch.utils.data.TensorDataset(torch.randn(n, 64), torch.randn(n, 1))
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
        return model, torch.utils.data.DataLoader(data, sampler=Curriculum(n), **common), _mse
    if loop.kind == "text":
        return Bag(), torch.utils.data.DataLoader(Sentences(n), shuffle=True, **common), ce
    data = torch.utils.data.TensorDataset(torch.randn(n, 256), torch.randn(n, 1))
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    return model, torch.utils.data.DataLoader(data, shuffle=True, **common), _mse


def _mse(out: torch.Tensor, y: Any) -> torch.Tensor:
    return torch.nn.functional.mse_loss(out, y)


def _seq_first(batch: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples [T, F] stacked along dimension 1: [T, B, F] inputs, [B, 1] targets."""
    return torch.stack([s[0] for s in batch], 1), torch.stack([s[1] for s in batch])


def record(loop: Loop, out: Path) -> None:
    """Record the loop's optimizer steps (``accumulate`` micro-batches each) with profiled windows."""
    model, loader, loss_fn = _parts(loop)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    windows = {"window_first": max(4, loop.steps // 3), "window_every": max(3, loop.steps // 3), "window_steps": 3}
    sink = io.StringIO()
    with analyzer.profile(model, out=str(out), kernel_windows=True, **windows):
        it = iter(loader)
        for step in range(loop.steps):
            for _ in range(loop.accumulate):
                x, y = next(it)
                cast = torch.autocast("cpu", dtype=torch.bfloat16) if loop.autocast else contextlib.nullcontext()
                with cast:
                    loss = loss_fn(model(x).float(), y)
                loss.backward()
            opt.step()
            if loop.kind == "logging" and step % loop.log_every == 0:
                stats = {n: (p.grad.abs().mean().item(), p.grad.norm().item()) for n, p in model.named_parameters()}
                json.dump(stats, sink)
            opt.zero_grad()


def apply(loop: Loop, fix: Fix) -> Loop | None:
    """The loop with the fix applied, None when it has no knob for it."""
    if fix.key == "num_workers" and isinstance(fix.value, int):
        return replace(loop, workers=fix.value, persistent=fix.persistent)
    if fix.key == "batch" and isinstance(fix.value, int | float) and fix.value == int(fix.value) > 1:
        return replace(loop, batch=loop.batch * int(fix.value), steps=max(20, loop.steps // int(fix.value)))
    if fix.key == "micro_batch" and isinstance(fix.value, int) and loop.accumulate > fix.accumulate:
        return replace(loop, batch=fix.value, accumulate=fix.accumulate)
    if fix.key == "precision" and not loop.autocast:
        return replace(loop, autocast=True)
    if fix.key in ("log_every", "sync_every") and loop.kind == "logging":
        return replace(loop, log_every=50)
    return None


def pair(loop: Loop, tmp: Path) -> Measured | None:
    """Record BEFORE, apply the top finding's fix, record AFTER; print the pair."""
    before = tmp / f"{loop.kind}_before.arrow"
    record(loop, before)
    report = analyzer.analyze(str(before))
    top = report.findings[0] if report.findings else None
    if top is None:
        print(f"{loop.kind}: verdict {report.bottleneck}, no finding")
        return None
    fixes = [f for f in fixes_of(top) if apply(loop, f) is not None]
    if not fixes:
        print(f"{loop.kind}: {top.bottleneck}/{top.cause}: no fix this loop can apply ({fixes_of(top)})")
        return None
    after_loop = apply(loop, fixes[0])
    assert after_loop is not None
    after = tmp / f"{loop.kind}_after.arrow"
    record(after_loop, after)
    p = top.projection
    m = analyzer.analyze(str(after)).metrics
    measured = m.step_mean_ms * (p.per_batch_of / m.batch_samples if p.per_batch_of and m.batch_samples else 1.0)
    low = "n/a" if p.low_ms is None else f"{p.low_ms:.2f}"
    high = "n/a" if p.high_ms is None else f"{p.high_ms:.2f}"
    print(
        f"{loop.kind}: {top.bottleneck}/{top.cause} ({top.confidence.level}), fix {fixes[0].label()}: current "
        f"{p.current_ms:.2f} projected {p.step_ms:.2f} [{low}, {high}] measured {measured:.2f} error "
        f"{(p.step_ms - measured) / measured:+.1%}",
        flush=True,
    )
    print("   ", p.rule)
    return Measured(loop.kind, str(before), (top.bottleneck, top.cause), p.current_ms, measured)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=[], help="run only these kinds")
    parser.add_argument("--no-corrections", action="store_true", help="skip the with/without-corrections table")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"held-out loops; load average {os.getloadavg()[0]:.2f} at start", flush=True)
    with tempfile.TemporaryDirectory(prefix="gpuanalyze-held-out-") as tmp:
        pairs = [p for loop in LOOPS if not args.only or loop.kind in args.only if (p := pair(loop, Path(tmp)))]
        print(f"load average {os.getloadavg()[0]:.2f} after recording", flush=True)
        if not args.no_corrections and pairs:
            table(pairs, "held-out loops")
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()

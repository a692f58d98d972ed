"""What the sample replay (analyzer/record/sample_replay.py) costs, and how its growth compares with the step's.

For MLPs of a few sizes (one thread, SGD with momentum, the loop of tests/scenarios): a profiled window of three
steps recorded with shapes, its ops that touched the batch replayed at 2, 4 and 8 times the batch within the
product's budget, and, side by side in the same run, the loop's step measured at 1, 2, 4 and 8 times the batch.
Printed per size: the replay's wall time and shapes replayed, the op time per step it predicts to grow by at each
multiplier (ms), and the step's measured growth (ms; the step also holds the optimizer and Python, which do not
grow, so the two should agree where op time is what grows).

    python benchmarks/sample_replay.py
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from analyzer.record import sample_replay as R

SIZES = ((1, 16, 32), (2, 64, 128), (8, 512, 1024), (64, 1024, 1024), (256, 1024, 2048))


def _step_ms(model: torch.nn.Module, opt: torch.optim.Optimizer, batch: int, features: int, reps: int) -> float:
    x, y = torch.randn(batch, features), torch.randn(batch, 1)

    def step() -> None:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    for _ in range(3):
        step()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(reps):
            step()
        best = min(best, (time.perf_counter() - start) / reps * 1e3)
    return best


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, load average {os.getloadavg()[0]:.2f}")
    print(f"{'batch x in x hidden':>20} {'replay s':>8} {'shapes':>7}  {'op growth ms at 2/4/8x':>24}  step growth ms")
    for batch, features, hidden in SIZES:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(features, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, 1),
        )
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        x, y = torch.randn(batch, features), torch.randn(batch, 1)
        for _ in range(3):
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "w.json"
            with torch.profiler.profile(record_shapes=True) as prof:
                for _ in range(3):
                    torch.nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                    opt.zero_grad()
            prof.export_chrome_trace(str(path))
            params = frozenset(tuple(p.shape) for p in model.parameters())
            window = R.window_ops(path, batch, params)
            start = time.perf_counter()
            gains = R.replay(window.calls, batch, params)
            took = time.perf_counter() - start
        shares = R.fields(window, gains)
        own_ms = window.own_us / 3 / 1e3
        predicted = [own_ms * (shares[f] - 1) for f in R.FIELDS]
        reps = max(3, int(200 / max(_step_ms(model, opt, batch, features, 3), 0.01)) // 10)
        base = _step_ms(model, opt, batch, features, reps)
        measured = [_step_ms(model, opt, batch * k, features, max(1, reps // k)) - base for k in R.MULTIPLIERS]
        keys = len({R._key(c) for c in window.calls})
        print(
            f"{batch:>6} x {features:>4} x {hidden:>4} {took:8.2f} {len(gains):>3}/{keys:<3}  "
            + " ".join(f"{v:7.2f}" for v in predicted)
            + "  "
            + " ".join(f"{v:7.2f}" for v in measured)
        )


if __name__ == "__main__":
    main()

"""Slowdown of a ~25 ms/step training loop under gpuanalyze, measured side by side.

    python benchmarks/overhead.py [--rounds 7] [--steps 40]

Times the steps inside the context (one-time start/stop costs are excluded and do not grow
with run length). Runs the same loop unprofiled, under ``analyzer.profile`` (default mode: its first kernel
window is at step 50, so none falls in these steps), under ``analyzer.profile`` with dense
kernel windows (3 of every 20 steps under torch.profiler, a worst case; the default samples 3
of every 2000) and under a full ``torch.profiler`` trace, in alternating order each round, and prints each mode's median
step time and its ratio to the unprofiled loop. Goal for the default mode: <= 1.01. A tiny
loop (steps of ~0.2 ms) then isolates the profiler's absolute cost per step in microseconds.
On a busy machine that wall-clock difference is noisy, so the recorder's hot path is also timed
alone: its hooks and wrappers called as one DataLoader-loop step calls them (fetch, forward,
backward, optimizer step, the row), in training-thread CPU time (the writer and the system
sampler run on their own threads and are not the training thread's cost), fastest of the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import torch

import analyzer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared loops in tests/scenarios
from tests.scenarios.loops import LoopConfig, make_loop, train


def run_once(mode: str, cfg: LoopConfig, workdir: Path) -> float:
    model, optimizer, loader = make_loop(cfg)
    train(model, optimizer, [next(iter(loader))])  # warm the allocator and kernels outside the timing
    if mode == "gpuanalyze":
        ctx = analyzer.profile(model, out=str(workdir / f"{time.monotonic_ns()}.arrow"))
    elif mode == "gpuanalyze+windows":
        ctx = analyzer.profile(
            model,
            out=str(workdir / f"{time.monotonic_ns()}.arrow"),
            kernel_windows=True,
            window_first=10,
            window_every=20,
        )
    elif mode == "torch.profiler":
        ctx = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    else:
        ctx = nullcontext()
    with ctx:
        t0 = time.perf_counter()
        train(model, optimizer, loader)
        elapsed = time.perf_counter() - t0
    return elapsed * 1e3 / cfg.steps


def hot_path_us(rounds: int, steps: int = 2000) -> float:
    """Training-thread CPU microseconds per step of the recorder's own code, hooks called directly."""
    from analyzer.record.patches import Patches

    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.zeros(8, 4)
    batch = [x, x]

    class Source:
        def fetch(self) -> list[torch.Tensor]:
            return batch

        def backward(self) -> None:
            return None

    best = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            with analyzer.profile(model, out=str(Path(tmp) / f"h{r}.arrow")) as prof:
                patches = Patches()
                patches._wrap(Source, "fetch", "fetch", prof._on_patched_call, prof._before_call)
                patches._wrap(Source, "backward", "backward", prof._on_patched_call, prof._before_call)
                src = Source()
                name = "Linear"
                t0 = time.thread_time_ns()
                for _ in range(steps):
                    src.fetch()
                    prof._on_forward_pre(name, model, (x,), {})
                    prof._on_forward(name, model, (x,), {}, x)
                    src.backward()
                    prof._on_optimizer_pre(opt, (), {})
                    prof._on_optimizer_post(opt, (), {})
                best = min(best, (time.thread_time_ns() - t0) / steps / 1e3)
                patches.remove()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--features", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--hot-path-only", action="store_true", help="only time the recorder's hot path")
    args = parser.parse_args()
    if args.hot_path_only:
        cost = hot_path_us(args.rounds)
        print(f"recorder hot path alone (training-thread CPU, fastest of {args.rounds}): {cost:.1f} us/step")
        return
    cfg = LoopConfig(steps=args.steps, batch=args.batch, features=args.features)
    modes = ["plain", "gpuanalyze", "gpuanalyze+windows", "torch.profiler"]
    times: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for mode in modes if r % 2 == 0 else modes[::-1]:
                times[mode].append(run_once(mode, cfg, Path(tmp)))
    tiny = LoopConfig(steps=400, batch=8, features=16)
    tiny_times: dict[str, list[float]] = {"plain": [], "gpuanalyze": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for mode in tiny_times:
                tiny_times[mode].append(run_once(mode, tiny, Path(tmp)) * 1e3)
    base = statistics.median(times["plain"])
    print(
        f"loop: {cfg.steps} steps x {args.rounds} rounds, batch {cfg.batch}, MLP width {cfg.features}; "
        f"torch {torch.__version__}"
    )
    for mode in modes:
        med = statistics.median(times[mode])
        print(f"{mode:>15}: median {med:7.2f} ms/step  ratio {med / base:.4f}")
    cost_us = min(tiny_times["gpuanalyze"]) - min(tiny_times["plain"])
    print(
        f"absolute cost on a tiny loop ({tiny.steps} steps, fastest of {args.rounds}): {cost_us:.1f} us/step "
        f"= {cost_us / 250:.2f}% of a 25 ms step"
    )
    print(
        f"recorder hot path alone (hooks called directly, training-thread CPU, fastest of {args.rounds}): "
        f"{hot_path_us(args.rounds):.1f} us/step"
    )


if __name__ == "__main__":
    main()

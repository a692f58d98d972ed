"""Slowdown of a ~25 ms/step training loop under gpuanalyze, measured side by side.

    python benchmarks/overhead.py [--rounds 7] [--steps 40] [--tiny-rounds 15] [--tiny-only]
    python benchmarks/overhead.py --flush-every 50 1000   # the writer's row trigger, side by side
    python benchmarks/overhead.py --against /work/main    # this checkout's recorder against another's

Times the steps inside the context (one-time start/stop costs are excluded and do not grow
with run length). Runs the same loop unprofiled, under ``analyzer.profile`` (default mode: its first kernel
window is at step 50, so none falls in these steps), under ``analyzer.profile`` with dense
kernel windows (3 of every 20 steps under torch.profiler, a worst case; the default samples 3
of every 2000) and under a full ``torch.profiler`` trace, in alternating order each round, and prints each mode's median
step time and its ratio to the unprofiled loop. Goal for the default mode: <= 1.01. A tiny
loop (400 steps of ~0.3 ms) then isolates the profiler's absolute cost per step in microseconds:
the median of its profiled rounds less the median of its unprofiled ones (alternating), in the
training thread's CPU time (what the loop's own thread spent; the writer and the system sampler
run on threads of their own, but what they make that thread wait or redo counts) and in
wall-clock time, over steps 10-399 (the trace file is created and its threads started at the
first step, once) and over all 400. Goal: <= 40 us. On a busy machine the wall-clock difference is
the noisier one (it includes waiting for the GIL and for a core). The recorder's hot path is also
timed alone: its hooks and wrappers called as one DataLoader-loop step calls them (fetch,
forward, backward, optimizer step, the row), in training-thread CPU time, fastest of the rounds:
hot in the caches, it costs a fraction of what the same calls cost between torch's work.
``--against DIR`` measures the tiny loop's cost with this checkout's recorder and with the one in
another checkout (the code before a change), side by side: child processes, each importing one of
the two (PYTHONPATH), alternate in every round; each runs the loop unprofiled and profiled in turn.
``--nvtx`` measures ``analyzer.profile(nvtx=True)`` (NVTX ranges per step and phase, for Nsight Systems)
against the default profile on the same loop on CUDA, alternating: its cost per step in training-thread CPU
and wall-clock time. ``nvtx=True`` installs nothing without CUDA, so on a machine without one there is
nothing to measure and it says so; the phase wrappers' own host cost per call, NVTX stubbed, is
``benchmarks/nvtx_phases.py``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

import analyzer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared loops in tests/scenarios
from tests.scenarios.loops import LoopConfig, make_loop, train


def run_once(mode: str, cfg: LoopConfig, workdir: Path) -> float:
    """Wall-clock ms per step."""
    return run_timed(mode, cfg, workdir)[0][0]


Timing = tuple[float, float]
"""(wall-clock, training-thread CPU) ms per step."""


def run_timed(mode: str, cfg: LoopConfig, workdir: Path, *, skip: int = 0) -> tuple[Timing, Timing]:
    """One run of the loop in ``mode``: the timing of all its steps, and of the steps after the
    first ``skip`` (from the fetch of batch ``skip``: the profile creates its trace file and starts
    its threads at the first step, a one-time cost)."""
    model, optimizer, loader = make_loop(cfg)
    train(model, optimizer, [next(iter(loader))], cfg.device)  # warm the allocator and kernels outside the timing
    ctx = _context(mode, model, workdir)
    marks: list[tuple[int, int]] = []

    def batches() -> Iterator[Any]:
        for i, batch in enumerate(loader):
            if i == skip and skip:
                marks.append((time.perf_counter_ns(), time.thread_time_ns()))
            yield batch

    with ctx:
        marks.append((time.perf_counter_ns(), time.thread_time_ns()))
        train(model, optimizer, batches(), cfg.device)
        end = time.perf_counter_ns(), time.thread_time_ns()
    first, later = marks[0], marks[-1]

    def per_step(since: tuple[int, int], steps: int) -> Timing:
        return (end[0] - since[0]) / 1e6 / steps, (end[1] - since[1]) / 1e6 / steps

    return per_step(first, cfg.steps), per_step(later, cfg.steps - (skip if len(marks) > 1 else 0))


def _context(mode: str, model: Any, workdir: Path) -> Any:
    if mode.startswith("flush="):  # the writer's row trigger (flush_every_steps) side by side
        every = int(mode.removeprefix("flush="))
        return analyzer.profile(model, out=str(workdir / f"{time.monotonic_ns()}.arrow"), flush_every_steps=every)
    if mode == "gpuanalyze":
        return analyzer.profile(model, out=str(workdir / f"{time.monotonic_ns()}.arrow"))
    if mode == "gpuanalyze+nvtx":
        return analyzer.profile(model, out=str(workdir / f"{time.monotonic_ns()}.arrow"), nvtx=True)
    if mode == "gpuanalyze+windows":
        return analyzer.profile(
            model,
            out=str(workdir / f"{time.monotonic_ns()}.arrow"),
            kernel_windows=True,
            window_first=10,
            window_every=20,
        )
    if mode == "torch.profiler":
        return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    return nullcontext()


def tiny_cost_us(rounds: int, workdir: Path, *, skip: int = 10) -> dict[str, float]:
    """The profile's cost per step of a tiny loop, in microseconds: the median of the profiled rounds
    less the median of the unprofiled ones (alternating), in wall-clock and training-thread CPU time,
    over all steps and over the steps after the first ``skip``."""
    tiny = LoopConfig(steps=400, batch=8, features=16)
    runs: dict[str, list[tuple[Timing, Timing]]] = {"plain": [], "gpuanalyze": []}
    for r in range(rounds):
        for mode in ("plain", "gpuanalyze") if r % 2 == 0 else ("gpuanalyze", "plain"):
            runs[mode].append(run_timed(mode, tiny, workdir, skip=skip))

    def cost(part: int, clock: int) -> float:
        med = {m: statistics.median(run[part][clock] for run in runs[m]) for m in runs}
        return (med["gpuanalyze"] - med["plain"]) * 1e3

    return {"wall": cost(1, 0), "cpu": cost(1, 1), "wall_all": cost(0, 0), "cpu_all": cost(0, 1)}


def flush_cost_us(
    rounds: int, workdir: Path, values: tuple[int, ...], *, skip: int = 10
) -> dict[int, tuple[float, float]]:
    """The tiny loop's cost per step (CPU, wall-clock; us) with each writer row trigger, rounds alternating."""
    tiny = LoopConfig(steps=400, batch=8, features=16)
    modes = ["plain", *(f"flush={v}" for v in values)]
    runs: dict[str, list[tuple[Timing, Timing]]] = {m: [] for m in modes}
    for r in range(rounds):
        for mode in modes if r % 2 == 0 else reversed(modes):
            runs[mode].append(run_timed(mode, tiny, workdir, skip=skip))

    def med(mode: str, clock: int) -> float:
        return statistics.median(run[1][clock] for run in runs[mode])

    return {
        v: ((med(f"flush={v}", 1) - med("plain", 1)) * 1e3, (med(f"flush={v}", 0) - med("plain", 0)) * 1e3)
        for v in values
    }


def nvtx_cost(rounds: int, steps: int, workdir: Path) -> None:
    """``--nvtx``: the default profile against nvtx=True on a CUDA loop (a tiny MLP: launches, not math, fill
    its steps, so the ranges' host cost shows), alternating each round; steps 10 on, medians."""
    if not torch.cuda.is_available():
        print(
            "nvtx=True: not measured: no CUDA device here, and without one nvtx=True installs nothing (the plain "
            "profile runs; its cost is this benchmark's default mode). The phase wrappers' own host cost per call, "
            "NVTX stubbed: python benchmarks/nvtx_phases.py"
        )
        return
    cfg = LoopConfig(steps=steps, batch=8, features=16, device="cuda")
    runs: dict[str, list[tuple[Timing, Timing]]] = {"gpuanalyze": [], "gpuanalyze+nvtx": []}
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for r in range(rounds):
        for mode in list(runs) if r % 2 == 0 else list(runs)[::-1]:
            runs[mode].append(run_timed(mode, cfg, workdir, skip=10))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    med = {m: [statistics.median(run[1][c] for run in v) for c in (0, 1)] for m, v in runs.items()}
    wall, cpu = ((med["gpuanalyze+nvtx"][c] - med["gpuanalyze"][c]) * 1e3 for c in (0, 1))
    print(
        f"nvtx=True on {torch.cuda.get_device_name()}: +{cpu:.1f} us/step training-thread CPU, +{wall:.1f} us/step "
        f"wall-clock over the default profile (default {med['gpuanalyze'][0]:.3f} ms/step; {rounds} rounds of "
        f"{steps} steps each)"
    )


def tiny_child(pairs: int) -> None:
    """``--tiny-child``: the tiny loop unprofiled and profiled, ``pairs`` times in turn; prints the
    timings and the files the recorder came from as JSON (for ``--against``)."""
    import gpuanalyze.ingest.trace.writer

    tiny = LoopConfig(steps=400, batch=8, features=16)
    runs: dict[str, list[Timing]] = {"plain": [], "gpuanalyze": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(pairs):
            for mode in ("plain", "gpuanalyze") if r % 2 == 0 else ("gpuanalyze", "plain"):
                runs[mode].append(run_timed(mode, tiny, Path(tmp), skip=10)[1])
    print(json.dumps({"files": [analyzer.__file__, gpuanalyze.ingest.trace.writer.__file__], **runs}))


def against(other: Path, rounds: int, pairs: int) -> None:
    """The tiny loop's cost per step with this checkout's recorder and with ``other``'s, in child
    processes alternating each round (steps 10-399; medians; training-thread CPU and wall-clock)."""
    trees = {"this checkout": Path(__file__).resolve().parents[1], str(other): other.resolve()}
    runs: dict[str, dict[str, list[Timing]]] = {t: {"plain": [], "gpuanalyze": []} for t in trees}
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for r in range(rounds):
        for name in list(trees) if r % 2 == 0 else list(trees)[::-1]:
            root = trees[name]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(root / d) for d in ("", "ingest", "kernels"))}
            child = [sys.executable, __file__, "--tiny-child", str(pairs)]
            done = subprocess.run(child, env=env, capture_output=True, text=True, check=True)
            got = json.loads(done.stdout.splitlines()[-1])
            if not all(Path(f).resolve().is_relative_to(root) for f in got["files"]):
                raise SystemExit(f"{name}: the recorder came from {got['files']}, not from {root}")
            for mode in ("plain", "gpuanalyze"):
                runs[name][mode] += [tuple(t) for t in got[mode]]
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name, by_mode in runs.items():
        med = {m: [statistics.median(t[c] for t in by_mode[m]) for c in (0, 1)] for m in by_mode}
        cpu, wall = ((med["gpuanalyze"][c] - med["plain"][c]) * 1e3 for c in (1, 0))
        print(
            f"{name}: {cpu:.1f} us/step training-thread CPU, {wall:.1f} us/step wall-clock "
            f"(profiled {med['gpuanalyze'][1] * 1e3:.1f} us CPU, unprofiled {med['plain'][1] * 1e3:.1f}; "
            f"{len(by_mode['gpuanalyze'])} runs each)"
        )


def hot_path_us(rounds: int, steps: int = 2000) -> float:
    """Training-thread CPU microseconds per step of the recorder's own code, hooks called directly."""
    from analyzer.record.patch_loader import data_wrapper
    from analyzer.record.patches import Patches
    from analyzer.record.timed_call import timed_wrapper

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
                report, before = prof._on_patched_call, [prof._before_call]
                fetch = functools.partial(data_wrapper, kind="fetch", report=report, before=before)
                backward = functools.partial(timed_wrapper, kind="backward", report=report, before=[])  # as on CPU
                patches.apply([(Source, "fetch", fetch), (Source, "backward", backward)])
                src = Source()
                name = "Linear"
                t0 = time.thread_time_ns()
                for _ in range(steps):
                    src.fetch()
                    prof._on_forward_pre(name, (x,), {})
                    prof._on_forward(name)
                    src.backward()
                    prof._on_optimizer_pre(opt, (), {})
                    prof._on_optimizer_post(opt, (), {})
                best = min(best, (time.thread_time_ns() - t0) / steps / 1e3)
                patches.remove()
    return best


def sync_site_ns(rounds: int, calls: int = 20_000) -> dict[str, float]:
    """Training-thread CPU ns per ``Tensor.item()``: unwrapped, through the sync wrapper with the profile's report
    as it was before call sites (the checks and ``sync_ns``), and with the call site kept (record.sync_sites),
    alternating, fastest of ``rounds`` each. The wrapper is installed by hand: on CPU the profile installs none."""
    from analyzer.record.patches import Patches

    t = torch.zeros(())
    best = {"plain": float("inf"), "sync wrapper, no call site": float("inf"), "with call site": float("inf")}
    with tempfile.TemporaryDirectory() as tmp, analyzer.profile(torch.nn.Linear(1, 1), out=f"{tmp}/s.arrow") as prof:

        def before(kind: str, ns: int, owner: Any, result: Any, cpu_ns: int = 0) -> None:
            if not prof.enabled or prof._compiling() or prof._compile_flags._is_compiling_flag:
                return
            prof._steps.step.sync_ns += ns

        for _ in range(rounds):
            for mode, report in (("plain", None), ("sync wrapper, no call site", before), ("with call site", None)):
                patches = Patches()
                if mode != "plain":
                    patches.install_sync(report or prof._on_patched_call)
                t0 = time.thread_time_ns()
                for _ in range(calls):
                    t.item()
                best[mode] = min(best[mode], (time.thread_time_ns() - t0) / calls)
                patches.remove()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--features", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--tiny-rounds", type=int, default=15, help="rounds of the tiny loop (each mode)")
    parser.add_argument("--tiny-only", action="store_true", help="only the tiny loop's cost per step")
    parser.add_argument("--hot-path-only", action="store_true", help="only time the recorder's hot path")
    parser.add_argument("--sync-sites", action="store_true", help="only the cost per sync of keeping its call site")
    parser.add_argument(
        "--flush-every",
        type=int,
        nargs="+",
        metavar="N",
        help="only the tiny loop's cost with these writer row triggers (flush_every_steps), side by side",
    )
    parser.add_argument(
        "--against",
        type=Path,
        metavar="DIR",
        help="only the tiny loop's cost with this checkout's recorder and with the one in DIR (another "
        "checkout), side by side; --tiny-rounds rounds of --against-runs runs each",
    )
    parser.add_argument("--against-runs", type=int, default=3, help="profiled runs per child process")
    parser.add_argument("--tiny-child", type=int, metavar="N", help=argparse.SUPPRESS)
    parser.add_argument(
        "--nvtx", action="store_true", help="only the cost of nvtx=True against the default profile (CUDA)"
    )
    args = parser.parse_args()
    if args.tiny_child:
        tiny_child(args.tiny_child)
        return
    if args.nvtx:
        with tempfile.TemporaryDirectory() as tmp:
            nvtx_cost(args.tiny_rounds, max(args.steps, 200), Path(tmp))
        return
    if args.against:
        against(args.against, args.tiny_rounds, args.against_runs)
        return
    if args.flush_every:
        with tempfile.TemporaryDirectory() as tmp:
            costs = flush_cost_us(args.tiny_rounds, Path(tmp), tuple(args.flush_every))
        for every, (cpu, wall) in costs.items():
            print(f"flush_every_steps={every}: {cpu:.1f} us/step training-thread CPU, {wall:.1f} us/step wall-clock")
        return
    if args.sync_sites:
        ns = sync_site_ns(args.rounds)
        load = os.getloadavg()[0]
        print(f"load average {load:.2f}; training-thread CPU ns per Tensor.item(), fastest of {args.rounds}:")
        for mode, v in ns.items():
            print(f"  {mode:28s} {v:7.0f}  ({v - ns['plain']:+.0f})")
        return
    if args.hot_path_only:
        cost = hot_path_us(args.rounds)
        print(f"recorder hot path alone (training-thread CPU, fastest of {args.rounds}): {cost:.1f} us/step")
        return
    if not args.tiny_only:
        ratios(args)
    with tempfile.TemporaryDirectory() as tmp:
        tiny = tiny_cost_us(args.tiny_rounds, Path(tmp))
    print(
        f"cost per step on a tiny loop (steps 10-399 of 400; median of {args.tiny_rounds} alternating rounds less "
        f"the unprofiled median): {tiny['cpu']:.1f} us of the training thread's CPU time, {tiny['wall']:.1f} us "
        f"wall-clock (= {tiny['wall'] / 250:.2f}% of a 25 ms step)"
    )
    print(
        f"  all 400 steps (with creating the trace at the first step): {tiny['cpu_all']:.1f} us CPU, "
        f"{tiny['wall_all']:.1f} us wall-clock"
    )
    if not args.tiny_only:
        print(
            f"recorder hot path alone (hooks called directly, training-thread CPU, fastest of {args.rounds}): "
            f"{hot_path_us(args.rounds):.1f} us/step"
        )


def ratios(args: argparse.Namespace) -> None:
    """The ~30 ms/step loop in each mode, alternating order each round: median step times and ratios."""
    cfg = LoopConfig(steps=args.steps, batch=args.batch, features=args.features)
    modes = ["plain", "gpuanalyze", "gpuanalyze+windows", "torch.profiler"]
    times: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for mode in modes if r % 2 == 0 else modes[::-1]:
                times[mode].append(run_once(mode, cfg, Path(tmp)))
    base = statistics.median(times["plain"])
    print(
        f"loop: {cfg.steps} steps x {args.rounds} rounds, batch {cfg.batch}, MLP width {cfg.features}; "
        f"torch {torch.__version__}"
    )
    for mode in modes:
        med = statistics.median(times[mode])
        print(f"{mode:>15}: median {med:7.2f} ms/step  ratio {med / base:.4f}")


if __name__ == "__main__":
    main()

"""Real CPU training loops with one knob per fix gpuanalyze recommends, so a benchmark can record a
loop, apply exactly the finding's fix (one field changed) and record it again.

Loading: a Dataset whose ``__getitem__`` sleeps (I/O-like) or does numpy work (CPU-bound), fetched
per sample or as whole batches by index, with or without DataLoader workers (persistent or not,
over several epochs); or a custom ``get_batch()`` function (no DataLoader) timed with
``with prof.data():``, sleeping or pure-Python CPU work, optionally fed by a prefetching thread or
made cheap (batches precomputed). Per step: ``.item()`` every N steps, and per-parameter gradient
statistics via ``.tolist()`` after ``optimizer.step()`` every N steps (logging). Everything is
seeded: what the loop computes is the same in every run. Needs torch and numpy.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Batch = tuple[Any, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class FixLoop:
    """One synthetic training run; each field is a knob a fix turns."""

    steps: int = 40
    """Optimizer steps per epoch."""
    epochs: int = 1
    batch: int = 32
    features: int = 256
    hidden: int = 512
    layers: int = 2
    """Hidden layers of the MLP."""
    seed: int = 0
    # -- a Dataset and a DataLoader ------------------------------------------------------------
    sample_sleep_s: float = 0.0
    """Each __getitem__ sleeps this long per sample (I/O-like loading)."""
    sample_numpy_reps: int = 0
    """Each __getitem__ runs this many numpy passes over a 4096-float array (CPU-bound loading)."""
    batched_fetch: bool = False
    """Fetch each batch with one indexing call (a BatchSampler) instead of per-sample __getitem__ + collate."""
    num_workers: int = 0
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    # -- a custom batch function (no DataLoader) ----------------------------------------------
    function_loader: bool = False
    """Batches come from get_batch(i), timed with `with prof.data():`."""
    fn_sleep_s: float = 0.0
    """get_batch sleeps this long per batch (I/O-like)."""
    fn_python_reps: int = 0
    """get_batch builds the batch this many times from Python lists (pure-Python CPU work, holds the GIL)."""
    fn_cheap: bool = False
    """get_batch slices precomputed tensors: the function made cheaper."""
    prefetch_thread: bool = False
    """A background thread calls get_batch ahead of the loop (a queue of 2 batches)."""
    # -- per-step extras -----------------------------------------------------------------------
    item_every: int = 0
    """Read the loss with .item() every N steps (0: never)."""
    log_every: int = 0
    """After optimizer.step(), every N steps (0: never): per-parameter gradient statistics via .tolist()."""
    log_values: int = 20000
    """Gradient values per parameter the logging reads."""
    accumulate: int = 1
    """Batches (micro-batches) per optimizer step: gradient accumulation."""
    autocast_bf16: bool = False
    """Forward and loss under torch.autocast('cpu', dtype=torch.bfloat16)."""

    def __post_init__(self) -> None:
        if min(self.steps, self.epochs, self.batch, self.features, self.hidden, self.layers) < 1:
            raise ValueError("steps, epochs, batch, features, hidden and layers must be positive")
        if min(self.sample_sleep_s, self.fn_sleep_s, self.sample_numpy_reps, self.fn_python_reps) < 0:
            raise ValueError("loading costs must not be negative")
        if min(self.num_workers, self.item_every, self.log_every) < 0:
            raise ValueError("num_workers, item_every and log_every must not be negative")
        if self.accumulate < 1:
            raise ValueError("accumulate must be at least 1")
        if self.prefetch_thread and not self.function_loader:
            raise ValueError("prefetch_thread feeds a custom batch function (function_loader=True)")


def make_model(cfg: FixLoop) -> tuple[Any, Any]:
    """(model, optimizer), seeded."""
    import torch

    torch.manual_seed(cfg.seed)
    layers: list[Any] = [torch.nn.Linear(cfg.features, cfg.hidden), torch.nn.ReLU()]
    for _ in range(cfg.layers - 1):
        layers += [torch.nn.Linear(cfg.hidden, cfg.hidden), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(cfg.hidden, 1))
    return model, torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)


def _numpy_sample(base: Any, i: int, reps: int, features: int) -> Any:
    import numpy as np

    v = base[i % base.shape[0]]
    for _ in range(reps):
        v = np.sin(v) * np.float32(1.0001)
    return v[:features]


def make_loader(cfg: FixLoop) -> Any:
    """The DataLoader of the configuration (seeded shuffling)."""
    import numpy as np
    import torch
    from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

    n = cfg.steps * cfg.batch * cfg.accumulate

    class Samples(Dataset):
        def __init__(self) -> None:
            g = torch.Generator().manual_seed(cfg.seed)
            self.x = torch.randn(n, cfg.features, generator=g)
            self.y = torch.randn(n, 1, generator=g)
            self.base = np.random.default_rng(cfg.seed).standard_normal((64, 4096)).astype(np.float32)

        def __len__(self) -> int:
            return n

        def __getitem__(self, i: int | list[int]) -> Batch:
            idx = i if isinstance(i, list) else [i]
            if cfg.sample_sleep_s:
                time.sleep(cfg.sample_sleep_s * len(idx))
            x = self.x[i]
            if cfg.sample_numpy_reps:
                arr = np.stack([_numpy_sample(self.base, j, cfg.sample_numpy_reps, cfg.features) for j in idx])
                x = x + torch.from_numpy(arr if isinstance(i, list) else arr[0])
            return x, self.y[i]

    data = Samples()
    gen = torch.Generator().manual_seed(cfg.seed)
    extra: dict[str, Any] = {}
    if cfg.num_workers:
        extra["persistent_workers"] = cfg.persistent_workers
        if cfg.prefetch_factor is not None:
            extra["prefetch_factor"] = cfg.prefetch_factor
    if cfg.batched_fetch:
        sampler = BatchSampler(RandomSampler(data, generator=gen), cfg.batch, drop_last=False)
        # the loader draws its worker seed from the same generator, as the shuffling loader does: same batches
        return DataLoader(data, sampler=sampler, batch_size=None, num_workers=cfg.num_workers, generator=gen, **extra)
    return DataLoader(data, batch_size=cfg.batch, shuffle=True, num_workers=cfg.num_workers, generator=gen, **extra)


def make_get_batch(cfg: FixLoop) -> Callable[[int], Batch]:
    """A nanoGPT-style batch function: batch i, the same values whichever way it is built."""
    import torch

    n = cfg.steps * cfg.epochs * cfg.accumulate
    g = torch.Generator().manual_seed(cfg.seed)
    xs = torch.randn(n, cfg.batch, cfg.features, generator=g)
    ys = xs.sum(dim=2, keepdim=True)

    def get_batch(i: int) -> Batch:
        if cfg.fn_cheap:
            return xs[i], ys[i]
        if cfg.fn_sleep_s:
            time.sleep(cfg.fn_sleep_s)
        if not cfg.fn_python_reps:
            return xs[i].clone(), ys[i]
        rows = xs[i].tolist()
        for _ in range(cfg.fn_python_reps):  # pure Python: rebuild the rows value by value
            rows = [[v * 1.0 for v in row] for row in rows]
        return torch.tensor(rows), ys[i]

    return get_batch


def prefetched(get_batch: Callable[[int], Batch], n: int, depth: int = 2) -> Iterator[Batch]:
    """Batches 0..n-1 from a background thread that stays ``depth`` batches ahead."""
    q: queue.Queue[Batch] = queue.Queue(maxsize=depth)

    def fill() -> None:
        for i in range(n):
            q.put(get_batch(i))

    t = threading.Thread(target=fill, name="prefetch", daemon=True)
    t.start()
    for _ in range(n):
        yield q.get()
    t.join()


def _log_grads(model: Any, values: int) -> list[float]:
    """Per-parameter gradient statistics read value by value (a logging hook after optimizer.step())."""
    stats = []
    for p in model.parameters():
        vals = p.grad.flatten()[:values].tolist()
        stats.append(sum(abs(v) for v in vals) / len(vals))
    return stats


def run_loop(cfg: FixLoop, prof: Any = None, model: Any = None, optimizer: Any = None) -> list[float]:
    """Train the configuration (inside ``analyzer.profile`` as ``prof`` when given, on ``model`` and
    ``optimizer`` from make_model when given); returns the losses."""
    import contextlib

    import torch

    if model is None or optimizer is None:
        model, optimizer = make_model(cfg)
    losses: list[Any] = []
    data_block: Callable[[], Any] = prof.data if prof is not None else contextlib.nullcontext

    def one_step(step: int, x: Any, y: Any) -> None:
        cast = torch.autocast("cpu", dtype=torch.bfloat16) if cfg.autocast_bf16 else contextlib.nullcontext()
        with cast:
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        if cfg.accumulate > 1:
            (loss / cfg.accumulate).backward()
            if step % cfg.accumulate != cfg.accumulate - 1:
                losses.append(loss.detach())
                return
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        else:
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        if cfg.log_every and step % cfg.log_every == 0:
            _log_grads(model, cfg.log_values)
        losses.append(loss.item() if cfg.item_every and step % cfg.item_every == 0 else loss.detach())

    step = 0
    if cfg.function_loader:
        get_batch = make_get_batch(cfg)
        n = cfg.steps * cfg.epochs * cfg.accumulate
        source = prefetched(get_batch, n) if cfg.prefetch_thread else (get_batch(i) for i in range(n))
        for _ in range(n):
            with data_block():
                x, y = next(source)
            one_step(step, x, y)
            step += 1
    else:
        loader = make_loader(cfg)
        for _ in range(cfg.epochs):
            for x, y in loader:
                one_step(step, x, y)
                step += 1
    return [float(v) for v in losses]


def record(cfg: FixLoop, out: Path, *, windows: bool = False) -> None:
    """Record the configuration under ``analyzer.profile`` to ``out``; with ``windows``, sampled profiler windows
    of 3 steps at a third and two thirds of the run (CPU op statistics), else none."""
    import analyzer

    model, optimizer = make_model(cfg)
    total = cfg.steps * cfg.epochs
    first = max(4, min(50, total // 3))
    spacing = {"window_first": first, "window_every": max(3, total // 3), "window_steps": 3} if windows else {}
    with analyzer.profile(model, out=str(out), kernel_windows=windows, **spacing) as prof:
        run_loop(cfg, prof, model, optimizer)

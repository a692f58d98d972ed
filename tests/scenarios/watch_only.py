"""A training loop that shows whatever a recorder does to the process it records (tests/test_recorder_only_watches.py).

    python tests/scenarios/watch_only.py plain|profile|windows [TRACE]

``plain`` trains unprofiled (run it under ``gpuanalyze run`` for the automatic profile), ``profile`` inside
``analyzer.profile`` with its defaults, ``windows`` with sampled profiler windows. Meanwhile a background thread
draws from torch's global generator; the model calls an op the script registers in the ``aten`` namespace, which
counts its calls; one DataLoader gives dict-subclass samples that count their reads (each also holding 20,000
strings) to torch's default_collate, another a user collate that counts its calls. At interpreter exit, after any
profile closed (the handler is registered before torch is imported, so it runs after the automatic profile's),
it prints one JSON line: the thread's draws, the counts, the losses (as hex floats), the median fetch of the
string samples and the seconds from the loop's end to then.
"""

from __future__ import annotations

import atexit
import json
import sys
import threading
import time
from typing import Any

MODE = sys.argv[1] if len(sys.argv) > 1 else "plain"
OUT = sys.argv[2] if len(sys.argv) > 2 else "trace.arrow"
STEPS = 12
BATCH = 12
counts = {"op": 0, "reads": 0, "collate": 0}
facts: dict[str, Any] = {}


def _report() -> None:
    facts["exit_s"] = time.perf_counter() - facts.pop("loop_end", time.perf_counter())
    print(json.dumps({**facts, **counts}), flush=True)


atexit.register(_report)  # before torch is imported: runs after `gpuanalyze run`'s profile closes

import torch  # noqa: E402

import analyzer  # noqa: E402

_lib = torch.library.Library("aten", "FRAGMENT")
_lib.define("gpuanalyze_watch_scale(Tensor x) -> Tensor")


def _scale(x: torch.Tensor) -> torch.Tensor:
    counts["op"] += 1  # a side effect: called again, it counts again
    return x * 1.0


_lib.impl("gpuanalyze_watch_scale", _scale, "CPU")


class Counting(dict):  # type: ignore[type-arg]
    """A sample whose every read is counted."""

    def __getitem__(self, key: Any) -> Any:
        counts["reads"] += 1
        return super().__getitem__(key)

    def __iter__(self) -> Any:
        counts["reads"] += 1
        return super().__iter__()


class Samples(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, n: int) -> None:
        self.x = torch.arange(n * 8, dtype=torch.float32).reshape(n, 8) / (n * 8)
        self.text = [f"w{i}" for i in range(20_000)]

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> Counting:
        return Counting(x=self.x[i], text=self.text)


def _collate(batch: list[Any]) -> Any:
    counts["collate"] += 1
    return torch.stack(batch)


def _draw(stop: threading.Event, out: list[float]) -> None:
    while not stop.is_set():
        out.append(float(torch.rand(1)))
        time.sleep(0.0005)


def main() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    a = torch.utils.data.DataLoader(Samples(BATCH * STEPS), batch_size=BATCH, generator=torch.Generator())
    b = torch.utils.data.DataLoader(
        torch.ones(BATCH * STEPS, 8), batch_size=BATCH, collate_fn=_collate, generator=torch.Generator()
    )
    drawn: list[float] = []
    stop = threading.Event()
    thread = threading.Thread(target=_draw, args=(stop, drawn), daemon=True)
    losses = []
    if MODE == "plain":
        prof: Any = None
    else:
        windows = {"kernel_windows": True, "window_first": 3, "window_every": 100, "window_steps": 3}
        prof = analyzer.profile(model, out=OUT, **(windows if MODE == "windows" else {}))
    thread.start()
    if prof is not None:
        prof.__enter__()
    fetch_s = []
    it = iter(a)
    for ones in b:
        t = time.perf_counter()
        batch = next(it)
        fetch_s.append(time.perf_counter() - t)
        x = torch.ops.aten.gpuanalyze_watch_scale(batch["x"] * ones)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()).hex())
    facts["loop_end"] = time.perf_counter()
    if prof is not None:
        prof.__exit__(None, None, None)
    stop.set()
    thread.join()
    facts.update(losses=losses, drawn=drawn, fetch_s=sorted(fetch_s)[len(fetch_s) // 2])


if __name__ == "__main__":
    main()

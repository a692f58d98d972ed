"""Host cost of ``nvtx=True``'s phase wrappers (analyzer/record/nvtx_phases.py), per call, side by side.

    python benchmarks/nvtx_phases.py [--calls 20000] [--rounds 7]

Times, on the CPU, the calls the wrappers sit on, unwrapped and wrapped, alternating each round, and prints
each one's median ns per call and the difference: ``Tensor.to(torch.float16)`` of a CPU tensor (checked,
no range), ``Tensor.item()`` of a CPU tensor (checked, no range), and a DataLoader ``__next__`` (a range).
NVTX itself is a stand-in that does nothing, so this is the wrappers' own cost (the check, the call, the
try/finally), not NVTX's: ``torch.cuda.nvtx`` is a no-op without CUDA, and the cost of a real range on a GPU
machine is not measured here (``benchmarks/overhead.py`` with ``nvtx=True`` on CUDA is that measurement).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "ingest"), str(ROOT / "kernels")]


class _NoNvtx:
    def range_start(self, name: str) -> int:
        return 1

    def range_end(self, rid: int) -> None:
        pass


def _per_call(fn: Callable[[], object], calls: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - t0) / calls


def main() -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from analyzer.record.nvtx_phases import NvtxPhases

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    x, s = torch.ones(4), torch.tensor(1.0)
    data = TensorDataset(torch.arange(float(args.calls)))

    def fetches() -> Callable[[], object]:
        it = iter(DataLoader(data, batch_size=1))
        return lambda: next(it)

    cases: dict[str, Callable[[], Callable[[], object]]] = {
        "Tensor.to(float16), CPU": lambda: lambda: x.to(torch.float16),
        "Tensor.item(), CPU": lambda: s.item,
        "DataLoader __next__": fetches,
    }
    got: dict[str, dict[str, list[float]]] = {c: {"plain": [], "wrapped": []} for c in cases}
    for r in range(args.rounds):
        for mode in ("plain", "wrapped") if r % 2 == 0 else ("wrapped", "plain"):
            phases = NvtxPhases(_NoNvtx()) if mode == "wrapped" else None
            if phases is not None:
                phases.install()
            try:
                for name, make in cases.items():
                    got[name][mode].append(_per_call(make(), args.calls))
            finally:
                if phases is not None:
                    phases.remove()
    print(f"{'call':28s} {'plain ns':>10s} {'wrapped ns':>11s} {'added ns':>9s} {'ratio':>6s}")
    for name, res in got.items():
        plain, wrapped = statistics.median(res["plain"]), statistics.median(res["wrapped"])
        print(f"{name:28s} {plain:10.0f} {wrapped:11.0f} {wrapped - plain:9.0f} {wrapped / plain:6.2f}")


if __name__ == "__main__":
    main()

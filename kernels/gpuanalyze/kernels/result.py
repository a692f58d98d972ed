"""Benchmark results and the formulas that turn timings into rates."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class BenchResult:
    """One measured number with everything needed to reproduce and judge it."""

    benchmark: str
    backend: str
    device: str
    variant: str
    value: float
    """The median rate (or time, for launch overhead) over the timed repeats."""
    unit: str
    repeats: int
    min: float
    median: float
    max: float
    dtype: str | None = None
    size_bytes: int | None = None
    world_size: int | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(d.pop("params"))
        return d


def rate_result(
    *,
    benchmark: str,
    backend: str,
    device: str,
    variant: str,
    unit: str,
    work: float,
    seconds: list[float],
    **extra: Any,
) -> BenchResult:
    """Rates from repeat timings: work / time; min rate comes from the slowest repeat."""
    assert seconds and all(s > 0 for s in seconds)
    rates = sorted(work / s for s in seconds)
    med = statistics.median(rates)
    return BenchResult(
        benchmark=benchmark,
        backend=backend,
        device=device,
        variant=variant,
        value=med,
        unit=unit,
        repeats=len(seconds),
        min=rates[0],
        median=med,
        max=rates[-1],
        **extra,
    )


def stream_bytes(variant: str, n: int, itemsize: int) -> int:
    """Bytes moved as BabelStream counts them: copy/mul read 1 + write 1 array, add/triad 2 + 1, dot 2."""
    arrays = {"copy": 2, "scale": 2, "add": 3, "triad": 3, "dot": 2}[variant]
    return arrays * n * itemsize


def matmul_flops(m: int, n: int, k: int) -> int:
    return 2 * m * n * k

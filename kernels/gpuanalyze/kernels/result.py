"""Benchmark results (one number, one suite, one run of the suites) and the formulas that turn timings into rates."""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import msgspec

from analyzer.machine.ceilings_store import Fingerprint
from analyzer.machine.datasheet import lookup


@dataclass(frozen=True, slots=True)
class BenchResult:
    """One measured number with everything needed to reproduce and judge it."""

    benchmark: str
    backend: str
    device: str
    variant: str
    value: float
    """The median rate over the timed repeats."""
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


def rate_result(*, work: float, seconds: list[float], **fields: Any) -> BenchResult:
    """Rates from repeat timings: work / time; min rate comes from the slowest repeat. ``fields``: the rest of
    the result (benchmark, backend, device, variant, unit, ...)."""
    assert seconds and all(s > 0 for s in seconds)
    rates = sorted(work / s for s in seconds)
    med = statistics.median(rates)
    return BenchResult(value=med, repeats=len(seconds), min=rates[0], median=med, max=rates[-1], **fields)


def matmul_flops(m: int, n: int, k: int) -> int:
    return 2 * m * n * k


@dataclass(frozen=True, slots=True)
class SuiteOutcome:
    """What one benchmark suite gave: results, skips with reasons, or the failure that stopped it."""

    name: str
    results: tuple[BenchResult, ...] = ()
    skipped: tuple[str, ...] = ()
    """'<suite>: why' for parts that do not apply here."""
    failed: str | None = None
    """'<suite>: error' when the suite broke or failed verification (no number reported)."""


@dataclass(frozen=True, slots=True)
class BenchReport:
    backend: str
    device: str
    fingerprint: Fingerprint
    quick: bool
    suites: tuple[SuiteOutcome, ...]
    availability: dict[str, str | None]
    seconds: float
    notes: tuple[str, ...] = ()
    created_unix_s: int = field(default_factory=lambda: int(time.time()))

    @property
    def results(self) -> tuple[BenchResult, ...]:
        return tuple(r for s in self.suites for r in s.results)

    @property
    def skipped(self) -> tuple[str, ...]:
        return tuple(x for s in self.suites for x in s.skipped)

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(s.failed for s in self.suites if s.failed)

    def to_dict(self) -> dict[str, Any]:
        spec = lookup(self.device)
        return {
            "backend": self.backend,
            "device": self.device,
            "fingerprint": msgspec.to_builtins(self.fingerprint),
            "datasheet": spec.name if spec else None,
            "quick": self.quick,
            "results": [{**r.to_dict(), "suite": s.name} for s in self.suites for r in s.results],
            "skipped": list(self.skipped),
            "failed": list(self.failed),
            "notes": list(self.notes),
            "backends": self.availability,
            "seconds": round(self.seconds, 2),
            "created_unix_s": self.created_unix_s,
        }

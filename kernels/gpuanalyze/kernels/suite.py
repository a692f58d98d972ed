"""Run a selection of benchmarks on one backend and collect results, skips and failures."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analyzer.errors import Skip
from analyzer.machine.datasheet import lookup
from gpuanalyze.kernels.allreduce import run_allreduce
from gpuanalyze.kernels.backend import availability, select
from gpuanalyze.kernels.launch import run_launch
from gpuanalyze.kernels.loader import run_loader
from gpuanalyze.kernels.matmul import run_matmul
from gpuanalyze.kernels.memory import run_memory
from gpuanalyze.kernels.result import BenchResult
from gpuanalyze.kernels.transfer import run_transfer


def _plain(fn: Callable[..., list[BenchResult]]) -> Callable[..., tuple[list[BenchResult], list[str]]]:
    return lambda backend, quick: (fn(backend, quick=quick), [])


SUITES: dict[str, Callable[..., tuple[list[BenchResult], list[str]]]] = {
    "memory": _plain(run_memory),
    "copy": _plain(run_transfer),
    "matmul": lambda backend, quick: run_matmul(backend, quick=quick),
    "launch": _plain(run_launch),
    "allreduce": _plain(run_allreduce),
    "dataloader": _plain(run_loader),
}
CHOICES = (*SUITES, "all")


@dataclass(frozen=True, slots=True)
class BenchReport:
    backend: str
    device: str
    results: tuple[BenchResult, ...]
    skipped: tuple[str, ...]
    """'<suite>: why' for benchmarks that do not apply here."""
    failed: tuple[str, ...]
    """'<suite>: error' for benchmarks that broke or failed verification (no number reported)."""
    availability: dict[str, str | None]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        spec = lookup(self.device)
        return {
            "backend": self.backend,
            "device": self.device,
            "datasheet": spec.name if spec else None,
            "results": [r.to_dict() for r in self.results],
            "skipped": list(self.skipped),
            "failed": list(self.failed),
            "backends": self.availability,
            "seconds": round(self.seconds, 2),
            "created_unix_s": int(time.time()),
        }


def run_bench(
    which: str, backend_name: str, *, quick: bool, progress: Callable[[str], None] | None = None
) -> BenchReport:
    """Run ``which`` (a suite name or 'all'); a failing suite is recorded, never hides the others."""
    from analyzer.errors import GpuAnalyzeError

    if which not in CHOICES:
        raise GpuAnalyzeError(f"unknown benchmark {which!r}; choose one of {', '.join(CHOICES)}")
    backend = select(backend_name)
    names = list(SUITES) if which == "all" else [which]
    results: list[BenchResult] = []
    skipped: list[str] = []
    failed: list[str] = []
    t0 = time.perf_counter()
    for name in names:
        if progress:
            progress(name)
        try:
            res, skips = SUITES[name](backend, quick)
            results += res
            skipped += [s if ":" in s else f"{name}: {s}" for s in skips]
        except Skip as exc:
            skipped.append(f"{name}: {exc}")
        except Exception as exc:  # noqa: BLE001 - one broken benchmark must not hide the rest
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    return BenchReport(
        backend.name,
        backend.device,
        tuple(results),
        tuple(skipped),
        tuple(failed),
        availability(),
        time.perf_counter() - t0,
    )


def save(report: BenchReport, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.to_dict(), indent=2))

"""Run a selection of benchmarks on one backend and collect results, skips and failures."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import msgspec

from analyzer.errors import GpuAnalyzeError, Skip
from analyzer.machine.ceilings_store import Fingerprint, SuiteRun, merge_runs, this_host
from gpuanalyze.kernels.allreduce import run_allreduce
from gpuanalyze.kernels.backend import Backend, availability, select
from gpuanalyze.kernels.matmul import run_matmul
from gpuanalyze.kernels.result import BenchReport, BenchResult, SuiteOutcome


def _plain(fn: Callable[..., list[BenchResult]]) -> Callable[..., tuple[list[BenchResult], list[str]]]:
    return lambda backend, quick: (fn(backend, quick=quick), [])


SUITES: dict[str, Callable[..., tuple[list[BenchResult], list[str]]]] = {
    "matmul": lambda backend, quick: run_matmul(backend, quick=quick),
    "allreduce": _plain(run_allreduce),
}
CHOICES = (*SUITES, "all")
#: Seconds each suite took on the cpu backend (quick, full) on this project's 2-core VM beside other work (load
#: 8-10), 2026-12-06: each suite's function timed alone (allreduce again without our ring, at load 2.6: 4.3 and
#: 16.8 s). GPU backends were not timed on this project's machines.
CPU_SECONDS = dict(matmul=(5, 92), allreduce=(5, 17))


def _expected(names: list[str], backend: Backend, quick: bool) -> str:
    """The duration to expect, said before the first suite starts."""
    if backend.name != "cpu":
        return f"not timed for the {backend.name} backend; each suite says when it ends"
    seconds = sum(CPU_SECONDS[n][0 if quick else 1] for n in names)
    about = f"{max(seconds, 1)} s" if seconds < 90 else f"{round(seconds / 60)} min"
    return f"expect ~{about} (measured on a 2-core CPU at load 8); fewer busy cores, less"


def fingerprint(backend: Backend) -> Fingerprint:
    """This machine as the ceilings file records it; every lookup is best-effort."""
    gpu_count = cuda = None
    if backend.name == "cupy":
        import cupy

        gpu_count = int(cupy.cuda.runtime.getDeviceCount())
        v = int(cupy.cuda.runtime.runtimeGetVersion())
        cuda = f"{v // 1000}.{v % 1000 // 10}"
    driver = None
    if backend.name != "cpu":
        from analyzer.machine.driver import driver_version

        driver = driver_version()
    try:
        torch_version: str | None = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    return Fingerprint(
        host=this_host(),
        backend=backend.name,
        device=backend.device,
        gpu_count=gpu_count,
        cpu_count=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        driver=driver,
        cuda=cuda,
        torch=torch_version,
    )


def run_bench(
    which: str, backend_name: str, *, quick: bool, progress: Callable[[str], None] | None = None
) -> BenchReport:
    """Run ``which`` (a suite name or 'all'); a failing suite is recorded, never hides the others.

    KeyboardInterrupt propagates (after each suite has released what it holds).
    """
    if which not in CHOICES:
        raise GpuAnalyzeError(f"unknown benchmark {which!r}; choose one of {', '.join(CHOICES)}")
    backend = select(backend_name)
    notes: list[str] = []
    names = list(SUITES) if which == "all" else [which]
    outcomes: list[SuiteOutcome] = []
    say = progress or (lambda _line: None)
    say(
        f"{', '.join(names)} on {backend.name} ({backend.device}){' --quick' if quick else ''}: "
        + _expected(names, backend, quick)
    )
    t0 = time.perf_counter()
    for i, name in enumerate(names, 1):
        started = time.perf_counter()
        try:
            res, skips = SUITES[name](backend, quick)
            outcomes.append(SuiteOutcome(name, tuple(res), tuple(s if ":" in s else f"{name}: {s}" for s in skips)))
        except Skip as exc:
            outcomes.append(SuiteOutcome(name, skipped=(f"{name}: {exc}",)))
        except GpuAnalyzeError as exc:  # our own errors say what happened and what to do
            outcomes.append(SuiteOutcome(name, failed=f"{name}: {exc}"))
        except Exception as exc:  # noqa: BLE001 - one broken benchmark must not hide the rest
            outcomes.append(SuiteOutcome(name, failed=f"{name}: {type(exc).__name__}: {exc}"))
        say(f"[{i}/{len(names)}] {_ended(outcomes[-1])} ({time.perf_counter() - started:.0f} s)")
    return BenchReport(
        backend.name,
        backend.device,
        fingerprint(backend),
        quick,
        tuple(outcomes),
        availability(),
        time.perf_counter() - t0,
        tuple(notes),
    )


def _ended(o: SuiteOutcome) -> str:
    """One suite's progress line: how many results it measured, or why none."""
    return (
        f"failed: {o.failed}"
        if o.failed
        else f"{o.name}: {len(o.results)} result(s)"
        if o.results
        else "; ".join(o.skipped)
    )


def save_ceilings(report: BenchReport, path: Path) -> list[str]:
    """Merge the suites that ran (results or skips, not failures) into the ceilings file at ``path``;
    returns their names (empty: nothing was written)."""
    runs = {
        s.name: SuiteRun(
            measured_unix_s=report.created_unix_s,
            quick=report.quick,
            fingerprint=report.fingerprint,
            results=[msgspec.Raw(msgspec.json.encode({**r.to_dict(), "suite": s.name})) for r in s.results],
            skipped=list(s.skipped),
        )
        for s in report.suites
        if s.failed is None
    }
    if runs:
        merge_runs(path, runs, report.fingerprint)
    return list(runs)


def write_report(report: BenchReport, path: Path, *, force: bool) -> None:
    """The `--json` report as a file of the user's: never over an existing one without ``force``."""
    from analyzer.files import write_bytes

    write_bytes(path, (json.dumps(report.to_dict(), indent=2) + "\n").encode(), force=force)

"""Which measured ceilings apply to a trace, and the best numbers of one machine.

Numbers from another machine are never applied: ``ceilings_for`` gives a trace the ceilings of
the machine it was recorded on, or a note saying why there are none. The file itself (format,
locking, merging) is ``analyzer.machine.ceilings_store``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from analyzer.errors import GpuAnalyzeError
from analyzer.machine.ceilings_store import (
    Fingerprint,
    StoredMachine,
    default_path,
    not_ceilings,
    stored_machines,
)

if TYPE_CHECKING:
    from gpuanalyze.ingest.trace.runinfo import RunInfo

KINDS = ("busbw", "matmul:<dtype>")


@dataclass(frozen=True, slots=True)
class Ceilings:
    """The best measured numbers of one machine, that the analysis compares a run with."""

    path: str
    device: str
    busbw_gbps: float | None
    matmul_tflops: dict[str, float]
    host: str | None = None
    backends: tuple[str, ...] = ()
    fingerprint: Fingerprint | None = field(default=None, compare=False)
    measured_unix_s: dict[str, int] = field(default_factory=dict, compare=False)
    """When each suite last ran (suite name -> Unix seconds): evidence says where and when its ceiling came from."""

    def source(self, suite: str) -> str:
        """```gpuanalyze bench matmul` on NVIDIA H200, 2026-12-06 (PATH)``: a ceiling's origin, for its evidence."""
        when = self.measured_unix_s.get(suite)
        day = time.strftime("%Y-%m-%d", time.gmtime(when)) if when else "date not recorded"
        return f"`gpuanalyze bench {suite}` on {self.device}, {day} ({self.path})"

    def value(self, kind: str) -> float | None:
        """The ceiling of ``kind``: 'busbw' (GB/s), 'matmul:<dtype>' (TFLOP/s)."""
        if kind == "busbw":
            return self.busbw_gbps
        if kind.startswith("matmul:"):
            return self.matmul_tflops.get(kind.removeprefix("matmul:"))
        raise ValueError(f"unknown ceiling kind {kind!r}; one of {', '.join(KINDS)}")

    def beaten(self, kind: str, achieved: float) -> bool:
        """True when the run already does better than the measured ceiling, which then is no limit to quote."""
        ceiling = self.value(kind)
        return ceiling is not None and achieved > ceiling

    def limit(self, kind: str, achieved: float) -> float | None:
        """The ceiling to quote against ``achieved``: None when there is none or the run already beats it."""
        return None if self.beaten(kind, achieved) else self.value(kind)


def _ceilings(path: Path, machines: list[StoredMachine]) -> Ceilings:
    """The best of each quantity over ``machines`` (the entries of one machine: e.g. cupy and numba)."""
    assert machines
    results = [r for m in machines for r in m.results]

    def best(benchmark: str, variant: str | None = None) -> float | None:
        values = [r.value for r in results if r.benchmark == benchmark and (variant is None or r.variant == variant)]
        return max(values) if values else None

    matmul: dict[str, float] = {}
    for r in results:
        if r.benchmark == "matmul" and r.dtype:
            matmul[r.dtype] = max(matmul.get(r.dtype, 0.0), r.value)
    first = machines[0].fingerprint
    return Ceilings(
        path=str(path),
        device=first.device,
        busbw_gbps=best("allreduce"),
        matmul_tflops=matmul,
        host=first.host,
        backends=tuple(sorted({m.fingerprint.backend for m in machines})),
        fingerprint=first if machines[0].known else None,
        measured_unix_s={s: t for t, s in sorted((t, s) for m in machines for s, t in m.measured_unix_s.items())},
    )


def load_ceilings(path: str | Path) -> Ceilings:
    """The ceilings in ``path``, not checked against any trace (callers that know the machine, tests).

    A file holding several machines raises: choose with ``ceilings_for``.
    """
    path = Path(path)
    machines = stored_machines(path)
    if not machines:
        raise not_ceilings(path, "no results")
    devices = {(m.fingerprint.host, m.fingerprint.device) for m in machines}
    if len(devices) > 1:
        raise GpuAnalyzeError(
            f"{path}: holds ceilings of {len(machines)} machines; choose by trace with ceilings_for(run, path)"
        )
    return _ceilings(path, machines)


# -- matching a trace ----------------------------------------------------------------------------


def _norm(name: str) -> str:
    return " ".join(name.split()).casefold()


def _same_host(a: str | None, b: str | None) -> bool:
    """Host names compare by their first label, case-insensitively ('node1' = 'Node1.cluster.local')."""
    if not a or not b:
        return False
    return _norm(a).split(".")[0] == _norm(b).split(".")[0]


def _trace_machine(run: RunInfo) -> str:
    if run.gpu_name:
        what = run.gpu_name
    elif run.device == "cpu":
        what = "CPU"
    else:
        what = run.device or "unknown device"
    return f"{what} on host {run.host}" if run.host else f"{what} (host not recorded)"


def _listing(fps: list[Fingerprint]) -> str:
    names = [fp.describe() for fp in fps[:2]]
    more = f" and {len(fps) - 2} more" if len(fps) > 2 else ""
    return ", ".join(names) + more


def ceilings_for(run: RunInfo, explicit: Path | None) -> tuple[Ceilings | None, str | None]:
    """The ceilings measured on the machine ``run`` was recorded on, from ``explicit`` or the default file.

    Returns (ceilings, None) on a match; (ceilings, note) when the match rests on the GPU model
    alone because the trace does not record its host (imported profiler traces); (None, note)
    when the file holds nothing for that machine, the note saying why (one line); (None, None)
    when there is no explicit file and nothing has been saved yet. The matching rule:

    - GPU trace (``gpu_name`` set): an entry from a GPU backend (cupy, numba) whose device name
      equals the trace's GPU name (whitespace and case ignored), measured on the trace's host.
    - CPU trace (``device`` 'cpu'): an entry from the cpu backend measured on the trace's host.
    - Hosts compare by the first label of the name, case-insensitively; a trace that records no
      host matches a GPU entry on the device name alone (with a note), and no CPU entry.
    - Entries without a fingerprint (files from before fingerprints) are an unknown machine:
      never applied. Driver, CUDA and torch versions and device counts are not compared.

    Raises GpuAnalyzeError when ``explicit`` is missing or not a ceilings file. A damaged
    default file is a note, not an error: the analysis goes on without ceilings.
    """
    path = explicit if explicit is not None else default_path()
    if explicit is None and not path.is_file():
        return None, None
    try:
        machines = stored_machines(path)
    except GpuAnalyzeError as exc:
        if explicit is not None:
            raise
        return None, f"{exc}; ceilings not used"
    known = [m.fingerprint for m in machines if m.known]
    why = _unusable(run, path, known)
    if why is not None:
        return None, why
    matching = [m for m in machines if m.known and _measured_where_recorded(m.fingerprint, run)]
    if not matching:
        return None, (
            f"ceilings in {path} were measured on {_listing(known)}, not this trace's {_trace_machine(run)}; not used"
        )
    hosts = {m.fingerprint.host for m in matching}
    if len(hosts) > 1:  # the trace names no host and several hosts measured this GPU: take none of them
        return None, (
            f"ceilings in {path} hold {matching[0].fingerprint.device} measured on {len(hosts)} hosts "
            "and this trace does not record its host; not used"
        )
    ceilings = _ceilings(path, matching)
    if not run.host:
        return ceilings, (
            f"ceilings from {path} matched on the GPU model ({ceilings.device}) only: "
            "this trace does not record its host"
        )
    return ceilings, None


def _unusable(run: RunInfo, path: Path, known: list[Fingerprint]) -> str | None:
    """Why no entry of the file can apply to this trace at all (None when one may)."""
    if not known:
        return (
            f"ceilings in {path} carry no machine fingerprint (written by an older gpuanalyze); not used - "
            "run `gpuanalyze bench` again on the machine that recorded the trace"
        )
    if run.gpu_name:
        return None
    if run.device not in ("cpu", None):
        return f"ceilings in {path} cover CUDA GPUs and CPUs, not this trace's {run.device} device; not used"
    if run.device is None:
        return f"this trace does not record its device, so the ceilings in {path} are not used"
    if not run.host:
        return f"this trace does not record its host, so the CPU ceilings in {path} are not used"
    return None


def _measured_where_recorded(fp: Fingerprint, run: RunInfo) -> bool:
    """The entry's device is the trace's (a GPU backend on the same GPU model, or the cpu backend for a
    CPU trace), on the trace's host; a GPU trace that records no host matches on the model alone."""
    if run.gpu_name:
        device = fp.is_gpu and _norm(fp.device) == _norm(run.gpu_name)
        return device and (_same_host(fp.host, run.host) or not run.host)
    return fp.backend == "cpu" and _same_host(fp.host, run.host)


# -- writing -------------------------------------------------------------------------------------

"""Measured machine ceilings (from `gpuanalyze bench`), kept per machine, and the rule that says
which of them apply to a trace.

Ceilings belong to the machine they were measured on. Every bench run carries a ``Fingerprint``;
the saved file (``default_path()``) keeps one entry per machine, keyed by host, backend and
device, and within it the latest results of each benchmark suite, so a partial run (`bench
launch`) replaces only what it measured and other machines' numbers stay side by side.
``ceilings_for`` gives a trace the ceilings of the machine it was recorded on, or a note saying
why there are none; numbers from another machine are never applied.

File format (version 2)::

    {"format": "gpuanalyze-ceilings", "version": 2,
     "machines": {"<host>/<backend>/<device>": {
         "fingerprint": {...},
         "suites": {"<suite>": {"measured_unix_s": ..., "quick": ..., "fingerprint": {...},
                                "results": [<bench --json result>, ...], "skipped": [...]}}}}}

The report that `bench --json` prints (and `--out` writes) is read too: one machine, or an unknown
one when it has no fingerprint (files written before fingerprints existed).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final, Literal

import msgspec

from analyzer.errors import GpuAnalyzeError

if TYPE_CHECKING:
    from gpuanalyze.ingest.runinfo import RunInfo

FORMAT: Final = "gpuanalyze-ceilings"
VERSION = 2
GPU_BACKENDS = ("cupy", "numba")
LOCK_TIMEOUT_S = 10.0
_MAX_FILE_BYTES = 64 * 2**20

_Name = Annotated[str, msgspec.Meta(max_length=256)]
_Count = Annotated[int, msgspec.Meta(ge=0, le=1 << 20)]
_Value = Annotated[float, msgspec.Meta(ge=0.0, le=1e18)]


class Fingerprint(msgspec.Struct, frozen=True, kw_only=True):
    """The machine a benchmark ran on. ``host``, ``backend`` and ``device`` identify it (the key
    in the saved file); the counts and versions are recorded to explain a difference, and are
    not required to match a trace."""

    backend: _Name
    """cupy, numba or cpu."""
    device: _Name
    """The GPU's name as CUDA reports it (``NVIDIA H200``), or ``CPU: <arch> x<cores>``."""
    host: _Name | None = None
    """socket.gethostname(); None in files written before fingerprints existed (unknown machine)."""
    gpu_count: _Count | None = None
    cpu_count: _Count | None = None
    driver: _Name | None = None
    cuda: _Name | None = None
    torch: _Name | None = None

    @property
    def key(self) -> str:
        return f"{self.host or '?'}/{self.backend}/{self.device}"

    @property
    def is_gpu(self) -> bool:
        return self.backend in GPU_BACKENDS

    def describe(self) -> str:
        return f"{self.device} ({self.backend}) on host {self.host or 'unknown'}"


class SuiteRun(msgspec.Struct, frozen=True, kw_only=True):
    """The latest results of one benchmark suite on one machine."""

    measured_unix_s: Annotated[int, msgspec.Meta(ge=0)]
    quick: bool
    fingerprint: Fingerprint
    """The machine with the versions of the day the suite ran."""
    results: list[msgspec.Raw]
    """As `bench --json` prints them; kept verbatim."""
    skipped: list[str] = []


class MachineEntry(msgspec.Struct, frozen=True, kw_only=True):
    fingerprint: Fingerprint
    suites: dict[_Name, SuiteRun]


class Store(msgspec.Struct, frozen=True, kw_only=True):
    format: Literal["gpuanalyze-ceilings"]
    version: int
    machines: dict[str, MachineEntry]


class _Report(msgspec.Struct, frozen=True, kw_only=True):
    """A `bench --json` report (or a version-1 ceilings file): one machine's results."""

    results: list[msgspec.Raw]
    backend: _Name | None = None
    device: _Name | None = None
    fingerprint: Fingerprint | None = None
    quick: bool = False
    skipped: list[str] = []
    created_unix_s: int = 0


class _Result(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of one result that ceilings read; other keys pass through untouched."""

    benchmark: _Name
    value: _Value
    variant: _Name | None = None
    dtype: _Name | None = None
    suite: _Name | None = None


KINDS = ("loader", "busbw", "matmul:<dtype>")


@dataclass(frozen=True, slots=True)
class Ceilings:
    """The best measured numbers of one machine, that the analysis compares a run with."""

    path: str
    device: str
    loader_samples_per_s: float | None
    busbw_gbps: float | None
    matmul_tflops: dict[str, float]
    host: str | None = None
    backends: tuple[str, ...] = ()
    fingerprint: Fingerprint | None = field(default=None, compare=False)

    def value(self, kind: str) -> float | None:
        """The ceiling of ``kind``: 'loader' (samples/s), 'busbw' (GB/s), 'matmul:<dtype>' (TFLOP/s)."""
        if kind == "loader":
            return self.loader_samples_per_s
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


def default_path() -> Path:
    """Where `gpuanalyze bench` saves and analysis looks: $GPUANALYZE_CEILINGS or the user cache."""
    env = os.environ.get("GPUANALYZE_CEILINGS")
    if env:
        return Path(env)
    return _cache_path()


def _cache_path() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gpuanalyze" / "ceilings.json"


def this_host() -> str:
    return socket.gethostname()


# -- reading -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Machine:
    fingerprint: Fingerprint
    results: list[_Result]

    @property
    def known(self) -> bool:
        """False for entries without a fingerprint (older files): an unknown machine."""
        return self.fingerprint.host is not None


def _read_bytes(path: Path) -> bytes:
    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_FILE_BYTES + 1)
    except FileNotFoundError as exc:
        raise GpuAnalyzeError(
            f"{path}: no such ceilings file (create one with `gpuanalyze bench --out {path}`)"
        ) from exc
    except IsADirectoryError as exc:
        raise GpuAnalyzeError(f"{path}: is a directory, not a ceilings file") from exc
    except OSError as exc:
        raise GpuAnalyzeError(f"{path}: cannot read the ceilings file ({exc.strerror})") from exc
    if len(data) > _MAX_FILE_BYTES:
        raise GpuAnalyzeError(f"{path}: larger than {_MAX_FILE_BYTES >> 20} MiB; not a ceilings file")
    return data


def _not_ceilings(path: Path, why: object) -> GpuAnalyzeError:
    return GpuAnalyzeError(f"{path}: not a ceilings file written by `gpuanalyze bench` ({why})")


def _decode_store(path: Path, raw: bytes) -> Store:
    """The file as a version-2 store; a `bench --json` report or a version-1 file is converted."""
    try:
        head = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
    except msgspec.DecodeError as exc:
        raise _not_ceilings(path, exc) from exc
    try:
        if "machines" in head:
            version = msgspec.json.decode(head.get("version", b"0"), type=int)
            if version > VERSION:
                raise GpuAnalyzeError(
                    f"{path}: ceilings format version {version} is newer than this gpuanalyze reads ({VERSION}); "
                    "upgrade gpuanalyze"
                )
            return msgspec.json.decode(raw, type=Store)
        return _store_of_report(msgspec.json.decode(raw, type=_Report))
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _not_ceilings(path, exc) from exc


def _store_of_report(report: _Report) -> Store:
    fp = report.fingerprint or Fingerprint(backend=report.backend or "?", device=report.device or "?")
    by_suite: dict[str, list[msgspec.Raw]] = {}
    for raw in report.results:
        suite = msgspec.json.decode(raw, type=_Result).suite or "unknown"
        by_suite.setdefault(suite, []).append(raw)
    suites = {
        name: SuiteRun(
            measured_unix_s=max(0, report.created_unix_s),
            quick=report.quick,
            fingerprint=fp,
            results=results,
            skipped=[s for s in report.skipped if s.startswith(f"{name}:")],
        )
        for name, results in by_suite.items()
    }
    return Store(format=FORMAT, version=VERSION, machines={fp.key: MachineEntry(fingerprint=fp, suites=suites)})


def _machines(path: Path) -> list[_Machine]:
    store = _decode_store(path, _read_bytes(path))
    out = []
    for entry in store.machines.values():
        try:
            results = [msgspec.json.decode(r, type=_Result) for run in entry.suites.values() for r in run.results]
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise _not_ceilings(path, exc) from exc
        out.append(_Machine(entry.fingerprint, results))
    return out


def _ceilings(path: Path, machines: list[_Machine]) -> Ceilings:
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
        loader_samples_per_s=best("dataloader", "pipeline"),
        busbw_gbps=best("allreduce"),
        matmul_tflops=matmul,
        host=first.host,
        backends=tuple(sorted({m.fingerprint.backend for m in machines})),
        fingerprint=first if machines[0].known else None,
    )


def load_ceilings(path: str | Path) -> Ceilings:
    """The ceilings in ``path``, not checked against any trace (callers that know the machine, tests).

    A file holding several machines raises: choose with ``ceilings_for``.
    """
    path = Path(path)
    machines = _machines(path)
    if not machines:
        raise _not_ceilings(path, "no results")
    devices = {(m.fingerprint.host, m.fingerprint.device) for m in machines}
    if len(devices) > 1:
        raise GpuAnalyzeError(
            f"{path}: holds ceilings of {len(machines)} machines; choose by trace with ceilings_for(run, path)"
        )
    return _ceilings(path, machines)


def find_ceilings(explicit: str | Path | None) -> Ceilings | None:
    """The explicit file (must exist; not checked against a trace), else this host's entry in the
    default file, if any (GPU entries before CPU ones). Prefer ``ceilings_for``, which checks the machine."""
    if explicit is not None:
        return load_ceilings(explicit)
    path = default_path()
    if not path.is_file():
        return None
    mine = [m for m in _machines(path) if _same_host(m.fingerprint.host, this_host())]
    chosen = [m for m in mine if m.fingerprint.is_gpu] or mine
    if not chosen or len({m.fingerprint.device for m in chosen}) != 1:
        return None
    return _ceilings(path, chosen)


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
        machines = _machines(path)
    except GpuAnalyzeError as exc:
        if explicit is not None:
            raise
        return None, f"{exc}; ceilings not used"
    known = [m.fingerprint for m in machines if m.known]
    if not known:
        return None, (
            f"ceilings in {path} carry no machine fingerprint (written by an older gpuanalyze); not used - "
            "run `gpuanalyze bench` again on the machine that recorded the trace"
        )
    gpu = bool(run.gpu_name)
    if not gpu and run.device not in ("cpu", None):
        return None, f"ceilings in {path} cover CUDA GPUs and CPUs, not this trace's {run.device} device; not used"
    if not gpu and run.device is None:
        return None, f"this trace does not record its device, so the ceilings in {path} are not used"
    if not gpu and not run.host:
        return None, f"this trace does not record its host, so the CPU ceilings in {path} are not used"

    def device_matches(fp: Fingerprint) -> bool:
        if gpu:
            assert run.gpu_name is not None
            return fp.is_gpu and _norm(fp.device) == _norm(run.gpu_name)
        return fp.backend == "cpu"

    matching = [
        m
        for m in machines
        if m.known
        and device_matches(m.fingerprint)
        and (_same_host(m.fingerprint.host, run.host) or (gpu and not run.host))
    ]
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


# -- writing -------------------------------------------------------------------------------------


def prepare_directory(path: Path) -> None:
    """Create the default cache directory (``~/.cache/gpuanalyze``, ours) when ``path`` is the default
    cache file; any other directory must already exist (``files.check_target`` says so)."""
    if path != _cache_path() or path.parent.is_dir():
        return
    try:
        path.parent.mkdir(mode=0o700)
    except FileNotFoundError as exc:
        raise GpuAnalyzeError(
            f"cannot save ceilings: {path.parent.parent} does not exist (create it, or set GPUANALYZE_CEILINGS)"
        ) from exc
    except FileExistsError:
        pass
    except OSError as exc:
        raise GpuAnalyzeError(f"cannot create {path.parent} ({exc.strerror})") from exc


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive flock on ``directory`` (no lock file left behind), waited for up to LOCK_TIMEOUT_S.

    Where the platform or file system cannot lock, the caller's read-compare-retry still applies.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise GpuAnalyzeError(
                        f"another process has held the lock on {directory} for {LOCK_TIMEOUT_S:g} s; "
                        "ceilings not saved (try again)"
                    ) from None
                time.sleep(0.02)
            except OSError:  # no locks here (some network file systems): rely on compare-and-retry
                break
        yield
    finally:
        os.close(fd)


def _current(path: Path) -> bytes | None:
    try:
        return _read_bytes(path)
    except GpuAnalyzeError:
        if not path.exists() and not path.is_symlink():
            return None
        raise


def merge_runs(path: Path, runs: dict[str, SuiteRun], fingerprint: Fingerprint, *, attempts: int = 5) -> None:
    """Merge ``runs`` (suite name -> its results on ``fingerprint``'s machine) into the ceilings file.

    Each named suite replaces the same suite of the same machine; everything else in the file is
    kept. Concurrent bench processes do not lose each other's results: the read-merge-replace
    runs under a lock on the directory, and the file is re-read just before the replace and the
    merge redone if another process changed it meanwhile. The replace goes through
    ``analyzer.files.write_bytes`` (temporary file created with O_EXCL in the same directory,
    no links or special files, never a new directory).
    """
    from analyzer.files import check_target, write_bytes

    prepare_directory(path)
    check_target(path, force=True)
    for _ in range(attempts):
        with _locked(path.parent):
            before = _current(path)
            store = Store(format=FORMAT, version=VERSION, machines={})
            if before is not None:
                try:
                    store = _decode_store(path, before)
                except GpuAnalyzeError as exc:
                    raise GpuAnalyzeError(f"{exc}; results not saved there (move it away to start a new file)") from exc
            data = encode_store(merged(store, runs, fingerprint))
            if _current(path) != before:
                continue  # another process wrote meanwhile (no lock here): merge again
            write_bytes(path, data, force=True)
            return
    raise GpuAnalyzeError(f"{path} kept changing while results were being saved; ceilings not saved (try again)")


def merged(store: Store, runs: dict[str, SuiteRun], fingerprint: Fingerprint) -> Store:
    """``store`` with ``runs`` replacing the same suites of ``fingerprint``'s machine."""
    machines = dict(store.machines)
    old = machines.get(fingerprint.key)
    suites = {**(old.suites if old else {}), **runs}
    machines[fingerprint.key] = MachineEntry(fingerprint=fingerprint, suites=dict(sorted(suites.items())))
    return Store(format=FORMAT, version=VERSION, machines=dict(sorted(machines.items())))


def encode_store(store: Store) -> bytes:
    return msgspec.json.format(msgspec.json.encode(store), indent=2) + b"\n"

"""The measured-ceilings file (from `gpuanalyze bench`): its format, reading it, and merging new
results into it safely while other bench processes may write too.

Ceilings belong to the machine they were measured on. Every bench run carries a ``Fingerprint``;
the saved file (``default_path()``) keeps one entry per machine, keyed by host, backend and
device, and within it the latest results of each benchmark suite, so a partial run (`bench
launch`) replaces only what it measured and other machines' numbers stay side by side.
``analyzer.machine.ceilings`` decides which entries apply to a trace.

File format (version 2)::

    {"format": "gpuanalyze-ceilings", "version": 2,
     "machines": {"<host>/<backend>/<device>": {
         "fingerprint": {...},
         "suites": {"<suite>": {"measured_unix_s": ..., "quick": ..., "fingerprint": {...},
                                "results": [<bench --json result>, ...], "skipped": [...]}}}}}

The report that `bench --json` prints (and `--out` writes) is read too: one machine, or an unknown
one when it has no fingerprint (files written before fingerprints existed).

The lock is an flock on the file's directory, not filelock's lock file: a lock file would be left
beside a ceilings file at a user-chosen path, and the directory lock needs none.
``benchmarks/file_lock.py``: 2.2 us per acquire+release vs filelock's 109-111 us; neither loses an update.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Final, Literal

import msgspec

from analyzer.errors import GpuAnalyzeError
from analyzer.machine.user_cache import gpuanalyze_cache, make_private_dir

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


class StoredResult(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of one result that ceilings read; other keys pass through untouched."""

    benchmark: _Name
    value: _Value
    variant: _Name | None = None
    dtype: _Name | None = None
    suite: _Name | None = None


def default_path() -> Path:
    """Where `gpuanalyze bench` saves and analysis looks: $GPUANALYZE_CEILINGS or the user cache."""
    env = os.environ.get("GPUANALYZE_CEILINGS")
    if env:
        return Path(env)
    return _cache_path()


def _cache_path() -> Path:
    return gpuanalyze_cache("ceilings.json")


def this_host() -> str:
    return socket.gethostname()


@dataclass(frozen=True, slots=True)
class StoredMachine:
    """One machine's entry of the file, with the results ceilings read."""

    fingerprint: Fingerprint
    results: list[StoredResult]
    measured_unix_s: dict[str, int] = field(default_factory=dict)
    """When each suite that gave the results ran (suite name -> Unix seconds)."""

    @property
    def known(self) -> bool:
        """False for entries without a fingerprint (older files): an unknown machine."""
        return self.fingerprint.host is not None


def read_bytes(path: Path) -> bytes:
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


def not_ceilings(path: Path, why: object) -> GpuAnalyzeError:
    return GpuAnalyzeError(f"{path}: not a ceilings file written by `gpuanalyze bench` ({why})")


def _decode_store(path: Path, raw: bytes) -> Store:
    """The file as a version-2 store; a `bench --json` report or a version-1 file is converted."""
    try:
        head = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
    except msgspec.DecodeError as exc:
        raise not_ceilings(path, exc) from exc
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
        raise not_ceilings(path, exc) from exc


def _store_of_report(report: _Report) -> Store:
    fp = report.fingerprint or Fingerprint(backend=report.backend or "?", device=report.device or "?")
    by_suite: dict[str, list[msgspec.Raw]] = {}
    for raw in report.results:
        suite = msgspec.json.decode(raw, type=StoredResult).suite or "unknown"
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


def stored_machines(path: Path) -> list[StoredMachine]:
    store = _decode_store(path, read_bytes(path))
    out = []
    for entry in store.machines.values():
        try:
            results = [msgspec.json.decode(r, type=StoredResult) for run in entry.suites.values() for r in run.results]
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise not_ceilings(path, exc) from exc
        when = {name: run.measured_unix_s for name, run in entry.suites.items()}
        out.append(StoredMachine(entry.fingerprint, results, when))
    return out


def prepare_directory(path: Path) -> None:
    """Create the default cache directory (``$XDG_CACHE_HOME/gpuanalyze``, parents included, 0700) when
    ``path`` is the default cache file; any other directory must already exist (``files.check_target`` says so)."""
    if path != _cache_path() or path.parent.is_dir():
        return
    make_private_dir(path.parent)  # the XDG rule: create missing cache directories 0700


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
        return read_bytes(path)
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

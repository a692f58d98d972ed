from __future__ import annotations

import functools
import itertools
import os
import signal
from pathlib import Path
from typing import Any

import msgspec
import pytest
import typer.main
import typer.testing

from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo
from gpuanalyze.ingest.trace.writer import TraceWriter, WriterOptions

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
SHARED = ROOT.parent / "shared"


@functools.cache
def _click_command(app: typer.Typer, commands: int) -> Any:
    return typer.main.get_command(app)


def _built_once(app: typer.Typer) -> Any:
    """typer's CliRunner builds the click command from the app at every invoke: 12 ms of CPU for the app with every
    command, ~450 invokes a run. Built once per app and number of registered commands instead; a click command
    keeps nothing of one invocation for the next (each has its own Context)."""
    return _click_command(app, len(app.registered_commands) + len(app.registered_groups))


typer.testing._get_command = _built_once


#: Where the xdist workers of this run share their loads of the real traces (set in each worker; None: one process).
_SHARED_LOADS: dict[str, Path] = {}


@pytest.fixture(autouse=True, scope="session")
def _shared_loads_of_the_run(tmp_path_factory):
    """Beside the workers' base temporary directories: the run's own (pytest removes it with them)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _SHARED_LOADS["dir"] = tmp_path_factory.getbasetemp().parent / "shared-loads"
    yield


def _once_per_run(load: Any) -> Any:
    """``load(path)`` of a real trace under ../shared once per test process, and under xdist mostly once per run:
    the first worker to need it pickles it for the others, which read it; a worker never waits for another (on a
    loaded host the waiting worker's CPU went to other work), it loads a trace the other is loading itself. The
    truth table, memory, idle-owner and start-up tests read the same traces. What is loaded is treated as
    immutable."""

    @functools.cache
    def cached(path: Path) -> Any:
        folder = _SHARED_LOADS.get("dir")
        if folder is None:
            return load(path)
        import fcntl
        import hashlib
        import pickle

        folder.mkdir(exist_ok=True)
        name = folder / f"{load.__name__}-{hashlib.sha256(str(path).encode()).hexdigest()[:16]}"
        saved = name.with_suffix(".pickle")
        if saved.exists():  # written whole, then renamed
            return pickle.loads(saved.read_bytes())
        with open(name.with_suffix(".lock"), "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when the file closes
            except BlockingIOError:  # the other worker is loading it: load it here too rather than wait
                return load(path)
            if saved.exists():
                return pickle.loads(saved.read_bytes())
            value = load(path)
            saved.with_suffix(".part").write_bytes(pickle.dumps(value))
            saved.with_suffix(".part").replace(saved)
            return value

    cached.__doc__ = load.__doc__
    return cached


@_once_per_run
def shared_report(path: Path) -> Any:
    """``analyze`` of a real trace under ../shared (a real trace's import is 0.1-0.4 s of CPU)."""
    from analyzer.api import analyze

    return analyze(path)


@_once_per_run
def shared_timeline(path: Path) -> Any:
    """``parse_kineto`` of a real trace under ../shared."""
    from gpuanalyze.ingest.kineto.parse import parse_kineto

    return parse_kineto(path)


@_once_per_run
def shared_kineto(path: Path) -> Any:
    """``load_kineto`` of a real trace under ../shared: the import of its shared_timeline."""
    from gpuanalyze.ingest.timeline.step_rows import import_kineto

    return import_kineto(shared_timeline(path))


def make_row(
    step: int,
    *,
    rank: int = 0,
    wall: float = 20.0,
    data: float = 0.0,
    fwd: float = 7.0,
    bwd: float = 10.0,
    opt: float = 1.5,
    sync: float = 0.0,
    busy: float | None = None,
    samples: int | None = 32,
    peak: int | None = None,
    data_cpu: float | None = None,
) -> dict[str, Any]:
    """A consistent trace row; ``other`` is what is left of ``wall``."""
    row = S.empty_row()
    row.update(
        {
            S.STEP: step,
            S.RANK: rank,
            S.START_UNIX_NS: 1_700_000_000_000_000_000 + step * 10**7,
            S.WALL_MS: wall,
            S.DATA_WAIT_MS: data,
            S.FORWARD_MS: fwd,
            S.BACKWARD_MS: bwd,
            S.OPTIMIZER_MS: opt,
            S.SYNC_MS: sync,
            S.OTHER_MS: max(0.0, wall - data - fwd - bwd - opt - sync),
            S.GPU_BUSY_MS: busy,
            S.BATCH_SAMPLES: samples,
            S.PEAK_MEM_BYTES: peak,
            S.DATA_CPU_MS: data_cpu,
        }
    )
    return row


def as_run(run: RunInfo | dict[str, Any] | None) -> RunInfo:
    """RunInfo from the dicts tests write for brevity (validated like a file's metadata)."""
    return run if isinstance(run, RunInfo) else msgspec.convert(run or {"host": "test"}, RunInfo)


def rows_on_disk(path: Path) -> int:
    """Rows a trace that is still being written has on disk so far (0 while it cannot be read)."""
    from analyzer.errors import GpuAnalyzeError
    from gpuanalyze.ingest.trace.reader import load_trace

    try:
        return load_trace(path).frame.height
    except (OSError, GpuAnalyzeError):
        return 0


def write_trace(
    path: Path,
    rows: list[dict[str, Any]],
    *,
    run: RunInfo | dict[str, Any] | None = None,
    close: bool = True,
    end: EndInfo | None = None,
) -> Path:
    writer = TraceWriter(path=path, run=as_run(run), options=WriterOptions(fsync=False))
    writer.open()
    for row in rows:
        writer.add(row)
    if close:
        writer.close(end or EndInfo(status="ok", steps=len(rows)))
    else:
        writer.flush()
        writer._stop.set()
        writer._file.flush()
        writer._release_lock()  # as if the writing process had died
    return path


@pytest.fixture
def trace_factory(tmp_path: Path):
    counter = iter(range(10**6))

    def factory(rows: list[dict[str, Any]], **kwargs: Any) -> Path:
        return write_trace(tmp_path / f"t{next(counter)}.arrow", rows, **kwargs)

    return factory


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """With -n and no --dist, xdist's worksteal: each worker starts on a contiguous half of the tests and takes work
    from the other only when idle, so a module's tests (and the real traces they load) stay on one worker. Beside
    xdist's default (load: tests dealt out one by one) the fast tier took 5% less CPU."""
    if getattr(config.option, "numprocesses", None) and config.option.dist == "no":
        config.option.dist = "worksteal"


def pytest_configure(config: pytest.Config) -> None:
    """The fast tier's models are tiny: one intra-op thread each (set before a test module imports torch; a
    value given wins; the slow tier trains as users do). Beside other work on a 2-core machine torch's OpenMP
    threads wait on each other: a 32-wide MLP's step took 4.5 ms on two threads beside two busy loops, 0.1 ms
    on one."""
    if "not slow" in (config.option.markexpr or ""):
        os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True, scope="session")
def _ctrl_c_reaches_the_tests():
    """A job started in the background (`cmd &`, nohup) inherits SIGINT ignored, and so would every
    process the tests start: give this process Python's own handler, so children start with the
    default disposition and the Ctrl-C tests test gpuanalyze, not how CI was launched."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield


@pytest.fixture(scope="session")
def _isolation_root(tmp_path_factory):
    return tmp_path_factory.mktemp("isolated")


_test_number = itertools.count()


@pytest.fixture(autouse=True)
def _isolated_user_files(_isolation_root, monkeypatch):
    """No test reads or writes the user's saved ceilings (~/.cache/gpuanalyze) or import cache (`gpuanalyze
    DIR` of Kineto rank files): each test has its own, named in one directory and made only when the test
    writes one (two new directories per test were 2,400 a run, each ~2.5 ms to remove on this project's disk)."""
    n = next(_test_number)
    monkeypatch.setenv("GPUANALYZE_CEILINGS", str(_isolation_root / f"ceilings{n}.json"))
    monkeypatch.setenv("GPUANALYZE_CACHE", str(_isolation_root / f"imports{n}"))


@pytest.fixture
def empty_home(tmp_path, monkeypatch):
    """A fresh machine: HOME an empty directory, no XDG_* variables, no gpuanalyze cache settings."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in (
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
        "GPUANALYZE_CEILINGS",
        "GPUANALYZE_CACHE",
    ):
        monkeypatch.delenv(name, raising=False)
    return home

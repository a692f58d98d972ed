"""`gpuanalyze run`: run a command unchanged with profiling in every Python process it starts.

The command runs as a child in the same process group (so it keeps the terminal), with the
bootstrap first on PYTHONPATH and the GPUANALYZE_* variables set (analyzer.run.env_vars). Signals
sent to the launcher are passed on: SIGTERM, SIGUSR1 and SIGUSR2 always; SIGINT, SIGQUIT and
SIGHUP only when the launcher is not in the terminal's foreground group (a terminal already
sends those to the whole group, and a second Ctrl-C would interrupt the child's cleanup). When
the command ends, the traces this run wrote (found by its run id) are analysed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from analyzer.errors import GpuAnalyzeError
from analyzer.record.profile_options import ProfileOptions
from analyzer.run import env_vars

_ALWAYS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
_FROM_TERMINAL = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)


@dataclass(frozen=True, slots=True)
class Finished:
    """How the command ended and what it left."""

    returncode: int
    """The child's exit status; negative: killed by that signal (as subprocess reports it)."""
    out_dir: Path
    traces: tuple[Path, ...]
    """One file per recorded process group: a single-process trace, or one rank file of a multi-rank run."""


def default_out_dir() -> Path:
    """``gpuanalyze-<date>-<time>`` in the current directory (a new one per run)."""
    return Path(f"gpuanalyze-{time.strftime('%Y%m%d-%H%M%S')}")


def prepare_out_dir(out_dir: Path) -> tuple[Path, bool]:
    """Create the output directory (not its parents); returns it and whether it was created.
    Raises GpuAnalyzeError when it cannot."""
    if out_dir.exists() and not out_dir.is_dir():
        raise GpuAnalyzeError(f"{out_dir} exists and is not a directory; choose another --out")
    if not out_dir.parent.is_dir():
        raise GpuAnalyzeError(
            f"{out_dir.parent}: no such directory (create it first; gpuanalyze does not create directories)"
        )
    return out_dir.resolve(), create_dir(out_dir)


def create_dir(path: Path, shown: str | None = None) -> bool:
    """Create ``path`` (never its parents): True when this call made it, False when it was there already.
    Raises GpuAnalyzeError ``cannot create SHOWN (why)`` when it cannot (``shown``: the path, by default)."""
    try:
        path.mkdir()
    except FileExistsError:
        return False
    except OSError as exc:
        raise GpuAnalyzeError(f"cannot create {path if shown is None else shown} ({exc.strerror})") from exc
    return True


def child_env(options: ProfileOptions, out_dir: Path, run_id: str) -> dict[str, str]:
    """The command's environment. Raises GpuAnalyzeError when its processes would not record (a bad
    GPUANALYZE_* variable inherited from this shell): said before the command runs, not after."""
    env = dict(os.environ)
    env.update(env_vars.env_for(options, out_dir, run_id))
    env["PYTHONPATH"] = env_vars.pythonpath(os.environ.get("PYTHONPATH"))
    try:
        env_vars.options_from_env(env)  # what each process of the command will parse
    except GpuAnalyzeError as exc:
        raise GpuAnalyzeError(f"recording would be off, so the command was not run: {exc}") from exc
    return env


def run_command(command: list[str], options: ProfileOptions, out_dir: Path) -> Finished:
    """Run ``command`` to its end with profiling on; raises GpuAnalyzeError if it cannot start."""
    out_dir, created = prepare_out_dir(out_dir)
    run_id = uuid.uuid4().hex
    try:
        child = subprocess.Popen(command, env=child_env(options, out_dir, run_id))
    except GpuAnalyzeError:
        if created:
            with contextlib.suppress(OSError):
                out_dir.rmdir()
        raise
    except OSError as exc:
        if created:
            with contextlib.suppress(OSError):
                out_dir.rmdir()  # leave nothing behind for a command that never ran
        raise GpuAnalyzeError(f"cannot run {command[0]!r}: {exc.strerror or exc}") from exc
    with _forwarding_signals(child):
        returncode = child.wait()
    traces = tuple(traces_of(out_dir, run_id))
    if created and not traces:
        with contextlib.suppress(OSError):
            out_dir.rmdir()  # no trace written: leave nothing behind (kept if the command wrote files there)
    return Finished(returncode=returncode, out_dir=out_dir, traces=traces)


def traces_of(out_dir: Path, run_id: str) -> list[Path]:
    """The traces of run ``run_id`` in ``out_dir``: each single-process file, and the lowest rank
    file of a multi-rank run (analysing it brings in the other ranks of the same run)."""
    from gpuanalyze.ingest.sources import read_run_info

    singles: list[tuple[int, Path]] = []
    ranks: list[tuple[int, Path]] = []
    for path in sorted(out_dir.glob("*.arrow")):
        run = read_run_info(path)
        if run is None or run.run_id != run_id:
            continue
        (ranks if run.world > 1 else singles).append((run.rank_or_zero, path))
    return [p for _, p in singles] + ([min(ranks)[1]] if ranks else [])


@contextlib.contextmanager
def _forwarding_signals(child: subprocess.Popen[bytes]) -> Iterator[None]:
    foreground = _in_terminal_foreground()

    def forward(signum: int, frame: FrameType | None) -> None:
        if signum in _FROM_TERMINAL and foreground:
            return  # the terminal sent it to the child as well
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    with signals_handled((*_ALWAYS, *_FROM_TERMINAL), forward):
        yield


@contextlib.contextmanager
def signals_handled(signums: Iterable[int], handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """``handler`` for each of ``signums`` this thread may set, and the previous handlers back afterwards."""
    saved: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}
    for signum in signums:
        with contextlib.suppress(OSError, ValueError):
            saved[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, previous in saved.items():
            signal.signal(signum, previous)


def _in_terminal_foreground() -> bool:
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except (AttributeError, OSError, ValueError):
            continue
    return False


def die_like(returncode: int) -> None:
    """End this process the way the child ended: killed by the same signal (the shell then sees
    exactly what it would have seen without gpuanalyze), or with the same exit code."""
    if returncode < 0:
        signum = -returncode
        with contextlib.suppress(OSError, ValueError):
            signal.signal(signum, signal.SIG_DFL)
            sys.stdout.flush()
            sys.stderr.flush()
            os.kill(os.getpid(), signum)
        sys.exit(128 + signum)  # the signal was blocked or could not be re-raised
    sys.exit(returncode)

"""Run several `gpuanalyze` command lines in this one process, each with its own captured stdout and
stderr, and print their results as JSON: how the hostile-input corpus runs one input's commands
under one memory cap (tests/test_hostile_corpus.py).

``{out}`` in an argument becomes a fresh path in a new empty directory; ``{import_out}`` a fresh
.arrow path, or a new empty directory when the input is a directory. `watch` is stopped after
WATCH_S seconds as Ctrl-C would stop it (a live view has no end of its own); any other command
that uses more than COMMAND_CPU_S seconds of CPU (this process's threads; SIGPROF) or runs past
COMMAND_S seconds (a command that waits without computing) is reported with exit code 124. Each result
carries its wall time and its CPU time (this process's threads and the child processes it reaped): CPU
time, unlike wall time, does not grow with the machine's load.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

WATCH_S = 3
COMMAND_S = 600
COMMAND_CPU_S = 120


class _TooLong(BaseException):
    pass


def _alarm(is_watch: bool):
    def fire(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt if is_watch else _TooLong

    return fire


def _resolve(args: list[str], scratch: Path) -> list[str]:
    out = []
    for a in args:
        if "{out}" in a:
            d = Path(tempfile.mkdtemp(dir=scratch))
            a = a.replace("{out}", str(d / "out"))
        if a == "{import_out}":
            d = Path(tempfile.mkdtemp(dir=scratch))
            source = Path(args[1])
            a = str(d) if source.is_dir() else str(d / "out.arrow")
        out.append(a)
    return out


def main() -> None:
    from analyzer.cli import main as cli

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for raw in json.loads(sys.argv[1]):
            args = _resolve(raw, scratch)
            out, err = io.StringIO(), io.StringIO()
            code = 0
            is_watch = bool(args) and args[0] == "watch"
            signal.signal(signal.SIGALRM, _alarm(is_watch))
            signal.signal(signal.SIGPROF, _alarm(False))
            signal.alarm(WATCH_S if is_watch else COMMAND_S)
            signal.setitimer(signal.ITIMER_PROF, 0 if is_watch else COMMAND_CPU_S)
            start, cpu = time.perf_counter(), _cpu_s()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    cli(args)
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
                except _TooLong:
                    code = 124
                    err.write(f"used over {COMMAND_CPU_S} s of CPU or ran over {COMMAND_S} s")
                except BaseException:  # noqa: BLE001 - what the promise forbids: report it, do not die
                    code = 1
                    err.write(traceback.format_exc())
                finally:
                    signal.alarm(0)
                    signal.setitimer(signal.ITIMER_PROF, 0)
            results.append(
                {
                    "args": raw,
                    "code": code,
                    "out": out.getvalue(),
                    "err": err.getvalue(),
                    "seconds": time.perf_counter() - start,
                    "cpu_seconds": _cpu_s() - cpu,
                }
            )
    sys.__stdout__.write(json.dumps(results))
    peak = _peak_rss_kb()
    if peak is not None:
        sys.__stderr__.write(f"\n{PEAK_PREFIX}{peak}\n")


def _cpu_s() -> float:
    """CPU seconds used so far by this process (all its threads) and by the children it has reaped."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


#: The last stderr line: this process's peak RSS (kB) since exec, and its reaped children's.
PEAK_PREFIX = "peak_rss_kb="


def _peak_rss_kb() -> int | None:
    """VmHWM (this process's mm since exec: unlike ru_maxrss it inherits nothing from the process that forked
    it, e.g. a test run that compiled with inductor first), and the largest reaped child's; None off Linux."""
    import resource

    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    hwm = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), None)
    if hwm is None:
        return None
    return max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


if __name__ == "__main__":
    main()

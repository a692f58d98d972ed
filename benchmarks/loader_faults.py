"""How fast does `gpuanalyze bench dataloader` end after Ctrl-C, or after one of its workers dies?

    python benchmarks/loader_faults.py [--trials 9]

Each trial starts `gpuanalyze bench dataloader --backend cpu --quick` in its own session, waits
until all its workers run, waits a delay spread over the run, then either sends SIGINT to the
whole process group (what a terminal's Ctrl-C does) or SIGKILLs one worker. Prints, per trial, the
exit status and the seconds from the signal to the end of the command, then the median and the
maximum. A trial that has not ended 15 s after its signal counts as a hang.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def workers(pgid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z" and b"spawn_main" in cmd:
            out.append(int(stat.parent.name))
    return out


def trial(kind: str, delay: float, cache: str) -> tuple[int | None, float]:
    env = dict(os.environ, GPUANALYZE_CEILINGS=cache)
    cmd = [sys.executable, "-m", "analyzer", "bench", "dataloader", "--backend", "cpu", "--quick"]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(workers(proc.pid)) < (os.cpu_count() or 1) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(delay)
    t0 = time.monotonic()
    if kind == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(workers(proc.pid)[0], signal.SIGKILL)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None, 15.0
    return proc.returncode, time.monotonic() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=9)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("ctrl-c", "kill a worker"):
            times = []
            for i in range(args.trials):
                delay = 1.2 * i / max(1, args.trials - 1)
                status, seconds = trial(kind, delay, str(Path(tmp) / "ceilings.json"))
                times.append(seconds)
                print(f"{kind:14} delay {delay:4.2f} s  exit {status}  ended after {seconds:.2f} s")
            hangs = sum(1 for t in times if t >= 15.0)
            print(f"{kind:14} median {statistics.median(times):.2f} s, max {max(times):.2f} s, hangs {hangs}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()

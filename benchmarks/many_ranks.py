"""How long `gpuanalyze DIR` takes on a directory of thousands of tiny rank files.

`python benchmarks/many_ranks.py [N]` writes N (default 3000) two-step Kineto rank files (~800
bytes of JSON each, compact) to a temporary directory, then times `gpuanalyze DIR --json` in a
fresh process, once cold (every import made and cached) and once warm (the imports reused), and
prints both (wall and CPU time: the machine may be shared; the load average is printed) with the
peak RSS. The claim: 3,000 files in under 15 s on the 2-core CI machine.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.kineto_fixtures import two_step_trace  # noqa: E402


def write_ranks(d: Path, n: int) -> int:
    total = 0
    for r in range(n):
        data = json.dumps(two_step_trace(rank=r, world=n), separators=(",", ":")).encode()
        (d / f"rank{r}.json").write_bytes(data)
        total += len(data)
    return total


def timed(args: list[str], env: dict[str, str]) -> tuple[float, int, int, float]:
    """(wall s, peak RSS bytes, exit status, CPU s of the command and its workers)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, env=env, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    rss = after.ru_maxrss * 1024
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr.decode(errors="replace")[-2000:])
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, rss, proc.returncode, cpu


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "ranks"
        d.mkdir()
        size = write_ranks(d, n)
        env = {
            **os.environ,
            "XDG_CACHE_HOME": str(Path(tmp) / "cache"),
            "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("", "ingest", "kernels")),
        }
        args = [sys.executable, "-c", "import sys; from analyzer.cli import main; main(sys.argv[1:])", str(d), "--json"]
        cold = timed(args, env)
        warm = timed(args, env)
    print(f"{n} rank files, {size / 1e6:.1f} MB of JSON; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    cold_s = f"cold: {cold[0]:.1f} s wall, {cold[3]:.1f} s CPU (exit {cold[2]})"
    warm_s = f"warm: {warm[0]:.1f} s wall, {warm[3]:.1f} s CPU (exit {warm[2]})"
    print(f"{cold_s}; {warm_s}; peak RSS {cold[1] / 2**20:.0f} MiB; budget 15 s on 2 cores")


if __name__ == "__main__":
    main()

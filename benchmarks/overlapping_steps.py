"""`gpuanalyze TRACE --json` and `export --chrome-trace` on a Kineto file of nested ProfilerStep ranges.

    python benchmarks/overlapping_steps.py [N]        # N ranges (default 20,000), each nested in the one before

Each range starts 10 us after the previous one and lasts to past the end of the trace (one kernel
launched in each), so before step_windows.py every window held every later kernel (quadratic:
34-41 s for 20,000 ranges). Prints the file size, the wall and CPU time of each command in a fresh
process, its peak RSS, the load average (the machine is shared) and the budget (10 s).
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

from tests.kineto_fixtures import ev  # noqa: E402

BUDGET_S = 10.0


def nested_ranges(n: int) -> dict:
    events = []
    for i in range(n):
        events += [
            ev("user_annotation", f"ProfilerStep#{i}", i * 10, (n - i) * 10 + 5000),
            ev("cuda_runtime", "cudaLaunchKernel", i * 10 + 1, 2, correlation=i + 1),
            ev("kernel", "k", i * 10 + 3, 4, stream=7, correlation=i + 1),
        ]
    props = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85 * 10**9}]
    return {"schemaVersion": 1, "traceEvents": events, "deviceProperties": props}


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, CPU s, exit status) of one command in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, env=env, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr.decode(errors="replace")[-2000:])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nested.json"
        path.write_text(json.dumps(nested_ranges(n), separators=(",", ":")))
        paths = os.pathsep.join(str(ROOT / p) for p in ("", "ingest", "kernels"))
        env = {**os.environ, "XDG_CACHE_HOME": str(Path(tmp) / "cache"), "PYTHONPATH": paths}
        cli = [sys.executable, "-m", "analyzer"]
        print(f"{n:,} nested ProfilerStep ranges, {path.stat().st_size / 1e6:.1f} MB; load {os.getloadavg()[0]:.2f}")
        for name, args in (
            ("analyze --json", [*cli, str(path), "--json"]),
            ("export --chrome-trace", [*cli, "export", str(path), "--chrome-trace", str(Path(tmp) / "out.json")]),
        ):
            wall, cpu, rc = timed(args, env)
            rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            verdict = "within" if wall <= BUDGET_S else "OVER"
            print(
                f"{name:22s} {wall:5.1f} s wall, {cpu:5.1f} s CPU (exit {rc}), peak RSS so far {rss:.0f} MiB; "
                f"{verdict} the {BUDGET_S:.0f} s budget"
            )
        print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

"""Start-up time of the CLI against the imports it cannot avoid, measured side by side.

    python benchmarks/startup.py [--runs 15]

Goals: `gpuanalyze --version` within 1.5x of
`python -c "import typer, rich.console"`; `gpuanalyze TRACE` on a small .arrow file within 2x of
`python -c "import polars, pyarrow"`. Each command runs --runs times, interleaved so load changes
hit all of them alike; the minimum of each is compared (the least disturbed run).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "cpu_healthy.arrow"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    cli = shutil.which("gpuanalyze") or str(Path(sys.executable).parent / "gpuanalyze")
    commands = {
        "import typer, rich.console": [sys.executable, "-c", "import typer, rich.console"],
        "gpuanalyze --version": [cli, "--version"],
        "import polars, pyarrow": [sys.executable, "-c", "import polars, pyarrow"],
        "gpuanalyze TRACE (small .arrow)": [cli, str(SAMPLE)],
    }
    best = dict.fromkeys(commands, float("inf"))
    env = {**os.environ, "COLUMNS": "100"}
    for _ in range(args.runs):
        for name, cmd in commands.items():
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
            best[name] = min(best[name], time.perf_counter() - t0)
    load = os.getloadavg()[0]
    print(f"best of {args.runs} runs each, load average {load:.2f}")
    for name, seconds in best.items():
        print(f"  {name:34} {seconds * 1e3:7.1f} ms")
    base_cli, base_data = best["import typer, rich.console"], best["import polars, pyarrow"]
    for name, base, goal in (
        ("gpuanalyze --version", base_cli, 1.5),
        ("gpuanalyze TRACE (small .arrow)", base_data, 2.0),
    ):
        ratio = best[name] / base
        print(f"  {name:34} {ratio:5.2f}x its baseline (goal <= {goal}x): {'met' if ratio <= goal else 'NOT met'}")


if __name__ == "__main__":
    main()

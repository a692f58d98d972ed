"""How a `run --try` trial is scheduled: the same CPU loop as a child in a new session (the old
trial launch, ``start_new_session=True``) and in a new process group of the caller's session (the
launch now, ``process_group=0``), alternated.

    nice -n 5 python benchmarks/trial_scheduling.py [--runs 4]

Under Linux autogroup (/proc/sys/kernel/sched_autogroup_enabled) a new session is a new scheduling
group at default weight, whatever the caller's priority and group: the loop is then not timed as
the run it stands for, which runs in the caller's group. Prints each launch's autogroups, its median
step time per run and coefficient of variation, and the ratio of the medians; also the load average.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

LOOP = """
import json, time, torch
torch.set_num_threads(1)
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x = torch.randn(64, 256)
steps = []
for i in range(60):
    start = time.perf_counter()
    m(x).sum().backward()
    opt.step()
    opt.zero_grad()
    steps.append(time.perf_counter() - start)
print(json.dumps({"group": open("/proc/self/autogroup").read().split()[0], "steps": steps[10:]}))
"""
LAUNCHES: dict[str, dict[str, Any]] = {
    "new session": {"start_new_session": True},
    "process group": {"process_group": 0},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4)
    runs = parser.parse_args().runs
    if not Path("/proc/self/autogroup").exists():
        sys.exit("no /proc/self/autogroup: this kernel schedules without autogroups")
    found: dict[str, list[dict]] = {name: [] for name in LAUNCHES}
    for _ in range(runs):
        for name, launch in LAUNCHES.items():
            out = subprocess.run([sys.executable, "-c", LOOP], capture_output=True, text=True, check=True, **launch)
            found[name].append(json.loads(out.stdout))
    print(f"caller's autogroup {Path('/proc/self/autogroup').read_text().split()[0]}, "
          f"load {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")  # fmt: skip
    medians = {}
    for name, results in found.items():
        per_run = [1e3 * statistics.median(r["steps"]) for r in results]
        cv = [statistics.stdev(r["steps"]) / statistics.mean(r["steps"]) for r in results]
        medians[name] = statistics.median(per_run)
        groups = sorted({r["group"] for r in results})
        print(f"{name:14s} {len(groups)} autogroup(s) {', '.join(groups)}: median ms/step per run "
              f"{', '.join(f'{m:.2f}' for m in per_run)}; cv {', '.join(f'{c:.2f}' for c in cv)}")  # fmt: skip
    ratio = medians["new session"] / medians["process group"]
    print(f"new session / process group (the caller's scheduling): {ratio:.2f}")


if __name__ == "__main__":
    main()

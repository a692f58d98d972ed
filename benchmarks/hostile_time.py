"""Time per input of the hostile corpus: every reading command on every input, as the slow
test runs them (one process per input, under the same address-space cap), one input at a time so
the figures do not share the CPU.

`python benchmarks/hostile_time.py [NAME-SUBSTRING ...]` prints, per input, its size, the wall time
of all its commands together, the CPU time of the command that took most, and its peak RSS; then the
median and the maximum over inputs under 10 MB (the claim in docs/robustness.md and the slow test's
bound: each command under 10 s of CPU). The 3,000-rank directory has its own benchmark
(benchmarks/many_ranks.py).
"""

from __future__ import annotations

import os
import pickle
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.test_hostile_corpus import TIMED_BELOW_BYTES, _run, _size  # noqa: E402


def _command(args: list[str]) -> str:
    if not args or args[0] != "{}":
        return args[0] if args else "?"
    return "--json" if "--json" in args else "analyze"


def main() -> None:
    wanted = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        code = "import pickle, sys; from pathlib import Path; from tests.hostile.corpus import build; "
        code += "sys.stdout.buffer.write(pickle.dumps(build(Path(sys.argv[1]))))"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        built = subprocess.run([sys.executable, "-c", code, str(d / "c")], capture_output=True, env=env, check=True)
        cases = [c for c in pickle.loads(built.stdout) if not wanted or any(w in c.name for w in wanted)]
        timed = []
        for case in cases:
            if case.cls == "scale":
                continue
            results, rss, _ = _run(case, d)
            total = sum(r.get("seconds", 0.0) for r in results)
            slowest = max((r.get("cpu_seconds", 0.0), _command(r["args"])) for r in results)
            size = _size(case.path)
            label = case.name.encode("ascii", "backslashreplace").decode()[:44]
            print(
                f"{label:44s} {size / 2**20:7.2f} MiB {total:6.1f} s (most CPU {slowest[1][:8]} {slowest[0]:.1f} s) "
                f"{rss / 2**20:5.0f} MiB RSS"
            )
            if size < TIMED_BELOW_BYTES:
                timed.append(slowest[0])
    if timed:
        median, most = statistics.median(timed), max(timed)
        print(f"{len(timed)} inputs under 10 MB, costliest command: median {median:.1f} s, max {most:.1f} s of CPU")


if __name__ == "__main__":
    main()

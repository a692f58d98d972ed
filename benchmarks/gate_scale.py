"""The regression gate on two long runs: time and peak memory of `gpuanalyze compare BEFORE AFTER
--fail-if-slower 10` on two single-rank traces of --steps steps each (default 1,000,000).

    python benchmarks/gate_scale.py                    # 2 x 1M steps (goal: <= 30 s, <= 600 MiB)
    python benchmarks/gate_scale.py --steps 100000     # a quicker look

Generates the traces once into --dir (tests/scale_fixtures.py; kept and reused), then runs the
command in a fresh process, so its peak RSS (the child's ru_maxrss) is the gate's own. AFTER's
forward is 2 ms longer per step (~+13%): the gate must fail (exit 1). Prints the load average next
to the time: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GOAL_S, GOAL_MIB = 30.0, 600.0


def generate(directory: Path, steps: int) -> tuple[Path, Path]:
    from tests.scale_fixtures import write_ranks

    out = []
    for name, stragglers in (("before", {}), ("after", {0: ("forward", 2.0)})):
        d = directory / f"{name}-{steps}"
        marker = d / ".complete"
        if not marker.exists():
            d.mkdir(parents=True, exist_ok=True)
            (raw,) = write_ranks(d, 1, steps, seed=1 if name == "before" else 2, stragglers=stragglers)
            _zstd(raw)
            marker.write_text("ok")
        out.append(d / "trace.rank0.arrow")
    return out[0], out[1]


def _zstd(path: Path) -> None:
    """Rewrite the trace with zstd-compressed bodies, as the recorder writes them (~56 MiB per 1M steps:
    the fixture's random timings compress little)."""
    import pyarrow as pa

    with pa.OSFile(str(path), "rb") as src:
        reader = pa.ipc.open_stream(src)
        batches = []
        while True:
            try:
                batches.append(reader.read_next_batch_with_custom_metadata())
            except StopIteration:
                break
        schema = reader.schema
    tmp = path.with_suffix(".tmp")
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_stream(sink, schema, options=options) as w:
        for batch, meta in batches:
            if meta is None:
                w.write_batch(batch)
            else:
                w.write_batch(batch, custom_metadata=meta)
    tmp.replace(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "gpuanalyze-gate-scale")
    args = ap.parse_args()
    t0 = time.perf_counter()
    before, after = generate(args.dir, args.steps)
    print(
        f"traces: {before} ({before.stat().st_size / 2**20:.1f} MiB), {after} "
        f"(generated/reused in {time.perf_counter() - t0:.1f} s)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "ingest"), str(ROOT / "kernels")])}
    cmd = [sys.executable, "-m", "analyzer", "compare", str(before), str(after), "--fail-if-slower", "10"]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    gate = [line for line in done.stdout.splitlines() if "Gate [" in line or "spike" in line or "drift" in line]
    print("\n".join(gate) or done.stdout[-2000:] + done.stderr[-2000:])
    print(f"steps per run: {args.steps:,}; exit {done.returncode} (expected 1); load before: {load}")
    print(
        f"wall: {wall:.1f} s (goal <= {GOAL_S:g} s, ratio {wall / GOAL_S:.2f}); "
        f"peak RSS: {peak_mib:.0f} MiB (goal <= {GOAL_MIB:g} MiB, ratio {peak_mib / GOAL_MIB:.2f})"
    )


if __name__ == "__main__":
    main()

"""Record the bundled sample traces from real training loops on this machine.

    python sample_traces/record.py            # CPU scenarios -> sample_traces/cpu_<scenario>.arrow
    python sample_traces/record.py --device cuda --prefix h200   # also sync, small_batch, fp32_compute

Each file is overwritten only with --force. Under `gpuanalyze run` (the samples' `measure` lines) the loops
train unprofiled by this script and no sample is written.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import analyzer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared loops in tests/scenarios
from tests.scenarios.loops import GPU_SCENARIOS, SCENARIOS, make_loop, scenario, train

HERE = Path(__file__).parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--prefix", default="cpu")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--out-dir", type=Path, default=HERE)
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()
    under_run = os.environ.get("GPUANALYZE_RUN") == "1"  # a sample's `measure` line: `gpuanalyze run` records
    for name in GPU_SCENARIOS if args.device == "cuda" else SCENARIOS:
        cfg = scenario(name, steps=args.steps, device=args.device)
        out = args.out_dir / f"{args.prefix}_{name}.arrow"
        model, optimizer, loader = make_loop(cfg)
        if under_run:
            train(model, optimizer, loader, cfg.device, item_every_step=cfg.item_every_step)
            continue
        with analyzer.profile(model, out=str(out), overwrite=args.force, tags={"scenario": name}) as prof:
            train(model, optimizer, loader, cfg.device, item_every_step=cfg.item_every_step)
        print(f"{prof.path}: {prof.steps_recorded} steps, verdict {analyzer.analyze(prof.path).bottleneck}")
    if args.device == "cpu" and not under_run:
        from tests.scenarios.ddp import run_ddp

        out = args.out_dir / "cpu_ddp_straggler.arrow"
        for old in out.parent.glob("cpu_ddp_straggler.rank*.arrow"):
            if not args.force:
                raise SystemExit(f"{old} exists; pass --force to record again")
            old.unlink()
        run_ddp(out, world=2, slow_rank=1, slow_s=0.02, steps=40)
        print(f"{out}: 2 ranks, verdict {analyzer.analyze(out).bottleneck}")


if __name__ == "__main__":
    main()

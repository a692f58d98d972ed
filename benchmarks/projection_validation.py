"""Do projections come true, and does following the top recommendation ever make things slower?

    python benchmarks/projection_validation.py [--quick]

For each case a real CPU training loop runs under analyzer.profile; the top finding's fix is then
applied to the same loop (DataLoader workers, or a larger batch) and measured. Prints, side by
side from one run: the step time before, the projected and the measured time after (per current
batch worth of samples for a batch change), the error, and whether following the advice was
slower. Cases: a slow Dataset (1.5 ms per sample in __getitem__), batch 1 of a tiny MLP from
memory, and batch 256 from memory. Where the finding has no setting to change (CPU-bound loading:
"build batches cheaper", projected as an upper bound on the gain), the fix applied is fetching
each batch with one indexing call, and the check is that the measured step does not beat the
bound. For the two in-memory cases it also measures the advice the old projection gave
(num_workers=2), to show why it is no longer given. torch uses one thread so
the compute path is the same in every run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import torch

import analyzer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared loops in tests/scenarios
from tests.scenarios.loops import LoopConfig, make_loop, train

CASES = {
    "slow Dataset (1.5 ms/sample)": LoopConfig(sample_cost_s=0.0015, features=256, batch=32, steps=60),
    "in-memory, batch 1, tiny MLP": LoopConfig(batch=1, features=16, steps=600),
    "in-memory, batch 256, tiny MLP": LoopConfig(batch=256, features=16, steps=300),
}


def run(cfg: LoopConfig, out: Path) -> analyzer.Report:
    model, optimizer, loader = make_loop(cfg)
    if cfg.num_workers:
        loader = torch.utils.data.DataLoader(
            loader.dataset,
            batch_size=cfg.batch,
            shuffle=True,
            num_workers=cfg.num_workers,
            persistent_workers=True,
            generator=torch.Generator().manual_seed(cfg.seed),
        )
    with analyzer.profile(model, out=str(out), kernel_windows=False):
        train(model, optimizer, loader)
    return analyzer.analyze(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke run, noisier numbers)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"{'case':30} {'before':>8} {'verdict':>12} {'fix':>21} {'projected':>9} {'measured':>8} {'error':>7}  slower"
    )
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, cfg) in enumerate(CASES.items()):
            if args.quick:
                cfg = replace(cfg, steps=max(30, cfg.steps // 4))
            before = run(cfg, Path(tmp) / f"b{i}.arrow")
            wall = before.metrics.step_mean_ms
            if not before.findings:
                print(f"{name:30} {wall:8.2f} {before.bottleneck:>12} {'none':>21}")
                continue
            top = before.findings[0]
            params = dict(top.projection.params)
            scale = 1.0
            if "num_workers" in params:
                fix = f"workers={params['num_workers']}"
                after_cfg = replace(cfg, num_workers=int(params["num_workers"]))
            elif top.cause == "cpu_bound_loading":
                # no setting: the advice is to build batches cheaper; check the projection is a bound
                fix = "batched fetch"
                after_cfg = replace(cfg, batched_fetch=True)
            elif "batch_multiplier" in params:
                k = int(params["batch_multiplier"])
                fix, scale = f"batch x{k}", float(k)
                after_cfg = replace(cfg, batch=cfg.batch * k, steps=max(20, cfg.steps // k))
            else:
                print(f"{name:30} {wall:8.2f} {before.bottleneck:>12} {'(no setting)':>21}")
                continue
            after = run(after_cfg, Path(tmp) / f"a{i}.arrow")
            measured = after.metrics.step_mean_ms / scale
            projected = top.projection.step_ms
            error = (projected - measured) / measured
            if params:
                errors.append((top.bottleneck, error))
            else:  # an upper bound on the gain: the measured step must not beat it
                fix += " (bound)" if measured >= projected * 0.95 else " (BEATEN)"
            slower = "YES" if measured > wall * 1.05 else "no"
            print(
                f"{name:30} {wall:8.2f} {before.bottleneck:>12} {fix:>21} {projected:9.2f} {measured:8.2f} "
                f"{error:+7.1%}  {slower}"
            )
            if cfg.batch <= 256 and cfg.sample_cost_s == 0:
                old = run(replace(cfg, num_workers=2), Path(tmp) / f"w{i}.arrow").metrics.step_mean_ms
                print(
                    f"{'':30} {'':8} {'':>12} {'workers=2 (old)':>21} {'':9} {old:8.2f} {'':7}  "
                    f"{'YES' if old > wall * 1.05 else 'no'}"
                )
    data = [abs(e) for b, e in errors if b == "data_loading"]
    if data:
        print(f"data-loading projection error: {statistics.mean(data):.1%} (|projected - measured| / measured)")


if __name__ == "__main__":
    main()

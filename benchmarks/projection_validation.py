"""Does the projected step time come true? Induce a data-loading bottleneck, project, fix, measure.

    python benchmarks/projection_validation.py [--steps 60] [--workers 4]

Runs the real `data_loading` demo loop (each sample costs 1.5 ms in Dataset.__getitem__) with
num_workers=0 under analyzer.profile, takes the data_loading finding's projected step time,
then runs the same loop with the recommended fix (num_workers=N, persistent workers) and
reports the measured mean step time and the prediction error. torch uses one thread so the
compute path is the same in both runs (OpenMP threads that sleep through long data waits make
the first forward after each wait slower, which the fix would also remove).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

import analyzer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared loops in tests/scenarios
from gpuanalyze.ingest import schema as S
from tests.scenarios.loops import make_loop, scenario, train


def profiled(out: Path, **overrides: object) -> analyzer.Report:
    cfg = scenario("data_loading", **overrides)
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
    with analyzer.profile(model, out=str(out)):
        train(model, optimizer, loader)
    return analyzer.analyze(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--workers", type=int, default=0, help="default: the num_workers the finding recommends")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        before = profiled(Path(tmp) / "before.arrow", steps=args.steps)
        finding = next(f for f in before.findings if f.bottleneck == "data_loading")
        workers = args.workers or int(dict(finding.projection.params).get("num_workers", 4))
        after = profiled(Path(tmp) / "after.arrow", steps=args.steps, num_workers=workers)
    measured = after.metrics.step_mean_ms
    projected = finding.projection.step_ms
    print(f"before (num_workers=0): {before.metrics.step_mean_ms:.2f} ms/step, verdict {before.bottleneck}")
    print(f"projected: {projected:.2f} ms/step ({finding.projection.rule})")
    print(
        f"after (num_workers={workers}, persistent): {measured:.2f} ms/step, verdict {after.bottleneck}, "
        f"data wait {after.metrics.share[S.DATA_WAIT_MS]:.0%}"
    )
    print(f"prediction error: {100 * (projected - measured) / measured:+.1f}%")


if __name__ == "__main__":
    main()

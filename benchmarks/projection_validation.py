"""Do projections come true, and does following a recommendation ever make the step slower?

    python benchmarks/projection_validation.py [--load quiet|busy|both] [--busy-procs N] [--quick]
                                               [--only TEXT ...] [--json PATH] [--no-windows]

For each case (benchmarks/validation_cases.py) a real CPU training loop (tests/scenarios/fixes.py,
or the gloo DDP loop of tests/scenarios/ddp.py) is recorded under analyzer.profile (BEFORE) and
analysed; the top finding's fix is applied to the same loop, exactly as the finding recommends it
(its projection's setting: num_workers, batch multiplier; else the fix its cause and
recommendations name), and recorded again (AFTER). Per pair it prints the verdict/cause, the
confidence level, the fix, the step before, the projected step (per current batch of samples for
a batch change: Projection.per_batch_of), the projection's interval [low, high] (n/a when the
analyzer gives none), the measured AFTER step on the same basis, the error (projected - measured)
/ measured, whether the measurement is inside the interval, the interval's width relative to the
step before, and whether AFTER is slower than BEFORE. A healthy ('none') verdict projects no
change: AFTER reruns the loop (or applies the would-be fix, to check that it indeed changes
nothing). Then mean, median and worst error, the interval coverage, the share within 5% and 10%,
the median width, the medium/high-confidence recommendations that made the step slower, and each
target met or missed with the reason.

Then the same statistics **leave-one-family-out** (``lofo``): the constants the models fit on these
pairs (BATCH_UNMEASURED_FIXED, MICRO_UNMEASURED_FIXED, CPU_MATMUL_UNMEASURED: each the share its own
model, batch, micro-batch or CPU precision, does not measure) are chosen on every family but one from a
small grid (median |error| first, then
the narrowest high end that still covers 80% of the training pairs), and the held-out family's
BEFORE traces are analysed again with them: its projections are out of sample. A group no other
family's pairs fit (the batch and micro-batch models have one family each) takes its PRIORS entry,
set before any pair was measured, never the in-sample choice. Models with no constant fitted on the
pairs (workers, stragglers), and projections whose share the trace measured, project the same in both.
The held-out family's ranges are widened by the model's own error calibrated without it
(leave_one_family_out.conformal_error: conformalized quantile regression over the other families' pairs,
projected with constants fitted without both families); each mode prints MODEL_ERROR to ship (every family's
out-of-sample scores), and --load both the value of both modes' pairs pooled (thresholds.MODEL_ERROR).

The CPU loops are recorded with sampled profiler windows (3 steps at a third and two thirds of the run):
the precision projection measures the matmul share from them (rules/cpu_precision.py).
Each mode also prints the same pairs projected as if the traces had no profiled steps (every share its
model's constant), in sample and leave-one-family-out: the same measurements, so the two differ by the
measured shares alone. --no-windows records without them.

--load busy runs the pairs beside N background busy loops (default: one per core this process may
use), each `python -c` running `while the parent lives: spin` (a `while 1: pass` that also ends if
this script is killed), stopped by PID when the mode ends, on an error or on Ctrl-C; --load both
runs quiet, then busy. torch uses one thread; the loops are seeded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

import analyzer
from analyzer.analysis import thresholds as T

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.corrections import Measured, table
from benchmarks.leave_one_family_out import conformal_error, in_sample, lofo, without_windows
from benchmarks.validation_cases import CASES, Case, Fix, fixes_of

SPIN = "import os\np = os.getppid()\nwhile os.getppid() == p:\n    for _ in range(1000000): pass\n"
"""A background busy loop: `while 1: pass`, checking every million iterations that its parent lives."""
MEDIAN_TARGET = 0.10
COVERAGE_TARGET = 0.80
WIDTH_TARGET = 0.30
"""Median range width, as a share of the step before, the leave-one-family-out target."""
#: The constants fitted on the pairs, per model group, and the grid leave-one-family-out chooses from.
GRID: dict[str, list[dict[str, float]]] = {
    "batch": [{"BATCH_UNMEASURED_FIXED": f} for f in (0.25, 0.35, 0.5, 0.65)],
    "micro_batch": [{"MICRO_UNMEASURED_FIXED": f} for f in (0.5, 0.65, 0.8, 0.9)],
    "precision": [{"CPU_MATMUL_UNMEASURED": f} for f in (0.5, 0.75, 0.9, 1.0)],
}
#: Per group, the constants a held-out family takes when no other family's pairs fit the group: set before
#: any pair was measured, not fitted on them: an unmeasured share at the middle of its [0, 1] range (nothing
#: says which end).
PRIORS: dict[str, dict[str, float]] = {
    "batch": {"BATCH_UNMEASURED_FIXED": 0.5},
    "micro_batch": {"MICRO_UNMEASURED_FIXED": 0.5},
    "precision": {"CPU_MATMUL_UNMEASURED": 0.5},
}
#: Which group a pair's applied fix belongs to (its projection uses that group's constants).
UNMEASURED_FIXES = ("batch", "micro_batch", "precision")


@dataclass(slots=True)
class Pair:
    mode: str
    case: str
    kind: str
    verdict: str
    cause: str | None
    confidence: str
    fix: str | None
    bound: bool
    """The projection has no setting: an upper bound on the gain (the analyzer labels it so)."""
    before_ms: float
    projected_ms: float | None
    low_ms: float | None
    high_ms: float | None
    measured_ms: float | None
    error: float | None
    inside: bool | None
    slower: bool | None
    recommendation: bool
    """A finding's fix was applied (False for a healthy verdict's 'change nothing')."""
    note: str = ""
    host: dict[str, Any] | None = None
    """The BEFORE run's host facts the rules saw (HostFacts: run queue, free cores, oversubscribed)."""
    rule: str = ""
    """What the projection was built from (Projection.rule)."""
    family: str = ""
    finding: tuple[str, str] | None = None
    """(bottleneck, cause) of the finding whose fix was applied."""
    before_path: str | None = None
    """The BEFORE trace (kept while the mode runs, for leave-one-family-out)."""
    fix_key: str | None = None

    @property
    def width(self) -> float | None:
        """The interval's width as a share of the step before."""
        if self.low_ms is None or self.high_ms is None or self.before_ms <= 0:
            return None
        return (self.high_ms - self.low_ms) / self.before_ms

    @property
    def group(self) -> str | None:
        """The fitted-constant group whose constants the pair's projection uses (None: none)."""
        if self.fix_key in UNMEASURED_FIXES:  # each model its own constant
            return self.fix_key
        return None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def background_load(n: int) -> Iterator[list[int]]:
    """N busy-loop processes for the duration of the block, stopped by PID however it ends."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", SPIN]))
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def run_pair(case: Case, mode: str, tmp: Path, tag: str, quick: bool, windows: bool = True) -> Pair:
    """Record BEFORE, analyse it, apply the top finding's fix, record AFTER; the pair's numbers."""
    case = case.steps(quick)
    start = case.loop if case.loop is not None else case.ddp_batches
    assert start is not None
    before_path = case.record(start, tmp, f"{tag}b", quick, windows=windows)
    before = analyzer.analyze(before_path)
    top = before.findings[0] if before.findings else None
    base = {"mode": mode, "case": case.name, "kind": case.kind, "verdict": before.bottleneck}
    if top is None:
        fix: Fix | None = Fix("none") if before.bottleneck == "none" else None
        fixes: list[Fix] = []
        conf, before_ms, cause = before.confidence.level, before.metrics.step_mean_ms, None
    else:
        fixes = fixes_of(top)
        fix = case.choose(fixes)
        conf, before_ms, cause = top.confidence.level, top.projection.current_ms, top.cause
    pair = Pair(
        **base,
        cause=cause,
        confidence=conf,
        fix=fix.label() if fix else None,
        bound=top is not None and top.projection.fix is None,
        before_ms=before_ms,
        projected_ms=top.projection.step_ms if top else (before_ms if fix else None),
        low_ms=top.projection.low_ms if top else None,
        high_ms=top.projection.high_ms if top else None,
        measured_ms=None,
        error=None,
        inside=None,
        slower=None,
        recommendation=top is not None,
        host=_host(before),
        rule=top.projection.rule if top else "",
        family=case.family,
        finding=(top.bottleneck, top.cause) if top else None,
        before_path=str(before_path),
        fix_key=fix.key if fix else None,
    )
    variant = case.apply(fix) if fix else None
    if fix is None or variant is None:
        if top is None:
            pair.note = f"not applied: verdict {before.bottleneck}, no finding and no fix to apply"
        else:
            named = ", ".join(f.label() for f in fixes) or "no fix this benchmark can read"
            pair.note = f"not applied: the finding recommends {named}, which this loop has no knob for"
        return pair
    after = analyzer.analyze(case.record(variant, tmp, f"{tag}a", quick, windows=windows))
    measured = after.metrics.step_mean_ms
    per = top.projection.per_batch_of if top else None
    if per and after.metrics.batch_samples:
        measured *= per / after.metrics.batch_samples  # per current batch worth of samples
    pair.measured_ms = measured
    assert pair.projected_ms is not None
    pair.error = (pair.projected_ms - measured) / measured
    if pair.low_ms is not None and pair.high_ms is not None:
        pair.inside = pair.low_ms <= measured <= pair.high_ms
    pair.slower = measured > before_ms
    if top is None and fix.key == "none" and case.none_check:
        pair.note = (
            "after: the would-be fix applied (" + ", ".join(f"{k}={v}" for k, v in case.none_check.items()) + ")"
        )
    return pair


def _host(report: Any) -> dict[str, Any] | None:
    """The host facts that bear on a CPU-side projection, rounded for the JSON."""
    h = report.host
    if h is None:
        return None
    keys = ("cores_available", "cores_free", "run_queue", "load_avg", "oversubscribed", "oversubscribed_share")
    keys += ("process_cpu_cores", "workers_cpu_cores", "samples")
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in ((k, getattr(h, k)) for k in keys)}


HEADER = (
    f"{'case':32} {'verdict/cause':31} {'conf':6} {'fix':22} {'before':>8} {'projected':>9} "
    f"{'interval':>17} {'measured':>8} {'error':>7} {'inside':>6} {'width':>6} {'slower':>6}"
)


def _ms(v: float | None, width: int) -> str:
    return f"{v:{width}.2f}" if v is not None else f"{'n/a':>{width}}"


def _yes(v: bool | None) -> str:
    return "n/a" if v is None else ("YES" if v else "no")


def row(p: Pair) -> str:
    vc = p.verdict + (f"/{p.cause}" if p.cause else "")
    interval = f"[{p.low_ms:.2f}, {p.high_ms:.2f}]" if p.low_ms is not None and p.high_ms is not None else "n/a"
    fix = (p.fix or "-") + ("*" if p.bound else "")
    error = f"{p.error:+7.1%}" if p.error is not None else f"{'n/a':>7}"
    width = f"{p.width:6.0%}" if p.width is not None else f"{'n/a':>6}"
    line = (
        f"{p.case[:32]:32} {vc[:31]:31} {p.confidence:6} {fix[:22]:22} {p.before_ms:8.2f} "
        f"{_ms(p.projected_ms, 9)} {interval:>17} {_ms(p.measured_ms, 8)} {error} "
        f"{_yes(p.inside):>6} {width} {_yes(p.slower):>6}"
    )
    return line + (f"\n{'':32} {p.note}" if p.note else "")


def summarise(pairs: list[Pair], mode: str) -> dict[str, Any]:
    """Error statistics, coverage, slower recommendations and the targets, for one mode's pairs."""
    done = [p for p in pairs if p.error is not None]
    errs = [abs(p.error) for p in done if p.error is not None]
    worst = max(done, key=lambda p: abs(p.error or 0.0), default=None)
    with_interval = [p for p in done if p.inside is not None]
    coverage = sum(bool(p.inside) for p in with_interval) / len(with_interval) if with_interval else None
    slower = [p.case for p in done if p.recommendation and p.confidence in ("medium", "high") and p.slower]
    median = statistics.median(errs) if errs else None
    widths = [p.width for p in with_interval if p.width is not None]
    targets = []
    if mode in ("quiet", "lofo"):
        off = [f"{p.case} ({p.error:+.0%})" for p in done if p.error is not None and abs(p.error) > MEDIAN_TARGET]
        targets.append(
            {
                "target": f"median |error| <= {MEDIAN_TARGET:.0%} (quiet host)",
                "met": median is not None and median <= MEDIAN_TARGET,
                "why": "pairs off by more than 10%: " + "; ".join(off) if off else "",
            }
        )
    outside = [p.case for p in with_interval if not p.inside]
    targets.append(
        {
            "target": f"interval coverage >= {COVERAGE_TARGET:.0%}",
            "met": coverage is not None and coverage >= COVERAGE_TARGET,
            "why": (
                "no pair has an interval: the analyzer leaves Projection.low_ms/high_ms None"
                if coverage is None
                else ("measured outside the interval: " + "; ".join(outside) if outside else "")
            ),
        }
    )
    if mode == "lofo":
        wide = [f"{p.case} ({p.width:.0%})" for p in with_interval if p.width is not None and p.width > WIDTH_TARGET]
        targets.append(
            {
                "target": f"median width <= {WIDTH_TARGET:.0%} of the step",
                "met": bool(widths) and statistics.median(widths) <= WIDTH_TARGET,
                "why": "wider than 30%: " + "; ".join(wide) if wide else "",
            }
        )
    targets.append(
        {
            "target": "no medium/high-confidence recommendation makes the step slower",
            "met": not slower,
            "why": "slower: " + "; ".join(slower) if slower else "",
        }
    )
    not_applied = [p.case for p in pairs if p.error is None]
    return {
        "pairs": len(pairs),
        "measured": len(done),
        "not_applied": not_applied,
        "mean_abs_error": statistics.fmean(errs) if errs else None,
        "mean_signed_error": statistics.fmean(p.error for p in done if p.error is not None) if done else None,
        "median_abs_error": median,
        "worst_error": worst.error if worst else None,
        "worst_case": worst.case if worst else None,
        "within_5": sum(e <= 0.05 for e in errs) / len(errs) if errs else None,
        "within_10": sum(e <= 0.10 for e in errs) / len(errs) if errs else None,
        "median_width": statistics.median(widths) if widths else None,
        "with_interval": len(with_interval),
        "coverage": coverage,
        "slower_medium_high": slower,
        "targets": targets,
    }


def print_summary(s: dict[str, Any]) -> None:
    def pct(v: float | None, sign: bool = False) -> str:
        return "n/a" if v is None else (f"{v:+.1%}" if sign else f"{v:.1%}")

    print(
        f"pairs {s['pairs']}, measured {s['measured']}; |error| mean {pct(s['mean_abs_error'])}, "
        f"median {pct(s['median_abs_error'])}, worst {pct(s['worst_error'], True)} ({s['worst_case']}); "
        f"signed mean {pct(s['mean_signed_error'], True)}"
    )
    cov = "n/a" if s["coverage"] is None else f"{s['coverage']:.0%} of {s['with_interval']}"
    print(
        f"within 5% {pct(s['within_5'])}, within 10% {pct(s['within_10'])}; interval coverage {cov}, median width "
        f"{pct(s['median_width'])} of the step; medium/high-confidence recommendations slower: "
        f"{len(s['slower_medium_high'])}"
    )
    for t in s["targets"]:
        print(f"  {'MET   ' if t['met'] else 'MISSED'} {t['target']}" + (f": {t['why']}" if t["why"] else ""))
    print("  (* = projection with no setting, an upper bound on the gain; error > 0 means projected slower)")


def run_mode(
    mode: str, cases: list[Case], quick: bool, busy_procs: int, windows: bool = True, corrections: bool = True
) -> dict[str, Any]:
    n = busy_procs if mode == "busy" else 0
    started = time.perf_counter()
    load_start = os.getloadavg()
    pairs: list[Pair] = []
    with background_load(n) as pids, tempfile.TemporaryDirectory() as tmp:
        load = f"{n} background busy loop(s) (PIDs {', '.join(map(str, pids))})" if n else "no background load"
        print(f"\n== {mode}: {load}; {_cores()} core(s); load average {load_start[0]:.2f} at start")
        print(HEADER, flush=True)
        for i, case in enumerate(cases):
            pairs.append(run_pair(case, mode, Path(tmp), f"p{i}", quick, windows))
            print(row(pairs[-1]), flush=True)
        load_end = os.getloadavg()
        held, chosen, model_error, scores = lofo(pairs, GRID, PRIORS)  # while the BEFORE traces exist
        with without_windows():  # the same pairs, projected as if the traces had no profiled steps
            plain = in_sample(pairs)
            plain_held = lofo(pairs, GRID, PRIORS).pairs
        measured = [
            Measured(p.case, p.before_path, p.finding, p.before_ms, p.measured_ms)
            for p in pairs
            if p.measured_ms is not None and p.finding is not None and p.before_path is not None
        ]
        without = table(measured, f"{mode}, in sample") if corrections else None
    summary = summarise(pairs, mode)
    seconds = time.perf_counter() - started
    print(f"-- {mode}: {seconds:.0f} s, load average {load_end[0]:.2f} at end; in sample:")
    print_summary(summary)
    families = sorted({p.family for p in pairs})
    print(f"-- {mode}, leave-one-family-out ({len(families)} families: {', '.join(families)}):")
    for p in held:
        if p.group:
            print(row(p), flush=True)
    out_of_sample = summarise(held, "lofo")
    print_summary(out_of_sample)
    constants_only = {"in_sample": summarise(plain, mode), "lofo": summarise(plain_held, "lofo")}
    print(f"-- {mode}, the same pairs projected as if the traces had no profiled steps (every share its constant):")
    for p in plain:
        if p.group:
            print(row(p), flush=True)
    for label, s in constants_only.items():
        print(f"   {label}:")
        print_summary(s)
    for c in chosen:
        fitted = "; ".join(f"{g} {v}" for g, v in c.items() if g not in ("held_out", "prior", "model_error"))
        error = "n/a" if c["model_error"] is None else f"{c['model_error']:.3f}"
        print(
            f"   without {c['held_out']}: {fitted}; MODEL_ERROR {error}"
            + (f" (prior: {', '.join(c['prior'])})" if c["prior"] else "")
        )
    shipped = f"{model_error:.3f}" if model_error is not None else "n/a (too few pairs)"
    print(
        f"-- {mode}: MODEL_ERROR to ship {shipped} (conformalized quantile regression over every family's "
        f"out-of-sample scores; in use: {T.MODEL_ERROR:g})"
    )
    return {
        "mode": mode,
        "busy_procs": n,
        "busy_command": [sys.executable, "-c", SPIN] if n else None,
        "load_avg_start": load_start[0],
        "load_avg_end": load_end[0],
        "seconds": seconds,
        "pairs": [asdict(p) for p in pairs],
        "summary": summary,
        "lofo": {
            "pairs": [asdict(p) for p in held],
            "summary": out_of_sample,
            "chosen": chosen,
            "model_error": model_error,
            "model_error_in_use": T.MODEL_ERROR,
            "scores": scores,
        },
        "corrections": without,
        "constants_only": {
            "pairs": [asdict(p) for p in plain],
            "lofo_pairs": [asdict(p) for p in plain_held],
            **constants_only,
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--load", choices=("quiet", "busy", "both"), default="quiet")
    parser.add_argument("--busy-procs", type=int, default=_cores(), help="background busy loops for --load busy")
    parser.add_argument("--quick", action="store_true", help="a sixth of the steps (a smoke run, noisier numbers)")
    parser.add_argument("--only", nargs="*", default=[], help="run only the cases whose name contains one of these")
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this path")
    parser.add_argument(
        "--no-windows",
        action="store_true",
        help="record the CPU loops without sampled profiler windows (the projections then use their constants)",
    )
    parser.add_argument("--no-corrections", action="store_true", help="skip the with/without-corrections table")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cases = [c for c in CASES if not args.only or any(t.lower() in c.name.lower() for t in args.only)]
    modes = ("quiet", "busy") if args.load == "both" else (args.load,)
    print(
        f"projection validation: {len(cases)} case(s), {'quick' if args.quick else 'full'} steps, "
        f"torch {torch.__version__} (1 thread), {platform.platform()}"
    )
    results = []
    try:
        for mode in modes:
            results.append(
                run_mode(mode, cases, args.quick, args.busy_procs, not args.no_windows, not args.no_corrections)
            )
    except KeyboardInterrupt:
        print("\ninterrupted: background load stopped, nothing saved", file=sys.stderr)
        return 130
    pooled = conformal_error([s for r in results for s in r["lofo"]["scores"]])
    if len(results) > 1:  # the analyzer meets quiet and busy hosts: one calibration set of both modes' pairs
        shown = "n/a" if pooled is None else f"{pooled:.3f}"
        print(f"\nMODEL_ERROR to ship, quiet and busy pairs pooled: {shown} (in use: {T.MODEL_ERROR:g})")
    if args.json:
        doc = {
            "command": sys.argv,
            "quick": args.quick,
            "cores": _cores(),
            "platform": platform.platform(),
            "torch": torch.__version__,
            "windows": not args.no_windows,
            "modes": results,
            "model_error_pooled": pooled,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
